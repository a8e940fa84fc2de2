//! Finding and loading transport plugin libraries at run time.
//!
//! A transport plugin is a shared library named
//! `{DLL_PREFIX}ipl_plugin_<name>{DLL_SUFFIX}` (`libipl_plugin_tcp.so` on Linux,
//! `libipl_plugin_tcp.dylib` on macOS, `ipl_plugin_tcp.dll` on Windows) that exports
//! [`ENTRY_SYMBOL`]. Only files whose name follows this scheme, in the directories the
//! caller names (by default [`search_path`]), are ever opened: opening a library runs
//! its initialisers, so the loader never opens anything else.
//!
//! [`load_file`] opens one library, calls its entry and validates the descriptor with
//! [`Plugin::from_raw`]; [`discover`] scans directories and keeps one plugin per
//! transport name. A bad file is reported (as a [`LoadError`] in
//! [`Discovery::refused`], and with `tracing::warn!`) and never stops a scan.
//!
//! Libraries are **never unloaded**: a [`Plugin`]'s descriptor is `'static`, and Rust
//! libraries in general cannot be unloaded soundly. A library that was opened but
//! refused (no entry symbol, wrong ABI version) stays mapped too, since its initialisers
//! have run. Loaded plugins are cached by file identity, so discovering twice opens
//! nothing again.
//!
//! ```no_run
//! let found = ipl_transport_abi::loader::discover_default();
//! for p in &found.loaded {
//!     println!("{} {} from {}", p.name(), p.version(), p.origin());
//! }
//! for (file, why) in &found.refused {
//!     eprintln!("skipped {}: {why}", file.display());
//! }
//! ```

use parking_lot::Mutex;
use std::collections::HashMap;
use std::env::consts::{DLL_PREFIX, DLL_SUFFIX};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::error::LoadError;
use crate::ffi::{EntryFn, ENTRY_SYMBOL};
use crate::host::Plugin;

/// What a plugin library's file name starts with, after the platform's
/// [`DLL_PREFIX`] (`lib` on Unix).
pub const PLUGIN_PREFIX: &str = "ipl_plugin_";

/// The environment variable naming extra plugin directories, separated like `PATH`
/// (`:` on Unix, `;` on Windows). They are searched before the executable's directory.
pub const PLUGIN_PATH_VAR: &str = "IPL_PLUGIN_PATH";

/// The file name of the plugin library for transport `name` on this platform, e.g.
/// `libipl_plugin_tcp.so`.
pub fn plugin_file_name(name: &str) -> String {
    format!("{DLL_PREFIX}{PLUGIN_PREFIX}{name}{DLL_SUFFIX}")
}

/// The `<name>` part of a file named `{DLL_PREFIX}ipl_plugin_<name>{DLL_SUFFIX}`, or
/// `None` if the file does not follow the naming scheme. `<name>` is non-empty and made
/// of ASCII letters, digits, `_` and `-` (so `libipl_plugin_tcp.so.bak` or
/// `libipl_plugin_tcp.old.so` are not plugins).
pub fn plugin_name_of(path: &Path) -> Option<&str> {
    let file = path.file_name()?.to_str()?;
    let name = file
        .strip_prefix(DLL_PREFIX)?
        .strip_prefix(PLUGIN_PREFIX)?
        .strip_suffix(DLL_SUFFIX)?;
    let valid = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    valid.then_some(name)
}

/// The default plugin directories, in search order: those of `IPL_PLUGIN_PATH`
/// ([`PLUGIN_PATH_VAR`]), then the directory of the running executable, then its parent
/// (so that programs in `target/debug` and test binaries in `target/debug/deps` both find
/// the `libipl_plugin_*.so` that `cargo build` puts in `target/debug`).
///
/// Only existing directories are returned, canonicalised, each once (at its first
/// position).
pub fn search_path() -> Vec<PathBuf> {
    let mut candidates = Vec::new();
    if let Some(var) = std::env::var_os(PLUGIN_PATH_VAR) {
        candidates.extend(std::env::split_paths(&var).filter(|p| !p.as_os_str().is_empty()));
    }
    if let Ok(exe) = std::env::current_exe() {
        let exe = std::fs::canonicalize(&exe).unwrap_or(exe);
        if let Some(dir) = exe.parent() {
            candidates.push(dir.to_path_buf());
            if let Some(parent) = dir.parent() {
                candidates.push(parent.to_path_buf());
            }
        }
    }
    let mut dirs: Vec<PathBuf> = Vec::new();
    for c in candidates {
        match std::fs::canonicalize(&c) {
            Ok(d) if d.is_dir() => {
                if !dirs.contains(&d) {
                    dirs.push(d);
                }
            }
            _ => tracing::debug!(dir = %c.display(), "plugin directory does not exist; skipped"),
        }
    }
    dirs
}

