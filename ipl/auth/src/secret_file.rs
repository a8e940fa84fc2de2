//! Reading a pool secret from a file only its owner can read.
//!
//! The environment is a poor place for a secret: `/proc/<pid>/environ` shows
//! it to the user's other processes, and it is inherited by every child. A
//! file of mode `0600` is readable by its owner alone. [`read`] refuses, with a
//! [`SecretFileProblem`] naming the reason, a file that
//!
//! * is not owned by the user reading it,
//! * grants its group or others any permission (`mode & 0o077 != 0`, as ssh
//!   refuses a private key),
//! * is not a regular file (a FIFO is never waited on),
//! * does not hold exactly 64 hex digits, optionally followed by one newline
//!   (at most 65 bytes are read).
//!
//! The checks are made on the opened file (`fstat`), so the file that is
//! checked is the file that is read.

use std::fmt;
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags};

use crate::{AuthError, PoolSecret, LEN};

/// The environment variable naming a file that holds the pool's secret (read
/// when [`SECRET_ENV`](crate::SECRET_ENV) is not set).
pub const SECRET_FILE_ENV: &str = "IPL_POOL_SECRET_FILE";

/// The most a secret file may hold: 64 hex digits and a newline.
const MAX_LEN: usize = 2 * LEN + 1;

/// Why a secret file was refused (see the [module](self) docs).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SecretFileProblem {
    /// The file could not be opened or read.
    Unreadable(String),
    /// It is a directory, a FIFO, a device, ...
    NotAFile,
    /// It is owned by another user.
    NotOwner {
        /// The file's owner.
        owner: u32,
        /// The user reading it.
        user: u32,
    },
    /// Its group or others have some permission on it.
    TooOpen {
        /// The file's permission bits.
        mode: u32,
    },
    /// It holds more than a secret and a newline.
    TooLong,
    /// Its content is not 64 hex digits.
    Malformed(String),
}

impl fmt::Display for SecretFileProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unreadable(e) => write!(f, "cannot be read: {e}"),
            Self::NotAFile => f.write_str("is not a regular file"),
            Self::NotOwner { owner, user } => write!(
                f,
                "is owned by uid {owner}, not by this user (uid {user}); it must belong to the user who reads it"
            ),
            Self::TooOpen { mode } => write!(
                f,
                "can be accessed by its group or others (mode {mode:04o}); make it private with `chmod 600`"
            ),
            Self::TooLong => write!(
                f,
                "holds more than a secret ({} hex digits and an optional newline)",
                2 * LEN
            ),
            Self::Malformed(why) => write!(
                f,
                "does not hold a pool secret ({} hex digits and an optional newline): {why}",
                2 * LEN
            ),
        }
    }
}

/// Reads the secret in `path`, checking that only its owner, the current
/// user, can read it.
pub fn read(path: &Path) -> Result<PoolSecret, AuthError> {
    read_checked(path).map_err(|problem| AuthError::SecretFile {
        path: PathBuf::from(path),
        problem,
    })
}

