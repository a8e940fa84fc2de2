//! Every argument of the Satin applications is validated: an input the program cannot
//! run (a result that overflows, a recursion deeper than a stack, a tolerance never
//! reached, thousands of threads) is a usage error naming the argument and the accepted
//! range, exit status 2, never a crash, a panic or a run that never ends.

#[path = "../../../tests/common/cli.rs"]
mod cli;

use cli::{run, BOUND};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// `bin args` is a usage error (exit status 2) whose message contains every `needle`.
fn rejects(bin: &str, args: &[&str], needles: &[&str]) {
    let out = run(bin, args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{bin} {args:?} should be a usage error: {out:?}"
    );
    for n in needles {
        assert!(err.contains(n), "{bin} {args:?}: {n:?} not in {err}");
    }
    assert!(!err.contains("panicked"), "{bin} {args:?} panicked: {err}");
}

#[test]
fn fib_beyond_a_u64_is_rejected() {
    let fib = env!("CARGO_BIN_EXE_fib");
    rejects(fib, &["100000"], &["[N]", "0..=93"]);
    rejects(fib, &["94"], &["[N]", "0..=93"]);
    rejects(fib, &["-1"], &["[N]"]);
}

#[test]
fn knapsack_beyond_the_exhaustive_search_is_rejected() {
    rejects(
        env!("CARGO_BIN_EXE_knapsack"),
        &["100000"],
        &["[N]", "0..=64"],
    );
}

#[test]
fn integrate_needs_a_positive_tolerance_and_ordered_finite_bounds() {
    let integrate = env!("CARGO_BIN_EXE_integrate");
    rejects(integrate, &["0", "10", "0"], &["[EPS]", ">= 1e-12"]);
    rejects(integrate, &["0", "10", "-1"], &["[EPS]", ">= 1e-12"]);
    rejects(integrate, &["0", "10", "NaN"], &["[EPS]", ">= 1e-12"]);
    rejects(integrate, &["NaN", "10", "1e-3"], &["[A]", "finite"]);
    rejects(integrate, &["0", "inf", "1e-3"], &["[B]", "finite"]);
    rejects(integrate, &["0", "1e300", "1e-3"], &["[B]", "1e6"]);
    rejects(integrate, &["10", "0", "1e-3"], &["reversed", "A <= B"]);
}

#[test]
fn nqueens_beyond_the_board_is_rejected() {
    rejects(env!("CARGO_BIN_EXE_nqueens"), &["33"], &["[N]", "1..=32"]);
}

#[test]
fn noverk_needs_k_at_most_n_and_a_result_in_a_u64() {
    let noverk = env!("CARGO_BIN_EXE_noverk");
    rejects(noverk, &["3", "5"], &["K = 5", "N = 3"]);
    rejects(noverk, &["100", "50"], &["[N]", "0..=67"]);
}

#[test]
fn matmul_beyond_memory_is_rejected() {
    rejects(
        env!("CARGO_BIN_EXE_matmul"),
        &["1048576"],
        &["[N]", "64..=4096"],
    );
}

#[test]
fn workers_are_bounded_and_bad_options_are_errors() {
    let fib = env!("CARGO_BIN_EXE_fib");
    rejects(fib, &["5", "--workers", "100000"], &["--workers", "1..="]);
    rejects(fib, &["5", "--workers", "0"], &["--workers", "1..="]);
    rejects(fib, &["5", "--workers", "abc"], &["--workers"]);
    rejects(fib, &["5", "--no-such-flag"], &["--no-such-flag"]);
}