/// A plugin that was loaded, and the address of its descriptor (which identifies the
/// library: two paths leading to one library give the same address).
#[derive(Clone)]
struct Loaded {
    plugin: Plugin,
    desc: usize,
}

/// Identifies a file independently of the path used to reach it (hard links, symbolic
/// links, `deps/` and its parent in a cargo target directory).
#[cfg(unix)]
type FileId = (u64, u64);
#[cfg(not(unix))]
type FileId = PathBuf;

#[cfg(unix)]
fn file_id(_path: &Path, meta: &std::fs::Metadata) -> Option<FileId> {
    use std::os::unix::fs::MetadataExt;
    Some((meta.dev(), meta.ino()))
}

#[cfg(not(unix))]
fn file_id(path: &Path, _meta: &std::fs::Metadata) -> Option<FileId> {
    std::fs::canonicalize(path).ok()
}

/// The plugins loaded so far, by file.
fn cache() -> &'static Mutex<HashMap<FileId, Loaded>> {
    static CACHE: OnceLock<Mutex<HashMap<FileId, Loaded>>> = OnceLock::new();
    CACHE.get_or_init(Default::default)
}

/// Loads the plugin library at `path`: opens it, calls its entry symbol and validates
/// the descriptor.
///
/// The library is never unloaded. Loading the same file again (by any path) returns the
/// cached plugin, whose [`origin`](Plugin::origin) is the path it was first loaded from.
///
/// Loading a library runs its initialisers with the rights of this process: call this
/// only on files you trust, which is why [`discover`] only opens files that follow the
/// plugin naming scheme in the directories it is given.
///
/// # Errors
/// [`LoadError::NotALibrary`] if the file is missing or cannot be opened as a shared
/// library, [`LoadError::MissingSymbol`] if it does not export [`ENTRY_SYMBOL`],
/// [`LoadError::NotAFunction`] if that symbol is data (not in executable memory),
/// [`LoadError::EntryPanicked`] if the entry panicked, and the errors of
/// [`Plugin::from_raw`] ([`LoadError::BadMagic`], [`LoadError::WrongAbiVersion`],
/// [`LoadError::Malformed`], [`LoadError::NullDescriptor`]) for a bad descriptor. Every
/// error's message names the file.
pub fn load_file(path: &Path) -> Result<Plugin, LoadError> {
    load(path).map(|l| l.plugin)
}

fn load(path: &Path) -> Result<Loaded, LoadError> {
    let origin = path.display().to_string();
    let not_a_library = |reason: String| LoadError::NotALibrary {
        origin: origin.clone(),
        reason,
    };
    let meta = std::fs::metadata(path).map_err(|e| not_a_library(e.to_string()))?;
    if !meta.is_file() {
        return Err(not_a_library("not a regular file".into()));
    }
    let id = file_id(path, &meta);
    if let Some(id) = &id {
        let cached = cache().lock().get(id).cloned();
        if let Some(hit) = cached {
            return Ok(hit);
        }
    }
    // An absolute path, so that the dynamic loader opens exactly this file and never
    // searches its own directories (a bare file name would be looked up in
    // LD_LIBRARY_PATH and the system directories).
    let abs = std::fs::canonicalize(path).map_err(|e| not_a_library(e.to_string()))?;

    let lib = open_library(&abs).map_err(|e| not_a_library(e.to_string()))?;
    // SAFETY: the symbol is looked up with the type the ABI defines for it
    // (`EntryFn`); looking it up reads nothing. Whether it is a function at all is
    // checked before the call (`executable`): a library that exports a data object
    // under this name is refused with `NotAFunction`. An object that does lie in
    // executable memory (read-only data in the text segment of a library linked without
    // separate code segments) cannot be told from code and would still be called.
    let entry: Result<EntryFn, _> =
        unsafe { lib.get::<EntryFn>(ENTRY_SYMBOL.as_bytes()) }.map(|s| *s);
    // The library stays loaded for the life of the process, whatever happens next: the
    // descriptor and every function of the plugin live in it, and its initialisers
    // have already run (unloading Rust libraries is unsound in general).
    std::mem::forget(lib);
    let entry = entry.map_err(|_| LoadError::MissingSymbol {
        origin: origin.clone(),
    })?;
    if executable(entry as usize) == Some(false) {
        return Err(LoadError::NotAFunction {
            origin: origin.clone(),
        });
    }

    // SAFETY: `entry` is the plugin's entry point, of the ABI's type; the library is
    // never unloaded, so the function stays valid. It takes no arguments. A panic cannot
    // unwind out of an `extern "C"` function (the process aborts instead), so
    // `catch_unwind` is a second line of defence only.
    let desc = catch_unwind(AssertUnwindSafe(|| unsafe { entry() })).map_err(|p| {
        LoadError::EntryPanicked {
            origin: origin.clone(),
            reason: panic_message(p),
        }
    })?;
    // SAFETY: by the ABI, the entry returns null or a pointer to the plugin's descriptor
    // in its static memory, which stays valid because the library is never unloaded.
    // `from_raw` reads only magic and version before trusting the layout.
    let plugin = unsafe { Plugin::from_raw(desc, &origin) }?;
    let loaded = Loaded {
        plugin,
        desc: desc as usize,
    };
    if let Some(id) = id {
        let mut cache = cache().lock();
        return Ok(cache.entry(id).or_insert(loaded).clone());
    }
    Ok(loaded)
}

