//! pool-bench forms real pools: a pool of two members joins, closes and leaves, and the
//! benchmark prints one figure line per measurement for it.

use std::process::Command;

#[test]
fn a_pool_of_two_forms_and_its_figures_are_printed() {
    let out = Command::new(env!("CARGO_BIN_EXE_pool-bench"))
        .args(["--members", "2", "--repeat", "1"])
        .output()
        .expect("pool-bench runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "pool-bench failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    for name in [
        "pool.startup.2.join_to_closed_ms",
        "pool.startup.2.spawn_to_closed_ms",
        "pool.startup.2.total_ms",
    ] {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no figure {name} in:\n{stdout}"));
        let value: f64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
        assert!(value > 0.0, "{line}");
    }
}
