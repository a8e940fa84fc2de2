//! Addresses of the QUIC transport: the default interface selection advertises every
//! address of the host with the host's id and two endpoints of one host meet over
//! loopback, dead addresses are skipped within the connect timeout, and an interface
//! that does not exist is an error naming it. The scenarios are the kit's
//! [`addresses`], shared with the other IP transports; what is QUIC's own here is the
//! reply and the unreliable channel over the default selection, the dual-stack socket
//! reaching an IPv4 peer, and the kind of dead address. Network traffic stays on
//! 127.0.0.0/8.

mod common;

use std::net::UdpSocket;
use std::time::Duration;

use common::{PATIENCE, TRANSPORT};
use ipl_transport_abi::TransportError;
use ipl_transport_kit::testing::addresses;
use ipl_transport_quic::UNRELIABLE_SUFFIX;

#[test]
fn the_default_selection_advertises_the_host_and_connects() {
    let (p, back) = addresses::default_selection_advertises_the_host_and_connects(&TRANSPORT);
    p.b.send(back, &[b"and back"]).unwrap();
    p.log_a.until("reply", |e| e.messages.len() == 1);
    // An unreliable channel to the same list rides the same connection.
    let mut unrel = p.b.local_address().unwrap();
    unrel.extend_from_slice(UNRELIABLE_SUFFIX.as_bytes());
    p.a.connect(&unrel, PATIENCE).unwrap();
}

#[test]
fn an_ipv4_peer_is_reached_from_a_dual_stack_socket() {
    // b listens on IPv4 loopback only; a (default selection: both families when the
    // host has IPv6) dials it as an IPv4-mapped address.
    addresses::one_loopback_address_is_advertised_and_reached(&TRANSPORT, None, "127.0.0.1");
}

#[test]
fn an_interface_that_does_not_exist_is_an_error_naming_it() {
    addresses::an_interface_that_does_not_exist_is_an_error_naming_it(&TRANSPORT);
}

#[test]
fn dead_addresses_are_skipped_within_the_timeout() {
    // A UDP socket that never reads: QUIC's first packets vanish, as in a black hole.
    let silent = UdpSocket::bind("127.0.0.1:0").unwrap();
    let e = addresses::dead_addresses_are_skipped_within_the_timeout(
        &TRANSPORT,
        &[silent.local_addr().unwrap()],
        Duration::from_millis(500),
    );
    assert!(matches!(e, TransportError::Timeout(_)), "{e:?}");
}

#[test]
fn loopback_of_another_host_is_never_dialed() {
    addresses::loopback_of_another_host_is_never_dialed(&TRANSPORT);
}

#[test]
fn the_single_address_form_still_connects() {
    addresses::the_single_address_form_still_connects(&TRANSPORT);
}
