//! Rules of the adaptivity coordinator ([`satin_core::adapt`]), driven by hand
//! and with seeded random pools, and its invariants over random call sequences
//! (proptest).

use std::collections::BTreeSet;

use proptest::prelude::*;
use satin_core::adapt::{
    AdaptStats, Config, ConfigError, Coordinator, Decision, Reason, Sample, MAX_MEMBERS,
};
use satin_core::rng::SplitMix64;
use satin_core::{ClusterId, NodeId};

const PERIOD: u64 = 1_000_000_000;

fn n(i: u32) -> NodeId {
    NodeId(i)
}

fn c(i: u32) -> ClusterId {
    ClusterId(i)
}

/// A sample of `node` busy for `busy` of the period, idle for the rest.
fn busy(node: u32, cluster: u32, busy: f64) -> Sample {
    let mut s = Sample::new(n(node), c(cluster), PERIOD);
    s.busy_ns = (busy * PERIOD as f64) as u64;
    s.idle_ns = PERIOD - s.busy_ns;
    s
}

/// Members `0..count`, all in cluster 0, master 0.
fn pool(config: Config, count: u32) -> Coordinator {
    Coordinator::new(config, n(0), (0..count).map(|i| (n(i), c(0)))).unwrap()
}

/// Every member of `co` sends a sample busy for `share` of the period.
fn all_busy(co: &mut Coordinator, share: f64) {
    let members: Vec<_> = co.members().collect();
    for (node, cluster, _) in members {
        co.sample(busy(node.0, cluster.0, share));
    }
}

fn reason(co: &Coordinator) -> Reason {
    co.report().unwrap().reason
}

fn efficiency(co: &Coordinator) -> f64 {
    co.report().unwrap().efficiency.unwrap()
}

#[test]
fn adds_above_e_max_and_more_the_higher_the_efficiency() {
    let mut counts = Vec::new();
    for share in [0.51, 0.6, 0.7, 0.8, 0.9, 1.0] {
        let mut co = pool(Config::default(), 10);
        all_busy(&mut co, share);
        let Decision::Add { count } = co.end_period() else {
            panic!("{share}: {:?}", co.report())
        };
        assert_eq!(reason(&co), Reason::Efficient);
        // ⌈n (E − 0.5) / 0.5⌉ with n = 10.
        let expected = (10.0 * (share - 0.5) / 0.5 - 1e-9).ceil() as u32;
        assert_eq!(count, expected.max(1), "{share}");
        counts.push(count);
        assert_eq!(co.pending_joins(), count);
        assert_eq!(co.stats().added, u64::from(count));
    }
    assert!(counts.windows(2).all(|w| w[0] <= w[1]), "{counts:?}");
    assert_eq!(counts.first(), Some(&1), "just above 50 %: one more");
    assert_eq!(counts.last(), Some(&10), "at 100 %: the pool doubles");
}

#[test]
fn exactly_e_max_or_e_min_is_in_band() {
    for share in [0.5, 0.3, 0.4] {
        let mut co = pool(Config::default(), 4);
        all_busy(&mut co, share);
        assert_eq!(co.end_period(), Decision::Keep);
        assert_eq!(reason(&co), Reason::InBand, "{share}");
        assert!((efficiency(&co) - share).abs() < 1e-9);
    }
}

#[test]
fn additions_never_exceed_max_size_counting_those_asked_for() {
    let config = Config {
        max_size: 6,
        cooldown_periods: 0,
        ..Config::default()
    };
    let mut co = pool(config, 4);
    all_busy(&mut co, 1.0);
    assert_eq!(
        co.end_period(),
        Decision::Add { count: 2 },
        "4 wanted, 2 fit"
    );
    // Without cool-down it decides again, but the two asked for count.
    all_busy(&mut co, 1.0);
    assert_eq!(co.end_period(), Decision::Keep);
    assert_eq!(reason(&co), Reason::AtMaxSize);
    // One could not be started: room for one again.
    co.add_failed(1);
    all_busy(&mut co, 1.0);
    assert_eq!(co.end_period(), Decision::Add { count: 1 });
}

