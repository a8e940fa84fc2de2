//! Addresses of the TCP transport: the default interface selection advertises every
//! address of the host with the host's id, a peer on the same host is dialed over
//! loopback, dead addresses are skipped within the connect timeout, and an interface
//! that does not exist is an error naming it. The scenarios are the kit's
//! [`addresses`], shared with the other IP transports; what is TCP's own here is the
//! kind of dead address. Network traffic stays on 127.0.0.0/8.

mod common;

use std::net::TcpListener;
use std::time::Duration;

use common::TRANSPORT;
use ipl_transport_kit::testing::addresses;

#[test]
fn the_default_selection_advertises_the_host_and_connects() {
    addresses::default_selection_advertises_the_host_and_connects(&TRANSPORT);
}

#[test]
fn a_loopback_only_selection_advertises_one_loopback_address() {
    addresses::one_loopback_address_is_advertised_and_reached(&TRANSPORT, Some("lo"), "lo");
}

#[test]
fn an_interface_that_does_not_exist_is_an_error_naming_it() {
    addresses::an_interface_that_does_not_exist_is_an_error_naming_it(&TRANSPORT);
}

#[test]
fn dead_addresses_are_skipped_within_the_timeout() {
    // A closed port: refused at once.
    let closed = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    // A listener nobody accepts on: the connection is queued, the handshake is never
    // answered, the attempt ends when its share of the timeout is over.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    addresses::dead_addresses_are_skipped_within_the_timeout(
        &TRANSPORT,
        &[closed, silent.local_addr().unwrap()],
        Duration::from_secs(4),
    );
}

#[test]
fn loopback_of_another_host_is_never_dialed() {
    addresses::loopback_of_another_host_is_never_dialed(&TRANSPORT);
}

#[test]
fn the_single_address_form_still_connects() {
    addresses::the_single_address_form_still_connects(&TRANSPORT);
}
