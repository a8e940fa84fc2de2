//! Two hosts on one machine: two network namespaces joined by a veth pair (addresses
//! 10.232.0.1/24 and 10.232.0.2/24 inside them only), made and removed by the test,
//! with one process each running a QUIC endpoint with the default interface selection.
//! The client, on another host by the namespaces' identity, skips the server's loopback
//! address and reaches it over the veth link. The scenario is the kit's
//! [`across_hosts`], shared with the other IP transports.
//!
//! Needs root and `ip` (iproute2); without them the test says so and passes, unless
//! `IBIS_REQUIRE_LAUNCHERS=1` is set. The two processes are this test binary again,
//! running the ignored `netns_member` with its role in the environment.

mod common;

use common::TRANSPORT;
use ipl_transport_kit::testing::across_hosts;

#[test]
fn two_namespace_hosts_connect_over_their_veth_link() {
    across_hosts::connect_over_the_veth_link(&TRANSPORT, ["10.232.0.1/24", "10.232.0.2/24"]);
}

/// One side of the test above, in its namespace (does nothing when run on its own).
#[test]
#[ignore = "run by two_namespace_hosts_connect_over_their_veth_link inside a namespace"]
fn netns_member() {
    across_hosts::member(&TRANSPORT);
}
