//! The in-process transport packaged as a plugin library (`libipl_plugin_inproc.so`),
//! found at run time by `ipl_transport_abi::loader` like any other transport.
//!
//! The transport itself lives in `ipl-transport-inproc`; this crate only exports its
//! descriptor as the entry symbol. It is a crate of its own so that programs linking the
//! transport statically never carry the entry symbol.

#![forbid(unsafe_code)]

ipl_transport_abi::export_plugin!(ipl_transport_inproc::PLUGIN);
