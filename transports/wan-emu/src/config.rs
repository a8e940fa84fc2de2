//! Configuration: the `wan.*` lines of the transport configuration, the `IPL_WAN`
//! environment variable and the watched file, all in one syntax.
//!
//! ```text
//! wan.link=cluster-0>cluster-1 latency_ms=10 bandwidth_mbit=100
//! wan.default=latency_ms=5 bandwidth_mbit=100
//! wan.file=/tmp/wan.conf
//! wan.max_queued=67108864
//! ```
//!
//! A link's parameters: `latency_ms` or `latency_us` (one-way; default 0) and
//! `bandwidth_mbit` (10^6 bits/s) or `bandwidth_kbyte` (10^3 bytes/s) (default
//! unlimited). In `IPL_WAN` (entries separated by `;`) and in the file (one entry a line,
//! `#` comments) the `wan.` prefix may be left out.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use crate::link::Link;

/// The environment variable with `;`-separated entries (`link=A>B latency_ms=10;...`).
pub const ENV_VAR: &str = "IPL_WAN";

/// Default bound on the bytes held for delayed delivery per endpoint (64 MiB).
pub const DEFAULT_MAX_QUEUED: usize = 64 << 20;

/// The cluster of a member whose configuration names none.
pub const DEFAULT_CLUSTER: &str = "default";

/// Longest cluster name (it travels in addresses and in the channel hello).
pub const MAX_CLUSTER_LEN: usize = 255;

/// A configuration problem.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A line (of the transport configuration, `IPL_WAN` or the file) is malformed.
    #[error("wan-emu configuration ({origin}, entry {number}) `{line}`: {reason}")]
    Line {
        /// Where the line came from: `config`, `IPL_WAN` or the file's path.
        origin: String,
        /// 1-based line (or `IPL_WAN` entry) number.
        number: usize,
        /// The line itself.
        line: String,
        /// What is wrong.
        reason: String,
    },
    /// The `wan.file` could not be read.
    #[error("wan-emu configuration file {path}: {reason}")]
    File {
        /// The file.
        path: String,
        /// Why it could not be read.
        reason: String,
    },
    /// A link was given between a cluster and itself (traffic inside a cluster is never
    /// delayed).
    #[error("wan-emu: a link joins two different clusters, not `{cluster}` to itself")]
    SameCluster {
        /// The cluster named twice.
        cluster: String,
    },
    /// A cluster name is empty, too long or contains `>` or whitespace.
    #[error("wan-emu: bad cluster name {name:?}: {reason}")]
    BadCluster {
        /// The name.
        name: String,
        /// What is wrong.
        reason: String,
    },
}

/// Links per ordered pair of clusters, and a default for pairs not listed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LinkTable {
    pairs: HashMap<(String, String), Link>,
    default: Option<Link>,
}

impl LinkTable {
    /// An empty table (no delays).
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the link from cluster `from` to cluster `to`.
    pub fn set(&mut self, from: &str, to: &str, link: Link) -> Result<(), ConfigError> {
        check_cluster(from)?;
        check_cluster(to)?;
        if from == to {
            return Err(ConfigError::SameCluster {
                cluster: from.to_string(),
            });
        }
        self.pairs.insert((from.to_string(), to.to_string()), link);
        Ok(())
    }

    /// Removes the entry for `from -> to`; returns it.
    pub fn remove(&mut self, from: &str, to: &str) -> Option<Link> {
        self.pairs.remove(&(from.to_string(), to.to_string()))
    }

    /// Sets (or with `None` clears) the default for pairs not listed.
    pub fn set_default(&mut self, link: Option<Link>) {
        self.default = link;
    }

    /// The entry for `from -> to` exactly (without the default).
    pub fn pair(&self, from: &str, to: &str) -> Option<Link> {
        // A (String, String) key cannot be looked up by (&str, &str): build it.
        self.pairs.get(&(from.to_string(), to.to_string())).copied()
    }

    /// The default link, if set.
    pub fn default_link(&self) -> Option<Link> {
        self.default
    }

    /// The link for `from -> to`: its entry, else the default; `None` inside a cluster.
    pub fn lookup(&self, from: &str, to: &str) -> Option<Link> {
        if from == to {
            return None;
        }
        self.pair(from, to).or(self.default)
    }

