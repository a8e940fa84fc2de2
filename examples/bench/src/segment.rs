//! A benchmark's shared-memory segment between two processes: a file in `/dev/shm`
//! that one side creates and the other opens by name, both mapping it. The creator
//! unlinks the file as soon as the peer has opened it (the mappings live on), or when
//! it is dropped, so nothing is left in `/dev/shm`.

use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use ipl_transport_shm::bench_internals::Region;

use crate::spin;

/// One side's mapping of a segment.
#[derive(Debug)]
pub struct Segment {
    region: Arc<Region>,
    /// The file to unlink once the peer opened it (creator only).
    path: Option<PathBuf>,
}

pub(crate) fn invalid_data(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.into())
}

pub(crate) fn other(e: impl std::fmt::Display) -> io::Error {
    io::Error::other(e.to_string())
}

impl Segment {
    /// Creates a file of `size` bytes named `prefix` and 16 random hex digits, readable
    /// and writable by this user only, maps it and runs `init` on the mapping; returns
    /// the segment and the name the peer opens it by. The file is removed on failure.
    pub fn create(
        prefix: &str,
        size: usize,
        init: impl FnOnce(&Region) -> io::Result<()>,
    ) -> io::Result<(Segment, String)> {
        let mut r = [0u8; 8];
        getrandom::getrandom(&mut r).map_err(other)?;
        let path = PathBuf::from(format!("{prefix}{:016x}", u64::from_le_bytes(r)));
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)?;
        let setup = || -> io::Result<Region> {
            file.set_len(size as u64)?;
            let region = Region::map(&OwnedFd::from(file), size)?;
            init(&region)?;
            Ok(region)
        };
        let region = setup().inspect_err(|_| {
            let _ = std::fs::remove_file(&path);
        })?;
        let name = path.to_string_lossy().into_owned();
        Ok((
            Segment {
                region: Arc::new(region),
                path: Some(path),
            },
            name,
        ))
    }

    /// Opens and maps the segment named `name`, which must start with `prefix` and hold
    /// at least `min_size` bytes; `what` names the kind of segment in errors.
    pub fn open(prefix: &str, name: &str, min_size: usize, what: &str) -> io::Result<Segment> {
        if !name.starts_with(prefix) {
            return Err(invalid_data(format!("not a {what} segment name")));
        }
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(name)?;
        let size = usize::try_from(file.metadata()?.len())
            .map_err(|_| invalid_data(format!("{what} segment too large")))?;
        if size < min_size {
            return Err(invalid_data(format!("{what} segment too small")));
        }
        Ok(Segment {
            region: Arc::new(Region::map(&OwnedFd::from(file), size)?),
            path: None,
        })
    }

    /// The mapping.
    pub fn region(&self) -> &Arc<Region> {
        &self.region
    }

    /// Opener: tells the creator, through the word at `opened`, that the segment is
    /// open.
    pub fn mark_opened(&self, opened: usize) -> io::Result<()> {
        self.region
            .atomic(opened)
            .map_err(other)?
            .store(1, Ordering::Release);
        Ok(())
    }

    /// Creator: waits until the peer marked the word at `opened`, then unlinks the file
    /// (also when the wait failed).
    pub fn wait_peer(&self, opened: usize, what: &str) -> io::Result<()> {
        let r = self
            .region
            .atomic(opened)
            .map_err(other)
            .and_then(|w| spin::until(w, |v| v == 1, what));
        self.unlink();
        r
    }

    fn unlink(&self) {
        if let Some(p) = &self.path {
            let _ = std::fs::remove_file(p);
        }
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        self.unlink();
    }
}
