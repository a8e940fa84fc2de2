//! Shared helpers: an event log the tests wait on, configs, and a hand-made client that
//! performs the handshake with `ipl_auth` on a raw socket.

#![allow(dead_code)]

#[allow(unused_imports)] // each test file uses part of them
pub use ipl_transport_kit::testing::{connect, pattern, EventLog as Log, Events, PATIENCE};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;

use ipl_auth::{Initiator, PoolSecret, CHALLENGE_LEN};
use ipl_transport_abi::{Plugin, TransportInstance};
use ipl_transport_kit::testing::addresses::IpTransport;
use ipl_transport_tcp::wire;

/// This transport as the kit's shared scenarios take it.
pub const TRANSPORT: IpTransport = IpTransport {
    name: "tcp",
    plugin,
    peer_addresses: ipl_transport_tcp::TcpTransport::peer_addresses,
};

pub fn plugin() -> Plugin {
    Plugin::from_static(&ipl_transport_tcp::PLUGIN).unwrap()
}

pub fn config(secret: &PoolSecret) -> String {
    ipl_transport_kit::testing::config(secret, "test")
}

/// A fresh endpoint with its own log.
pub fn endpoint(cfg: &str) -> (TransportInstance, Arc<Log>) {
    ipl_transport_kit::testing::endpoint(&plugin(), cfg)
}

/// The socket address and id inside an endpoint address.
pub fn parse(addr: &[u8]) -> (SocketAddr, u64) {
    let a = ipl_transport_tcp::Address::parse("tcp", addr).unwrap();
    (a.primary(), a.id)
}

/// Dials `target` with a raw socket and performs the handshake by hand, as endpoint
/// `my_id`. Returns the authenticated stream.
pub fn raw_client(target: &TransportInstance, secret: &PoolSecret, my_id: u64) -> TcpStream {
    let (sock, id) = parse(&target.local_address().unwrap());
    let mut s = TcpStream::connect(sock).unwrap();
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    let (init, hello) = Initiator::start(secret, b"ipl-tcp/test").unwrap();
    s.write_all(&wire::MAGIC).unwrap();
    s.write_all(&hello).unwrap();
    let mut challenge = [0u8; CHALLENGE_LEN];
    s.read_exact(&mut challenge).unwrap();
    let finish = init.on_challenge(&challenge).unwrap();
    s.write_all(&finish).unwrap();
    s.write_all(&my_id.to_le_bytes()).unwrap();
    s.write_all(&id.to_le_bytes()).unwrap();
    let mut theirs = [0u8; 8];
    s.read_exact(&mut theirs).unwrap();
    assert_eq!(u64::from_le_bytes(theirs), id);
    s
}
