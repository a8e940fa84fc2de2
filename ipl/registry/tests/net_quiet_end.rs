//! The end of a registry connection is a warning only where something is lost: a
//! server that stops while a member of this process is still in its pool is one (its
//! members are considered dead); a server that stops after every member left is not
//! (before, every program that left and then let its registry server go logged the
//! warning, ipl-bench at the end of each run among them).
//!
//! This file is a test binary of its own: it installs the process's global tracing
//! subscriber, which the client's reader thread logs to.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ipl_auth::PoolSecret;
use ipl_registry::{JoinRequest, NetRegistry, PoolConfig, Registry, RegistryServer, ServerHandle};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::Layer;

/// Collects the messages of WARN events.
struct Warnings(Arc<Mutex<Vec<String>>>);

impl<S: tracing::Subscriber> Layer<S> for Warnings {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        if *event.metadata().level() != tracing::Level::WARN {
            return;
        }
        struct Msg(String);
        impl tracing::field::Visit for Msg {
            fn record_debug(&mut self, f: &tracing::field::Field, v: &dyn std::fmt::Debug) {
                if f.name() == "message" {
                    self.0 = format!("{v:?}");
                }
            }
        }
        let mut m = Msg(String::new());
        event.record(&mut m);
        self.0.lock().unwrap().push(m.0);
    }
}

const T: Duration = Duration::from_secs(10);

/// Waits (bounded) until `client` has seen its connection end.
fn until_disconnected(client: &NetRegistry) {
    let end = Instant::now() + T;
    while !client.is_disconnected() {
        assert!(Instant::now() < end, "the client never saw the server go");
        std::thread::yield_now();
    }
}

/// A new server, a client of it, and that client's one member of pool `pool` (closed).
fn member_of_a_new_server(
    secret: &PoolSecret,
    pool: &str,
) -> (ServerHandle, NetRegistry, Registry) {
    let server = RegistryServer::bind("127.0.0.1:0", secret.clone())
        .unwrap()
        .run_in_background()
        .unwrap();
    let client = NetRegistry::connect(server.local_addr(), secret, T).unwrap();
    let member = client
        .join(pool, PoolConfig::closed_world(1), JoinRequest::new("m"))
        .unwrap();
    member.wait_until_pool_closed(Some(T)).unwrap();
    (server, client, member)
}

#[test]
fn a_server_that_stops_warns_only_a_client_with_members_left() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    tracing::subscriber::set_global_default(
        tracing_subscriber::registry().with(Warnings(seen.clone())),
    )
    .expect("the only subscriber of this test binary");
    let secret = PoolSecret::generate().unwrap();
    let lost = |w: &Vec<String>| w.iter().filter(|m| m.contains("lost the registry")).count();

    // Every member left, then the server stops: no warning.
    let (server, client, member) = member_of_a_new_server(&secret, "quiet");
    member.leave().unwrap();
    server.shutdown();
    until_disconnected(&client);
    let quiet = seen.lock().unwrap().clone();
    assert_eq!(lost(&quiet), 0, "{quiet:?}");

    // A member still in its pool when the server stops: warned.
    let (server, client, member) = member_of_a_new_server(&secret, "loud");
    server.shutdown();
    until_disconnected(&client);
    let end = Instant::now() + T;
    loop {
        let warned = seen.lock().unwrap().clone();
        if lost(&warned) > 0 {
            break;
        }
        assert!(Instant::now() < end, "no warning: {warned:?}");
        std::thread::yield_now();
    }
    drop(member);
}