#[test]
fn removes_the_starved_member_below_e_min() {
    let mut co = pool(Config::default(), 4);
    for i in [0, 1, 3] {
        co.sample(busy(i, 0, 0.35));
    }
    co.sample(busy(2, 0, 0.0));
    // E = (3 · 0.35 + 0) / 4 = 0.2625: ⌈4 · 0.0375 / 0.3⌉ = 1 goes, the starved one.
    assert_eq!(co.end_period(), Decision::Remove { nodes: vec![n(2)] });
    assert_eq!(reason(&co), Reason::Inefficient);
    assert!((efficiency(&co) - 0.2625).abs() < 1e-9);
    let leaving: Vec<_> = co.members().filter(|m| m.2).map(|m| m.0).collect();
    assert_eq!(leaving, vec![n(2)]);
}

#[test]
fn the_slower_of_equally_busy_members_goes_first() {
    let mut co = pool(Config::default(), 4);
    for i in 0..4 {
        let mut s = busy(i, 0, 0.28);
        s.speed = if i == 1 { 0.5 } else { 1.0 };
        co.sample(s);
    }
    assert_eq!(co.end_period(), Decision::Remove { nodes: vec![n(1)] });
}

/// A member slower than e_min that holds the work the others wait for: it is busy,
/// they starve, so by `speed · (1 − overhead)` it is *more* efficient than they are
/// (0.05 against 0), but it is the one that goes (a real CPU limit does this:
/// tests/tests/satin_adapt.rs).
#[test]
fn a_member_slower_than_e_min_goes_before_idle_fast_ones() {
    let mut co = pool(Config::default(), 4);
    for i in [0, 1, 3] {
        co.sample(busy(i, 0, 0.0));
    }
    let mut slow = busy(2, 0, 1.0);
    slow.speed = 0.05;
    co.sample(slow);
    // E = 0.05 / 4: ⌈4 · (0.3 − 0.0125) / 0.3⌉ = 4 wanted, 3 may go (the master stays):
    // the slow one first, then the idle ones by the higher id.
    assert_eq!(
        co.end_period(),
        Decision::Remove {
            nodes: vec![n(2), n(3), n(1)]
        }
    );
    // At e_min the speed alone does not put a member first: E = 0.1, two go, the
    // idle one first.
    let mut co = pool(Config::default(), 3);
    co.sample(busy(0, 0, 0.0));
    co.sample(busy(1, 0, 0.0));
    let mut slowish = busy(2, 0, 1.0);
    slowish.speed = 0.3;
    co.sample(slowish);
    assert_eq!(
        co.end_period(),
        Decision::Remove {
            nodes: vec![n(1), n(2)]
        }
    );
}

#[test]
fn the_lower_the_efficiency_the_more_go_but_never_below_min_nor_the_master() {
    // Everybody idle: every member but min_size would go; the master stays.
    let config = Config {
        min_size: 2,
        ..Config::default()
    };
    let mut co = pool(config, 6);
    all_busy(&mut co, 0.0);
    let Decision::Remove { nodes } = co.end_period() else {
        panic!("{:?}", co.report())
    };
    assert_eq!(nodes.len(), 4, "6 − min_size 2");
    assert!(!nodes.contains(&n(0)), "never the master: {nodes:?}");
    // Ties (all at 0) go by the higher id first.
    assert_eq!(nodes, vec![n(5), n(4), n(3), n(2)]);

    // Slightly below E_min: just one.
    let mut co = pool(Config::default(), 6);
    all_busy(&mut co, 0.29);
    assert!(matches!(co.end_period(), Decision::Remove { nodes } if nodes.len() == 1));
}

#[test]
fn the_master_is_never_removed_even_when_it_is_the_worst() {
    let mut co = pool(Config::default(), 3);
    co.sample(busy(0, 0, 0.0));
    co.sample(busy(1, 0, 0.45));
    co.sample(busy(2, 0, 0.4));
    let Decision::Remove { nodes } = co.end_period() else {
        panic!("{:?}", co.report())
    };
    assert_eq!(nodes, vec![n(2)], "the worst but the master");

    // A pool of the master alone (or at min_size) removes nobody.
    let mut co = pool(Config::default(), 1);
    co.sample(busy(0, 0, 0.0));
    assert_eq!(co.end_period(), Decision::Keep);
    assert_eq!(reason(&co), Reason::AtMinSize);
}

#[test]
fn after_a_new_master_is_elected_the_old_one_may_go_and_the_new_one_not() {
    let config = Config {
        cooldown_periods: 0,
        ..Config::default()
    };
    let mut co = pool(config, 3);
    co.leave(n(0));
    co.set_master(n(2));
    co.sample(busy(1, 0, 0.5));
    co.sample(busy(2, 0, 0.0));
    // E = 0.25: one goes; member 2 is the worst but the master now.
    assert_eq!(co.end_period(), Decision::Remove { nodes: vec![n(1)] });
}

