//! The address of a tcp or quic endpoint as a peer publishes it in the registry
//! (`ip:port[,ip:port...]/id[/host]`): parsed strictly, and what parses prints back to
//! something that parses to the same endpoint.
#![no_main]

use ipl_transport_kit::address::IpEndpoint;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(a) = IpEndpoint::parse("tcp", data) {
        let again = IpEndpoint::parse("tcp", &a.to_bytes()).expect("a printed address parses");
        assert_eq!(again.to_bytes(), a.to_bytes());
    }
});
