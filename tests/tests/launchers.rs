//! Pools started by the cluster's own launchers, each started for real by the test:
//! Open MPI's `mpirun`, MPICH's Hydra `mpiexec`, and Slurm's `srun` on a throwaway
//! cluster (`common/slurm.rs`). Each goes through `ipl-run --launcher` (the library
//! function it calls, [`ipl_tools::cluster_launcher::run`]), which serves the registry
//! and passes its address and a fresh secret down; each member takes its rank and the
//! pool size from its launcher and its cluster from its node.
//!
//! Per launcher: `launch-member` on 4 processes (every rank once, size 4, 4 joins, one
//! pool, the cluster is this host's name), then the Satin application `fib 25 --check`
//! on 4 processes (the right answer, 4 processes in the master's report). And `srun -N
//! 2 -n 4` over two network-namespace hosts (`common/netns.rs`, the registry on a third),
//! where the members of each node form their own cluster.
//!
//! A launcher that is not installed (or Slurm without root) is reported and the test
//! passes, unless `IBIS_REQUIRE_LAUNCHERS=1` (CI) makes that a failure. Only 127.0.0.1 is
//! used, or links inside the namespaces the test makes: the registry is advertised on
//! 127.0.0.1 (`--registry-address 127.0.0.1`), or on the namespace host's address.

#[path = "../common/hosts.rs"]
mod hosts;
#[path = "../common/slurm.rs"]
mod slurm;

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use ipl_tools::cluster_launcher::{run, ClusterLaunch};

const MEMBER: &str = env!("CARGO_BIN_EXE_launch-member");
const APP: &str = env!("CARGO_BIN_EXE_satin-app");
const TIMEOUT: Duration = Duration::from_secs(120);

const OPEN_MPI: &[&str] = &[
    "mpirun.openmpi",
    "--allow-run-as-root",
    "--oversubscribe",
    "-n",
    "4",
];
const MPICH: &[&str] = &["mpiexec.mpich", "-n", "4"];
const SRUN: &[&str] = &["srun", "-N", "1", "-n", "4"];
const SRUN_THREE_NODES: &[&str] = &["srun", "-N", "3", "-n", "6"];

/// `Err(why)` when `program` cannot be run here.
fn installed(program: &str) -> Result<(), String> {
    match Command::new(program)
        .arg("--version")
        .stdin(std::process::Stdio::null())
        .output()
    {
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => Err(format!("{program} --version failed: {}", o.status)),
        Err(e) => Err(format!("{program} is not installed: {e}")),
    }
}

/// Reports a missing component: a pass, unless IBIS_REQUIRE_LAUNCHERS=1.
fn skip(test: &str, why: &str) {
    if std::env::var("IBIS_REQUIRE_LAUNCHERS").is_ok_and(|v| v == "1") {
        panic!("{test}: {why} (IBIS_REQUIRE_LAUNCHERS=1)");
    }
    eprintln!("{test}: skipped: {why}");
}

