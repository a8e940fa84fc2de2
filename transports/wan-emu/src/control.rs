//! Changing links at run time: the Rust API ([`links`], [`endpoint`]) and the watched
//! `wan.file`.
//!
//! An endpoint looks its links up in four layers, first match wins, pairs before
//! defaults: its own overrides ([`EndpointLinks::overrides`]), the process-wide overrides
//! ([`links`]), the watched file, and its configuration (`wan.*` lines and `IPL_WAN`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant, SystemTime};

use parking_lot::Mutex;

use crate::config::{ConfigError, LinkTable};
use crate::link::Link;

/// How often, at most, the endpoint looks at the file's modification time.
pub const FILE_CHECK_INTERVAL: Duration = Duration::from_millis(100);

/// A handle on a table of link overrides, cheap to clone. Changes take effect for the
/// next message sent.
#[derive(Debug, Clone, Default)]
pub struct Links {
    table: Arc<Mutex<LinkTable>>,
}

impl Links {
    /// Sets the link from cluster `from` to cluster `to`.
    ///
    /// ```
    /// use ipl_transport_wan_emu::{links, Link};
    /// links().set("doc-a", "doc-b", Link::from_ms_mbit(10.0, 100.0)).unwrap();
    /// assert_eq!(links().get("doc-a", "doc-b"), Some(Link::from_ms_mbit(10.0, 100.0)));
    /// assert!(links().set("doc-a", "doc-a", Link::IDEAL).is_err());
    /// links().remove("doc-a", "doc-b");
    /// ```
    pub fn set(&self, from: &str, to: &str, link: Link) -> Result<(), ConfigError> {
        self.table.lock().set(from, to, link)
    }

    /// Removes the override for `from -> to` (lower layers apply again).
    pub fn remove(&self, from: &str, to: &str) -> Option<Link> {
        self.table.lock().remove(from, to)
    }

    /// Sets or clears the default for pairs this table does not list.
    pub fn set_default(&self, link: Option<Link>) {
        self.table.lock().set_default(link);
    }

    /// This table's entry for `from -> to` (without its default).
    pub fn get(&self, from: &str, to: &str) -> Option<Link> {
        self.table.lock().pair(from, to)
    }

    /// Replaces the whole table.
    pub fn replace(&self, table: LinkTable) {
        *self.table.lock() = table;
    }

    /// A copy of the table.
    pub fn snapshot(&self) -> LinkTable {
        self.table.lock().clone()
    }
}

/// The process-wide link overrides: they apply to every wan-emu endpoint of this process,
/// present and future (below each endpoint's own overrides).
pub fn links() -> Links {
    static GLOBAL: OnceLock<Links> = OnceLock::new();
    GLOBAL.get_or_init(Links::default).clone()
}

/// The watched file and the table last read from it.
#[derive(Debug)]
pub(crate) struct FileSource {
    path: PathBuf,
    checked: Option<Instant>,
    modified: Option<SystemTime>,
    table: LinkTable,
}

impl FileSource {
    /// Reads the file once; a missing or malformed file is an error at creation.
    pub fn open(path: &Path, now: Instant) -> Result<Self, ConfigError> {
        let modified = modified(path).map_err(|reason| ConfigError::File {
            path: path.display().to_string(),
            reason,
        })?;
        let table = read_table(path)?;
        Ok(FileSource {
            path: path.to_path_buf(),
            checked: Some(now),
            modified: Some(modified),
            table,
        })
    }

