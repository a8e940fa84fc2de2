//! The WAN emulator: a stacking transport that delays messages between clusters, for
//! running wide-area experiments (thesis §6.2.1, the Satin wide-area work) on one cluster
//! or one machine.
//!
//! A wan-emu endpoint wraps an endpoint of an **inner** transport (TCP in the plugin,
//! `libipl_plugin_wan_emu.so`; any [`TransportPlugin`] through [`WanEmu<T>`], e.g. inproc
//! in tests). Each member's cluster comes from the `cluster=` configuration line that the
//! IPL appends. The address is the own cluster plus the inner address, and a connecting
//! endpoint sends its cluster in a hello as the first message on the new channel, so both
//! ends know the link ([`address`]).
//!
//! **Model** ([`LinkModel`]): a link (an ordered pair of clusters `from > to`) is a FIFO
//! pipe with one-way latency `L` and bandwidth `B`. A message of `s` bytes waits until the
//! link is free, occupies it `s/B`, and arrives `L` later:
//! `arrival = max(now, free) + s/B + L`, `free = max(now, free) + s/B`. Messages inside a
//! cluster, or between clusters without a configured link, pass undelayed, straight to
//! the inner transport. The emulation is on the **sending** side: `send` copies the
//! borrowed slices into an owned buffer and a scheduler thread per endpoint hands it to
//! the inner transport at its arrival time (sleeping until shortly before, then
//! spinning). A channel stays FIFO, also when its link changes at run time. Each sending
//! endpoint has its own pipe per destination cluster (the thesis' emulator shared one per
//! cluster gateway; with one process per cluster that is the same).
//!
//! **Configuration** ([`config`]): `wan.link=A>B latency_ms=10 bandwidth_mbit=100`,
//! `wan.default=latency_ms=5 bandwidth_mbit=100` (every inter-cluster pair not listed),
//! `wan.file=PATH`, `wan.max_queued=BYTES`, and the same entries from the environment
//! variable `IPL_WAN`, `;`-separated, `wan.` optional (configuration lines win). Every
//! other line goes to the inner transport. A bad entry is an
//! [`InvalidArgument`](ipl_transport_abi::TransportError::InvalidArgument) naming the line
//! ([`ConfigError`]).
//!
//! **At run time** ([`control`]): [`links()`] changes links for every endpoint of the
//! process, [`endpoint`]`(address)` for one; across the plugin boundary, the file of
//! `wan.file` is re-read when its modification time changes (looked at at most every
//! 100 ms, on send).
//!
//! Name `wan-emu`, the inner transport's capabilities, priority 0: it is only chosen when
//! asked for by name (`IPL_TRANSPORT=wan-emu`).
//!
//! ```
//! use ipl_transport_wan_emu::{Emulation, Delivery, Link};
//! use std::time::Duration;
//!
//! let ms = Duration::from_millis;
//! let mut e = Emulation::new("A");
//! let wan = Link::from_ms_mbit(10.0, 100.0); // 100 Mbit/s: 12 500 bytes take 1 ms
//! assert_eq!(e.on_message(1, "B", Some(&wan), ms(0), 12_500), Delivery::At(ms(11)));
//! assert_eq!(e.on_message(1, "B", Some(&wan), ms(0), 12_500), Delivery::At(ms(12)));
//! assert_eq!(e.on_message(2, "A", Some(&wan), ms(0), 12_500), Delivery::Now);
//! ```

#![forbid(unsafe_code)]

pub mod address;
pub mod config;
pub mod control;
mod emulation;
mod endpoint;
mod link;
pub mod scheduler;

pub use config::{ConfigError, LinkTable, WanConfig, ENV_VAR};
pub use control::{endpoint, endpoints, links, EndpointLinks, Links};
pub use emulation::{Delivery, Emulation};
pub use endpoint::WanEmu;
pub use ipl_transport_abi::TransportPlugin;
pub use link::{Link, LinkModel};

/// wan-emu over TCP, the transport the plugin exports.
pub type WanEmuTcp = WanEmu<ipl_transport_tcp::TcpTransport>;

ipl_transport_abi::declare_plugin!(
    /// The descriptor of wan-emu over TCP, for static linking.
    pub static PLUGIN = WanEmuTcp;
);

/// The README example, compiled and run as a doc test.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctest;