/// `bin args` fails with exit status 1 and a message (no panic) containing every
/// `needle`.
fn fails(bin: &str, args: &[&str], needles: &[&str]) {
    let out = run(bin, args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{bin} {args:?}: {out:?}");
    for n in needles {
        assert!(err.contains(n), "{bin} {args:?}: {n:?} not in {err}");
    }
    assert!(!err.contains("panicked"), "{bin} {args:?} panicked: {err}");
}

#[test]
fn ida_rejects_bad_instance_files() {
    let ida = env!("CARGO_BIN_EXE_ida");
    let dir = std::env::temp_dir().join(format!("ida-inputs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = |name: &str, text: &str| {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p.to_str().unwrap().to_string()
    };
    let goal = "0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15";
    // Tiles 1 and 2 swapped: the other parity, on line 3 (after a comment and a good
    // line).
    let odd = file(
        "odd.txt",
        &format!("# two\n{goal}\n0 2 1 3 4 5 6 7 8 9 10 11 12 13 14 15\n"),
    );
    fails(ida, &[&odd], &["odd.txt:3:", "cannot reach the goal"]);
    let short = file("short.txt", "1 2 3\n");
    fails(ida, &[&short], &["short.txt:1:", "3 numbers"]);
    let word = file("word.txt", &format!("{goal}\n\n0 1 2 x\n"));
    fails(ida, &[&word], &["word.txt:3:", "\"x\" is not a number"]);
    let twice = file("twice.txt", "0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 14\n");
    fails(ida, &[&twice], &["twice.txt:1:", "tile 14 appears twice"]);
    let big = file(
        "big.txt",
        "0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 99999999999999999999\n",
    );
    fails(ida, &[&big], &["big.txt:1:", "not a number"]);
    let range = file("range.txt", "0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 16\n");
    fails(
        ida,
        &[&range],
        &["range.txt:1:", "tile 16 is not in 0..=15"],
    );
    let empty = file("empty.txt", "# nothing\n\n");
    fails(ida, &[&empty], &["empty.txt", "no instance"]);
    let missing = dir.join("missing.txt");
    fails(ida, &[missing.to_str().unwrap()], &["missing.txt"]);
    // A file larger than the documented maximum is refused before it is parsed.
    let huge = dir.join("huge.txt");
    std::fs::write(&huge, goal.repeat(200_000)).unwrap();
    fails(ida, &[huge.to_str().unwrap()], &["huge.txt", "larger than"]);
    let _ = std::fs::remove_dir_all(&dir);
    // No file at all is a usage error.
    rejects(ida, &[], &["<FILE>"]);
    rejects(
        ida,
        &["x.txt", "--spawn-depth", "81"],
        &["--spawn-depth", "0..=80"],
    );
}

#[test]
fn the_largest_accepted_inputs_run() {
    // The edges of the ranges run (small enough to end at once).
    for (bin, args) in [
        (env!("CARGO_BIN_EXE_nqueens"), &["1"][..]),
        (env!("CARGO_BIN_EXE_knapsack"), &["0"][..]),
        (env!("CARGO_BIN_EXE_noverk"), &["67", "67"][..]),
        (
            env!("CARGO_BIN_EXE_integrate"),
            &["-1", "1", "1e-12", "--workers", "2"][..],
        ),
        (env!("CARGO_BIN_EXE_fib"), &["10", "--workers", "64"][..]),
    ] {
        let out = run(bin, args);
        assert!(out.status.success(), "{bin} {args:?}: {out:?}");
    }
}

/// Runs `bin args` with a standard output nobody reads (`bin args | head -0`) and
/// checks that it ends normally: no panic, exit status 0.
fn closed_output_is_no_panic(bin: &str, args: &[&str]) {
    let (r, w) = std::io::pipe().expect("pipe");
    drop(r);
    let mut child = Command::new(bin)
        .args(args)
        .stdin(Stdio::null())
        .stdout(w)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("start {bin}: {e}"));
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() >= BOUND {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{bin} {args:?} did not end");
        }
        // Bounded poll of a child process; nothing to be notified by.
        std::thread::sleep(Duration::from_millis(10));
    }
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{bin} {args:?}: {err}");
    assert_eq!(out.status.code(), Some(0), "{bin} {args:?}: {err}");
}

#[test]
fn a_closed_output_is_no_panic() {
    // `fib 20 | head -0`: nobody reads the result; before, println! panicked (101).
    closed_output_is_no_panic(
        env!("CARGO_BIN_EXE_fib"),
        &["20", "--check", "--workers", "2"],
    );
}

/// The IPL and RMI examples print through the same helper as the Satin applications.
#[test]
fn the_ipl_and_rmi_examples_end_quietly_on_a_closed_output() {
    closed_output_is_no_panic(
        env!("CARGO_BIN_EXE_asp"),
        &["24", "--members", "2", "--check"],
    );
    closed_output_is_no_panic(
        env!("CARGO_BIN_EXE_tsp-repmi"),
        &["8", "--members", "2", "--check"],
    );
    closed_output_is_no_panic(env!("CARGO_BIN_EXE_rpc"), &["2", "10"]);
    closed_output_is_no_panic(env!("CARGO_BIN_EXE_rmi-hello"), &["tester"]);
}

/// `tsp FILE` with `text` in FILE fails with exit status 1 and a message with every
/// `needle`, never a panic.
fn tsp_rejects(name: &str, text: &str, needles: &[&str]) {
    let path = std::env::temp_dir().join(format!("tsp-input-{}-{name}.tsp", std::process::id()));
    std::fs::write(&path, text).unwrap();
    let file = path.to_str().unwrap();
    let out = run(env!("CARGO_BIN_EXE_tsp"), &[file, "--workers", "1"]);
    let _ = std::fs::remove_file(&path);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{name}: {out:?}");
    for n in needles {
        assert!(err.contains(n), "{name}: {n:?} not in {err}");
    }
    assert!(!err.contains("panicked"), "{name} panicked: {err}");
}

