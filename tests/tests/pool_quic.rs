//! The pool scenarios of `pool.rs` (rpc, multicast, many-to-one, election) over the QUIC
//! transport: every member runs with `IPL_TRANSPORT=quic`, which makes quic the only
//! transport its port types may use (a member that cannot create it fails), so a pool
//! that passes ran over QUIC. `ipl-pool-check` links the transport in and registers it
//! (`ipl::register_static_plugin`), so no plugin library needs to be built first.

use std::time::Duration;

use ipl_tools::launcher::{launch, LaunchConfig, LaunchOutcome};

const CHECK: &str = env!("CARGO_BIN_EXE_ipl-pool-check");

fn pool(n: usize, clusters: usize, scenario: &str) -> LaunchOutcome {
    let mut cfg = LaunchConfig::new(n, CHECK, vec![scenario.into()]);
    cfg.clusters = clusters;
    cfg.timeout = Some(Duration::from_secs(240));
    cfg.grace = Duration::from_secs(90);
    cfg.env = vec![("IPL_TRANSPORT".into(), "quic".into())];
    launch(&cfg).expect("launch the pool")
}

fn assert_all_ok(o: &LaunchOutcome) {
    assert!(!o.timed_out, "pool timed out: {o:?}");
    for (rank, end) in o.ends.iter().enumerate() {
        assert!(end.success(), "member {rank} ended with {end}: {o:?}");
    }
}

#[test]
fn rpc_over_quic() {
    assert_all_ok(&pool(3, 1, "rpc"));
}

#[test]
fn multicast_over_quic() {
    assert_all_ok(&pool(4, 2, "multicast"));
}

#[test]
fn many_to_one_over_quic() {
    assert_all_ok(&pool(4, 2, "manytoone"));
}

#[test]
fn election_and_signals_over_quic() {
    assert_all_ok(&pool(4, 2, "election"));
}
