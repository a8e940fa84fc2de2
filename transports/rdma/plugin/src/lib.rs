//! The RDMA transport packaged as a plugin library (`libipl_plugin_rdma.so`). It loads on
//! every machine: libibverbs is opened at run time, and a machine without it (or without
//! a device) gets a plugin that reports itself unavailable, with the reason.

#![forbid(unsafe_code)]

ipl_transport_abi::export_plugin!(ipl_transport_rdma::PLUGIN);
