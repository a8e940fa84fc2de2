//! A real CPU limit for a test's process: a control group of its own with a CPU quota
//! (e.g. 5 % of one CPU), into which the test moves a process it started. The group is
//! removed when the limit is dropped, on every path (`Drop`): the processes still in
//! it go back to the group they came from first (a group with processes cannot be
//! removed).
//!
//! Both hierarchies are supported: cgroup v1 with the `cpu` controller mounted at
//! `/sys/fs/cgroup/cpu` (`cpu.cfs_quota_us`, `cpu.cfs_period_us`), and cgroup v2
//! mounted at `/sys/fs/cgroup` (`cpu.max` in a child of the root, with `+cpu` in the
//! root's `cgroup.subtree_control`, which is enabled if it is not). Writing a process
//! id to a group's `cgroup.procs` moves the whole process (every thread).
//!
//! Making groups needs root and one of the two. Where either is missing,
//! [`CpuLimit::new`] says so and returns `None` (the test passes), unless
//! `IBIS_REQUIRE_LAUNCHERS=1` asks for every real component, as `.ci/run` does: then
//! the test fails.

#![allow(dead_code)]

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The variable that turns a missing component into a failure (as in `hosts.rs`).
const REQUIRE: &str = "IBIS_REQUIRE_LAUNCHERS";

/// The cgroup v1 `cpu` hierarchy.
const V1: &str = "/sys/fs/cgroup/cpu";
/// The cgroup v2 hierarchy.
const V2: &str = "/sys/fs/cgroup";
/// The quota's period (100 ms, the kernel's default).
const PERIOD_US: u64 = 100_000;
/// How long [`Drop`] waits for the group to empty before giving up (warned).
const EMPTY_WAIT: Duration = Duration::from_secs(10);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Version {
    V1,
    V2,
}

/// A control group with a CPU quota, removed on drop.
pub struct CpuLimit {
    version: Version,
    dir: PathBuf,
    /// The processes moved in, with the group each came from (relative to the
    /// hierarchy's root).
    moved: Vec<(u32, String)>,
}

/// Which hierarchy this machine offers, or why none.
fn hierarchy() -> Result<Version, String> {
    if !rustix::process::geteuid().is_root() {
        return Err("not root: control groups need it".into());
    }
    if Path::new(V1).join("cpu.cfs_quota_us").exists() {
        return Ok(Version::V1);
    }
    let controllers =
        fs::read_to_string(Path::new(V2).join("cgroup.controllers")).map_err(|e| {
            format!("no cgroup v1 cpu controller at {V1} and no cgroup v2 at {V2}: {e}")
        })?;
    if controllers.split_whitespace().any(|c| c == "cpu") {
        Ok(Version::V2)
    } else {
        Err(format!(
            "cgroup v2 at {V2} has no cpu controller ({controllers:?})"
        ))
    }
}

/// Writes `value` to `dir/file`, saying which on an error.
fn write(dir: &Path, file: &str, value: &str) -> io::Result<()> {
    let path = dir.join(file);
    fs::write(&path, value).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("writing {value:?} to {}: {e}", path.display()),
        )
    })
}

