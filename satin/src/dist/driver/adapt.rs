//! Self-adaptivity in a running pool (see "Adaptivity" in [`crate::dist`]): every
//! member measures itself once per monitoring period and reports to the master; the
//! master runs the coordinator ([`satin_core::adapt::Coordinator`]) and carries out
//! its decisions through `ipl-run --malleable`'s control socket.
//!
//! **Measurements** of one member over one period of `P` (wall time) with `W`
//! workers, in worker time (the sample's period is `W·P`):
//!
//! - *idle*: the time the member starved (a worker found no work and none is visible
//!   in the process: the load balancer's `idle_ns`), times `W`. With one worker this
//!   is exact; with more it is an upper bound (not every worker need be out of work
//!   while the member starves), as the kernel keeps no per-worker idle time.
//! - *communication*: of that idle time, the part spent waiting for steal replies
//!   (the load balancer's synchronous and asynchronous steal round trips, at most the
//!   idle time: an asynchronous wide-area steal overlaps local work); its *wide-area*
//!   part is the asynchronous (wide-area, CRS) round trips.
//! - *busy*: the rest.
//! - *speed*: a short fixed benchmark (a hash loop, best of three runs, on the driver
//!   thread, a few milliseconds at most) each period: work units per second, times
//!   the *share of the CPU* the member got while it was busy (the process's CPU time
//!   over the period divided by its busy time, at most 1; 1 when it was busy less
//!   than a tenth of the period, too little to tell). The master makes it relative
//!   to the fastest member's latest, as the journal's benchmark (re-run every period,
//!   so a member whose CPU becomes loaded shows it). The benchmark alone measures
//!   the processor's peak speed: a process under a CPU limit (a cgroup's CPU quota,
//!   e.g. 5 % of a CPU) runs it at full speed within its quota and is then stopped
//!   for the rest of the quota period, so a few milliseconds of benchmark rarely see
//!   the limit; its CPU time over a whole monitoring period does. The CPU time is
//!   the whole process's (driver and network threads included, hence the cap at 1);
//!   with several workers of which only some have work while the member does not
//!   starve, the share comes out lower than the CPU's (as the busy time is an upper
//!   bound, see *idle*): the product then still counts the member's useful work.
//!
//! The master's coordinator ends a period every period (with its own measurement),
//! except the first one after it was made: every member ends its first period at
//! about the moment the master ends its own, so the members' samples of it are still
//! on their way (a message's time, over a wide-area link tens or hundreds of
//! milliseconds) and judging it would count every other member as silent
//! (efficiency 0: a pool of four would be at 25 % and lose a member on no
//! measurement at all). The coordinator's first period therefore lasts two of the
//! master's, and the samples of the members' first period are in it. Joins and
//! departures reach it from the driver (`joined`, `gone`).

use super::*;
use ipl::launcher::control::Control as Launcher;
use satin_core::adapt::{Config as AdaptCoreConfig, Coordinator, Decision, Sample};

/// Iterations of the benchmark's loop (a fraction of a millisecond in a release
/// build, a few in a debug build).
const BENCH_ITERATIONS: u64 = 200_000;

/// The launcher rank in an IPL name `member-R`.
fn rank_in(name: &str) -> Option<u32> {
    name.strip_prefix("member-")?.parse().ok()
}

/// The benchmark: work units (loop iterations) per second, best of three runs.
fn benchmark() -> f64 {
    let mut best = u128::MAX;
    for _ in 0..3 {
        let t0 = Instant::now();
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for i in 0..BENCH_ITERATIONS {
            // splitmix64
            x = x.wrapping_add(0x9E37_79B9_7F4A_7C15 ^ i);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            x = std::hint::black_box(z ^ (z >> 31));
        }
        best = best.min(t0.elapsed().as_nanos());
    }
    BENCH_ITERATIONS as f64 * 1e9 / best.max(1) as f64
}

