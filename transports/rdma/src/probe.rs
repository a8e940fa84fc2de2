//! Is RDMA usable here? Opens libibverbs at run time (so that nothing links against it)
//! and asks it for devices.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::OnceLock;

/// The library probed by default.
pub const LIBRARY: &str = "libibverbs.so.1";

/// Environment variable naming another library to probe instead of [`LIBRARY`] (a
/// vendor build in a non-standard place; tests use it to exercise the failure paths).
pub const LIBRARY_VAR: &str = "IPL_RDMA_LIBRARY";

/// Why RDMA cannot be used on this machine.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Unavailable {
    /// libibverbs could not be opened.
    #[error("no libibverbs found ({library}: {reason})")]
    NoLibrary {
        /// The library name tried.
        library: String,
        /// The dynamic loader's explanation.
        reason: String,
    },
    /// The library opened but lacks a verbs function (not libibverbs, or a broken one).
    #[error("no libibverbs found ({library} has no {symbol}: {reason})")]
    MissingSymbol {
        /// The library name tried.
        library: String,
        /// The function looked for.
        symbol: &'static str,
        /// The dynamic loader's explanation.
        reason: String,
    },
    /// libibverbs found no device (or could not list them).
    #[error("no RDMA device ({library} found; {detail})")]
    NoDevice {
        /// The library name used.
        library: String,
        /// What `ibv_get_device_list` said.
        detail: String,
    },
    /// Devices exist, but this build has no data path for them.
    #[error(
        "RDMA device(s) {devices} found, but this build has no verbs data path \
         (build ipl-transport-rdma with the cargo feature `verbs`)"
    )]
    NotBuilt {
        /// The devices found, comma-separated.
        devices: String,
    },
}

type GetDeviceList = unsafe extern "C" fn(num: *mut c_int) -> *mut *mut c_void;
type FreeDeviceList = unsafe extern "C" fn(list: *mut *mut c_void);
type GetDeviceName = unsafe extern "C" fn(device: *mut c_void) -> *const c_char;

/// Longest device list read (a corrupt count never drives a huge loop).
const MAX_DEVICES: usize = 1024;

/// Lists the RDMA devices through the library `library` (e.g. [`LIBRARY`]): their names,
/// or why there are none. The library, once opened, stays loaded for the life of the
/// process (libibverbs is not meant to be unloaded).
pub fn devices_with(library: &str) -> Result<Vec<String>, Unavailable> {
    // SAFETY: opening a shared library runs its initialisers. libibverbs' initialisers
    // only read configuration (provider directories); any library named by the user
    // through IPL_RDMA_LIBRARY is trusted as the plugin libraries themselves are.
    let lib = unsafe { libloading::Library::new(library) }.map_err(|e| Unavailable::NoLibrary {
        library: library.to_string(),
        reason: e.to_string(),
    })?;
    // Never unloaded: providers loaded by libibverbs keep pointers into it.
    let lib: &'static libloading::Library = Box::leak(Box::new(lib));
    let missing = |symbol: &'static str, e: libloading::Error| Unavailable::MissingSymbol {
        library: library.to_string(),
        symbol,
        reason: e.to_string(),
    };
    // The types are those of libibverbs' declarations in <infiniband/verbs.h>.
    // SAFETY: `struct ibv_device **ibv_get_device_list(int *num_devices)`.
    let get = unsafe { lib.get::<GetDeviceList>(b"ibv_get_device_list\0") }
        .map(|f| *f)
        .map_err(|e| missing("ibv_get_device_list", e))?;
    // SAFETY: `void ibv_free_device_list(struct ibv_device **list)`.
    let free = unsafe { lib.get::<FreeDeviceList>(b"ibv_free_device_list\0") }
        .map(|f| *f)
        .map_err(|e| missing("ibv_free_device_list", e))?;
    // SAFETY: `const char *ibv_get_device_name(struct ibv_device *device)`.
    let name = unsafe { lib.get::<GetDeviceName>(b"ibv_get_device_name\0") }
        .map(|f| *f)
        .map_err(|e| missing("ibv_get_device_name", e))?;
    let mut n: c_int = 0;
    // SAFETY: `get` is ibv_get_device_list; `n` is a valid out-pointer for the call.
    let list = unsafe { get(&mut n) };
    if list.is_null() {
        let err = std::io::Error::last_os_error();
        return Err(Unavailable::NoDevice {
            library: library.to_string(),
            detail: format!("ibv_get_device_list failed: {err}"),
        });
    }
    let count = usize::try_from(n).unwrap_or(0).min(MAX_DEVICES);
    let mut names = Vec::with_capacity(count);
    for i in 0..count {
        // SAFETY: the list holds `n` device pointers followed by a null one (libibverbs
        // contract); `i < n`, so the slot is inside the list.
        let slot = unsafe { list.add(i) };
        // SAFETY: as above: the slot is an initialised device pointer of the list.
        let dev = unsafe { *slot };
        if dev.is_null() {
            break;
        }
        // SAFETY: `dev` is a device of the list, alive until the list is freed; the name
        // is a NUL-terminated string inside it.
        let p = unsafe { name(dev) };
        if !p.is_null() {
            // SAFETY: non-null NUL-terminated string owned by the device (see above),
            // copied before the list is freed.
            names.push(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned());
        }
    }
    // SAFETY: `list` came from ibv_get_device_list and is freed once, after its last use.
    unsafe { free(list) };
    if names.is_empty() {
        return Err(Unavailable::NoDevice {
            library: library.to_string(),
            detail: "ibv_get_device_list returned no device".to_string(),
        });
    }
    Ok(names)
}

/// The library to probe: `IPL_RDMA_LIBRARY` or [`LIBRARY`].
pub fn library() -> String {
    std::env::var(LIBRARY_VAR)
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| LIBRARY.to_string())
}

/// The RDMA devices of this machine, probed once per process through [`library`].
pub fn devices() -> Result<Vec<String>, Unavailable> {
    static PROBED: OnceLock<Result<Vec<String>, Unavailable>> = OnceLock::new();
    PROBED
        .get_or_init(|| {
            let r = devices_with(&library());
            match &r {
                Ok(d) => tracing::debug!(devices = ?d, "rdma: devices found"),
                Err(e) => tracing::debug!(reason = %e, "rdma: unavailable"),
            }
            r
        })
        .clone()
}

/// Whether this build can drive the devices found: `Ok` with their names, or why not.
pub fn usable() -> Result<Vec<String>, Unavailable> {
    let devs = devices()?;
    if cfg!(feature = "verbs") {
        Ok(devs)
    } else {
        Err(Unavailable::NotBuilt {
            devices: devs.join(","),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_library_is_named() {
        let e = devices_with("libipl-no-such-verbs.so.1").unwrap_err();
        assert!(
            matches!(&e, Unavailable::NoLibrary { library, .. } if library == "libipl-no-such-verbs.so.1")
        );
        assert!(e.to_string().starts_with("no libibverbs found"), "{e}");
    }

    #[test]
    fn a_library_without_verbs_is_refused() {
        // The C library is loaded in every process and has no verbs functions.
        let e = devices_with("libc.so.6").unwrap_err();
        assert!(
            matches!(
                &e,
                Unavailable::MissingSymbol {
                    symbol: "ibv_get_device_list",
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(e.to_string().starts_with("no libibverbs found"), "{e}");
    }
}