#[test]
fn tsp_rejects_bad_files_naming_the_line() {
    tsp_rejects(
        "atsp",
        "NAME: br17\nTYPE: ATSP\nDIMENSION: 17\n",
        &["line 2", "only symmetric TSP"],
    );
    tsp_rejects(
        "dimension",
        "NAME: big\nTYPE: TSP\nDIMENSION: 99999999999999999999\n",
        &["line 3", "1..=10000"],
    );
    tsp_rejects(
        "weight",
        "NAME: w\nTYPE: TSP\nDIMENSION: 3\nEDGE_WEIGHT_TYPE: EXPLICIT\n\
         EDGE_WEIGHT_FORMAT: UPPER_ROW\nEDGE_WEIGHT_SECTION\n1 2\nthree\nEOF\n",
        &["line 8", "ends after 2 of the 3 weights"],
    );
    let many: String = (1..=65).map(|i| format!("{i} {i} 0\n")).collect();
    tsp_rejects(
        "many",
        &format!("NAME: many\nTYPE: TSP\nDIMENSION: 65\nEDGE_WEIGHT_TYPE: EUC_2D\nNODE_COORD_SECTION\n{many}EOF\n"),
        &["65 cities", "at most 64"],
    );
    let out = run(env!("CARGO_BIN_EXE_tsp"), &["/nonexistent/dir/x.tsp"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(err.contains("reading /nonexistent/dir/x.tsp"), "{err}");
}

#[test]
fn raytrace_rejects_scenes_and_images_beyond_memory() {
    let rt = env!("CARGO_BIN_EXE_raytrace");
    let out = std::env::temp_dir().join(format!("raytrace-inputs-{}.png", std::process::id()));
    let out = out.to_str().unwrap();
    rejects(rt, &["--size", "8", "--output", out], &["--size", "0..=7"]);
    rejects(
        rt,
        &["--width", "0", "--output", out],
        &["--width", "1..=16384"],
    );
    rejects(
        rt,
        &["--height", "16385", "--output", out],
        &["--height", "1..=16384"],
    );
    rejects(
        rt,
        &["--width", "16384", "--height", "16384", "--output", out],
        &["16384x16384", "at most 67108864"],
    );
    rejects(rt, &["--block", "0", "--output", out], &["--block"]);
    rejects(rt, &["--size", "1"], &["--output"]);
    // An output that cannot be written is an error after the run, exit status 1.
    fails(
        rt,
        &[
            "--size",
            "0",
            "--width",
            "4",
            "--height",
            "4",
            "--output",
            "/nonexistent/dir/x.png",
        ],
        &["writing /nonexistent/dir/x.png"],
    );
}

#[test]
fn setcover_rejects_bad_arguments_and_files_naming_the_line() {
    let sc = env!("CARGO_BIN_EXE_setcover");
    rejects(sc, &[], &["<FILE>"]);
    rejects(sc, &["--random", "0", "10", "0.1"], &["ROWS", "1..=100000"]);
    rejects(
        sc,
        &["--random", "10", "x", "0.1"],
        &["COLUMNS", "1..=100000"],
    );
    rejects(sc, &["--random", "10", "10", "0"], &["DENSITY", "(0, 1]"]);
    rejects(sc, &["--random", "10", "10", "NaN"], &["DENSITY", "(0, 1]"]);
    rejects(sc, &["--random", "100000", "100000", "0.5"], &["2^26"]);
    rejects(
        sc,
        &["--random", "10", "10", "0.5", "--spawn-depth", "65"],
        &["0..=64"],
    );
    let dir = std::env::temp_dir().join(format!("setcover-inputs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = |name: &str, text: &str| {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p.to_str().unwrap().to_string()
    };
    let range = file("range.txt", "2 3\n1 1 1\n2 1 2\n1 4\n");
    fails(
        sc,
        &[&range],
        &["range.txt: line 4:", "column 1 of row 2 is 4"],
    );
    let short = file("short.txt", "2 3\n1 1 1\n2 1 2\n2 3\n");
    fails(
        sc,
        &[&short],
        &["short.txt: line 4:", "ends before column 2 of row 2"],
    );
    let word = file("word.txt", "2 3\n1 one 1\n");
    fails(
        sc,
        &[&word],
        &["word.txt: line 2:", "the cost of column 2 is `one`"],
    );
    let empty = file("empty.txt", "");
    fails(sc, &[&empty], &["empty.txt: line 1:", "the number of rows"]);
    fails(sc, &["/nonexistent/dir/x.txt"], &["/nonexistent/dir/x.txt"]);
    let _ = std::fs::remove_dir_all(&dir);
}
