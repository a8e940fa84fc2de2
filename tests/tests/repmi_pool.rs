//! Replicated objects across processes: pools started by the launcher, over TCP on
//! 127.0.0.1 (see `repmi-pool-check`).

use std::time::Duration;

use ipl_tools::launcher::{launch, LaunchConfig, LaunchOutcome};

fn pool(n: usize, scenario: &str) -> LaunchOutcome {
    let mut cfg = LaunchConfig::new(
        n,
        env!("CARGO_BIN_EXE_repmi-pool-check"),
        vec![scenario.into()],
    );
    cfg.clusters = 2;
    cfg.timeout = Some(Duration::from_secs(50));
    cfg.grace = Duration::from_secs(20);
    launch(&cfg).expect("launch the pool")
}

fn assert_all_ok(o: &LaunchOutcome) {
    assert!(!o.timed_out, "pool timed out: {o:?}");
    for (rank, end) in o.ends.iter().enumerate() {
        assert!(end.success(), "member {rank} ended with {end}: {o:?}");
    }
}

#[test]
fn concurrent_writes_are_totally_ordered_across_processes() {
    assert_all_ok(&pool(4, "order"));
}

#[test]
fn a_late_process_gets_the_state_by_transfer() {
    assert_all_ok(&pool(3, "late"));
}