/// Two clusters of three: 0..3 in cluster 0 (with the master), 3..6 in cluster 1.
fn two_clusters(config: Config) -> Coordinator {
    Coordinator::new(config, n(0), (0..6).map(|i| (n(i), c(i / 3)))).unwrap()
}

/// A sample busy `busy` and communicating `comm`, `inter` of it wide-area.
fn comm(node: u32, busy: f64, comm: f64, inter: f64) -> Sample {
    let mut s = Sample::new(n(node), c(node / 3), PERIOD);
    s.busy_ns = (busy * PERIOD as f64) as u64;
    s.comm_ns = (comm * PERIOD as f64) as u64;
    s.inter_comm_ns = (inter * PERIOD as f64) as u64;
    s.idle_ns = PERIOD - s.busy_ns - s.comm_ns;
    s
}

#[test]
fn drops_the_cluster_with_the_slow_wide_area_link() {
    let mut co = two_clusters(Config::default());
    for i in 0..3 {
        co.sample(comm(i, 0.8, 0.05, 0.01));
    }
    for i in 3..6 {
        co.sample(comm(i, 0.5, 0.45, 0.4));
    }
    // Efficiency (3 · 0.8 + 3 · 0.5) / 6 = 0.65 would add; the link rule comes first.
    assert_eq!(
        co.end_period(),
        Decision::RemoveCluster {
            cluster: c(1),
            nodes: vec![n(3), n(4), n(5)]
        }
    );
    let report = co.report().unwrap();
    assert_eq!(report.reason, Reason::WideAreaOverhead);
    assert!((report.efficiency.unwrap() - 0.65).abs() < 1e-9);
    assert_eq!(report.clusters.len(), 2);
    assert!((report.clusters[1].1 - 0.4).abs() < 1e-9);
    assert_eq!(co.stats().clusters_removed, 1);

    // Just under the threshold: kept (and members added, E = 0.65).
    let mut co = two_clusters(Config::default());
    for i in 0..6 {
        co.sample(comm(i, 0.65, 0.25, if i < 3 { 0.0 } else { 0.24 }));
    }
    assert!(matches!(co.end_period(), Decision::Add { .. }));
}

#[test]
fn the_worst_of_several_slow_clusters_goes_and_never_the_masters() {
    let config = Config::default();
    let members = (0..9).map(|i| (n(i), c(i / 3)));
    let mut co = Coordinator::new(config, n(0), members).unwrap();
    for i in 0..9 {
        let inter = [0.9, 0.3, 0.5][(i / 3) as usize];
        let mut s = Sample::new(n(i), c(i / 3), PERIOD);
        s.comm_ns = (inter * PERIOD as f64) as u64;
        s.inter_comm_ns = s.comm_ns;
        s.busy_ns = PERIOD - s.comm_ns;
        co.sample(s);
    }
    // Cluster 0 (the master's) is the worst but stays; of 1 and 2, 2 is worse.
    assert!(matches!(
        co.end_period(),
        Decision::RemoveCluster {
            cluster: ClusterId(2),
            ..
        }
    ));
}

#[test]
fn no_cluster_is_dropped_below_min_size_or_when_it_is_the_only_one() {
    let config = Config {
        min_size: 4,
        ..Config::default()
    };
    let mut co = two_clusters(config);
    for i in 0..6 {
        co.sample(comm(i, 0.4, 0.5, if i < 3 { 0.0 } else { 0.5 }));
    }
    assert!(
        !matches!(co.end_period(), Decision::RemoveCluster { .. }),
        "6 − 3 < min_size 4: {:?}",
        co.report()
    );

    let mut co = pool(Config::default(), 3);
    for i in 0..3 {
        let mut s = comm(i, 0.4, 0.5, 0.5);
        s.cluster = c(0);
        co.sample(s);
    }
    assert_eq!(co.end_period(), Decision::Keep);
    assert_eq!(reason(&co), Reason::InBand);
}

