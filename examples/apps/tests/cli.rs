//! Every application answers `--help` and rejects a bad option cleanly.

#[path = "../../../tests/common/cli.rs"]
mod cli;

#[test]
fn every_application_has_a_clean_command_line() {
    for bin in [
        env!("CARGO_BIN_EXE_fib"),
        env!("CARGO_BIN_EXE_nqueens"),
        env!("CARGO_BIN_EXE_integrate"),
        env!("CARGO_BIN_EXE_knapsack"),
        env!("CARGO_BIN_EXE_noverk"),
        env!("CARGO_BIN_EXE_primes"),
        env!("CARGO_BIN_EXE_matmul"),
        env!("CARGO_BIN_EXE_ida"),
        env!("CARGO_BIN_EXE_sat"),
        env!("CARGO_BIN_EXE_tsp"),
        env!("CARGO_BIN_EXE_raytrace"),
        env!("CARGO_BIN_EXE_setcover"),
        env!("CARGO_BIN_EXE_othello"),
        env!("CARGO_BIN_EXE_barnes"),
        env!("CARGO_BIN_EXE_asp"),
        env!("CARGO_BIN_EXE_tsp-repmi"),
        env!("CARGO_BIN_EXE_rmi-hello"),
        env!("CARGO_BIN_EXE_rpc"),
    ] {
        cli::check(bin);
    }
}

/// `othello`: a run prints the value, the move and the nodes; a bad position (file or
/// text) is a message naming it and exit status 1, a bad depth a usage error.
#[test]
fn othello_reads_positions_and_rejects_bad_ones() {
    let bin = env!("CARGO_BIN_EXE_othello");
    let ok = cli::run(bin, &["--depth", "3", "--workers", "2", "--check"]);
    let out = String::from_utf8_lossy(&ok.stdout);
    assert_eq!(ok.status.code(), Some(0), "{ok:?}");
    assert!(out.contains("best move d3"), "{out}");
    assert!(out.contains("check: OK"), "{out}");

    // The position after d3 (White to move) as text: it starts with `-`.
    let after_d3 = format!(
        "{}X{}XX{}XO{} O",
        "-".repeat(19),
        "-".repeat(7),
        "-".repeat(6),
        "-".repeat(27)
    );
    let r = cli::run(bin, &["--position", &after_d3, "--depth", "1"]);
    let out = String::from_utf8_lossy(&r.stdout);
    assert_eq!(r.status.code(), Some(0), "{r:?}");
    assert!(out.contains(&after_d3), "{out}");

    let dir = std::env::temp_dir().join(format!("othello-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let short = dir.join("short.txt");
    std::fs::write(&short, "XO-- X\n").unwrap();
    let big = dir.join("big.txt");
    std::fs::write(&big, vec![b' '; 65 * 1024]).unwrap();
    let short_s = short.to_str().unwrap();
    let big_s = big.to_str().unwrap();
    for (args, says) in [
        (vec![short_s], "short.txt: 5 squares"),
        (vec![big_s], "larger than"),
        (
            vec!["/no/such/othello/file"],
            "reading /no/such/othello/file",
        ),
        (vec!["--position", "X?"], "--position: character 2 is '?'"),
    ] {
        let r = cli::run(bin, &args);
        let err = String::from_utf8_lossy(&r.stderr);
        assert_eq!(r.status.code(), Some(1), "{args:?}: {r:?}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
    for args in [["--depth", "0"], ["--depth", "61"]] {
        let r = cli::run(bin, &args);
        assert_eq!(r.status.code(), Some(2), "{args:?}: {r:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