/// A fresh temporary directory.
fn temp_dir(what: &str) -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let d = std::env::temp_dir().join(format!(
        "ibis-launchers-{what}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

/// Runs `program args` under `launcher` through ipl-run's launch, with the registry on
/// 127.0.0.1; asserts the launcher succeeded (its output in the message otherwise).
fn launch(
    launcher: &[&str],
    env: &[(OsString, OsString)],
    program: &str,
    args: &[&str],
    dir: &Path,
) {
    let mut cfg = ClusterLaunch::new(
        launcher.iter().map(OsString::from).collect(),
        program,
        args.iter().map(OsString::from).collect(),
    );
    cfg.registry_bind = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
    cfg.registry_address = Some(IpAddr::V4(Ipv4Addr::LOCALHOST));
    cfg.timeout = Some(TIMEOUT);
    cfg.env = env.to_vec();
    cfg.env
        .push(("LAUNCH_MEMBER_DIR".into(), dir.as_os_str().to_owned()));
    let output = dir.join("launcher-output.txt");
    cfg.output = Some(output.clone());
    let o = run(&cfg).expect("start the launcher");
    let text = std::fs::read_to_string(&output).unwrap_or_default();
    assert!(
        !o.timed_out,
        "{launcher:?} {program} {args:?}: timed out; output:\n{text}"
    );
    assert_eq!(
        o.exit_code(),
        0,
        "{launcher:?} {program} {args:?}: {o:?}; output:\n{text}"
    );
    assert_eq!(o.registry.ip(), IpAddr::V4(Ipv4Addr::LOCALHOST));
}

/// `key=value` pairs of a line.
fn fields(line: &str) -> BTreeMap<String, String> {
    line.split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// 4 `launch-member`s under `launcher`: each rank once, one pool of 4, every member in
/// the cluster of its node (this host), started by `kind`.
fn members_form_one_pool(launcher: &[&str], env: &[(OsString, OsString)], kind: &str) {
    let dir = temp_dir(kind);
    launch(launcher, env, MEMBER, &[], &dir);
    let host = ipl::launcher::hostname().expect("host name");
    let mut ranks = BTreeSet::new();
    let mut pools = BTreeSet::new();
    for rank in 0..4 {
        let file = dir.join(format!("member-{rank}.txt"));
        let line = std::fs::read_to_string(&file)
            .unwrap_or_else(|e| panic!("{kind}: no report of rank {rank}: {e}"));
        let f = fields(&line);
        assert_eq!(f["launcher"], kind, "{line}");
        assert_eq!(f["size"], "4", "{line}");
        assert_eq!(f["joins"], "4", "{line}");
        assert_eq!(f["cluster"], host, "the cluster is the node: {line}");
        assert_eq!(f["name"], format!("member-{rank}"), "{line}");
        ranks.insert(f["rank"].clone());
        pools.insert(f["pool"].clone());
    }
    assert_eq!(ranks.len(), 4);
    assert_eq!(pools.len(), 1, "one pool: {pools:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `fib 25 --check` on 4 processes under `launcher`: the master's report says the check
/// passed on 4 processes.
fn fib_is_right(launcher: &[&str], env: &[(OsString, OsString)], kind: &str) {
    let dir = temp_dir(&format!("{kind}-fib"));
    let report = dir.join("report.txt");
    let report_arg = report.to_string_lossy().into_owned();
    launch(
        launcher,
        env,
        APP,
        &[
            "fib",
            "25",
            "--check",
            "--workers",
            "1",
            "--report",
            &report_arg,
        ],
        &dir,
    );
    let text = std::fs::read_to_string(&report).expect("the master's report");
    let kv: BTreeMap<&str, &str> = text.lines().filter_map(|l| l.split_once(" = ")).collect();
    assert_eq!(kv.get("result"), Some(&"75025"), "{text}");
    assert_eq!(kv.get("check"), Some(&"ok"), "{text}");
    assert_eq!(kv.get("processes"), Some(&"4"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn open_mpi_mpirun_forms_one_pool_and_fib_is_right() {
    if let Err(why) = installed(OPEN_MPI[0]) {
        return skip("open_mpi", &why);
    }
    members_form_one_pool(OPEN_MPI, &[], "openmpi");
    fib_is_right(OPEN_MPI, &[], "openmpi");
}

#[test]
fn mpich_mpiexec_forms_one_pool_and_fib_is_right() {
    if let Err(why) = installed(MPICH[0]) {
        return skip("mpich", &why);
    }
    members_form_one_pool(MPICH, &[], "hydra");
    fib_is_right(MPICH, &[], "hydra");
}

#[test]
fn slurm_srun_forms_one_pool_and_fib_is_right() {
    if let Some(why) = slurm::unavailable() {
        return skip("slurm", &why);
    }
    let cluster = match slurm::SlurmCluster::start(8) {
        Ok(c) => c,
        Err(e) => panic!("the throwaway Slurm cluster did not start: {e}"),
    };
    let env = cluster.env();
    members_form_one_pool(SRUN, &env, "slurm");
    fib_is_right(SRUN, &env, "slurm");
    assert_eq!(cluster.nodes, [ipl::launcher::hostname().unwrap()]);
}

/// Runs `program args` under `srun -N 3 -n 6` of `cluster` from host 0 of `hosts`
/// (where ipl-run's registry lives, at the address ipl-run finds by itself); returns
/// the launcher's output.
fn srun_on_hosts(
    hosts: &hosts::Hosts,
    cluster: &slurm::SlurmCluster,
    program: &str,
    args: &[&str],
    dir: &Path,
) -> String {
    let mut cfg = ClusterLaunch::new(
        SRUN_THREE_NODES.iter().map(OsString::from).collect(),
        program,
        args.iter().map(OsString::from).collect(),
    );
    cfg.timeout = Some(TIMEOUT);
    cfg.env = cluster.env();
    cfg.env
        .push(("LAUNCH_MEMBER_DIR".into(), dir.as_os_str().to_owned()));
    let output = dir.join("launcher-output.txt");
    cfg.output = Some(output.clone());
    // ipl-run's part runs on host 0: a thread of its own moves there (its registry
    // socket and the srun it starts live there).
    let outcome = std::thread::scope(|s| {
        s.spawn(|| {
            hosts.enter(0).map_err(|e| e.to_string())?;
            run(&cfg).map_err(|e| e.to_string())
        })
        .join()
        .expect("the launching thread")
    })
    .expect("run srun on host 0");
    let text = std::fs::read_to_string(&output).unwrap_or_default();
    assert_eq!(
        outcome.exit_code(),
        0,
        "{program} {args:?}: {outcome:?}\n{text}\n{}",
        cluster.logs()
    );
    assert_eq!(
        outcome.registry.ip(),
        IpAddr::V4(hosts.addr(0)),
        "the registry is advertised on host 0's own address"
    );
    text
}

/// `srun -N 3 -n 6` over three network-namespace hosts (a fourth runs slurmctld, srun
/// and ipl-run's registry): every member joins the registry across the bridge, each
/// one's cluster is its node (three clusters), and fib on the six processes, talking
/// across the hosts, gives the right answer.
#[test]
fn slurm_srun_over_three_namespace_hosts_gives_a_cluster_per_node_and_fib_is_right() {
    if let Some(why) = slurm::unavailable().or_else(hosts::unavailable) {
        return skip("slurm over namespace hosts", &why);
    }
    let Some(hosts) = hosts::Hosts::new(4) else {
        return;
    };
    let nodes: Vec<slurm::Node> = (1..4)
        .map(|i| slurm::Node {
            name: format!("h{i}"),
            addr: hosts.addr(i).to_string(),
            netns: Some(hosts.path(i)),
        })
        .collect();
    let cluster = slurm::SlurmCluster::start_nodes(
        Some((&hosts.addr(0).to_string(), hosts.path(0))),
        &nodes,
        6,
    )
    .unwrap_or_else(|e| panic!("the throwaway Slurm cluster did not start: {e}"));

    let dir = temp_dir("slurm-netns");
    let text = srun_on_hosts(&hosts, &cluster, MEMBER, &[], &dir);
    let mut clusters = BTreeSet::new();
    let mut ranks = BTreeSet::new();
    for rank in 0..6 {
        let line = std::fs::read_to_string(dir.join(format!("member-{rank}.txt")))
            .unwrap_or_else(|e| panic!("no report of rank {rank}: {e}\n{text}"));
        let f = fields(&line);
        assert_eq!(f["launcher"], "slurm", "{line}");
        assert_eq!(f["size"], "6", "{line}");
        assert_eq!(f["joins"], "6", "{line}");
        ranks.insert(f["rank"].clone());
        clusters.insert(f["cluster"].clone());
    }
    assert_eq!(ranks.len(), 6);
    assert_eq!(
        clusters,
        BTreeSet::from(["h1".to_owned(), "h2".to_owned(), "h3".to_owned()]),
        "a cluster per node"
    );
    let _ = std::fs::remove_dir_all(&dir);

    let dir = temp_dir("slurm-netns-fib");
    let report = dir.join("report.txt");
    let report_arg = report.to_string_lossy().into_owned();
    let args = [
        "fib",
        "25",
        "--check",
        "--workers",
        "1",
        "--report",
        &report_arg,
    ];
    let text = srun_on_hosts(&hosts, &cluster, APP, &args, &dir);
    let report = std::fs::read_to_string(&report)
        .unwrap_or_else(|e| panic!("no report from the master: {e}\n{text}"));
    let kv: BTreeMap<&str, &str> = report.lines().filter_map(|l| l.split_once(" = ")).collect();
    assert_eq!(kv.get("result"), Some(&"75025"), "{report}");
    assert_eq!(kv.get("check"), Some(&"ok"), "{report}");
    assert_eq!(kv.get("processes"), Some(&"6"), "{report}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Under a launcher but without ipl-run: no registry to meet at, so every process runs
/// alone, says so, and still gives the right answer (no hang).
#[test]
fn a_launcher_without_a_registry_gives_pools_of_one_with_a_warning() {
    if let Err(why) = installed(MPICH[0]) {
        return skip("mpich without a registry", &why);
    }
    let out = Command::new("timeout")
        .args([
            "60",
            "mpiexec.mpich",
            "-n",
            "2",
            APP,
            "fib",
            "15",
            "--check",
        ])
        .env_remove("IPL_REGISTRY")
        .env_remove("IPL_POOL_SIZE")
        .output()
        .expect("run mpiexec");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert_eq!(stdout.matches("result = 610").count(), 2, "{stdout}");
    assert_eq!(
        stderr.matches("IPL_REGISTRY is not set").count(),
        2,
        "each process warns: {stderr}"
    );
}

/// No launcher and no registry: one process, the right answer, no warning.
#[test]
fn no_launcher_and_no_registry_is_a_pool_of_one() {
    let mut cmd = Command::new(APP);
    cmd.args(["fib", "15", "--check"]);
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy().into_owned();
        if ["IPL_", "OMPI_", "PMI", "SLURM"]
            .iter()
            .any(|p| k.starts_with(p))
        {
            cmd.env_remove(k);
        }
    }
    let out = cmd.output().expect("run satin-app");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("result = 610"), "{stdout}");
    assert!(stdout.contains("check: OK"), "{stdout}");
    assert!(!stderr.contains("WARN"), "{stderr}");
}