/// Whether `addr` lies in an executable mapping of this process: `Some(false)` for a
/// data object (a function's address is always in executable memory), `None` when it
/// cannot be told (no `/proc/self/maps`, outside Linux).
fn executable(addr: usize) -> Option<bool> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    mapping_is_executable(&maps, addr)
}

/// [`executable`] over the text of `/proc/self/maps` (`start-end perms ...` per line,
/// hexadecimal addresses): `Some(false)` also when no mapping holds `addr`.
fn mapping_is_executable(maps: &str, addr: usize) -> Option<bool> {
    let mut parsed_any = false;
    for line in maps.lines() {
        let mut fields = line.split_whitespace();
        let (Some(range), Some(perms)) = (fields.next(), fields.next()) else {
            continue;
        };
        let Some((start, end)) = range.split_once('-') else {
            continue;
        };
        let (Ok(start), Ok(end)) = (
            usize::from_str_radix(start, 16),
            usize::from_str_radix(end, 16),
        ) else {
            continue;
        };
        parsed_any = true;
        if (start..end).contains(&addr) {
            return Some(perms.as_bytes().get(2) == Some(&b'x'));
        }
    }
    parsed_any.then_some(false)
}

#[cfg(unix)]
fn open_library(path: &Path) -> Result<libloading::Library, libloading::Error> {
    use libloading::os::unix::{Library, RTLD_LOCAL, RTLD_NOW};
    // SAFETY: opening a library runs its initialisers. Only files the caller chose are
    // opened (`discover` opens only files named after the plugin scheme in the
    // configured search path), and trusting them is the premise of a plugin system.
    // RTLD_NOW resolves every symbol now, so a library with missing dependencies is
    // refused here instead of failing on its first call; RTLD_LOCAL keeps its symbols
    // (every plugin exports `ipl_transport_plugin`) out of the global namespace.
    unsafe { Library::open(Some(path), RTLD_NOW | RTLD_LOCAL) }.map(Into::into)
}

#[cfg(not(unix))]
fn open_library(path: &Path) -> Result<libloading::Library, libloading::Error> {
    // SAFETY: as on Unix: only files the caller chose are opened, and their
    // initialisers are trusted.
    unsafe { libloading::Library::new(path) }
}

fn panic_message(p: Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".to_string()
    }
}

/// What a scan of plugin directories found.
#[derive(Debug, Default, Clone)]
pub struct Discovery {
    /// The plugins that loaded, at most one per transport name, in scan order.
    pub loaded: Vec<Plugin>,
    /// The files that follow the naming scheme but were refused, with the reason.
    pub refused: Vec<(PathBuf, LoadError)>,
}

impl Discovery {
    /// The loaded plugin of transport `name`, if any.
    pub fn get(&self, name: &str) -> Option<&Plugin> {
        self.loaded.iter().find(|p| p.name() == name)
    }

    /// Why `file` was refused, if it was.
    pub fn refusal(&self, file: &Path) -> Option<&LoadError> {
        self.refused.iter().find(|(f, _)| f == file).map(|(_, e)| e)
    }
}

