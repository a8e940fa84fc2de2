//! Two hosts on one machine: two network namespaces joined by a veth pair (addresses
//! 10.231.0.1/24 and 10.231.0.2/24 inside them only), made and removed by the test
//! ([`NetnsPair`]), with one process each running a TCP endpoint with the default
//! interface selection. The client, on another host by the namespaces' identity, skips
//! the server's loopback address and reaches it over the veth link.
//!
//! Needs root and `ip` (iproute2); without them the test says so and passes, unless
//! `IBIS_REQUIRE_LAUNCHERS=1` is set. The two processes are this test binary again,
//! running the ignored `netns_member` with its role in the environment.

mod common;

use std::time::Duration;

use common::{endpoint, PATIENCE};
use ipl_auth::PoolSecret;
use ipl_transport_kit::testing::netns::{launchers_required, NetnsPair};
use ipl_transport_tcp::{Address, TcpTransport};

const ROLE: &str = "IBIS_NETNS_ROLE";
const PEER: &str = "IBIS_NETNS_PEER";
const SECRET: &str = "IBIS_NETNS_SECRET";
const SERVER_IP: &str = "10.231.0.1";
const MEMBER: [&str; 5] = [
    "--exact",
    "netns_member",
    "--ignored",
    "--nocapture",
    "--test-threads=1",
];

#[test]
fn two_namespace_hosts_connect_over_their_veth_link() {
    let mut hosts = match NetnsPair::create("tcp", ["10.231.0.1/24", "10.231.0.2/24"]) {
        Ok(h) => h,
        Err(why) if !launchers_required() => {
            eprintln!("skipped: network namespaces unavailable (needs root and iproute2): {why}");
            return;
        }
        Err(why) => panic!("network namespaces unavailable and IBIS_REQUIRE_LAUNCHERS=1: {why}"),
    };
    let exe = std::env::current_exe().unwrap();
    let secret = PoolSecret::generate().unwrap().to_hex();
    let server = hosts
        .spawn(
            0,
            &exe,
            &MEMBER,
            &[(ROLE, "server".into()), (SECRET, secret.clone())],
        )
        .expect("start the server");
    let server_addr = hosts.line(server, "address=", PATIENCE);
    let parsed = Address::parse("tcp", server_addr.as_bytes()).unwrap();
    // The server advertises its veth address and its own loopback.
    assert!(
        parsed
            .sockets
            .iter()
            .any(|s| s.ip().to_string() == SERVER_IP),
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
            &MEMBER,
            &[
                (ROLE, "client".into()),
                (SECRET, secret),
                (PEER, server_addr),
            ],
        )
        .expect("start the client");
    let used = hosts.line(client, "used=", PATIENCE);
    assert!(used.starts_with(&format!("{SERVER_IP}:")), "{used}");
    assert!(hosts.exit(client, PATIENCE).success(), "client failed");
    assert!(hosts.exit(server, PATIENCE).success(), "server failed");
}

/// One side of the test above, in its namespace (does nothing when run on its own).
#[test]
#[ignore = "run by two_namespace_hosts_connect_over_their_veth_link inside a namespace"]
fn netns_member() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let secret = std::env::var(SECRET).expect("secret");
    let (t, log) = endpoint(&format!("secret={secret}\npool=netns"));
    match role.as_str() {
        "server" => {
            println!(
                "address={}",
                String::from_utf8(t.local_address().unwrap()).unwrap()
            );
            // Echo the client's message, then wait for it to go.
            let e = log.wait("the client's message", |e| e.messages.len() == 1);
            let (ch, msg) = e.messages[0].clone();
            drop(e);
            t.send(ch, &[&msg]).unwrap();
            log.until("the client to leave", |e| !e.closed.is_empty());
        }
        "client" => {
            let peer = std::env::var(PEER).expect("peer address");
            let ch = t
                .connect(peer.as_bytes(), Duration::from_secs(10))
                .expect("connect across namespaces");
            t.send(ch, &[b"across hosts"]).unwrap();
            let e = log.wait("the echo", |e| e.messages.len() == 1);
            assert_eq!(e.messages[0].1, b"across hosts");
            drop(e);
            let used = TcpTransport::peer_addresses(&t.local_address().unwrap()).unwrap();
            assert_eq!(used.len(), 1, "{used:?}");
            println!("used={}", used[0]);
            t.close_channel(ch);
        }
        other => panic!("unknown role {other}"),
    }
}
