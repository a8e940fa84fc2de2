//! The naming registry: `bind`, `rebind`, `unbind`, `lookup` and `list` of remote
//! references by name, pool-wide.
//!
//! Design: the bindings live in one naming service object, itself a remote object
//! ([`NamingService`]). Its host is the member that wins the IPL registry election
//! [`NAMING_ELECTION`]; it serves at the fixed port [`NAMING_PORT`]. A runtime's first
//! `bind` or `rebind` runs the election (joining it as a candidate): if it wins, it
//! exports the service; either way it connects a stub to the winner. `lookup`, `list`
//! and `unbind` only ask for the winner: if there is none, nothing was ever bound
//! ([`RmiError::NotBound`], an empty list). So no member is configured as "the
//! registry", the service starts only if naming is used, it lives on a member that
//! exports objects (not on a passing client), and every member agrees on the host
//! (elections are strict).
//!
//! If the host dies, the bindings die with it (as with Java's `rmiregistry`): an
//! operation that finds the host gone reports it as suspect to the IPL registry
//! (`maybe_dead`), forgets its stub, and retries once against a fresh election winner.
//! Bindings of objects whose member died stay until rebound or unbound; calls through
//! them fail with [`RmiError::ConnectionLost`] or [`RmiError::Connect`].

use std::collections::BTreeMap;
use std::time::Duration;

use parking_lot::Mutex;

use crate::error::RmiError;
use crate::reference::{RawRef, RemoteInterface, RemoteRef};
use crate::runtime::Rmi;
use crate::server::Mode;

/// The IPL registry election whose winner hosts the naming service.
pub const NAMING_ELECTION: &str = "ibis-rmi-naming";
/// The port name of the naming service on its host.
pub const NAMING_PORT: &str = "ibis-rmi/naming";

/// The naming service's remote interface (used through [`Rmi::bind`] and friends).
#[crate::remote]
pub trait NamingService {
    /// Binds `name` to `object`; fails with [`RmiError::AlreadyBound`] unless `replace`.
    #[nonblocking]
    fn bind(&self, name: String, object: RawRef, replace: bool) -> Result<(), RmiError>;
    /// Removes the binding of `name`; [`RmiError::NotBound`] if there is none.
    #[nonblocking]
    fn unbind(&self, name: String) -> Result<(), RmiError>;
    /// The reference bound to `name`; [`RmiError::NotBound`] if there is none.
    #[nonblocking]
    fn lookup(&self, name: String) -> Result<RawRef, RmiError>;
    /// Every bound name, sorted.
    #[nonblocking]
    fn list(&self) -> Result<Vec<String>, RmiError>;
}

/// The bindings, held by the naming host.
#[derive(Default)]
struct Bindings(Mutex<BTreeMap<String, RawRef>>);

impl NamingService for Bindings {
    fn bind(&self, name: String, object: RawRef, replace: bool) -> Result<(), RmiError> {
        let mut b = self.0.lock();
        if !replace && b.contains_key(&name) {
            return Err(RmiError::AlreadyBound(name));
        }
        tracing::debug!(%name, %object, "bound");
        b.insert(name, object);
        Ok(())
    }

    fn unbind(&self, name: String) -> Result<(), RmiError> {
        self.0
            .lock()
            .remove(&name)
            .map(|_| ())
            .ok_or(RmiError::NotBound(name))
    }

    fn lookup(&self, name: String) -> Result<RawRef, RmiError> {
        self.0
            .lock()
            .get(&name)
            .cloned()
            .ok_or(RmiError::NotBound(name))
    }

    fn list(&self) -> Result<Vec<String>, RmiError> {
        Ok(self.0.lock().keys().cloned().collect())
    }
}

/// A runtime's view of the naming service.
#[derive(Default)]
pub(crate) struct NamingState {
    stub: Mutex<Option<NamingServiceStub>>,
    hosting: Mutex<bool>,
}