    /// Whether the table has no entry and no default.
    pub fn is_empty(&self) -> bool {
        self.pairs.is_empty() && self.default.is_none()
    }

    /// Parses a file's text: one entry a line, `#` comments, `wan.` prefix optional.
    pub fn parse_file(text: &str, origin: &str) -> Result<LinkTable, ConfigError> {
        let mut table = LinkTable::new();
        for (i, raw) in text.lines().enumerate() {
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let err = |reason: String| ConfigError::Line {
                origin: origin.to_string(),
                number: i + 1,
                line: line.to_string(),
                reason,
            };
            let (key, value) = line
                .split_once('=')
                .ok_or_else(|| err("not key=value".into()))?;
            let key = key.trim();
            let key = key.strip_prefix("wan.").unwrap_or(key);
            match key {
                "link" | "default" => table.apply(key, value.trim()).map_err(err)?,
                other => return Err(err(format!("unknown key `{other}` (link or default)"))),
            }
        }
        Ok(table)
    }

    /// Applies one `link`/`default` entry.
    fn apply(&mut self, key: &str, value: &str) -> Result<(), String> {
        if key == "default" {
            self.default = Some(parse_params(value.split_whitespace())?);
            return Ok(());
        }
        let mut words = value.split_whitespace();
        let pair = words
            .next()
            .ok_or("expected FROM>TO followed by parameters")?;
        let (from, to) = pair
            .split_once('>')
            .ok_or_else(|| format!("`{pair}` is not FROM>TO"))?;
        let link = parse_params(words)?;
        self.set(from, to, link).map_err(|e| e.to_string())
    }
}

fn check_cluster(name: &str) -> Result<(), ConfigError> {
    let bad = |reason: &str| ConfigError::BadCluster {
        name: name.chars().take(300).collect(),
        reason: reason.to_string(),
    };
    if name.is_empty() {
        return Err(bad("empty"));
    }
    if name.len() > MAX_CLUSTER_LEN {
        return Err(bad("longer than 255 bytes"));
    }
    if name.contains('>') || name.chars().any(char::is_whitespace) {
        return Err(bad("contains `>` or whitespace"));
    }
    Ok(())
}

fn number(key: &str, value: &str) -> Result<f64, String> {
    let v: f64 = value
        .parse()
        .map_err(|_| format!("{key}={value:?} is not a number"))?;
    if !v.is_finite() || v < 0.0 {
        return Err(format!("{key}={value} must be a finite number >= 0"));
    }
    Ok(v)
}

/// Parses `latency_ms=.. bandwidth_mbit=..` words into a link.
fn parse_params<'a>(words: impl Iterator<Item = &'a str>) -> Result<Link, String> {
    let mut latency: Option<Duration> = None;
    let mut bandwidth: Option<u64> = None;
    for w in words {
        let (k, v) = w
            .split_once('=')
            .ok_or_else(|| format!("parameter `{w}` is not key=value"))?;
        match k {
            "latency_ms" | "latency_us" => {
                if latency.is_some() {
                    return Err("latency given twice".into());
                }
                let n = number(k, v)?;
                let secs = if k == "latency_ms" { n / 1e3 } else { n / 1e6 };
                if secs > 3600.0 {
                    return Err(format!("{k}={v} is more than an hour"));
                }
                latency = Some(Duration::from_secs_f64(secs));
            }
            "bandwidth_mbit" | "bandwidth_kbyte" => {
                if bandwidth.is_some() {
                    return Err("bandwidth given twice".into());
                }
                let n = number(k, v)?;
                let bps = if k == "bandwidth_mbit" {
                    n * 1e6 / 8.0
                } else {
                    n * 1e3
                };
                if !(1.0..=1e15).contains(&bps) {
                    return Err(format!(
                        "{k}={v} is out of range (1 byte/s to 10^15 bytes/s)"
                    ));
                }
                bandwidth = Some(bps.round() as u64);
            }
            other => {
                return Err(format!(
                    "unknown parameter `{other}` (latency_ms, latency_us, bandwidth_mbit, \
                     bandwidth_kbyte)"
                ))
            }
        }
    }
    Ok(Link {
        latency: latency.unwrap_or(Duration::ZERO),
        bytes_per_sec: bandwidth,
    })
}

