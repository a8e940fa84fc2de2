//! Checkpoint files of a member's saved results (`SATIN_CHECKPOINT_DIR`): written
//! periodically and atomically, read back by the master of the next run.
//!
//! A checkpoint is reused only by the same program run the same way: each file
//! carries a fingerprint (SHA-256) of the executable's bytes, the process arguments
//! and the optional tag `SATIN_CHECKPOINT_TAG`, and the master restores only files
//! with its own fingerprint (others are skipped with a warning naming the file:
//! "written by another program or other arguments"). So a job's result must depend
//! only on its serialized parameters and the program's arguments (set the tag when
//! it depends on anything else, such as an input file's contents).
//!
//! Each member writes `DIR/<fp8>-<its IPL name>.ckpt`, `<fp8>` the fingerprint's
//! first 8 hex digits (so runs of different programs or arguments sharing `DIR`
//! keep their own files; format: [`satin_core::checkpoint`]) every interval in which its store of saved results
//! changed: to a temporary file in `DIR` on a thread of its own, synced, then renamed
//! over the old one, so a reader sees the old file or the new one, never a part. A
//! failing write is a warning (the run goes on; only the next restart loses reuse).
//! At the start of a run the master reads every `*.ckpt` of `DIR` (a file that does
//! not decode, has another fingerprint or is larger than [`MAX_FILE`] is a warning
//! and skipped) and restores them: its workers find them locally and the other
//! members learn of them (announced). A run that ends successfully removes its files
//! (its own, and for the master the ones it restored, all with its fingerprint): the
//! result is out, and stale checkpoints would only cost memory in the next run.
//! The store is snapshotted under its lock (a reference per result, no copy) and
//! encoded and hashed on the writer thread.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use satin_core::checkpoint::{Fingerprint, FingerprintHasher, HEADER_LEN};
use satin_core::JobKey;

/// The file name suffix of checkpoint files.
pub(crate) const SUFFIX: &str = "ckpt";

/// A checkpoint file larger than this is not read: a member's file holds its
/// store, at most 256 MiB of results by default (plus less per entry than the
/// store charges), so a larger one is not ours and would only cost memory.
pub(crate) const MAX_FILE: u64 = (256 << 20) + (1 << 20);

/// The environment variable whose value, if set, is part of the fingerprint.
pub(crate) const TAG_VAR: &str = "SATIN_CHECKPOINT_TAG";

/// A member's saved results taken under the lock, encoded by the writer thread.
pub(crate) struct Snapshot(pub(crate) Vec<(JobKey, Arc<[u8]>)>);

/// The fingerprint of this process: its executable, arguments and tag.
pub(crate) fn fingerprint(tag: Option<&str>) -> Fingerprint {
    let mut h = FingerprintHasher::new();
    h.part(exe_digest().as_slice());
    for a in std::env::args_os() {
        h.part(os_bytes(&a).as_ref());
    }
    match tag {
        Some(t) => {
            h.part(b"tag");
            h.part(t.as_bytes());
        }
        None => h.part(b"no tag"),
    }
    h.finish()
}

/// The digest of the executable's bytes, read once per process (streamed); if it
/// cannot be read, of its path, size and modification time.
fn exe_digest() -> [u8; 32] {
    static EXE: OnceLock<[u8; 32]> = OnceLock::new();
    *EXE.get_or_init(|| {
        let mut h = FingerprintHasher::new();
        let exe = std::env::current_exe();
        let read = exe.as_ref().map_err(|e| e.to_string()).and_then(|p| {
            let mut f = std::fs::File::open(p).map_err(|e| e.to_string())?;
            let mut buf = vec![0u8; 1 << 16];
            let mut total = 0u64;
            loop {
                let n = f.read(&mut buf).map_err(|e| e.to_string())?;
                if n == 0 {
                    break;
                }
                h.stream(&buf[..n]);
                total += n as u64;
            }
            Ok(total)
        });
        match read {
            Ok(total) => h.part(&total.to_le_bytes()),
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the executable for the checkpoint fingerprint: using its path, size and time");
                let mut h = FingerprintHasher::new();
                h.part(b"unread");
                if let Ok(p) = &exe {
                    h.part(os_bytes(p.as_os_str()).as_ref());
                    if let Ok(m) = std::fs::metadata(p) {
                        h.part(&m.len().to_le_bytes());
                        let t = m
                            .modified()
                            .ok()
                            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                            .unwrap_or_default();
                        h.part(&t.as_nanos().to_le_bytes());
                    }
                }
                return h.finish().0;
            }
        }
        h.finish().0
    })
}

