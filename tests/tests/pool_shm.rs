//! The pool scenarios of `pool.rs` (see `ipl-pool-check`), with every member on the
//! shared-memory transport (`IPL_TRANSPORT=shm`). A member whose preferred transport is
//! unavailable or lacks a capability fails to start, so a passing pool ran on shm.
//! `ipl-pool-check` links the transport in and registers it
//! (`ipl::register_static_plugin`), so no plugin library needs to be built first.

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
    cfg.env = vec![("IPL_TRANSPORT".into(), "shm".into())];
    launch(&cfg).expect("launch the pool")
}

fn assert_all_ok(o: &LaunchOutcome) {
    assert!(!o.timed_out, "pool timed out: {o:?}");
    for (rank, end) in o.ends.iter().enumerate() {
        assert!(end.success(), "member {rank} ended with {end}: {o:?}");
    }
}

#[test]
fn rpc_over_shm() {
    assert_all_ok(&pool(3, 1, "rpc"));
}

#[test]
fn multicast_over_shm() {
    assert_all_ok(&pool(4, 2, "multicast"));
}

#[test]
fn many_to_one_over_shm() {
    assert_all_ok(&pool(4, 2, "manytoone"));
}

#[test]
fn election_and_signals_over_shm() {
    assert_all_ok(&pool(4, 2, "election"));
}

#[test]
fn killed_member_is_reported_dead_and_its_shm_connection_lost() {
    let o = pool(3, 1, "kill");
    assert!(!o.timed_out, "pool timed out: {o:?}");
    assert!(!o.ends[1].success(), "member 1 should have aborted: {o:?}");
    assert!(o.ends[0].success(), "member 0: {o:?}");
    assert!(o.ends[2].success(), "member 2: {o:?}");
}
