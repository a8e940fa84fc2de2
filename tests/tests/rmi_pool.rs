//! RMI across processes: pools started by the launcher, each member running
//! `rmi-pool-check` over TCP on 127.0.0.1.

use std::time::Duration;

use ipl_tools::launcher::{launch, LaunchConfig, LaunchOutcome};

fn pool(n: usize, clusters: usize, scenario: &str) -> LaunchOutcome {
    let mut cfg = LaunchConfig::new(
        n,
        env!("CARGO_BIN_EXE_rmi-pool-check"),
        vec![scenario.into()],
    );
    cfg.clusters = clusters;
    cfg.timeout = Some(Duration::from_secs(240));
    cfg.grace = Duration::from_secs(90);
    launch(&cfg).expect("launch the pool")
}

#[test]
fn every_call_kind_across_processes() {
    let o = pool(3, 2, "calls");
    assert!(!o.timed_out, "pool timed out: {o:?}");
    for (rank, end) in o.ends.iter().enumerate() {
        assert!(end.success(), "member {rank} ended with {end}: {o:?}");
    }
}

#[test]
fn a_killed_server_fails_the_call_in_flight_with_connection_lost() {
    let o = pool(2, 1, "kill");
    assert!(!o.timed_out, "pool timed out: {o:?}");
    assert!(
        !o.ends[1].success(),
        "the server should have aborted: {o:?}"
    );
    assert!(o.ends[0].success(), "the client: {o:?}");
}
