//! Pools of several processes started by the launcher, each exercising one IPL
//! capability across processes over TCP on 127.0.0.1 (see `ipl-pool-check`).

use std::time::Duration;

use ipl_tools::launcher::{launch, LaunchConfig, LaunchOutcome};

fn pool(n: usize, clusters: usize, scenario: &str) -> LaunchOutcome {
    let mut cfg = LaunchConfig::new(
        n,
        env!("CARGO_BIN_EXE_ipl-pool-check"),
        vec![scenario.into()],
    );
    cfg.clusters = clusters;
    cfg.timeout = Some(Duration::from_secs(240));
    cfg.grace = Duration::from_secs(90);
    // TCP explicitly: the members also link shm (which would win on one host) and quic.
    cfg.env = vec![("IPL_TRANSPORT".into(), "tcp".into())];
    launch(&cfg).expect("launch the pool")
}

fn assert_all_ok(o: &LaunchOutcome) {
    assert!(!o.timed_out, "pool timed out: {o:?}");
    for (rank, end) in o.ends.iter().enumerate() {
        assert!(end.success(), "member {rank} ended with {end}: {o:?}");
    }
}

#[test]
fn rpc_across_processes() {
    assert_all_ok(&pool(3, 1, "rpc"));
}

#[test]
fn multicast_across_processes() {
    assert_all_ok(&pool(4, 2, "multicast"));
}

#[test]
fn many_to_one_across_processes() {
    assert_all_ok(&pool(4, 2, "manytoone"));
}

#[test]
fn election_and_signals_across_processes() {
    assert_all_ok(&pool(4, 2, "election"));
}

#[test]
fn killed_member_is_reported_dead_and_its_connection_lost() {
    let o = pool(3, 1, "kill");
    assert!(!o.timed_out, "pool timed out: {o:?}");
    assert!(!o.ends[1].success(), "member 1 should have aborted: {o:?}");
    assert!(o.ends[0].success(), "member 0: {o:?}");
    assert!(o.ends[2].success(), "member 2: {o:?}");
}

/// A process with the wrong secret can neither join the pool nor connect to a member.
#[test]
fn stranger_without_the_secret_can_neither_join_nor_connect() {
    use ipl::{Ibis, PortCapabilities as P, PortType};
    use std::process::Command;
    let secret = ipl_auth::PoolSecret::generate().unwrap();
    let wrong = ipl_auth::PoolSecret::generate().unwrap();
    let server = ipl_registry::RegistryServer::bind("127.0.0.1:0", secret.clone())
        .unwrap()
        .run_in_background()
        .unwrap();
    // A real member of the pool, in this process, with a port to attack.
    let t = PortType::new(
        P::CONNECTION_MANY_TO_ONE
            | P::RECEIVE_EXPLICIT
            | P::SERIALIZATION_OBJECT
            | P::COMMUNICATION_RELIABLE
            | P::COMMUNICATION_FIFO,
    )
    .unwrap();
    let net =
        ipl_registry::NetRegistry::connect(server.local_addr(), &secret, Duration::from_secs(10))
            .unwrap();
    let member = Ibis::builder()
        .pool("guarded")
        .registry_backend(std::sync::Arc::new(net))
        .secret(secret.clone())
        .port_type(t)
        .build()
        .unwrap();
    let inbox = member.create_receive_port(&t, "inbox").unwrap();
    inbox.enable_connections();
    let target: String = postcard::to_allocvec(member.identifier())
        .unwrap()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let check = env!("CARGO_BIN_EXE_ipl-pool-check");
    let join = Command::new(check)
        .arg("stranger-join")
        .env("IPL_REGISTRY", server.local_addr().to_string())
        .env("IPL_POOL", "guarded")
        .env("IPL_POOL_SECRET", wrong.to_hex())
        .output()
        .unwrap();
    assert!(
        join.status.success(),
        "{}",
        String::from_utf8_lossy(&join.stdout)
    );
    let connect = Command::new(check)
        .arg("stranger-connect")
        .env("IPL_TARGET", &target)
        .env("IPL_POOL_SECRET", wrong.to_hex())
        .output()
        .unwrap();
    assert!(
        connect.status.success(),
        "{}",
        String::from_utf8_lossy(&connect.stdout)
    );
    // Nobody got in: the pool has one member and the port no connection.
    assert_eq!(member.registry().members().unwrap().len(), 1);
    assert!(inbox.connected_to().is_empty());
    // A member with the right secret does get in (so the refusals were about the secret).
    let net =
        ipl_registry::NetRegistry::connect(server.local_addr(), &secret, Duration::from_secs(10))
            .unwrap();
    let friend = Ibis::builder()
        .pool("guarded")
        .registry_backend(std::sync::Arc::new(net))
        .secret(secret)
        .prefer_transport("tcp")
        .port_type(t)
        .build()
        .unwrap();
    let mut sp = friend.create_send_port(&t, "friend").unwrap();
    sp.connect_to(member.identifier(), "inbox", Duration::from_secs(10))
        .unwrap();
    assert_eq!(inbox.connected_to().len(), 1);
}