#[test]
fn keeps_the_pool_while_the_efficiency_is_in_band() {
    let mut rng = SplitMix64::new(21);
    let mut co = pool(Config::default(), 8);
    for period in 0..20 {
        // Every member between 31 % and 49 % busy.
        for i in 0..8 {
            let share = 0.31 + rng.below(19) as f64 / 100.0;
            co.sample(busy(i, 0, share));
        }
        assert_eq!(co.end_period(), Decision::Keep, "period {period}");
        assert_eq!(reason(&co), Reason::InBand);
    }
    assert_eq!(co.stats().periods, 20);
    assert_eq!(co.stats().samples, 160);
}

/// The weighted average efficiency of random heterogeneous pools equals the
/// journal's formula computed here independently.
#[test]
fn efficiency_is_the_weighted_average_of_the_journal() {
    for seed in 0..50 {
        let mut rng = SplitMix64::new(seed);
        let members = 1 + rng.below(12) as u32;
        let mut co = Coordinator::new(
            Config::default(),
            n(0),
            (0..members).map(|i| (n(i), c(i % 3))),
        )
        .unwrap();
        let mut sum = 0.0;
        for i in 0..members {
            let period = 1 + rng.below(PERIOD);
            let b = rng.below(period + 1);
            let idle = rng.below(period - b + 1);
            let comm = period - b - idle;
            let speed = (1 + rng.below(100)) as f64 / 100.0;
            let mut s = Sample::new(n(i), c(i % 3), period);
            (s.busy_ns, s.idle_ns, s.comm_ns, s.speed) = (b, idle, comm, speed);
            s.inter_comm_ns = rng.below(comm + 1);
            co.sample(s);
            sum += speed * (1.0 - (idle + comm) as f64 / period as f64);
        }
        co.end_period();
        let report = co.report().unwrap();
        assert_eq!(report.measured, members);
        let expected = sum / f64::from(members);
        assert!(
            (report.efficiency.unwrap() - expected).abs() < 1e-9,
            "seed {seed}: {report:?} vs {expected}"
        );
        let want = if expected > 0.5 {
            Reason::Efficient
        } else if expected < 0.3 {
            Reason::Inefficient
        } else {
            Reason::InBand
        };
        match report.reason {
            Reason::WideAreaOverhead => {}
            // Only the master, which never goes.
            Reason::AtMinSize => assert!(want == Reason::Inefficient && members == 1),
            got => assert_eq!(got, want, "seed {seed}"),
        }
    }
}

#[test]
fn cool_down_skips_the_period_of_the_change_and_waits_for_it() {
    let mut co = pool(Config::default(), 4);
    all_busy(&mut co, 1.0);
    assert_eq!(co.end_period(), Decision::Add { count: 4 });

    // Nobody joins for two periods: waiting, whatever the measurements say.
    for _ in 0..2 {
        all_busy(&mut co, 1.0);
        assert_eq!(co.end_period(), Decision::Keep);
        assert_eq!(reason(&co), Reason::CoolingDown);
    }
    // Three join and one fails during a period: it is the change's period.
    for i in 4..7 {
        co.join(n(i), c(0));
    }
    co.add_failed(1);
    all_busy(&mut co, 1.0);
    assert_eq!(co.end_period(), Decision::Keep);
    assert_eq!(reason(&co), Reason::CoolingDown);
    assert_eq!(co.pending_joins(), 0);
    // The next whole period of 7 is judged.
    all_busy(&mut co, 0.4);
    assert_eq!(co.end_period(), Decision::Keep);
    assert_eq!(reason(&co), Reason::InBand);
    assert_eq!(co.report().unwrap().measured, 7);
    assert_eq!(co.stats().cooling_periods, 3);
}

#[test]
fn cool_down_after_a_removal_lasts_until_the_members_left() {
    let mut co = pool(Config::default(), 4);
    all_busy(&mut co, 0.0);
    let Decision::Remove { nodes } = co.end_period() else {
        panic!()
    };
    assert_eq!(nodes, vec![n(3), n(2), n(1)]);
    // Two leave, one cannot be stopped.
    co.leave(n(3));
    co.leave(n(2));
    co.remove_failed(n(1));
    all_busy(&mut co, 0.0);
    assert_eq!(co.end_period(), Decision::Keep);
    assert_eq!(reason(&co), Reason::CoolingDown);
    // A whole period of two starved members: member 1 goes again.
    all_busy(&mut co, 0.0);
    assert_eq!(co.end_period(), Decision::Remove { nodes: vec![n(1)] });
}