/// An endpoint's parsed configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WanConfig {
    /// This member's cluster (`cluster=`; [`DEFAULT_CLUSTER`] if absent).
    pub cluster: String,
    /// Links from `IPL_WAN` and the `wan.link`/`wan.default` lines (lines win).
    pub table: LinkTable,
    /// The file to watch (`wan.file=`), if any.
    pub file: Option<PathBuf>,
    /// Bound on the bytes held for delayed delivery (`wan.max_queued=`).
    pub max_queued: usize,
}

impl WanConfig {
    /// Parses the transport configuration `text` and the `IPL_WAN` value `env` (if set).
    /// Entries of `IPL_WAN` are applied first, so a configuration line for the same pair
    /// (or the default) wins. Keys without the `wan.` prefix other than `cluster` belong
    /// to the inner transport and are ignored here; an unknown `wan.` key is an error.
    pub fn parse(text: &str, env: Option<&str>) -> Result<WanConfig, ConfigError> {
        let mut cfg = WanConfig {
            cluster: DEFAULT_CLUSTER.to_string(),
            table: LinkTable::new(),
            file: None,
            max_queued: DEFAULT_MAX_QUEUED,
        };
        if let Some(env) = env {
            for (i, entry) in env.split(';').enumerate() {
                let entry = entry.trim();
                if entry.is_empty() {
                    continue;
                }
                let key_ok = |k: &str| k.strip_prefix("wan.").unwrap_or(k).to_string();
                cfg.entry(entry, ENV_VAR, i + 1, key_ok)?;
            }
        }
        for (i, raw) in text.lines().enumerate() {
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let Some((key, _)) = line.split_once('=') else {
                continue; // not ours to judge: the inner transport reports it
            };
            let key = key.trim();
            if key == "cluster" {
                let value = line.split_once('=').map_or("", |(_, v)| v.trim());
                check_cluster(value).map_err(|e| ConfigError::Line {
                    origin: "config".into(),
                    number: i + 1,
                    line: line.to_string(),
                    reason: e.to_string(),
                })?;
                cfg.cluster = value.to_string();
            } else if let Some(k) = key.strip_prefix("wan.") {
                let k = k.to_string();
                cfg.entry(line, "config", i + 1, move |_| k.clone())?;
            }
        }
        Ok(cfg)
    }

