//! Port types that ask for unreliable communication: the IPL tells a transport that
//! offers it by appending `UNRELIABLE_SUFFIX` to the address it connects to, and only
//! then. The transport here is the in-process one under another name, with the
//! `unreliable` capability, recording every address it is asked to connect to.

mod common;

use std::sync::Mutex;
use std::time::Duration;

use common::*;
use ipl::{EmbeddedRegistry, Ibis, PortCapabilities as P, PortType};
use ipl_transport_abi::{
    HostSink, Plugin, TransportCapabilities as C, TransportError, TransportPlugin,
    UNRELIABLE_SUFFIX,
};
use ipl_transport_inproc::InProcTransport;

/// Addresses passed to `connect`, in order.
static CONNECTS: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());

struct Lossy(InProcTransport);

impl TransportPlugin for Lossy {
    const NAME: &'static str = "lossy";
    const VERSION: &'static str = "0.1.0";
    const CAPABILITIES: C = C::RELIABLE
        .union(C::FIFO)
        .union(C::UNRELIABLE)
        .union(C::IN_PROCESS);
    const PRIORITY: i32 = 200;
    fn create(config: &str, host: HostSink) -> Result<Self, TransportError> {
        Ok(Lossy(InProcTransport::create(config, host)?))
    }
    fn local_address(&self) -> Vec<u8> {
        self.0.local_address()
    }
    fn connect(&self, address: &[u8], timeout: Duration) -> Result<u64, TransportError> {
        CONNECTS.lock().unwrap().push(address.to_vec());
        let plain = address.strip_suffix(UNRELIABLE_SUFFIX).unwrap_or(address);
        self.0.connect(plain, timeout)
    }
    fn send(&self, channel: u64, slices: &[&[u8]]) -> Result<(), TransportError> {
        self.0.send(channel, slices)
    }
    fn close_channel(&self, channel: u64) {
        self.0.close_channel(channel)
    }
    fn shutdown(&self) {
        self.0.shutdown()
    }
}

ipl_transport_abi::declare_plugin!(static LOSSY = Lossy;);

fn member(reg: &EmbeddedRegistry, pool: &str, t: PortType) -> Ibis {
    Ibis::builder()
        .pool(pool)
        .registry(reg)
        .plugin(Plugin::from_static(&LOSSY).unwrap())
        .port_type(t)
        .build()
        .unwrap()
}

fn connect_and_send(t: PortType, pool: &str) -> Vec<u8> {
    let reg = EmbeddedRegistry::new();
    let (a, b) = (member(&reg, pool, t), member(&reg, pool, t));
    let rp = b.create_receive_port(&t, "in").unwrap();
    rp.enable_connections();
    let mut sp = a.create_send_port(&t, "out").unwrap();
    let before = CONNECTS.lock().unwrap().len();
    sp.connect(rp.identifier(), LONG).unwrap();
    let address = CONNECTS.lock().unwrap()[before].clone();
    let mut m = sp.new_message().unwrap();
    m.write_bytes(b"hello").unwrap();
    m.finish().unwrap();
    let mut r = rp.receive_timeout(LONG).unwrap();
    assert_eq!(r.read_bytes_ref(5).unwrap(), b"hello");
    address
}

// One test: the recorded addresses of both cases come from one static list.
#[test]
fn unreliable_port_types_ask_the_transport_for_unreliable_channels() {
    let base = P::CONNECTION_ONE_TO_ONE | P::RECEIVE_TIMEOUT | P::SERIALIZATION_BYTE;
    let unreliable = PortType::new(base | P::COMMUNICATION_UNRELIABLE).unwrap();
    let reliable = PortType::new(base | P::COMMUNICATION_RELIABLE | P::COMMUNICATION_FIFO).unwrap();
    let a = connect_and_send(unreliable, &pool("unrel"));
    assert!(a.ends_with(UNRELIABLE_SUFFIX), "{a:?}");
    let b = connect_and_send(reliable, &pool("rel"));
    assert!(!b.ends_with(UNRELIABLE_SUFFIX), "{b:?}");
}