/// The CPU time this process used so far (ns), if the system tells.
fn process_cpu_ns() -> Option<u64> {
    #[cfg(unix)]
    {
        let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
        let s = u64::try_from(t.tv_sec).ok()?;
        let ns = u64::try_from(t.tv_nsec).ok()?;
        s.checked_mul(1_000_000_000)?.checked_add(ns)
    }
    #[cfg(not(unix))]
    None
}

/// The share of the CPU a member got while busy: `cpu` ns of CPU time over `busy`
/// ns of busy (worker) time, at most 1; 1 when unknown or when the member was busy
/// less than a tenth of `period` (too little to tell).
fn cpu_share(cpu: Option<u64>, busy: u64, period: u64) -> f64 {
    match cpu {
        Some(cpu) if busy > 0 && busy >= period / 10 => (cpu as f64 / busy as f64).min(1.0),
        _ => 1.0,
    }
}

/// What a control request to `ipl-run` came to (from its thread).
pub(crate) enum Outcome {
    /// `asked` members were asked for; `ipl-run` started `started` of them.
    Added { asked: u32, started: u32 },
    /// Asking for `0` members failed.
    AddFailed(u32, String),
    /// `ipl-run` sent the member of node `0` SIGTERM.
    Removed(u32),
    /// Removing node `0` failed.
    RemoveFailed(u32, String),
}

/// The load balancer's counters at the start of a period.
#[derive(Clone, Copy)]
struct Mark {
    at: Instant,
    idle: u64,
    sync: u64,
    async_: u64,
    /// The process's CPU time (ns), if known.
    cpu: Option<u64>,
}

/// The master's side: the coordinator and `ipl-run`'s control socket.
struct Steer {
    coordinator: Coordinator,
    /// `None`: not under `ipl-run --malleable` (decisions are only logged).
    launcher: Option<Launcher>,
    /// Raw speeds (benchmark units per second) by node, made relative to the fastest.
    speeds: HashMap<u32, f64>,
    /// Whether a period of the master's has ended since the coordinator was made
    /// (the first is not judged: see the module documentation).
    judging: bool,
}

/// Adaptivity's state on one member.
pub(crate) struct Adapt {
    on: bool,
    period: Duration,
    min_size: u32,
    max_size: u32,
    next: Instant,
    mark: Option<Mark>,
    steer: Option<Steer>,
    /// The coordinator could not be made (bad bounds): warned once, off.
    broken: bool,
    pub(super) added: u64,
    pub(super) removed: u64,
}

impl Adapt {
    pub(crate) fn new(config: &DistConfig) -> Adapt {
        let c = config.adapt;
        Adapt {
            on: c.on,
            period: c.period.max(Duration::from_millis(1)),
            min_size: c.min_size,
            max_size: c.max_size,
            next: Instant::now() + c.period,
            mark: None,
            steer: None,
            broken: false,
            added: 0,
            removed: 0,
        }
    }
}

impl Driver {
    /// Called once per round of the event loop: ends a monitoring period when it is
    /// due (measure; send the sample to the master, or on the master judge the
    /// period).
    pub(super) fn adapt_tick(&mut self) {
        if !self.adapt.on || self.adapt.broken || self.phase != Phase::Running {
            return;
        }
        let now = Instant::now();
        if self.adapt.mark.is_none() {
            self.adapt.mark = Some(self.adapt_mark(now));
        }
        if now < self.adapt.next {
            return;
        }
        self.adapt.next = now + self.adapt.period;
        let sample = self.measure(now);
        if self.is_master() {
            self.adapt_sample(self.me, sample);
            self.end_period();
        } else {
            let master = self.master;
            self.send(master, Msg::Sample(sample), &[]);
        }
    }

    fn adapt_mark(&self, at: Instant) -> Mark {
        let s = self.node.stats_at(self.now());
        Mark {
            at,
            idle: s.idle_ns,
            sync: s.sync_steal_ns,
            async_: s.async_steal_ns,
            cpu: process_cpu_ns(),
        }
    }

