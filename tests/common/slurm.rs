//! A throwaway Slurm cluster on this host for one test: `slurmctld` and one `slurmd`
//! (the node is this host, by its host name, reached on 127.0.0.1), each in the
//! foreground as a child of the test, with a `slurm.conf` of their own in a temporary
//! directory (state, spool, logs and pid files there too), free ports, no
//! authentication (`auth/none`, `cred/none`: nothing leaves 127.0.0.1),
//! `proctrack/linuxproc` and `task/none` (no cgroups), and `SlurmdParameters=
//! config_overrides`, so the node may claim more CPUs than the machine has. It needs
//! root (slurmd starts the tasks as the job's user) and Debian's `slurm-wlm`.
//!
//! [`SlurmCluster::start`] waits (bounded) until the node is idle; dropping the value
//! stops both daemons (SIGTERM, then SIGKILL) and removes the directory, on every exit
//! path of the test. Commands that talk to it need [`SlurmCluster::env`]
//! (`SLURM_CONF`).

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The daemons and commands the cluster needs.
pub const PROGRAMS: &[&str] = &["slurmctld", "slurmd", "srun", "sinfo"];

/// How long the node may take to become idle.
const START: Duration = Duration::from_secs(30);

/// A running throwaway cluster; stopped and removed on drop.
pub struct SlurmCluster {
    dir: PathBuf,
    conf: PathBuf,
    daemons: Vec<Child>,
    /// The node's name (this host's name).
    pub node: String,
}

/// A port nobody listens on now (the kernel's choice; released at once).
fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Where `program` is: `PATH`, then the sbin directories (Debian installs the daemons
/// in `/usr/sbin`, often not on a test's `PATH`).
pub fn find(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/local/sbin"].map(PathBuf::from))
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}

/// Why the cluster cannot start here, if it cannot: a missing program, or not root.
pub fn unavailable() -> Option<String> {
    for p in PROGRAMS {
        if find(p).is_none() {
            return Some(format!("{p} is not installed (Debian package slurm-wlm)"));
        }
    }
    if !is_root() {
        return Some("a throwaway Slurm cluster needs root (slurmd)".into());
    }
    None
}

fn is_root() -> bool {
    // `id -u` rather than a libc call: this crate has no unsafe code and no libc.
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

impl SlurmCluster {
    /// Writes the configuration, starts both daemons and waits until the node is idle.
    pub fn start(cpus: usize) -> Result<SlurmCluster, String> {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "ibis-slurm-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let node = ipl::launcher::hostname().ok_or("this host has no name")?;
        let mut cluster = SlurmCluster {
            conf: dir.join("slurm.conf"),
            dir,
            daemons: Vec::new(),
            node,
        };
        for sub in ["state", "spool", "log"] {
            std::fs::create_dir_all(cluster.dir.join(sub)).map_err(|e| e.to_string())?;
        }
        let ctld_port = free_port().map_err(|e| e.to_string())?;
        let mut d_port = free_port().map_err(|e| e.to_string())?;
        while d_port == ctld_port {
            d_port = free_port().map_err(|e| e.to_string())?;
        }
        let d = cluster.dir.display();
        let node = &cluster.node;
        let conf = format!(
            "ClusterName=ibistest\n\
             SlurmctldHost=localhost\n\
             SlurmctldPort={ctld_port}\n\
             SlurmdPort={d_port}\n\
             AuthType=auth/none\n\
             CredType=cred/none\n\
             SlurmUser=root\n\
             SlurmdUser=root\n\
             StateSaveLocation={d}/state\n\
             SlurmdSpoolDir={d}/spool\n\
             SlurmctldPidFile={d}/slurmctld.pid\n\
             SlurmdPidFile={d}/slurmd.pid\n\
             SlurmctldLogFile={d}/log/slurmctld.log\n\
             SlurmdLogFile={d}/log/slurmd.log\n\
             ProctrackType=proctrack/linuxproc\n\
             TaskPlugin=task/none\n\
             MpiDefault=none\n\
             SchedulerType=sched/builtin\n\
             SelectType=select/cons_tres\n\
             SelectTypeParameters=CR_Core\n\
             SlurmdParameters=config_overrides\n\
             ReturnToService=2\n\
             JobCompType=jobcomp/none\n\
             AccountingStorageType=accounting_storage/none\n\
             JobAcctGatherType=jobacct_gather/none\n\
             MailProg=/bin/true\n\
             NodeName={node} NodeHostname={node} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN\n\
             PartitionName=debug Nodes={node} Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES\n"
        );
        std::fs::write(&cluster.conf, conf).map_err(|e| e.to_string())?;
        for daemon in ["slurmctld", "slurmd"] {
            let program = find(daemon).ok_or_else(|| format!("{daemon} is not installed"))?;
            let log = std::fs::File::create(cluster.dir.join("log").join(format!("{daemon}.out")))
                .map_err(|e| e.to_string())?;
            let child = Command::new(program)
                .arg("-D")
                .arg("-f")
                .arg(&cluster.conf)
                .env("SLURM_CONF", &cluster.conf)
                .stdin(Stdio::null())
                .stdout(log.try_clone().map_err(|e| e.to_string())?)
                .stderr(log)
                .spawn()
                .map_err(|e| format!("starting {daemon}: {e}"))?;
            cluster.daemons.push(child);
        }
        cluster.wait_idle()?;
        Ok(cluster)
    }

    /// Polls `sinfo` until the node is idle, within [`START`].
    fn wait_idle(&mut self) -> Result<(), String> {
        let until = Instant::now() + START;
        let sinfo = find("sinfo").ok_or("sinfo is not installed")?;
        let mut last = String::new();
        while Instant::now() < until {
            for (i, d) in self.daemons.iter_mut().enumerate() {
                if let Ok(Some(status)) = d.try_wait() {
                    return Err(format!(
                        "daemon {i} exited ({status}) before the node was up:\n{}",
                        self.logs()
                    ));
                }
            }
            let out = Command::new(&sinfo)
                .args(["-h", "-o", "%T"])
                .env("SLURM_CONF", &self.conf)
                .stdin(Stdio::null())
                .output()
                .map_err(|e| format!("sinfo: {e}"))?;
            last = String::from_utf8_lossy(&out.stdout).trim().to_owned();
            if last == "idle" {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Err(format!(
            "the node did not become idle within {START:?} (sinfo: {last:?}):\n{}",
            self.logs()
        ))
    }

    /// The variables a Slurm command needs to reach this cluster.
    pub fn env(&self) -> Vec<(std::ffi::OsString, std::ffi::OsString)> {
        vec![("SLURM_CONF".into(), self.conf.clone().into())]
    }

    /// The daemons' logs, for a failure's message.
    pub fn logs(&self) -> String {
        let log = self.dir.join("log");
        ["slurmctld.log", "slurmd.log", "slurmctld.out", "slurmd.out"]
            .iter()
            .map(|f| {
                let text = std::fs::read_to_string(log.join(f)).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(20).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                format!("--- {f}\n{}\n", tail.join("\n"))
            })
            .collect()
    }
}

impl Drop for SlurmCluster {
    fn drop(&mut self) {
        // slurmd first (it ends its step daemons), then the controller.
        for d in self.daemons.iter_mut().rev() {
            let _ = Command::new("kill")
                .args(["-TERM", &d.id().to_string()])
                .status();
        }
        let until = Instant::now() + Duration::from_secs(5);
        for d in &mut self.daemons {
            while Instant::now() < until {
                if matches!(d.try_wait(), Ok(Some(_))) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = d.kill();
            let _ = d.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