#[test]
fn longer_cool_downs_and_none() {
    for cooldown in [0u32, 1, 2, 3] {
        let config = Config {
            cooldown_periods: cooldown,
            max_size: 1000,
            ..Config::default()
        };
        let mut co = pool(config, 2);
        let mut next = 2;
        let mut decisions = Vec::new();
        for _ in 0..8 {
            all_busy(&mut co, 1.0);
            let d = co.end_period();
            // The launcher starts what was asked for at once (next period).
            if let Decision::Add { count } = d {
                for _ in 0..count {
                    co.join(n(next), c(0));
                    next += 1;
                }
            }
            decisions.push(matches!(d, Decision::Add { .. }));
        }
        // A decision, then 1 period of the change + (cooldown − 1) settled ones
        // skipped, then the next decision; without cool-down every period.
        let gap = cooldown.max(1) as usize;
        let expected: Vec<bool> = (0..8).map(|p| p % (gap + 1) == 0).collect();
        let expected = if cooldown == 0 {
            vec![true; 8]
        } else {
            expected
        };
        assert_eq!(decisions, expected, "cooldown {cooldown}");
    }
}

#[test]
fn members_joining_mid_period_are_not_measured_in_it() {
    let mut co = pool(Config::default(), 4);
    co.join(n(9), c(0));
    all_busy(&mut co, 0.4);
    // The newcomer stole nothing yet: idle all the time; not counted.
    co.sample(busy(9, 0, 0.0));
    assert_eq!(co.end_period(), Decision::Keep);
    let report = co.report().unwrap();
    assert_eq!((report.measured, report.joined), (4, 1));
    assert!((report.efficiency.unwrap() - 0.4).abs() < 1e-9);
    // From the next period on it is.
    all_busy(&mut co, 0.4);
    co.end_period();
    assert_eq!(co.report().unwrap().measured, 5);
}

#[test]
fn members_leaving_mid_period_are_forgotten_with_their_samples() {
    let mut co = pool(Config::default(), 4);
    all_busy(&mut co, 0.4);
    co.sample(busy(3, 0, 0.0));
    co.leave(n(3));
    co.sample(busy(3, 0, 0.0));
    assert_eq!(co.end_period(), Decision::Keep);
    assert_eq!(co.report().unwrap().measured, 3);
    assert!((efficiency(&co) - 0.4).abs() < 1e-9);
    assert_eq!(co.stats().ignored, 1, "the sample after it left");
}

#[test]
fn a_missing_sample_reuses_the_previous_one_then_counts_as_zero() {
    // At its maximum size: no change, so no cool-down either.
    let config = Config {
        max_size: 2,
        ..Config::default()
    };
    let mut co = pool(config, 2);
    all_busy(&mut co, 0.8);
    co.end_period();
    // Member 1 is late: judged by its 0.8 of the previous period.
    co.sample(busy(0, 0, 0.4));
    co.end_period();
    let report = co.report().unwrap();
    assert_eq!((report.stale, report.silent), (1, 0));
    assert!((report.efficiency.unwrap() - 0.6).abs() < 1e-9);
    // Silent again: nothing to go by, efficiency 0; the late one may go.
    co.sample(busy(0, 0, 0.4));
    assert_eq!(co.end_period(), Decision::Remove { nodes: vec![n(1)] });
    let report = co.report().unwrap();
    assert_eq!((report.stale, report.silent), (0, 1));
    assert!((report.efficiency.unwrap() - 0.2).abs() < 1e-9);
    assert_eq!((co.stats().stale, co.stats().silent), (1, 1));
}

#[test]
fn samples_of_one_period_add_up() {
    let mut co = pool(Config::default(), 1);
    // Two halves: one busy, one idle -> 50 %.
    co.sample(busy(0, 0, 1.0));
    co.sample(busy(0, 0, 0.0));
    co.end_period();
    assert!((efficiency(&co) - 0.5).abs() < 1e-9);
}