fn os_bytes(s: &std::ffi::OsStr) -> std::borrow::Cow<'_, [u8]> {
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        std::borrow::Cow::Borrowed(s.as_bytes())
    }
    #[cfg(not(unix))]
    {
        std::borrow::Cow::Owned(s.to_string_lossy().into_owned().into_bytes())
    }
}

/// One member's checkpoint files.
pub(crate) struct Checkpoints {
    dir: PathBuf,
    /// What this process writes, and the only files it restores.
    fingerprint: Fingerprint,
    /// Files larger than this are not read.
    max_file: u64,
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
    /// The checkpoints of member `name` in `dir`, written every `interval`, with this
    /// process's fingerprint (tag: `SATIN_CHECKPOINT_TAG`).
    pub(crate) fn new(dir: &Path, name: &str, interval: Duration) -> Checkpoints {
        let tag = std::env::var(TAG_VAR).ok();
        Self::with_fingerprint(dir, name, interval, fingerprint(tag.as_deref()))
    }

    /// Like [`Checkpoints::new`] with the given fingerprint.
    pub(crate) fn with_fingerprint(
        dir: &Path,
        name: &str,
        interval: Duration,
        fingerprint: Fingerprint,
    ) -> Checkpoints {
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
            file: dir.join(format!("{}-{safe}.{SUFFIX}", fingerprint.short())),
            fingerprint,
            max_file: MAX_FILE,
            interval,
            next: Instant::now() + interval,
            written: 0,
            writer: None,
            restored: Vec::new(),
        }
    }

    /// Files larger than `max` bytes are not read (default [`MAX_FILE`], the store's
    /// fixed budget and a margin; the tests use a small bound).
    #[cfg(test)]
    pub(crate) fn max_file(mut self, max: u64) -> Checkpoints {
        self.max_file = max;
        self
    }

    /// Reads every checkpoint file in the directory written with this process's
    /// fingerprint (files that do not decode, another program's and too large ones
    /// are warned about and skipped); remembers them, to remove them at a
    /// successful end.
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
            match read_one(&path, &self.fingerprint, self.max_file) {
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

    /// Encodes and writes `snapshot` (holding `stored` results) on a thread of its
    /// own.
    pub(crate) fn write(&mut self, snapshot: Snapshot, stored: u64) {
        self.next = Instant::now() + self.interval;
        self.written = stored;
        let dir = self.dir.clone();
        let file = self.file.clone();
        let fingerprint = self.fingerprint;
        let spawned = std::thread::Builder::new()
            .name("satin-checkpoint".into())
            .spawn(move || {
                let bytes = satin_core::checkpoint::encode(&fingerprint, snapshot.0);
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

/// Reads one file if it has fingerprint `ours` and at most `max` bytes: its header
/// first (another program's file is not read further), then the rest.
fn read_one(path: &Path, ours: &Fingerprint, max: u64) -> Result<Vec<(JobKey, Vec<u8>)>, String> {
    let mut f = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let len = f.metadata().map_err(|e| e.to_string())?.len();
    let mut head = [0u8; HEADER_LEN];
    f.read_exact(&mut head).map_err(|e| e.to_string())?;
    let theirs = satin_core::checkpoint::fingerprint_of(&head).map_err(|e| e.to_string())?;
    if theirs != *ours {
        return Err(format!(
            "written by another program or other arguments (fingerprint {}, ours {})",
            theirs.short(),
            ours.short()
        ));
    }
    if len > max {
        return Err(format!(
            "{len} bytes is larger than a checkpoint of this run can be ({max})"
        ));
    }
    // `len` is at most `max`: a bounded allocation.
    let mut bytes = Vec::with_capacity(len as usize);
    bytes.extend_from_slice(&head);
    f.take(max - HEADER_LEN as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    if bytes.len() as u64 > max {
        return Err(format!("grew beyond {max} bytes while read"));
    }
    let read = satin_core::checkpoint::decode(&bytes).map_err(|e| e.to_string())?;
    Ok(read.entries)
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

    const FP: Fingerprint = Fingerprint([1; 32]);

    fn snapshot(entries: &[(JobKey, &[u8])]) -> Snapshot {
        Snapshot(entries.iter().map(|(k, b)| (*k, Arc::from(*b))).collect())
    }

    fn at(dir: &Path, name: &str) -> Checkpoints {
        Checkpoints::with_fingerprint(dir, name, Duration::ZERO, FP)
    }

    #[test]
    fn written_checkpoints_are_read_back_and_bad_files_are_skipped() {
        let dir = scratch("rw");
        let key = JobKey::of("fib", b"30");
        let mut a = at(&dir, "member-1");
        assert!(a.due(1));
        a.write(snapshot(&[(key, b"832040")]), 1);
        a.finish(false);
        assert!(!a.due(1), "nothing new since the last write");
        let written = dir.join(format!("{}-member-1.ckpt", FP.short()));
        assert!(
            written.exists(),
            "named after the fingerprint and the member"
        );
        std::fs::write(dir.join("junk.ckpt"), b"not a checkpoint").unwrap();
        std::fs::write(dir.join("other.txt"), b"ignored").unwrap();
        let mut b = at(&dir, "member-0");
        assert_eq!(b.read_all(), vec![(key, b"832040".to_vec())]);
        b.finish(true);
        assert!(!written.exists(), "restored files are removed");
        assert!(
            dir.join("junk.ckpt").exists(),
            "a file not read is left alone"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn another_programs_checkpoint_is_skipped_and_kept() {
        let dir = scratch("foreign");
        let key = JobKey::of("fib", b"24");
        let other = Fingerprint([2; 32]);
        let mut theirs = Checkpoints::with_fingerprint(&dir, "member-7", Duration::ZERO, other);
        theirs.write(snapshot(&[(key, b"46369")]), 1);
        theirs.finish(false);
        let mut ours = at(&dir, "member-7");
        ours.write(snapshot(&[(JobKey::of("fib", b"23"), b"28657")]), 1);
        ours.finish(false);
        let their_file = dir.join(format!("{}-member-7.ckpt", other.short()));
        assert!(their_file.exists(), "two runs keep their own files");

        let mut master = at(&dir, "member-0");
        let read = master.read_all();
        assert_eq!(read, vec![(JobKey::of("fib", b"23"), b"28657".to_vec())]);
        master.finish(true);
        assert!(their_file.exists(), "another run's file is not removed");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_file_larger_than_the_bound_is_not_read() {
        let dir = scratch("large");
        let small = (JobKey::of("fib", b"2"), b"1".as_slice());
        let mut a = at(&dir, "member-1");
        a.write(snapshot(&[small, (JobKey::of("fib", b"9"), &[7; 4096])]), 2);
        a.finish(false);
        let mut b = at(&dir, "member-2");
        b.write(snapshot(&[small]), 1);
        b.finish(false);
        let mut master = at(&dir, "member-0").max_file(1024);
        assert_eq!(master.read_all(), vec![(small.0, small.1.to_vec())]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_fingerprint_covers_the_tag() {
        assert_eq!(fingerprint(Some("a")), fingerprint(Some("a")));
        assert_ne!(fingerprint(Some("a")), fingerprint(Some("b")));
        assert_ne!(fingerprint(None), fingerprint(Some("")));
    }

    #[test]
    fn a_missing_directory_is_no_checkpoint() {
        let dir = scratch("missing");
        let mut c = at(&dir, "member-0");
        assert!(c.read_all().is_empty());
    }
}