    /// This member's sample of the period that ends now (see the module
    /// documentation), and the start of the next one.
    fn measure(&mut self, now: Instant) -> Sample {
        let new = self.adapt_mark(now);
        let old = self.adapt.mark.replace(new).unwrap_or(new);
        let wall = now.saturating_duration_since(old.at).as_nanos() as u64;
        let idle = new.idle.saturating_sub(old.idle).min(wall);
        let sync = new.sync.saturating_sub(old.sync);
        let async_ = new.async_.saturating_sub(old.async_);
        let comm = sync.saturating_add(async_).min(idle);
        let inter = async_.min(comm);
        let w = self.satin.workers().max(1) as u64;
        let cluster = self
            .topology
            .cluster_of(NodeId(self.me))
            .unwrap_or(satin_core::ClusterId(0));
        let mut s = Sample::new(NodeId(self.me), cluster, wall.saturating_mul(w));
        s.busy_ns = (wall - idle).saturating_mul(w);
        s.idle_ns = (idle - comm).saturating_mul(w);
        s.comm_ns = comm.saturating_mul(w);
        s.inter_comm_ns = inter.saturating_mul(w);
        let cpu = match (old.cpu, new.cpu) {
            (Some(a), Some(b)) => Some(b.saturating_sub(a)),
            _ => None,
        };
        s.speed = benchmark() * cpu_share(cpu, s.busy_ns, s.period_ns);
        tracing::debug!(
            busy_ms = s.busy_ns / 1_000_000,
            idle_ms = s.idle_ns / 1_000_000,
            comm_ms = s.comm_ns / 1_000_000,
            inter_ms = s.inter_comm_ns / 1_000_000,
            speed = s.speed,
            "adaptivity: measured a period"
        );
        s
    }

    /// The coordinator, made on the master when first needed (also on a member that
    /// became the master): the members alive now.
    fn steer(&mut self) -> Option<&mut Steer> {
        if self.adapt.steer.is_none() && !self.adapt.broken {
            let members: Vec<(NodeId, satin_core::ClusterId)> = (0..self.alive.len() as u32)
                .filter(|n| self.alive[*n as usize])
                .filter_map(|n| Some((NodeId(n), self.topology.cluster_of(NodeId(n))?)))
                .collect();
            let config = AdaptCoreConfig {
                min_size: self.adapt.min_size,
                max_size: self.adapt.max_size,
                ..AdaptCoreConfig::default()
            };
            match Coordinator::new(config, NodeId(self.me), members) {
                Ok(coordinator) => {
                    let launcher = match Launcher::from_env() {
                        Ok(Some(l)) => Some(l),
                        Ok(None) => {
                            tracing::warn!(
                                "adaptivity needs `ipl-run --malleable` to add and remove \
                                 members: measuring and logging its decisions only"
                            );
                            None
                        }
                        Err(e) => {
                            tracing::warn!(error = %e,
                                "adaptivity cannot use ipl-run's control socket: measuring \
                                 and logging its decisions only");
                            None
                        }
                    };
                    self.adapt.steer = Some(Steer {
                        coordinator,
                        launcher,
                        speeds: HashMap::new(),
                        judging: false,
                    });
                }
                Err(e) => {
                    tracing::warn!(error = %e, "adaptivity is off");
                    self.adapt.broken = true;
                }
            }
        }
        self.adapt.steer.as_mut()
    }