impl CpuLimit {
    /// A new group limited to `percent` % of one CPU (1 to 100); `None` where this
    /// machine cannot (see the module documentation). A failure to make it fails the
    /// test.
    pub fn new(percent: u64) -> Option<CpuLimit> {
        assert!((1..=100).contains(&percent), "1 to 100 % of a CPU");
        let version = match hierarchy() {
            Ok(v) => v,
            Err(why) => {
                let required = std::env::var(REQUIRE).is_ok_and(|v| v == "1");
                assert!(!required, "{REQUIRE}=1 but {why}");
                eprintln!("CPU limit unavailable, test skipped: {why}");
                return None;
            }
        };
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let name = format!(
            "ibis-test-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let root = Path::new(match version {
            Version::V1 => V1,
            Version::V2 => V2,
        });
        if version == Version::V2 {
            let enabled =
                fs::read_to_string(root.join("cgroup.subtree_control")).unwrap_or_default();
            if !enabled.split_whitespace().any(|c| c == "cpu") {
                write(root, "cgroup.subtree_control", "+cpu")
                    .unwrap_or_else(|e| panic!("enabling the cpu controller: {e}"));
            }
        }
        let dir = root.join(name);
        fs::create_dir(&dir).unwrap_or_else(|e| panic!("making {}: {e}", dir.display()));
        // From here on, Drop removes the group.
        let limit = CpuLimit {
            version,
            dir,
            moved: Vec::new(),
        };
        let quota = (PERIOD_US * percent / 100).max(1000);
        let set = match version {
            Version::V1 => write(&limit.dir, "cpu.cfs_period_us", &PERIOD_US.to_string())
                .and_then(|()| write(&limit.dir, "cpu.cfs_quota_us", &quota.to_string())),
            Version::V2 => write(&limit.dir, "cpu.max", &format!("{quota} {PERIOD_US}")),
        };
        set.unwrap_or_else(|e| panic!("setting the CPU limit: {e}"));
        Some(limit)
    }

    /// The group's directory.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Moves process `pid` (all its threads) into the group.
    pub fn confine(&mut self, pid: u32) -> io::Result<()> {
        let from = self.group_of(pid)?;
        write(&self.dir, "cgroup.procs", &pid.to_string())?;
        self.moved.push((pid, from));
        Ok(())
    }

    /// The group of `pid` in this hierarchy, relative to its root (`/proc/PID/cgroup`).
    fn group_of(&self, pid: u32) -> io::Result<String> {
        let text = fs::read_to_string(format!("/proc/{pid}/cgroup"))?;
        text.lines()
            .filter_map(|l| {
                let mut parts = l.splitn(3, ':');
                Some((parts.next()?, parts.next()?, parts.next()?))
            })
            .find(|(id, controllers, _)| match self.version {
                Version::V1 => controllers.split(',').any(|c| c == "cpu"),
                Version::V2 => *id == "0" && controllers.is_empty(),
            })
            .map(|(_, _, path)| path.to_string())
            .ok_or_else(|| io::Error::other(format!("process {pid} has no cpu group: {text:?}")))
    }

    /// The processes in the group now.
    fn members(&self) -> Vec<u32> {
        fs::read_to_string(self.dir.join("cgroup.procs"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    }

    /// The group's CPU statistics (`cpu.stat`), for messages.
    pub fn stat(&self) -> String {
        fs::read_to_string(self.dir.join("cpu.stat")).unwrap_or_default()
    }
}

impl Drop for CpuLimit {
    fn drop(&mut self) {
        let root = self.dir.parent().map(Path::to_path_buf).unwrap_or_default();
        // Whatever is still in the group goes back where it came from (a process that
        // ended is gone already; the root if its old group is unknown).
        let until = Instant::now() + EMPTY_WAIT;
        loop {
            let left = self.members();
            if left.is_empty() {
                break;
            }
            if Instant::now() >= until {
                eprintln!(
                    "CPU limit: processes {left:?} stay in {}",
                    self.dir.display()
                );
                break;
            }
            for pid in left {
                let from = self
                    .moved
                    .iter()
                    .find(|(p, _)| *p == pid)
                    .map_or("/", |(_, g)| g.as_str());
                let back = root.join(from.trim_start_matches('/'));
                if write(&back, "cgroup.procs", &pid.to_string()).is_err() {
                    // Its old group is gone: the root takes any process.
                    let _ = write(&root, "cgroup.procs", &pid.to_string());
                }
            }
            // A process moving out while another thread of it forks: try again (bounded).
            std::thread::yield_now();
        }
        if let Err(e) = fs::remove_dir(&self.dir) {
            eprintln!("CPU limit: removing {}: {e}", self.dir.display());
        }
    }
}