#[test]
fn absurd_inputs_are_clamped_or_ignored_and_counted() {
    let mut co = pool(Config::default(), 3);
    // Zero period: ignored.
    co.sample(Sample::new(n(0), c(0), 0));
    // Times beyond the period, wide-area above communication, speed NaN.
    let mut s = Sample::new(n(1), c(0), 10);
    (s.busy_ns, s.idle_ns, s.comm_ns, s.inter_comm_ns) = (u64::MAX, u64::MAX, u64::MAX, u64::MAX);
    s.speed = f64::NAN;
    co.sample(s);
    // Infinite and negative speeds, wrong cluster, unknown node.
    let mut s = busy(2, 7, 1.0);
    s.speed = f64::INFINITY;
    co.sample(s);
    let mut s = busy(0, 0, 1.0);
    s.speed = -3.0;
    co.sample(s);
    co.sample(busy(42, 0, 1.0));
    co.end_period();
    let stats = co.stats();
    assert_eq!(stats.invalid, 1);
    assert_eq!(stats.ignored, 1);
    assert_eq!(stats.clamped, 3);
    assert_eq!(stats.cluster_mismatch, 1);
    assert_eq!(stats.samples, 3);
    let report = co.report().unwrap();
    // Member 0: speed 0 -> 0; member 1: all overhead -> 0; member 2: speed 1, busy -> 1.
    assert!((report.efficiency.unwrap() - 1.0 / 3.0).abs() < 1e-9);
    for (_, o) in &report.clusters {
        assert!((0.0..=1.0).contains(o));
    }
}

#[test]
fn bad_configurations_are_refused() {
    let bad = [
        (
            Config {
                e_min: 0.6,
                ..Config::default()
            },
            "thresholds",
        ),
        (
            Config {
                e_max: f64::NAN,
                ..Config::default()
            },
            "thresholds",
        ),
        (
            Config {
                e_max: 1.5,
                ..Config::default()
            },
            "thresholds",
        ),
        (
            Config {
                min_size: 0,
                ..Config::default()
            },
            "sizes",
        ),
        (
            Config {
                min_size: 5,
                max_size: 4,
                ..Config::default()
            },
            "sizes",
        ),
        (
            Config {
                cluster_overhead_max: 0.0,
                ..Config::default()
            },
            "cluster",
        ),
    ];
    for (config, what) in bad {
        let e = Coordinator::new(config, n(0), []).unwrap_err();
        let ok = match what {
            "thresholds" => matches!(e, ConfigError::Thresholds { .. }),
            "sizes" => matches!(e, ConfigError::Sizes { .. }),
            _ => matches!(e, ConfigError::ClusterOverhead(_)),
        };
        assert!(ok, "{what}: {e}");
        assert!(!e.to_string().is_empty());
    }
    assert!(Config::default().validate().is_ok());
}

#[test]
fn membership_is_bounded_and_duplicates_are_ignored() {
    let mut co = pool(Config::default(), 2);
    co.join(n(1), c(0));
    co.leave(n(7));
    co.remove_failed(n(0));
    co.add_failed(3);
    assert_eq!(co.stats().ignored, 4);
    assert_eq!(co.size(), 2);
    for i in 0..(MAX_MEMBERS as u32 + 10) {
        co.join(n(i), c(0));
    }
    assert_eq!(co.size(), MAX_MEMBERS);
}

#[test]
fn an_empty_or_just_joined_pool_has_no_measurements() {
    let mut co = pool(Config::default(), 0);
    assert_eq!(co.end_period(), Decision::Keep);
    assert_eq!(reason(&co), Reason::NoMeasurements);
    co.join(n(0), c(0));
    co.sample(busy(0, 0, 1.0));
    assert_eq!(co.end_period(), Decision::Keep);
    assert_eq!(reason(&co), Reason::NoMeasurements);
}

// ---- invariants over random call sequences ----

#[derive(Debug, Clone)]
enum Op {
    Join(u32, u32),
    Leave(u32),
    Sample(Sample),
    EndPeriod,
    /// The launcher carries out what was asked: starts `joins` of the members
    /// asked for, stops those asked to leave.
    Execute,
    AddFailed(u32),
    RemoveFailed(u32),
    SetMaster(u32),
}

fn any_f64() -> impl Strategy<Value = f64> {
    prop_oneof![
        Just(f64::NAN),
        Just(f64::INFINITY),
        Just(-1.0),
        0.0..=1.0f64,
        any::<f64>(),
    ]
}

fn any_time() -> impl Strategy<Value = u64> {
    prop_oneof![Just(0u64), Just(u64::MAX), 0..2 * PERIOD, any::<u64>()]
}

