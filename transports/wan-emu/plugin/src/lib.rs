//! The wan-emu transport (over TCP) packaged as a plugin library
//! (`libipl_plugin_wan_emu.so`), found at run time by the IPL's plugin loader.
//!
//! The transport lives in `ipl-transport-wan-emu`; this crate only exports its
//! descriptor as the entry symbol.

#![forbid(unsafe_code)]

ipl_transport_abi::export_plugin!(ipl_transport_wan_emu::PLUGIN);
