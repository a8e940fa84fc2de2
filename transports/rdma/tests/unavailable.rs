//! On a machine without RDMA (this one, CI) the plugin loads, reports why it cannot run,
//! and refuses to create an endpoint with a typed error carrying the same reason.

use std::sync::Arc;

use ipl_transport_abi::{ChannelClosed, Plugin, ReceivedBuffer, TransportError, TransportEvents};
use ipl_transport_rdma::probe::{self, Unavailable};

struct Nothing;
impl TransportEvents for Nothing {
    fn channel_opened(&self, _: u64) {}
    fn message(&self, _: u64, _: ReceivedBuffer) {}
    fn channel_closed(&self, _: u64, _: ChannelClosed) {}
}

#[test]
fn descriptor_loads_through_from_static() {
    let p = Plugin::from_static(&ipl_transport_rdma::PLUGIN).unwrap();
    assert_eq!(p.name(), "rdma");
    assert_eq!(p.version(), env!("CARGO_PKG_VERSION"));
    let caps = p.capabilities();
    assert!(caps.contains(
        ipl_transport_abi::TransportCapabilities::RELIABLE
            | ipl_transport_abi::TransportCapabilities::FIFO
            | ipl_transport_abi::TransportCapabilities::NETWORK
    ));
}

/// What the probe says must be what availability reports, in the words of the brief.
#[test]
fn availability_gives_the_reason() {
    let p = Plugin::from_static(&ipl_transport_rdma::PLUGIN).unwrap();
    let probed = probe::usable();
    match (&probed, p.availability()) {
        (Err(e), Err(why)) => {
            eprintln!("rdma availability on this machine: {why}");
            assert_eq!(why, e.to_string());
            match e {
                Unavailable::NoLibrary { .. } | Unavailable::MissingSymbol { .. } => {
                    assert!(why.starts_with("no libibverbs found"), "{why}")
                }
                Unavailable::NoDevice { .. } => {
                    assert!(why.starts_with("no RDMA device"), "{why}")
                }
                Unavailable::NotBuilt { .. } => assert!(why.contains("feature"), "{why}"),
                other => panic!("unexpected reason {other:?}"),
            }
        }
        (Ok(_), Ok(())) => {} // a machine with a device and the verbs data path
        (probed, avail) => panic!("probe {probed:?} but availability {avail:?}"),
    }
}

#[test]
fn create_fails_with_the_same_typed_reason() {
    let p = Plugin::from_static(&ipl_transport_rdma::PLUGIN).unwrap();
    let Err(why) = p.availability() else {
        return; // RDMA usable here: nothing to check
    };
    match p.create("pool=p\ncluster=c\n", Arc::new(Nothing)) {
        Err(TransportError::Unavailable(m)) => assert_eq!(m, why),
        Err(e) => panic!("expected Unavailable, got {e:?}"),
        Ok(_) => panic!("created an endpoint although unavailable: {why}"),
    }
}

#[test]
fn probing_an_absent_library_names_it() {
    let e = probe::devices_with("libibverbs-absent-for-test.so.1").unwrap_err();
    assert!(
        e.to_string()
            .starts_with("no libibverbs found (libibverbs-absent-for-test.so.1:"),
        "{e}"
    );
}