    /// Re-reads the file if [`FILE_CHECK_INTERVAL`] has passed since the last look and its
    /// modification time changed. A file that became unreadable or malformed is reported
    /// (with `tracing::warn!`) and the previous table stays in force. Returns whether the
    /// table changed.
    pub fn refresh(&mut self, now: Instant) -> bool {
        if let Some(c) = self.checked {
            if now.saturating_duration_since(c) < FILE_CHECK_INTERVAL {
                return false;
            }
        }
        self.checked = Some(now);
        let m = match modified(&self.path) {
            Ok(m) => m,
            Err(reason) => {
                if self.modified.take().is_some() {
                    tracing::warn!(file = %self.path.display(), %reason,
                        "wan-emu: link file unreadable; keeping the links last read");
                }
                return false;
            }
        };
        if self.modified == Some(m) {
            return false;
        }
        self.modified = Some(m);
        match read_table(&self.path) {
            Ok(t) => {
                let changed = t != self.table;
                tracing::info!(file = %self.path.display(), "wan-emu: link file re-read");
                self.table = t;
                changed
            }
            Err(e) => {
                tracing::warn!(error = %e, "wan-emu: link file malformed; keeping the links last read");
                false
            }
        }
    }

    pub fn table(&self) -> &LinkTable {
        &self.table
    }
}

fn modified(path: &Path) -> Result<SystemTime, String> {
    std::fs::metadata(path)
        .and_then(|m| m.modified())
        .map_err(|e| e.to_string())
}

fn read_table(path: &Path) -> Result<LinkTable, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|e| ConfigError::File {
        path: path.display().to_string(),
        reason: e.to_string(),
    })?;
    LinkTable::parse_file(&text, &path.display().to_string())
}

/// Where one endpoint's links come from.
#[derive(Debug)]
pub(crate) struct LinkState {
    pub cluster: String,
    pub own: Links,
    pub global: Links,
    pub file: Option<Mutex<FileSource>>,
    pub base: LinkTable,
}

impl LinkState {
    /// The link from this endpoint's cluster to `to`, at `now` (may re-read the file).
    pub fn lookup(&self, to: &str, now: Instant) -> Option<Link> {
        let from = self.cluster.as_str();
        if from == to {
            return None;
        }
        let own = self.own.table.lock();
        let global = self.global.table.lock();
        let mut file = self.file.as_ref().map(Mutex::lock);
        if let Some(f) = file.as_mut() {
            f.refresh(now);
        }
        let file_table = file.as_ref().map(|f| f.table());
        let tables = [Some(&*own), Some(&*global), file_table, Some(&self.base)];
        tables
            .iter()
            .flatten()
            .find_map(|t| t.pair(from, to))
            .or_else(|| tables.iter().flatten().find_map(|t| t.default_link()))
    }
}

/// A wan-emu endpoint of this process, as registered by `create`.
#[derive(Debug, Clone)]
pub struct EndpointLinks {
    address: Vec<u8>,
    state: Arc<LinkState>,
}

impl EndpointLinks {
    /// The endpoint's (wan-emu) address.
    pub fn address(&self) -> &[u8] {
        &self.address
    }

    /// The endpoint's cluster.
    pub fn cluster(&self) -> &str {
        &self.state.cluster
    }

    /// Overrides that apply to this endpoint only (above the process-wide ones).
    pub fn overrides(&self) -> Links {
        self.state.own.clone()
    }

    /// The link this endpoint applies now to messages for cluster `to` (`None`: not
    /// delayed). May re-read the watched file.
    pub fn link_to(&self, to: &str) -> Option<Link> {
        self.state.lookup(to, Instant::now())
    }
}

fn registry() -> &'static Mutex<HashMap<Vec<u8>, Weak<LinkState>>> {
    static REG: OnceLock<Mutex<HashMap<Vec<u8>, Weak<LinkState>>>> = OnceLock::new();
    REG.get_or_init(Default::default)
}

pub(crate) fn register(address: Vec<u8>, state: &Arc<LinkState>) {
    let mut reg = registry().lock();
    reg.retain(|_, w| w.strong_count() > 0);
    reg.insert(address, Arc::downgrade(state));
}

pub(crate) fn unregister(address: &[u8]) {
    registry().lock().remove(address);
}

/// The live wan-emu endpoint of this process with this address, if any.
pub fn endpoint(address: &[u8]) -> Option<EndpointLinks> {
    let state = registry().lock().get(address)?.upgrade()?;
    Some(EndpointLinks {
        address: address.to_vec(),
        state,
    })
}

