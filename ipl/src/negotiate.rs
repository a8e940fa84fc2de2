//! Negotiation: which transport serves a port type.
//!
//! Each port type asks for transport properties (reliable, FIFO, unreliable, encrypted).
//! Every available plugin that provides all of them is eligible, best (highest
//! priority) first; each connection then uses the first eligible transport that reaches
//! the target (in-process only inside one process, the network everywhere), so several
//! transports can be live at once. A preferred plugin (builder or `IPL_TRANSPORT`) is
//! the only eligible one if it provides the properties, and an error naming the missing
//! capability if it does not.

use ipl_transport_abi::Plugin;

use crate::error::{IplError, Result};
use crate::port_type::PortType;

/// The eligible plugins (indices into `plugins`, best first) for every port type.
pub fn choose_all(
    plugins: &[Plugin],
    types: &[PortType],
    prefer: Option<&str>,
) -> Result<Vec<(PortType, Vec<usize>)>> {
    let available: Vec<(usize, &Plugin)> = plugins
        .iter()
        .enumerate()
        .filter(|(_, p)| match p.availability() {
            Ok(()) => true,
            Err(reason) => {
                tracing::info!(transport = p.name(), %reason, "transport unavailable");
                false
            }
        })
        .collect();
    types
        .iter()
        .map(|t| choose(&available, plugins, t, prefer).map(|i| (*t, i)))
        .collect()
}

fn choose(
    available: &[(usize, &Plugin)],
    all: &[Plugin],
    t: &PortType,
    prefer: Option<&str>,
) -> Result<Vec<usize>> {
    let reqs = t.transport_requirements();
    if let Some(name) = prefer {
        let (i, p) = find_preferred(available, all, name)?;
        for (pc, tc) in &reqs {
            if !p.capabilities().contains(*tc) {
                return Err(IplError::CapabilityUnavailable {
                    capability: pc.names().first().copied().unwrap_or("?"),
                    needed: tc.to_string(),
                    detail: format!("preferred transport {name} provides {}", p.capabilities()),
                });
            }
        }
        return Ok(vec![i]);
    }
    let mut eligible: Vec<(usize, i32)> = available
        .iter()
        .filter(|(_, p)| reqs.iter().all(|(_, tc)| p.capabilities().contains(*tc)))
        .map(|(i, p)| (*i, p.priority()))
        .collect();
    if !eligible.is_empty() {
        eligible.sort_by_key(|(_, prio)| std::cmp::Reverse(*prio));
        return Ok(eligible.into_iter().map(|(i, _)| i).collect());
    }
    // Name the first capability that no available transport provides.
    for (pc, tc) in &reqs {
        if !available
            .iter()
            .any(|(_, p)| p.capabilities().contains(*tc))
        {
            return Err(IplError::CapabilityUnavailable {
                capability: pc.names().first().copied().unwrap_or("?"),
                needed: tc.to_string(),
                detail: format!(
                    "available transports: {}",
                    available
                        .iter()
                        .map(|(_, p)| format!("{} ({})", p.name(), p.capabilities()))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            });
        }
    }
    Err(IplError::CapabilityUnavailable {
        capability: "(combination)",
        needed: t.to_string(),
        detail: "no single available transport provides all of them".into(),
    })
}

/// The preferred plugin among the available ones, or why it cannot be used.
fn find_preferred<'p>(
    available: &[(usize, &'p Plugin)],
    all: &[Plugin],
    name: &str,
) -> Result<(usize, &'p Plugin)> {
    if let Some((i, p)) = available.iter().find(|(_, p)| p.name() == name) {
        return Ok((*i, *p));
    }
    let reason = match all.iter().find(|p| p.name() == name) {
        Some(p) => p
            .availability()
            .err()
            .unwrap_or_else(|| "unavailable".into()),
        None => "no such transport plugin".to_string(),
    };
    Err(IplError::TransportUnavailable {
        name: name.to_string(),
        reason,
    })
}

/// The preferred plugin if one is named (an error if it is unknown or unavailable),
/// else the available plugin with the highest priority. Used when no port type decides.
pub fn preferred_or_best(plugins: &[Plugin], prefer: Option<&str>) -> Result<usize> {
    match prefer {
        Some(name) => {
            let available: Vec<(usize, &Plugin)> = plugins
                .iter()
                .enumerate()
                .filter(|(_, p)| p.availability().is_ok())
                .collect();
            find_preferred(&available, plugins, name).map(|(i, _)| i)
        }
        None => best_available(plugins),
    }
}

/// The available plugin with the highest priority.
pub fn best_available(plugins: &[Plugin]) -> Result<usize> {
    plugins
        .iter()
        .enumerate()
        .filter(|(_, p)| p.availability().is_ok())
        .max_by_key(|(_, p)| p.priority())
        .map(|(i, _)| i)
        .ok_or_else(|| IplError::TransportUnavailable {
            name: "(any)".into(),
            reason: "no transport plugin is available".into(),
        })
}