fn read_checked(path: &Path) -> Result<PoolSecret, SecretFileProblem> {
    let unreadable = |e: std::io::Error| SecretFileProblem::Unreadable(e.to_string());
    // Non-blocking: opening a FIFO must not wait for a writer.
    let fd = rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY,
        Mode::empty(),
    )
    .map_err(|e| unreadable(e.into()))?;
    let mut file = File::from(fd);
    let meta = file.metadata().map_err(unreadable)?;
    if !meta.file_type().is_file() {
        return Err(SecretFileProblem::NotAFile);
    }
    let user = rustix::process::getuid().as_raw();
    if meta.uid() != user {
        return Err(SecretFileProblem::NotOwner {
            owner: meta.uid(),
            user,
        });
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Err(SecretFileProblem::TooOpen { mode });
    }
    let mut text = Vec::with_capacity(MAX_LEN + 1);
    (&mut file)
        .take(MAX_LEN as u64 + 1)
        .read_to_end(&mut text)
        .map_err(unreadable)?;
    if text.len() > MAX_LEN {
        return Err(SecretFileProblem::TooLong);
    }
    let digits = text.strip_suffix(b"\n").unwrap_or(&text);
    if digits.len() != 2 * LEN {
        return Err(SecretFileProblem::Malformed(format!(
            "{} characters",
            digits.len()
        )));
    }
    if !digits.iter().all(u8::is_ascii_hexdigit) {
        return Err(SecretFileProblem::Malformed(
            "a character is not a hex digit".into(),
        ));
    }
    let hex = std::str::from_utf8(digits)
        .map_err(|_| SecretFileProblem::Malformed("not ASCII".into()))?;
    PoolSecret::from_hex(hex).map_err(|e| SecretFileProblem::Malformed(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::PermissionsExt;
    use std::sync::atomic::{AtomicU32, Ordering};

    /// A fresh directory under the system's temporary directory, removed on
    /// drop.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new() -> Self {
            static N: AtomicU32 = AtomicU32::new(0);
            let p = std::env::temp_dir().join(format!(
                "ipl-auth-secret-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            fs::create_dir_all(&p).unwrap();
            TempDir(p)
        }

        /// Writes `content` to `name` with `mode`.
        fn file(&self, name: &str, content: &[u8], mode: u32) -> PathBuf {
            let p = self.0.join(name);
            fs::write(&p, content).unwrap();
            fs::set_permissions(&p, fs::Permissions::from_mode(mode)).unwrap();
            p
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn problem(path: &Path) -> SecretFileProblem {
        match read(path) {
            Err(AuthError::SecretFile { path: p, problem }) => {
                assert_eq!(p, path);
                problem
            }
            other => panic!("expected a secret-file error, got {other:?}"),
        }
    }

    #[test]
    fn a_private_file_with_a_secret_is_read() {
        let dir = TempDir::new();
        let s = PoolSecret::generate().unwrap();
        let with_newline = dir.file("a", format!("{}\n", s.to_hex()).as_bytes(), 0o600);
        assert_eq!(read(&with_newline).unwrap(), s);
        let without = dir.file("b", s.to_hex().as_bytes(), 0o400);
        assert_eq!(read(&without).unwrap(), s);
    }

    #[test]
    fn a_file_others_can_access_is_refused() {
        let dir = TempDir::new();
        let hex = PoolSecret::generate().unwrap().to_hex();
        for mode in [0o640, 0o604, 0o620, 0o644] {
            let p = dir.file(&format!("m{mode:o}"), hex.as_bytes(), mode);
            assert_eq!(problem(&p), SecretFileProblem::TooOpen { mode });
        }
        let err = read(&dir.file("x", hex.as_bytes(), 0o644)).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("chmod 600") && text.contains("/x"), "{text}");
    }

    #[test]
    fn a_file_of_another_user_is_refused() {
        let user = rustix::process::getuid().as_raw();
        let dir = TempDir::new();
        let p = dir.file(
            "s",
            PoolSecret::generate().unwrap().to_hex().as_bytes(),
            0o600,
        );
        let other = if user == 0 { 65534 } else { 0 };
        if user == 0 {
            // Root can give the file away.
            std::os::unix::fs::chown(&p, Some(other), None).unwrap();
            assert_eq!(
                problem(&p),
                SecretFileProblem::NotOwner { owner: other, user }
            );
        } else {
            // A file root owns that everybody may read.
            let p = Path::new("/etc/passwd");
            assert_eq!(
                problem(p),
                SecretFileProblem::NotOwner { owner: other, user }
            );
        }
    }

    #[test]
    fn bad_contents_are_refused() {
        let dir = TempDir::new();
        let hex = PoolSecret::generate().unwrap().to_hex();
        let cases: [(&str, Vec<u8>); 6] = [
            ("empty", Vec::new()),
            ("short", hex.as_bytes()[..63].to_vec()),
            ("spaces", format!(" {}", &hex[1..]).into_bytes()),
            ("nonhex", format!("g{}", &hex[1..]).into_bytes()),
            ("two-newlines", format!("{hex}\n\n").into_bytes()),
            ("crlf", format!("{hex}\r\n").into_bytes()),
        ];
        for (name, content) in cases {
            let p = dir.file(name, &content, 0o600);
            let got = problem(&p);
            assert!(
                matches!(
                    got,
                    SecretFileProblem::Malformed(_) | SecretFileProblem::TooLong
                ),
                "{name}: {got:?}"
            );
        }
        // A large file is refused after a bounded read.
        let big = dir.file("big", &vec![b'a'; 1 << 20], 0o600);
        assert_eq!(problem(&big), SecretFileProblem::TooLong);
    }

    #[test]
    fn missing_files_directories_and_fifos_are_refused() {
        let dir = TempDir::new();
        assert!(matches!(
            problem(&dir.0.join("missing")),
            SecretFileProblem::Unreadable(_)
        ));
        assert_eq!(problem(&dir.0), SecretFileProblem::NotAFile);
        let fifo = dir.0.join("fifo");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            Mode::RUSR | Mode::WUSR,
            0,
        )
        .unwrap();
        // Refused without waiting for a writer.
        assert_eq!(problem(&fifo), SecretFileProblem::NotAFile);
    }
}
