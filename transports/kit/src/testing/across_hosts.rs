//! A connection between two hosts on one machine, shared by the IP transports' tests:
//! two network namespaces joined by a veth pair ([`NetnsPair`], addresses inside them
//! only), made and removed by the test, with one process each running an endpoint of
//! the transport with the default interface selection. The server advertises its veth
//! address and its own loopback; the client, on another host by the namespaces'
//! identity, skips the server's loopback and reaches it over the veth link, and the
//! server echoes its message.
//!
//! The two processes are the transport's test binary again, running its ignored test
//! [`MEMBER_TEST`] (which calls [`member`]) with its role in the environment. A
//! transport's test file holds:
//!
//! ```text
//! #[test]
//! fn two_namespace_hosts_connect_over_their_veth_link() {
//!     across_hosts::connect_over_the_veth_link(&TRANSPORT, ["10.231.0.1/24", "10.231.0.2/24"]);
//! }
//!
//! #[test]
//! #[ignore = "run by two_namespace_hosts_connect_over_their_veth_link inside a namespace"]
//! fn netns_member() {
//!     across_hosts::member(&TRANSPORT);
//! }
//! ```
//!
//! Needs root and `ip` (iproute2); without them the test says so and passes, unless
//! `IBIS_REQUIRE_LAUNCHERS=1` is set.

use std::time::Duration;

use ipl_auth::PoolSecret;

use super::addresses::IpTransport;
use super::netns::{launchers_required, NetnsPair};
use super::{endpoint, PATIENCE};

/// The name of the ignored test of the transport's test binary that calls [`member`].
pub const MEMBER_TEST: &str = "netns_member";

const ROLE: &str = "IBIS_NETNS_ROLE";
const PEER: &str = "IBIS_NETNS_PEER";
const SECRET: &str = "IBIS_NETNS_SECRET";
const MEMBER_ARGS: [&str; 5] = [
    "--exact",
    MEMBER_TEST,
    "--ignored",
    "--nocapture",
    "--test-threads=1",
];

/// Runs a server in namespace host 0 (address `addrs[0]`, CIDR form) and a client in
/// host 1 (`addrs[1]`): the server advertises `addrs[0]`'s address and its loopback,
/// the client's connection takes `addrs[0]`'s address, and both end well.
///
/// # Panics
/// When any of that fails, or when the namespaces cannot be made and
/// `IBIS_REQUIRE_LAUNCHERS=1` is set (without it the test says why and passes).
pub fn connect_over_the_veth_link(t: &IpTransport, addrs: [&str; 2]) {
    let mut hosts = match NetnsPair::create(t.name, addrs) {
        Ok(h) => h,
        Err(why) if !launchers_required() => {
            eprintln!("skipped: network namespaces unavailable (needs root and iproute2): {why}");
            return;
        }
        Err(why) => panic!("network namespaces unavailable and IBIS_REQUIRE_LAUNCHERS=1: {why}"),
    };
    let server_ip = addrs[0].split('/').next().unwrap_or(addrs[0]);
    let exe = std::env::current_exe().unwrap();
    let secret = PoolSecret::generate().unwrap().to_hex();
    let server = hosts
        .spawn(
            0,
            &exe,
            &MEMBER_ARGS,
            &[(ROLE, "server".into()), (SECRET, secret.clone())],
        )
        .expect("start the server");
    let server_addr = hosts.line(server, "address=", PATIENCE);
    let parsed = crate::IpEndpoint::parse(t.name, server_addr.as_bytes()).unwrap();
    // The server advertises its veth address and its own loopback.
    assert!(
        parsed
            .sockets
            .iter()
            .any(|s| s.ip().to_string() == server_ip),
        "{server_addr}"
    );
    assert!(
        parsed.sockets.iter().any(|s| s.ip().is_loopback()),
        "{server_addr}"
    );
    let client = hosts
        .spawn(
            1,
            &exe,
            &MEMBER_ARGS,
            &[
                (ROLE, "client".into()),
                (SECRET, secret),
                (PEER, server_addr),
            ],
        )
        .expect("start the client");
    let used = hosts.line(client, "used=", PATIENCE);
    assert!(used.starts_with(&format!("{server_ip}:")), "{used}");
    assert!(hosts.exit(client, PATIENCE).success(), "client failed");
    assert!(hosts.exit(server, PATIENCE).success(), "server failed");
}

/// One side of [`connect_over_the_veth_link`], in its namespace, by the role in its
/// environment; does nothing without one (when the test is run on its own).
///
/// # Panics
/// When its side fails.
pub fn member(t: &IpTransport) {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let secret = std::env::var(SECRET).expect("secret");
    let (e, log) = endpoint(&(t.plugin)(), &format!("secret={secret}\npool=netns"));
    match role.as_str() {
        "server" => {
            // Stdout is how a member reports to the test that started it.
            println!(
                "address={}",
                String::from_utf8(e.local_address().unwrap()).unwrap()
            );
            // Echo the client's message, then wait for it to go.
            let ev = log.wait("the client's message", |ev| ev.messages.len() == 1);
            let (ch, msg) = ev.messages[0].clone();
            drop(ev);
            e.send(ch, &[&msg]).unwrap();
            log.until("the client to leave", |ev| !ev.closed.is_empty());
        }
        "client" => {
            let peer = std::env::var(PEER).expect("peer address");
            let ch = e
                .connect(peer.as_bytes(), Duration::from_secs(10))
                .expect("connect across namespaces");
            e.send(ch, &[b"across hosts"]).unwrap();
            let ev = log.wait("the echo", |ev| ev.messages.len() == 1);
            assert_eq!(ev.messages[0].1, b"across hosts");
            drop(ev);
            let used = t.used(&e);
            assert_eq!(used.len(), 1, "{used:?}");
            println!("used={}", used[0]);
            e.close_channel(ch);
        }
        other => panic!("unknown role {other}"),
    }
}
