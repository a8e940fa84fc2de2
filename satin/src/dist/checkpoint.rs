//! Checkpoint files of a member's saved results (`SATIN_CHECKPOINT_DIR`): written
//! periodically and atomically, read back by the master of the next run.
//!
//! Each member writes `DIR/<its IPL name>.ckpt` (format:
//! [`satin_core::checkpoint`]) every interval in which its store of saved results
//! changed: to a temporary file in `DIR` on a thread of its own, synced, then renamed
//! over the old one, so a reader sees the old file or the new one, never a part. A
//! failing write is a warning (the run goes on; only the next restart loses reuse).
//! At the start of a run the master reads every `*.ckpt` of `DIR` (a file that does
//! not decode is a warning and skipped) and restores them: its workers find them
//! locally and the other members learn of them (announced). A run that ends
//! successfully removes its files (its own, and for the master the ones it restored):
//! the result is out, and stale checkpoints would only cost memory in the next run.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use satin_core::JobKey;

/// The file name suffix of checkpoint files.
pub(crate) const SUFFIX: &str = "ckpt";

/// A checkpoint file larger than this is not read (it is not one of ours: a store
/// holds 256 MiB by default).
const MAX_FILE: u64 = 4 << 30;

/// One member's checkpoint files.
pub(crate) struct Checkpoints {
    dir: PathBuf,
    file: PathBuf,
    interval: Duration,
    next: Instant,
    /// `results_stored` as of the last write (nothing new: no write).
    written: u64,
    writer: Option<JoinHandle<()>>,
    /// Files of an earlier run restored at the start (removed at a successful end).
    restored: Vec<PathBuf>,
}

impl Checkpoints {
    /// The checkpoints of member `name` in `dir`, written every `interval`.
    pub(crate) fn new(dir: &Path, name: &str, interval: Duration) -> Checkpoints {
        let safe: String = name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        Checkpoints {
            dir: dir.to_path_buf(),
            file: dir.join(format!("{safe}.{SUFFIX}")),
            interval,
            next: Instant::now() + interval,
            written: 0,
            writer: None,
            restored: Vec::new(),
        }
    }

    /// Reads every checkpoint file in the directory (files that do not decode are
    /// warned about and skipped); remembers them, to remove them at a successful end.
    pub(crate) fn read_all(&mut self) -> Vec<(JobKey, Vec<u8>)> {
        let mut out = Vec::new();
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) => {
                if e.kind() != std::io::ErrorKind::NotFound {
                    tracing::warn!(dir = %self.dir.display(), error = %e, "cannot read the checkpoint directory");
                }
                return out;
            }
        };
        let mut files: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == SUFFIX) && p.is_file())
            .collect();
        files.sort();
        for path in files {
            match read_one(&path) {
                Ok(entries) => {
                    tracing::info!(file = %path.display(), results = entries.len(), "checkpoint read");
                    out.extend(entries);
                    self.restored.push(path);
                }
                Err(e) => {
                    tracing::warn!(file = %path.display(), error = %e, "checkpoint skipped")
                }
            }
        }
        out
    }

    /// Whether a checkpoint is due now (the interval passed, the store changed since
    /// the last write, and the last write has ended).
    pub(crate) fn due(&mut self, stored: u64) -> bool {
        if Instant::now() < self.next || stored == self.written {
            return false;
        }
        if self.writer.as_ref().is_some_and(|w| !w.is_finished()) {
            return false;
        }
        if let Some(w) = self.writer.take() {
            let _ = w.join();
        }
        true
    }

    /// Writes `bytes` (an encoded checkpoint holding `stored` results) on a thread of
    /// its own.
    pub(crate) fn write(&mut self, bytes: Vec<u8>, stored: u64) {
        self.next = Instant::now() + self.interval;
        self.written = stored;
        let dir = self.dir.clone();
        let file = self.file.clone();
        let spawned = std::thread::Builder::new()
            .name("satin-checkpoint".into())
            .spawn(move || {
                if let Err(e) = write_atomically(&dir, &file, &bytes) {
                    tracing::warn!(file = %file.display(), error = %e, "writing a checkpoint failed");
                } else {
                    tracing::debug!(file = %file.display(), bytes = bytes.len(), "checkpoint written");
                }
            });
        match spawned {
            Ok(h) => self.writer = Some(h),
            Err(e) => tracing::warn!(error = %e, "cannot start the checkpoint writer"),
        }
    }

    /// The run ended: waits for a write in progress; after a successful run removes
    /// this member's file and the files restored at the start.
    pub(crate) fn finish(&mut self, success: bool) {
        if let Some(w) = self.writer.take() {
            let _ = w.join();
        }
        if !success {
            return;
        }
        for path in std::iter::once(&self.file).chain(&self.restored) {
            match std::fs::remove_file(path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    tracing::warn!(file = %path.display(), error = %e, "cannot remove a checkpoint")
                }
            }
        }
    }
}

fn read_one(path: &Path) -> Result<Vec<(JobKey, Vec<u8>)>, String> {
    let len = std::fs::metadata(path).map_err(|e| e.to_string())?.len();
    if len > MAX_FILE {
        return Err(format!("{len} bytes is larger than any checkpoint"));
    }
    let bytes = std::fs::read(path).map_err(|e| e.to_string())?;
    satin_core::checkpoint::decode(&bytes).map_err(|e| e.to_string())
}

/// Writes `bytes` to `file` in `dir` so that a reader sees the old file or the new
/// one: a temporary file in `dir`, synced, renamed over `file`.
fn write_atomically(dir: &Path, file: &Path, bytes: &[u8]) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let name = file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let r = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, file)?;
        // The rename itself is durable once the directory is synced (best effort:
        // not every platform opens directories).
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
        Ok(())
    })();
    if r.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(what: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "satin-ckpt-{}-{what}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn written_checkpoints_are_read_back_and_bad_files_are_skipped() {
        let dir = scratch("rw");
        let key = JobKey::of("fib", b"30");
        let mut a = Checkpoints::new(&dir, "member-1", Duration::ZERO);
        assert!(a.due(1));
        a.write(
            satin_core::checkpoint::encode([(key, b"832040".as_slice())]),
            1,
        );
        a.finish(false);
        assert!(!a.due(1), "nothing new since the last write");
        std::fs::write(dir.join("junk.ckpt"), b"not a checkpoint").unwrap();
        std::fs::write(dir.join("other.txt"), b"ignored").unwrap();
        let mut b = Checkpoints::new(&dir, "member-0", Duration::ZERO);
        assert_eq!(b.read_all(), vec![(key, b"832040".to_vec())]);
        b.finish(true);
        assert!(
            !dir.join("member-1.ckpt").exists(),
            "restored files are removed"
        );
        assert!(
            dir.join("junk.ckpt").exists(),
            "a file not read is left alone"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_missing_directory_is_no_checkpoint() {
        let dir = scratch("missing");
        let mut c = Checkpoints::new(&dir, "member-0", Duration::ZERO);
        assert!(c.read_all().is_empty());
    }
}
