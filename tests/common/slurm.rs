//! A throwaway Slurm cluster on this host for one test: `slurmctld` and one `slurmd`
//! (the node is this host, by its host name, reached on 127.0.0.1; or one `slurmd` per
//! network-namespace host, `common/netns.rs`), each in the foreground as a child of the
//! test, with a `slurm.conf` of their own in a temporary
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
    /// The network namespace of the controller (and of `sinfo`), if not this one.
    ctl_netns: Option<PathBuf>,
    /// The nodes' names.
    pub nodes: Vec<String>,
}

/// A node of a cluster: its name, its address, its network namespace (`None`: this
/// one).
pub struct Node {
    /// The node's name (SLURMD_NODENAME).
    pub name: String,
    /// Where slurmctld and srun reach it.
    pub addr: String,
    /// Its network namespace file, if it is a namespace host.
    pub netns: Option<PathBuf>,
}

/// `program`, run in `netns` (with `nsenter`) if given.
fn command(netns: Option<&PathBuf>, program: &std::path::Path) -> Command {
    match netns {
        Some(ns) => {
            let mut c = Command::new("nsenter");
            c.arg(format!("--net={}", ns.display())).arg(program);
            c
        }
        None => Command::new(program),
    }
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
    /// One node, this host (by its host name, at 127.0.0.1), claiming `cpus` CPUs.
    pub fn start(cpus: usize) -> Result<SlurmCluster, String> {
        let name = ipl::launcher::hostname().ok_or("this host has no name")?;
        let node = Node {
            name,
            addr: "127.0.0.1".into(),
            netns: None,
        };
        Self::start_nodes(None, &[node], cpus)
    }

    /// The controller at `ctl` (`None`: this host; else its address and namespace) and
    /// one slurmd per node: writes the configuration, starts the daemons and waits
    /// until every node is idle.
    pub fn start_nodes(
        ctl: Option<(&str, PathBuf)>,
        nodes: &[Node],
        cpus: usize,
    ) -> Result<SlurmCluster, String> {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "ibis-slurm-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let mut cluster = SlurmCluster {
            conf: dir.join("slurm.conf"),
            dir,
            daemons: Vec::new(),
            ctl_netns: ctl.as_ref().map(|(_, ns)| ns.clone()),
            nodes: nodes.iter().map(|n| n.name.clone()).collect(),
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
        // slurmctld accepts "localhost" as its own name whatever the host's name is;
        // the address in parentheses is where the others reach it.
        let ctl_host = match &ctl {
            Some((addr, _)) => format!("localhost({addr})"),
            None => "localhost".into(),
        };
        let host = ipl::launcher::hostname().ok_or("this host has no name")?;
        let node_lines: String = nodes
            .iter()
            .map(|n| {
                format!(
                    "NodeName={} NodeHostname={host} NodeAddr={} CPUs={cpus} State=UNKNOWN\n",
                    n.name, n.addr
                )
            })
            .collect();
        let names = cluster.nodes.join(",");
        let conf = format!(
            "ClusterName=ibistest\n\
             SlurmctldHost={ctl_host}\n\
             SlurmctldPort={ctld_port}\n\
             SlurmdPort={d_port}\n\
             AuthType=auth/none\n\
             CredType=cred/none\n\
             SlurmUser=root\n\
             SlurmdUser=root\n\
             StateSaveLocation={d}/state\n\
             SlurmdSpoolDir={d}/spool/%n\n\
             SlurmctldPidFile={d}/slurmctld.pid\n\
             SlurmdPidFile={d}/slurmd-%n.pid\n\
             SlurmctldLogFile={d}/log/slurmctld.log\n\
             SlurmdLogFile={d}/log/slurmd-%n.log\n\
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
             {node_lines}\
             PartitionName=debug Nodes={names} Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES\n"
        );
        std::fs::write(&cluster.conf, conf).map_err(|e| e.to_string())?;
        let ctld = find("slurmctld").ok_or("slurmctld is not installed")?;
        let slurmd = find("slurmd").ok_or("slurmd is not installed")?;
        let mut daemons = vec![(
            "slurmctld".to_owned(),
            command(cluster.ctl_netns.as_ref(), &ctld),
        )];
        for n in nodes {
            let mut c = command(n.netns.as_ref(), &slurmd);
            c.args(["-N", &n.name]);
            daemons.push((format!("slurmd-{}", n.name), c));
        }
        for (name, mut c) in daemons {
            let log = std::fs::File::create(cluster.dir.join("log").join(format!("{name}.out")))
                .map_err(|e| e.to_string())?;
            let child = c
                .arg("-D")
                .arg("-f")
                .arg(&cluster.conf)
                .env("SLURM_CONF", &cluster.conf)
                .stdin(Stdio::null())
                .stdout(log.try_clone().map_err(|e| e.to_string())?)
                .stderr(log)
                .spawn()
                .map_err(|e| format!("starting {name}: {e}"))?;
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
            let out = command(self.ctl_netns.as_ref(), &sinfo)
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

    /// The daemons' logs (their last lines), for a failure's message.
    pub fn logs(&self) -> String {
        let mut files: Vec<PathBuf> = std::fs::read_dir(self.dir.join("log"))
            .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
            .unwrap_or_default();
        files.sort();
        files
            .iter()
            .map(|f| {
                let text = std::fs::read_to_string(f).unwrap_or_default();
                let lines: Vec<&str> = text.lines().collect();
                let tail = &lines[lines.len().saturating_sub(20)..];
                format!("--- {}\n{}\n", f.display(), tail.join("\n"))
            })
            .collect()
    }
}

impl Drop for SlurmCluster {
    fn drop(&mut self) {
        // The slurmds first (they end their step daemons), then the controller.
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