    /// A sample of node `from` (this member's own, or a `Msg::Sample`), on the master.
    pub(super) fn adapt_sample(&mut self, from: u32, mut s: Sample) {
        if !self.adapt.on || !self.is_master() {
            return;
        }
        let Some(cluster) = self.topology.cluster_of(NodeId(from)) else {
            return;
        };
        let Some(steer) = self.steer() else {
            return;
        };
        s.node = NodeId(from);
        s.cluster = cluster;
        if s.speed.is_finite() && s.speed >= 0.0 {
            steer.speeds.insert(from, s.speed);
            let fastest = steer.speeds.values().copied().fold(0.0, f64::max);
            s.speed = if fastest > 0.0 {
                (s.speed / fastest).clamp(0.0, 1.0)
            } else {
                f64::NAN // nobody measured yet: the member's previous speed
            };
        } else {
            s.speed = f64::NAN; // the member's previous speed
        }
        steer.coordinator.sample(s);
    }

    /// Node `n` joined the running pool.
    pub(super) fn adapt_joined(&mut self, n: u32) {
        if !self.adapt.on || !self.is_master() || self.adapt.steer.is_none() {
            return; // a coordinator made later takes the members alive then
        }
        if let (Some(cluster), Some(steer)) = (
            self.topology.cluster_of(NodeId(n)),
            self.adapt.steer.as_mut(),
        ) {
            steer.coordinator.join(NodeId(n), cluster);
        }
    }

    /// Node `n` left, was removed or crashed.
    pub(super) fn adapt_gone(&mut self, n: u32) {
        if let Some(steer) = self.adapt.steer.as_mut() {
            steer.speeds.remove(&n);
            steer.coordinator.leave(NodeId(n));
            if n == self.master && n != self.me {
                // This member is the master now.
                steer.coordinator.set_master(NodeId(self.me));
            }
        }
    }

    /// The launcher rank of node `n`: its IPL name is `member-R`.
    fn rank_of(&self, n: u32) -> Option<u32> {
        rank_in(&self.members.get(n as usize)?.1)
    }

    /// Ends the coordinator's period and carries out its decision.
    fn end_period(&mut self) {
        let Some(steer) = self.steer() else {
            return;
        };
        if !steer.judging {
            // The members' samples of this first period are still on their way.
            steer.judging = true;
            tracing::debug!("adaptivity: the first period goes on into the next");
            return;
        }
        let decision = steer.coordinator.end_period();
        let report = steer.coordinator.report().cloned();
        let launcher = steer.launcher.clone();
        let efficiency = report.as_ref().and_then(|r| r.efficiency);
        let measured = report.as_ref().map_or(0, |r| r.measured);
        let reason = report
            .as_ref()
            .map_or_else(String::new, |r| format!("{:?}", r.reason));
        // Each cluster's wide-area share: (cluster, share).
        let wide_area = report.as_ref().map_or_else(String::new, |r| {
            r.clusters
                .iter()
                .map(|(c, share)| format!("{}:{share:.2}", c.0))
                .collect::<Vec<_>>()
                .join(" ")
        });
        match decision {
            Decision::Keep => {
                tracing::debug!(
                    ?efficiency,
                    measured,
                    %reason,
                    %wide_area,
                    "adaptivity: keeping the pool"
                )
            }
            Decision::Add { count } => {
                tracing::info!(
                    efficiency = efficiency.unwrap_or(f64::NAN),
                    measured,
                    count,
                    %reason,
                    "adaptivity: adding members"
                );
                match launcher {
                    Some(l) => self.control_thread(move || match l.add(count, None) {
                        Ok(ranks) => Outcome::Added {
                            asked: count,
                            started: ranks.len().min(count as usize) as u32,
                        },
                        Err(e) => Outcome::AddFailed(count, e.to_string()),
                    }),
                    None => self.adapt_outcome(Outcome::AddFailed(
                        count,
                        "not under ipl-run --malleable".into(),
                    )),
                }
            }
            Decision::Remove { nodes } | Decision::RemoveCluster { nodes, .. } => {
                let names: Vec<String> = nodes.iter().map(|n| self.who(n.0)).collect();
                tracing::info!(
                    efficiency = efficiency.unwrap_or(f64::NAN),
                    measured,
                    %reason,
                    %wide_area,
                    members = %names.join(", "),
                    "adaptivity: removing members"
                );
                for node in nodes {
                    let n = node.0;
                    match (self.rank_of(n), launcher.clone()) {
                        (Some(rank), Some(l)) => {
                            self.control_thread(move || match l.remove(rank) {
                                Ok(()) => Outcome::Removed(n),
                                Err(e) => Outcome::RemoveFailed(n, e.to_string()),
                            })
                        }
                        (None, _) => self.adapt_outcome(Outcome::RemoveFailed(
                            n,
                            "its launcher rank is unknown".into(),
                        )),
                        (_, None) => self.adapt_outcome(Outcome::RemoveFailed(
                            n,
                            "not under ipl-run --malleable".into(),
                        )),
                    }
                }
            }
        }
    }