    fn entry(
        &mut self,
        line: &str,
        origin: &str,
        number: usize,
        key_of: impl Fn(&str) -> String,
    ) -> Result<(), ConfigError> {
        let err = |reason: String| ConfigError::Line {
            origin: origin.to_string(),
            number,
            line: line.to_string(),
            reason,
        };
        let (key, value) = line
            .split_once('=')
            .ok_or_else(|| err("not key=value".into()))?;
        let value = value.trim();
        match key_of(key.trim()).as_str() {
            k @ ("link" | "default") => self.table.apply(k, value).map_err(err)?,
            "file" => {
                if value.is_empty() {
                    return Err(err("empty file name".into()));
                }
                self.file = Some(PathBuf::from(value));
            }
            "max_queued" => {
                self.max_queued = value
                    .parse::<usize>()
                    .ok()
                    .filter(|&n| n > 0)
                    .ok_or_else(|| err(format!("max_queued={value:?} must be bytes > 0")))?;
            }
            other => {
                return Err(err(format!(
                    "unknown key `wan.{other}` (wan.link, wan.default, wan.file, wan.max_queued)"
                )))
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn lines_env_and_precedence() {
        let text = "secret=abc\npool=p\nwan.link=A>B latency_ms=10 bandwidth_mbit=100\n\
                    wan.default=latency_us=500\ncluster=A\nwan.max_queued=1000\n";
        let env = "link=A>B latency_ms=99; wan.link=B>A bandwidth_kbyte=100 ;;default=latency_ms=1";
        let c = WanConfig::parse(text, Some(env)).unwrap();
        assert_eq!(c.cluster, "A");
        assert_eq!(c.max_queued, 1000);
        assert_eq!(c.file, None);
        // The config line wins over IPL_WAN for A>B and for the default.
        assert_eq!(
            c.table.lookup("A", "B"),
            Some(Link {
                latency: 10 * MS,
                bytes_per_sec: Some(12_500_000)
            })
        );
        assert_eq!(
            c.table.lookup("B", "A"),
            Some(Link {
                latency: Duration::ZERO,
                bytes_per_sec: Some(100_000)
            })
        );
        assert_eq!(
            c.table.lookup("A", "C").map(|l| l.latency),
            Some(Duration::from_micros(500))
        );
        assert_eq!(c.table.lookup("A", "A"), None);
    }

    #[test]
    fn defaults() {
        let c = WanConfig::parse("", None).unwrap();
        assert_eq!(c.cluster, DEFAULT_CLUSTER);
        assert!(c.table.is_empty());
        assert_eq!(c.max_queued, DEFAULT_MAX_QUEUED);
        let c = WanConfig::parse("wan.file=/x/y\nnot a key value line\n", None).unwrap();
        assert_eq!(c.file, Some(PathBuf::from("/x/y")));
    }

    #[test]
    fn errors_name_the_line() {
        let cases: &[(&str, &str)] = &[
            ("wan.link=A>A latency_ms=1", "itself"),
            ("wan.link=AB latency_ms=1", "not FROM>TO"),
            ("wan.link=", "expected FROM>TO"),
            ("wan.link=A>B latency_ms=-1", ">= 0"),
            ("wan.link=A>B latency_ms=abc", "not a number"),
            ("wan.link=A>B latency_ms=1 latency_us=3", "twice"),
            ("wan.link=A>B bandwidth_mbit=0", "out of range"),
            ("wan.link=A>B bandwidth_mbit=inf", "finite"),
            ("wan.link=A>B speed=3", "unknown parameter"),
            ("wan.link=A>B latency_ms", "not key=value"),
            ("wan.link=>B", "empty"),
            ("wan.default=jitter_ms=3", "unknown parameter"),
            ("wan.lnk=A>B", "unknown key"),
            ("wan.max_queued=0", "max_queued"),
            ("wan.file=", "empty file"),
            ("cluster=a b", "whitespace"),
            ("cluster=", "empty"),
        ];
        for (line, why) in cases {
            let text = format!("pool=p\n{line}\n");
            let e = WanConfig::parse(&text, None).unwrap_err();
            match &e {
                ConfigError::Line {
                    origin,
                    number,
                    line: l,
                    reason,
                } => {
                    assert_eq!(origin, "config");
                    assert_eq!(*number, 2, "{line}");
                    assert_eq!(l, line);
                    assert!(reason.contains(why), "{line}: {reason}");
                }
                other => panic!("{line}: {other:?}"),
            }
            assert!(e.to_string().contains(line), "{e}");
        }
        let e = WanConfig::parse("", Some("link=A>B latency_ms=1;bogus")).unwrap_err();
        assert!(
            matches!(&e, ConfigError::Line { origin, number: 2, .. } if origin == ENV_VAR),
            "{e:?}"
        );
    }

    #[test]
    fn file_syntax() {
        let t = LinkTable::parse_file(
            "# scenario\n\nlink=A>B latency_ms=100 bandwidth_kbyte=100\nwan.default=latency_ms=10\n",
            "f",
        )
        .unwrap();
        assert_eq!(t.lookup("A", "B").unwrap().latency, 100 * MS);
        assert_eq!(t.lookup("B", "A").unwrap().latency, 10 * MS);
        let e = LinkTable::parse_file("link=A>B latency_ms=1\nfile=/etc/x\n", "f").unwrap_err();
        assert!(
            matches!(&e, ConfigError::Line { number: 2, reason, .. } if reason.contains("unknown key")),
            "{e:?}"
        );
    }

    #[test]
    fn table_edits() {
        let mut t = LinkTable::new();
        assert!(matches!(
            t.set("A", "A", Link::IDEAL),
            Err(ConfigError::SameCluster { .. })
        ));
        assert!(matches!(
            t.set("A>", "B", Link::IDEAL),
            Err(ConfigError::BadCluster { .. })
        ));
        let l = Link::from_ms_mbit(1.0, 1.0);
        t.set("A", "B", l).unwrap();
        assert_eq!(t.pair("A", "B"), Some(l));
        assert_eq!(t.lookup("B", "A"), None);
        t.set_default(Some(Link::IDEAL));
        assert_eq!(t.lookup("B", "A"), Some(Link::IDEAL));
        assert_eq!(t.remove("A", "B"), Some(l));
        assert_eq!(t.lookup("A", "B"), Some(Link::IDEAL));
    }
}