fn op() -> impl Strategy<Value = Op> {
    let sample = (
        0..12u32,
        0..3u32,
        any_time(),
        any_time(),
        any_time(),
        any_time(),
        any_time(),
        any_f64(),
    )
        .prop_map(|(node, cluster, p, b, i, cm, inter, speed)| {
            let mut s = Sample::new(NodeId(node), ClusterId(cluster), p);
            (s.busy_ns, s.idle_ns, s.comm_ns, s.inter_comm_ns, s.speed) = (b, i, cm, inter, speed);
            Op::Sample(s)
        });
    prop_oneof![
        2 => (0..12u32, 0..3u32).prop_map(|(n, c)| Op::Join(n, c)),
        1 => (0..12u32).prop_map(Op::Leave),
        8 => sample,
        4 => Just(Op::EndPeriod),
        2 => Just(Op::Execute),
        1 => (0..4u32).prop_map(Op::AddFailed),
        1 => (0..12u32).prop_map(Op::RemoveFailed),
        1 => (0..12u32).prop_map(Op::SetMaster),
    ]
}

fn config() -> impl Strategy<Value = Config> {
    (
        1..6u32,
        0..10u32,
        0..3u32,
        0.0..=0.6f64,
        0.0..=0.6f64,
        0.05..=1.0f64,
    )
        .prop_map(|(min, extra, cooldown, a, b, t)| Config {
            e_min: a.min(b),
            e_max: a.max(b),
            min_size: min,
            max_size: min + extra,
            cluster_overhead_max: t,
            cooldown_periods: cooldown,
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn decisions_never_remove_the_master_nor_leave_the_size_bounds(
        config in config(),
        initial in 0..8u32,
        ops in proptest::collection::vec(op(), 0..120),
    ) {
        let mut co = Coordinator::new(config, NodeId(0), (0..initial).map(|i| (NodeId(i), ClusterId(i % 3)))).unwrap();
        let mut fresh = 100u32;
        for op in ops {
            match op {
                Op::Join(n, c) => co.join(NodeId(n), ClusterId(c)),
                Op::Leave(n) => co.leave(NodeId(n)),
                Op::Sample(s) => co.sample(s),
                Op::AddFailed(k) => co.add_failed(k),
                Op::RemoveFailed(n) => co.remove_failed(NodeId(n)),
                Op::SetMaster(n) => co.set_master(NodeId(n)),
                Op::Execute => {
                    for _ in 0..co.pending_joins() {
                        co.join(NodeId(fresh), ClusterId(fresh % 3));
                        fresh += 1;
                    }
                    let leaving: Vec<NodeId> = co.members().filter(|m| m.2).map(|m| m.0).collect();
                    for n in leaving {
                        co.leave(n);
                    }
                }
                Op::EndPeriod => {
                    let before: Vec<_> = co.members().collect();
                    let staying_before: BTreeSet<NodeId> =
                        before.iter().filter(|m| !m.2).map(|m| m.0).collect();
                    let size_before = before.len() as u64 + u64::from(co.pending_joins());
                    let master = co.master();
                    let master_cluster = before.iter().find(|m| m.0 == master).map(|m| m.1);
                    let d = co.end_period();
                    let report = co.report().unwrap().clone();
                    prop_assert_eq!(&report.decision, &d);
                    if let Some(e) = report.efficiency {
                        prop_assert!((0.0..=1.0).contains(&e), "{:?}", report);
                    }
                    for (_, o) in &report.clusters {
                        prop_assert!((0.0..=1.0).contains(o));
                    }
                    match &d {
                        Decision::Keep => {}
                        Decision::Add { count } => {
                            prop_assert!(*count >= 1);
                            prop_assert!(size_before + u64::from(*count) <= u64::from(config.max_size),
                                "{} + {} > {}", size_before, count, config.max_size);
                        }
                        Decision::Remove { nodes } | Decision::RemoveCluster { nodes, .. } => {
                            prop_assert!(!nodes.is_empty());
                            prop_assert!(!nodes.contains(&master), "master {:?} in {:?}", master, nodes);
                            let distinct: BTreeSet<NodeId> = nodes.iter().copied().collect();
                            prop_assert_eq!(distinct.len(), nodes.len());
                            prop_assert!(distinct.is_subset(&staying_before));
                            prop_assert!(staying_before.len() - distinct.len() >= config.min_size as usize,
                                "{} − {} < min {}", staying_before.len(), distinct.len(), config.min_size);
                            if let Decision::RemoveCluster { cluster, .. } = &d {
                                prop_assert!(Some(*cluster) != master_cluster);
                            }
                        }
                    }
                }
            }
        }
        let s: AdaptStats = co.stats();
        prop_assert!(s.removed >= s.removes);
    }
}