    /// Runs a request to `ipl-run` on a thread of its own (each waits up to the
    /// control socket's timeout); its outcome comes back as an input.
    fn control_thread(&mut self, request: impl FnOnce() -> Outcome + Send + 'static) {
        let tx = self.tx.clone();
        let spawned = std::thread::Builder::new()
            .name("satin-adapt".into())
            .spawn(move || {
                let _ = tx.send(Input::Adapt(request()));
            });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "adaptivity: cannot start a control request");
        }
    }

    /// What became of a request to `ipl-run`.
    pub(super) fn adapt_outcome(&mut self, outcome: Outcome) {
        let who = match &outcome {
            Outcome::Removed(n) | Outcome::RemoveFailed(n, _) => self.who(*n),
            _ => String::new(),
        };
        let Some(steer) = self.adapt.steer.as_mut() else {
            return;
        };
        match outcome {
            Outcome::Added { asked, started } => {
                self.adapt.added += u64::from(started);
                if started < asked {
                    steer.coordinator.add_failed(asked - started);
                }
            }
            Outcome::AddFailed(count, why) => {
                if steer.launcher.is_some() {
                    tracing::warn!(count, error = %why, "adaptivity: adding members failed");
                }
                steer.coordinator.add_failed(count);
            }
            Outcome::Removed(n) => {
                self.adapt.removed += 1;
                tracing::info!(member = %who, "adaptivity: asked the member to leave");
                let _ = n;
            }
            Outcome::RemoveFailed(n, why) => {
                if steer.launcher.is_some() {
                    tracing::warn!(member = %who, error = %why, "adaptivity: removing a member failed");
                }
                steer.coordinator.remove_failed(NodeId(n));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn launcher_ranks_come_from_member_names() {
        assert_eq!(rank_in("member-12"), Some(12));
        assert_eq!(rank_in("worker-1"), None);
    }

    #[test]
    fn the_cpu_share_is_cpu_time_over_busy_time() {
        assert_eq!(cpu_share(Some(50), 1000, 1000), 0.05);
        assert_eq!(cpu_share(Some(5000), 1000, 1000), 1.0, "at most 1");
        assert_eq!(cpu_share(Some(0), 1000, 1000), 0.0);
        assert_eq!(cpu_share(None, 1000, 1000), 1.0, "unknown");
        assert_eq!(cpu_share(Some(0), 99, 1000), 1.0, "busy too little to tell");
        assert_eq!(cpu_share(Some(0), 0, 0), 1.0);
    }

    #[test]
    fn the_process_cpu_time_grows() {
        let Some(a) = process_cpu_ns() else { return };
        let mut x = 0u64;
        let until = a + 1_000_000;
        let mut b = a;
        for i in 0..1_000_000_000u64 {
            x = std::hint::black_box(x.wrapping_add(i));
            if i % 10_000 == 0 {
                b = process_cpu_ns().unwrap_or(u64::MAX);
                if b >= until {
                    break;
                }
            }
        }
        assert!(b >= until, "{a} {b} {x}");
    }

    #[test]
    fn the_benchmark_gives_a_speed() {
        let s = benchmark();
        assert!(s.is_finite() && s > 0.0, "{s}");
    }
}