/// Scans `dirs` in order for plugin libraries (files named
/// `{DLL_PREFIX}ipl_plugin_<name>{DLL_SUFFIX}`, see [`plugin_name_of`]; every other file
/// is ignored and never opened) and loads them with [`load_file`]. Within a directory,
/// files are taken in file-name order.
///
/// The first plugin of a given transport name wins. A later library that declares the
/// same name is refused with [`LoadError::Duplicate`]; the same library reached twice
/// (e.g. through a hard link, as cargo puts a `cdylib` both in `target/debug/deps` and
/// `target/debug`) is skipped silently.
///
/// A bad file never stops the scan: it is recorded in [`Discovery::refused`] and logged
/// with `tracing::warn!`. A directory that does not exist is skipped.
pub fn discover<P: AsRef<Path>>(dirs: &[P]) -> Discovery {
    let mut found = Discovery::default();
    // Transport name -> (descriptor address, index in `found.loaded`).
    let mut by_name: HashMap<&'static str, (usize, usize)> = HashMap::new();
    for dir in dirs {
        let dir = dir.as_ref();
        let entries = match std::fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                tracing::debug!(dir = %dir.display(), "plugin directory does not exist; skipped");
                continue;
            }
            Err(e) => {
                tracing::warn!(dir = %dir.display(), error = %e, "cannot read plugin directory");
                continue;
            }
        };
        let mut files: Vec<PathBuf> = entries
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .filter(|p| plugin_name_of(p).is_some())
            .collect();
        files.sort();
        for file in files {
            match load(&file) {
                Ok(l) => match by_name.get(l.plugin.name()) {
                    None => {
                        tracing::debug!(
                            transport = l.plugin.name(),
                            file = %file.display(),
                            "transport plugin loaded"
                        );
                        by_name.insert(l.plugin.name(), (l.desc, found.loaded.len()));
                        found.loaded.push(l.plugin);
                    }
                    Some(&(desc, _)) if desc == l.desc => {
                        tracing::debug!(
                            transport = l.plugin.name(),
                            file = %file.display(),
                            "same plugin library found again; skipped"
                        );
                    }
                    Some(&(_, first)) => {
                        let e = LoadError::Duplicate {
                            origin: file.display().to_string(),
                            name: l.plugin.name().to_string(),
                            first: found.loaded[first].origin().to_string(),
                        };
                        tracing::warn!(file = %file.display(), error = %e, "transport plugin refused");
                        found.refused.push((file, e));
                    }
                },
                Err(e) => {
                    tracing::warn!(file = %file.display(), error = %e, "transport plugin refused");
                    found.refused.push((file, e));
                }
            }
        }
    }
    found
}

/// [`discover`] in the default [`search_path`].
pub fn discover_default() -> Discovery {
    discover(&search_path())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn naming_scheme() {
        fn f(n: &str) -> Option<&str> {
            plugin_name_of(Path::new(n))
        }
        let good = plugin_file_name("tcp");
        assert_eq!(f(&good), Some("tcp"));
        assert_eq!(f(&format!("/some/dir/{good}")), Some("tcp"));
        assert_eq!(f(&plugin_file_name("shm-ring_2")), Some("shm-ring_2"));
        assert_eq!(f(&plugin_file_name("")), None);
        assert_eq!(f(&plugin_file_name("a.b")), None);
        assert_eq!(f(&format!("{good}.bak")), None);
        assert_eq!(
            f(&format!("{DLL_PREFIX}ipl_transport_tcp{DLL_SUFFIX}")),
            None
        );
        assert_eq!(f("ipl_plugin_tcp.txt"), None);
    }

    #[test]
    fn missing_file_is_not_a_library() {
        let p = Path::new("/nonexistent/dir/libipl_plugin_x.so");
        let e = load_file(p).unwrap_err();
        assert!(matches!(e, LoadError::NotALibrary { .. }), "{e:?}");
        assert!(e
            .to_string()
            .contains("/nonexistent/dir/libipl_plugin_x.so"));
    }

    #[test]
    fn only_addresses_in_executable_mappings_count_as_code() {
        let maps = "00400000-00452000 r-xp 00000000 08:02 173521 /usr/bin/x\n\
                    00651000-00652000 rw-p 00051000 08:02 173521 /usr/bin/x\n\
                    7fff00000000-7fff00001000 r--p 00000000 00:00 0\n";
        assert_eq!(mapping_is_executable(maps, 0x0040_1000), Some(true));
        assert_eq!(mapping_is_executable(maps, 0x0065_1008), Some(false));
        assert_eq!(mapping_is_executable(maps, 0x7fff_0000_0010), Some(false));
        assert_eq!(mapping_is_executable(maps, 0x10), Some(false), "unmapped");
        assert_eq!(mapping_is_executable("", 0x10), None, "nothing to tell");
        // This very function is code.
        let code: fn(usize) -> Option<bool> = executable;
        assert_eq!(executable(code as usize), Some(true));
        static DATA: [u8; 4] = [1, 2, 3, 4];
        assert_eq!(executable(DATA.as_ptr() as usize), Some(false));
    }

    #[test]
    fn missing_directory_is_skipped() {
        let d = discover(&[Path::new("/nonexistent/ipl/plugins")]);
        assert!(d.loaded.is_empty() && d.refused.is_empty());
    }
}
