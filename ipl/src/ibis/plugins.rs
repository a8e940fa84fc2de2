//! The transports linked into the program, and those found on the plugin search path.

use ipl_transport_abi::Plugin;
use parking_lot::Mutex;

/// Descriptors registered with [`register_static_plugin`].
static REGISTERED: Mutex<Vec<&'static ipl_transport_abi::ffi::PluginDescriptor>> =
    Mutex::new(Vec::new());

/// Adds a transport linked into the program (its crate's `PLUGIN` descriptor) to
/// [`static_plugins`], so that every Ibis built afterwards in this process can use it
/// without finding its plugin library on the search path. Registering the same
/// descriptor twice has no effect.
///
/// ```
/// // A program that links the transport crate registers it once, at start:
/// // ipl::register_static_plugin(&ipl_transport_shm::PLUGIN);
/// ipl::register_static_plugin(&ipl_transport_inproc::PLUGIN); // already built in: no-op
/// assert_eq!(ipl::static_plugins().iter().filter(|p| p.name() == "inproc").count(), 1);
/// ```
pub fn register_static_plugin(desc: &'static ipl_transport_abi::ffi::PluginDescriptor) {
    let mut r = REGISTERED.lock();
    if !r.iter().any(|d| std::ptr::eq(*d, desc)) {
        r.push(desc);
    }
}

/// The transports linked into this build: in-process and TCP, then those registered
/// with [`register_static_plugin`] (a name already present is skipped).
pub fn static_plugins() -> Vec<Plugin> {
    let mut descs: Vec<&'static ipl_transport_abi::ffi::PluginDescriptor> =
        vec![&ipl_transport_inproc::PLUGIN, &ipl_transport_tcp::PLUGIN];
    descs.extend(REGISTERED.lock().iter().copied());
    let mut plugins: Vec<Plugin> = Vec::new();
    for p in descs
        .into_iter()
        .filter_map(|d| match Plugin::from_static(d) {
            Ok(p) => Some(p),
            Err(e) => {
                tracing::error!(error = %e, "static plugin refused");
                None
            }
        })
    {
        if !plugins.iter().any(|q| q.name() == p.name()) {
            plugins.push(p);
        }
    }
    plugins
}

/// The statically linked transports, then every plugin found on the search path
/// (`IPL_PLUGIN_PATH`, the executable's directory and its parent) whose name is not
/// linked in already. Refused plugins are logged with their reason.
pub fn default_plugins() -> Vec<Plugin> {
    let mut plugins = static_plugins();
    let found = ipl_transport_abi::loader::discover_default();
    for (path, e) in &found.refused {
        tracing::warn!(file = %path.display(), error = %e, "transport plugin refused");
    }
    for p in found.loaded {
        if !plugins.iter().any(|q| q.name() == p.name()) {
            plugins.push(p);
        }
    }
    plugins
}
