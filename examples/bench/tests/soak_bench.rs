//! soak-bench keeps a real Satin pool busy: a short run of three processes gives right
//! results only, and reports memory and threads from its samples.

use std::process::Command;

#[test]
fn a_short_soak_gives_right_results_and_reports_its_samples() {
    let out = Command::new(env!("CARGO_BIN_EXE_soak-bench"))
        .args([
            "--members",
            "3",
            "--seconds",
            "2",
            "--sample-secs",
            "1",
            "--fib",
            "15",
        ])
        .output()
        .expect("soak-bench runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "soak-bench failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    let figure = |name: &str| -> f64 {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no figure {name} in:\n{stdout}"));
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    };
    assert!(figure("soak.jobs") > 0.0, "{stdout}");
    assert_eq!(figure("soak.errors"), 0.0, "{stdout}");
    assert!(
        figure("soak.messages") > 0.0,
        "work must cross the processes: {stdout}"
    );
    assert!(figure("soak.rss_first_kb") > 0.0, "{stdout}");
    assert!(figure("soak.threads_last") >= 1.0, "{stdout}");
}
