//! `ipl-run` end to end, with `ipl-run-selftest` as the pool member.

use std::collections::BTreeSet;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use ipl_auth::PoolSecret;
use ipl_registry::RegistryServer;
use ipl_tools::launcher::{
    ENV_CLUSTER, ENV_POOL, ENV_POOL_SIZE, ENV_RANK, ENV_REGISTRY, ENV_SECRET, EXIT_TIMEOUT,
};

const RUN: &str = env!("CARGO_BIN_EXE_ipl-run");
const SELFTEST: &str = env!("CARGO_BIN_EXE_ipl-run-selftest");

fn run(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(RUN);
    cmd.args(args).env_remove("IPL_SELFTEST_FAIL_RANK");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run ipl-run")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `key=value` pairs of one output line.
fn fields(line: &str) -> std::collections::BTreeMap<String, String> {
    line.split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

#[test]
fn three_processes_over_two_clusters_form_one_pool() {
    let out = run(
        &[
            "-n",
            "3",
            "--clusters",
            "2",
            "--timeout",
            "60",
            "--",
            SELFTEST,
        ],
        &[],
    );
    let stdout = text(&out.stdout);
    assert!(
        out.status.success(),
        "stdout:\n{stdout}\nstderr:\n{}",
        text(&out.stderr)
    );
    let mut ranks = BTreeSet::new();
    let mut members = BTreeSet::new();
    let mut pools = BTreeSet::new();
    for line in stdout.lines() {
        let (prefix, rest) = line.split_once(' ').expect("prefixed line");
        let f = fields(rest);
        let rank: usize = f["rank"].parse().unwrap();
        assert_eq!(prefix, format!("[{rank}]"));
        let want = if rank < 2 { "cluster-0" } else { "cluster-1" };
        assert_eq!(f["cluster"], want, "{line}");
        assert_eq!(f["size"], "3");
        assert_eq!(f["joins"], "3");
        ranks.insert(rank);
        members.insert(f["member"].clone());
        pools.insert(f["pool"].clone());
    }
    assert_eq!(ranks, BTreeSet::from([0, 1, 2]));
    assert_eq!(members.len(), 3, "three distinct members");
    assert_eq!(pools.len(), 1, "one pool");
}

#[test]
fn named_pool_and_one_cluster() {
    let out = run(&["-n", "2", "--pool", "mypool", "--", SELFTEST], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    for line in text(&out.stdout).lines() {
        let f = fields(line);
        assert_eq!(f["pool"], "mypool");
        assert_eq!(f["cluster"], "cluster-0");
    }
}

#[test]
fn a_failing_process_makes_ipl_run_fail() {
    let t0 = Instant::now();
    let out = run(
        &["-n", "3", "--grace", "1", "--timeout", "60", "--", SELFTEST],
        &[("IPL_SELFTEST_FAIL_RANK", "1")],
    );
    assert!(!out.status.success());
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("[1] ipl-run-selftest: rank 1 fails on purpose"),
        "{stderr}"
    );
    assert!(stderr.contains("process 1 failed"), "{stderr}");
    // The others wait for a pool that never closes: killed after the grace period.
    assert!(stderr.contains("killing process"), "{stderr}");
    assert!(t0.elapsed() < Duration::from_secs(30));
}

#[test]
fn timeout_kills_everything() {
    let out = run(&["-n", "2", "--timeout", "0.5", "--", "sleep", "30"], &[]);
    assert_eq!(out.status.code(), Some(EXIT_TIMEOUT));
    assert!(text(&out.stderr).contains("timed out"));
}

#[test]
fn a_missing_program_is_an_error() {
    let out = run(&["-n", "1", "--", "/nonexistent/program"], &[]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("could not start"));
}

#[test]
fn a_process_without_the_secret_cannot_join() {
    let secret = PoolSecret::generate().unwrap();
    let server = RegistryServer::bind("127.0.0.1:0", secret.clone())
        .unwrap()
        .run_in_background()
        .unwrap();
    let addr = server.local_addr().to_string();
    let wrong = PoolSecret::generate().unwrap().to_hex();
    let run_member = |secret_hex: &str| {
        Command::new(SELFTEST)
            .env(ENV_REGISTRY, &addr)
            .env(ENV_POOL, "p")
            .env(ENV_POOL_SIZE, "1")
            .env(ENV_SECRET, secret_hex)
            .env(ENV_CLUSTER, "cluster-0")
            .env(ENV_RANK, "0")
            .env_remove("IPL_SELFTEST_FAIL_RANK")
            .output()
            .unwrap()
    };
    let out = run_member(&wrong);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("cannot join"), "{stderr}");
    assert!(stderr.contains("refused"), "{stderr}");
    assert!(stderr.contains("secret"), "{stderr}");
    assert!(server.with_core(|c| c.pool("p").is_err()), "never a member");
    // With the right secret the same process joins.
    let out = run_member(&secret.to_hex());
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("size=1"));
}
