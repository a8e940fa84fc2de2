//! The ibis-rs example applications' shared start-up: members of an IPL pool as
//! processes under a launcher, or as threads of one process.

pub mod members;