/// Every live wan-emu endpoint of this process.
pub fn endpoints() -> Vec<EndpointLinks> {
    registry()
        .lock()
        .iter()
        .filter_map(|(a, w)| {
            Some(EndpointLinks {
                address: a.clone(),
                state: w.upgrade()?,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(base: LinkTable, file: Option<FileSource>) -> LinkState {
        LinkState {
            cluster: "A".into(),
            own: Links::default(),
            global: Links::default(),
            file: file.map(Mutex::new),
            base,
        }
    }

    fn ms(n: u64) -> Link {
        Link {
            latency: Duration::from_millis(n),
            bytes_per_sec: None,
        }
    }

    #[test]
    fn layers_pairs_before_defaults() {
        let mut base = LinkTable::new();
        base.set("A", "B", ms(1)).unwrap();
        base.set_default(Some(ms(2)));
        let s = state(base, None);
        let now = Instant::now();
        assert_eq!(s.lookup("B", now), Some(ms(1)));
        assert_eq!(s.lookup("C", now), Some(ms(2)));
        assert_eq!(s.lookup("A", now), None);
        s.global.set_default(Some(ms(3)));
        // A pair of a lower layer beats a default of a higher one.
        assert_eq!(s.lookup("B", now), Some(ms(1)));
        assert_eq!(s.lookup("C", now), Some(ms(3)));
        s.global.set("A", "B", ms(4)).unwrap();
        assert_eq!(s.lookup("B", now), Some(ms(4)));
        s.own.set("A", "B", ms(5)).unwrap();
        assert_eq!(s.lookup("B", now), Some(ms(5)));
        s.own.remove("A", "B");
        s.global.remove("A", "B");
        assert_eq!(s.lookup("B", now), Some(ms(1)));
    }

    #[test]
    fn file_is_reread_when_its_time_changes_at_most_every_interval() {
        let dir = std::env::temp_dir().join(format!("wan-emu-ctl-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("links.conf");
        std::fs::write(&path, "link=A>B latency_ms=10\n").unwrap();
        let t0 = Instant::now();
        let src = FileSource::open(&path, t0).unwrap();
        let s = state(LinkTable::new(), Some(src));
        assert_eq!(s.lookup("B", t0), Some(ms(10)));

        let set_mtime = |secs: u64| {
            let f = std::fs::File::options().write(true).open(&path).unwrap();
            f.set_modified(SystemTime::UNIX_EPOCH + Duration::from_secs(secs))
                .unwrap();
        };
        std::fs::write(&path, "link=A>B latency_ms=20\ndefault=latency_ms=7\n").unwrap();
        set_mtime(1_000_000);
        // Not looked at again before the interval...
        assert_eq!(s.lookup("B", t0 + Duration::from_millis(50)), Some(ms(10)));
        // ...and re-read after it.
        let t1 = t0 + FILE_CHECK_INTERVAL;
        assert_eq!(s.lookup("B", t1), Some(ms(20)));
        assert_eq!(s.lookup("C", t1), Some(ms(7)));

        // A malformed file keeps the previous links.
        std::fs::write(&path, "link=A>A latency_ms=1\n").unwrap();
        set_mtime(2_000_000);
        let t2 = t1 + FILE_CHECK_INTERVAL;
        assert_eq!(s.lookup("B", t2), Some(ms(20)));
        // Fixed again: taken.
        std::fs::write(&path, "link=A>B latency_ms=30\n").unwrap();
        set_mtime(3_000_000);
        let t3 = t2 + FILE_CHECK_INTERVAL;
        assert_eq!(s.lookup("B", t3), Some(ms(30)));
        assert_eq!(s.lookup("C", t3), None);
        // A removed file keeps them too.
        std::fs::remove_file(&path).unwrap();
        assert_eq!(s.lookup("B", t3 + FILE_CHECK_INTERVAL), Some(ms(30)));
        let _ = std::fs::remove_dir_all(&dir);

        assert!(matches!(
            FileSource::open(&dir.join("missing"), t0),
            Err(ConfigError::File { .. })
        ));
    }
}