/// The stub to the naming host. A binding operation (`elect`) runs the election, and
/// hosts the service if it wins; the others only look the winner up: `None` if there
/// is none (so nothing is bound).
fn stub(rmi: &Rmi, elect: bool) -> Result<Option<NamingServiceStub>, RmiError> {
    let st = rmi.naming_state();
    let mut cached = st.stub.lock();
    if let Some(s) = &*cached {
        return Ok(Some(s.clone()));
    }
    let registry = rmi.ibis().registry();
    let winner = if elect {
        registry.elect(NAMING_ELECTION)?
    } else {
        match registry.get_election_result(NAMING_ELECTION, Some(Duration::ZERO))? {
            Some(w) => w,
            None => return Ok(None),
        }
    };
    if &winner == rmi.identifier() {
        let mut hosting = st.hosting.lock();
        if !*hosting {
            rmi.export_named(
                NamingServiceSkeleton::new(Bindings::default()),
                NAMING_PORT,
                Mode::Serial,
            )?;
            *hosting = true;
            tracing::info!(member = %winner, "hosting the RMI naming service");
        }
    }
    let r = RemoteRef::<dyn NamingService>::from_raw(RawRef {
        member: winner,
        port: NAMING_PORT.into(),
        interface: <dyn NamingService as RemoteInterface>::NAME.into(),
    });
    let s = rmi.stub(&r)?;
    *cached = Some(s.clone());
    Ok(Some(s))
}

/// Runs `op` against the naming service (`none` when there is no host), retrying once
/// with a fresh host if the current one cannot be reached.
fn with_naming<T>(
    rmi: &Rmi,
    elect: bool,
    op: impl Fn(&NamingServiceStub) -> Result<T, RmiError>,
    none: impl Fn() -> Result<T, RmiError>,
) -> Result<T, RmiError> {
    let Some(s) = stub(rmi, elect)? else {
        return none();
    };
    match op(&s) {
        Err(e @ (RmiError::ConnectionLost(_) | RmiError::Connect { .. })) => {
            use crate::reference::Stub;
            let host = s.remote_ref().member().clone();
            tracing::info!(%host, error = %e, "naming host unreachable; electing again");
            if let Err(err) = rmi.ibis().registry().maybe_dead(&host) {
                tracing::debug!(error = %err, "maybe_dead report failed");
            }
            *rmi.naming_state().stub.lock() = None;
            match stub(rmi, elect)? {
                Some(s) => op(&s),
                None => none(),
            }
        }
        other => other,
    }
}

impl Rmi {
    /// Binds `name` to an object; [`RmiError::AlreadyBound`] if the name is taken.
    pub fn bind<I: ?Sized>(&self, name: &str, object: &RemoteRef<I>) -> Result<(), RmiError> {
        with_naming(
            self,
            true,
            |s| s.bind(name.into(), object.raw().clone(), false),
            || Err(RmiError::Ended),
        )
    }

    /// Binds `name` to an object, replacing any earlier binding.
    pub fn rebind<I: ?Sized>(&self, name: &str, object: &RemoteRef<I>) -> Result<(), RmiError> {
        with_naming(
            self,
            true,
            |s| s.bind(name.into(), object.raw().clone(), true),
            || Err(RmiError::Ended),
        )
    }

    /// Removes the binding of `name`; [`RmiError::NotBound`] if there is none.
    pub fn unbind(&self, name: &str) -> Result<(), RmiError> {
        with_naming(
            self,
            false,
            |s| s.unbind(name.into()),
            || Err(RmiError::NotBound(name.into())),
        )
    }

    /// The reference bound to `name`, checked to be of interface `I`
    /// ([`RmiError::WrongInterface`] otherwise).
    pub fn lookup_ref<I: RemoteInterface + ?Sized>(
        &self,
        name: &str,
    ) -> Result<RemoteRef<I>, RmiError> {
        let raw = with_naming(
            self,
            false,
            |s| s.lookup(name.into()),
            || Err(RmiError::NotBound(name.into())),
        )?;
        RemoteRef::try_from_raw(raw)
    }

    /// A connected stub to the object bound to `name`
    /// (`rmi.lookup::<dyn Hello>("hello")?`).
    pub fn lookup<I: RemoteInterface + ?Sized>(&self, name: &str) -> Result<I::Stub, RmiError> {
        let r = self.lookup_ref::<I>(name)?;
        self.stub(&r)
    }

    /// Every bound name, sorted.
    pub fn list(&self) -> Result<Vec<String>, RmiError> {
        with_naming(self, false, |s| s.list(), || Ok(Vec::new()))
    }
}
