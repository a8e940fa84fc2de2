//! Rules of the load-balancing policies, checked on a single node driven by
//! hand-written and seeded random event sequences.

mod common;

use common::{cluster, drain, fuzz, requests};
use satin_core::{
    Action, ClusterId, Config, Event, JobRef, Node, NodeId, Policy, StealId, Topology,
};

// ---------------------------------------------------------------- RS

#[test]
fn rs_idle_sends_one_synchronous_request_to_another_node() {
    let topo = Topology::uniform(4, 4);
    let mut seen = [0u32; 16];
    for seed in 0..2000 {
        let me = NodeId((seed % 16) as u32);
        let mut node = Node::new(me, topo.clone(), Policy::Rs, seed);
        node.handle(Event::Idle { now: 0 });
        let a = drain(&mut node);
        let r = requests(&a);
        assert_eq!(a.len(), 1, "{a:?}");
        assert_eq!(r.len(), 1);
        let (to, _, sync) = r[0];
        assert!(sync, "RS steals synchronously");
        assert_ne!(to, me, "never steal from yourself");
        seen[to.0 as usize] += 1;
    }
    // Every node gets chosen by somebody; RS ignores clusters.
    assert!(seen.iter().all(|&c| c > 60), "{seen:?}");
}

#[test]
fn rs_waits_for_the_reply_before_asking_again() {
    let topo = Topology::uniform(2, 3);
    let mut node = Node::new(NodeId(0), topo, Policy::Rs, 9);
    node.handle(Event::Idle { now: 0 });
    let (victim, id, _) = requests(&drain(&mut node))[0];
    // Nothing provokes a second request while the first is in flight.
    node.handle(Event::Idle { now: 1 });
    node.handle(Event::Busy { now: 2 });
    node.handle(Event::Idle { now: 3 });
    node.handle(Event::StealRequest {
        from: NodeId(4),
        id: StealId(77),
        synchronous: true,
        now: 4,
    });
    node.handle(Event::Timer {
        id: satin_core::TimerId(0),
        now: 5,
    });
    let a = drain(&mut node);
    assert!(requests(&a).is_empty(), "{a:?}");
    assert!(matches!(
        a.as_slice(),
        [Action::ServeSteal {
            to: NodeId(4),
            id: StealId(77),
            ..
        }]
    ));
    // An empty reply: exactly one new request.
    node.handle(Event::StealReply {
        from: victim,
        id,
        job: None,
        now: 100,
    });
    let a = drain(&mut node);
    assert_eq!(requests(&a).len(), 1, "{a:?}");
    assert_eq!(a.len(), 1);
}

#[test]
fn rs_successful_reply_stops_stealing() {
    let mut node = Node::new(NodeId(2), Topology::uniform(1, 5), Policy::Rs, 1);
    node.handle(Event::Idle { now: 0 });
    let (victim, id, _) = requests(&drain(&mut node))[0];
    node.handle(Event::StealReply {
        from: victim,
        id,
        job: Some(JobRef(5)),
        now: 37_000,
    });
    assert_eq!(
        drain(&mut node),
        vec![Action::EnqueueStolen {
            job: JobRef(5),
            from: victim
        }]
    );
    assert!(!node.is_idle());
    assert!(!node.sync_outstanding());
    // Thieves are still served; no steal happens until Idle.
    node.handle(Event::StealRequest {
        from: NodeId(0),
        id: StealId(3),
        synchronous: true,
        now: 40_000,
    });
    assert!(requests(&drain(&mut node)).is_empty());
    node.handle(Event::Idle { now: 90_000 });
    assert_eq!(requests(&drain(&mut node)).len(), 1);
    let s = node.stats();
    assert_eq!(s.intra.steal_attempts, 2);
    assert_eq!(s.intra.steal_successes, 1);
    assert_eq!(s.intra.requests_served, 1);
    assert_eq!(s.idle_ns, 37_000);
    assert_eq!(s.sync_steal_ns, 37_000);
}

#[test]
fn rs_alone_does_nothing_until_someone_joins() {
    let mut node = Node::new(NodeId(0), Topology::uniform(1, 1), Policy::Rs, 1);
    node.handle(Event::Idle { now: 0 });
    assert!(drain(&mut node).is_empty());
    node.handle(Event::NodeJoined {
        node: NodeId(1),
        cluster: ClusterId(3),
        now: 10,
    });
    assert_eq!(
        requests(&drain(&mut node)),
        vec![(NodeId(1), StealId(0), true)]
    );
}

#[test]
fn rs_fuzz_never_more_than_one_request_in_flight() {
    for seed in 0..50 {
        let topo = Topology::from_cluster_sizes(&[3, 1, 4]);
        let node = Node::new(NodeId((seed % 8) as u32), topo, Policy::Rs, seed);
        fuzz(node, seed + 1000, 3000, true, |n, actions| {
            assert!(n.outstanding().count() <= 1);
            for (to, _, sync) in requests(actions) {
                assert!(sync);
                assert_ne!(to, n.id());
            }
        });
    }
}

// ---------------------------------------------------------------- CRS

/// Checks every CRS rule that can be seen on one node's actions.
fn crs_checker(n: &Node, actions: &[Action]) {
    assert!(
        n.async_outstanding() <= 1,
        "two WAN steals outstanding: {actions:?}"
    );
    assert!(n.wan_outstanding() <= 1);
    assert!(n.outstanding().filter(|o| o.2).count() <= 1);
    let t = n.topology();
    let r = requests(actions);
    assert!(r.iter().filter(|r| !r.2).count() <= 1);
    for (to, _, sync) in r {
        assert_ne!(to, n.id());
        if sync {
            assert_eq!(cluster(t, to), n.cluster(), "sync steals stay local");
        } else {
            assert_ne!(cluster(t, to), n.cluster(), "async steals go remote");
        }
    }
}

#[test]
fn crs_never_two_wan_steals_outstanding() {
    let shapes: [&[usize]; 5] = [&[4, 4, 4, 4], &[1, 7], &[2, 1, 5], &[1, 1, 1], &[3, 3]];
    for (k, shape) in shapes.iter().enumerate() {
        let topo = Topology::from_cluster_sizes(shape);
        let n = topo.len() as u64;
        for seed in 0..40u64 {
            for &backoff in &[0u64, 25_000] {
                let node = Node::try_new(
                    NodeId((seed % n) as u32),
                    topo.clone(),
                    Policy::Crs,
                    seed,
                    Config {
                        retry_backoff_ns: backoff,
                    },
                )
                .unwrap();
                let log = fuzz(node, seed * 31 + k as u64, 2000, true, crs_checker);
                assert!(!requests(&log).is_empty());
            }
        }
    }
}

#[test]
fn crs_local_steals_continue_while_wan_steal_outstanding() {
    let topo = Topology::uniform(4, 4);
    for seed in 0..200 {
        let me = NodeId((seed % 16) as u32);
        let mut node = Node::new(me, topo.clone(), Policy::Crs, seed);
        node.handle(Event::Idle { now: 0 });
        let r = requests(&drain(&mut node));
        assert_eq!(r.len(), 2, "{r:?}");
        assert!(!r[0].2, "the WAN request goes first (fig. 6.2)");
        let (wan_victim, wan_id, _) = r[0];
        let (mut victim, mut id, sync) = r[1];
        assert!(sync);
        for step in 1..=10u64 {
            node.handle(Event::StealReply {
                from: victim,
                id,
                job: None,
                now: step * 40_000,
            });
            let r = requests(&drain(&mut node));
            assert_eq!(r.len(), 1, "exactly one new local request: {r:?}");
            assert!(r[0].2);
            assert_eq!(node.async_outstanding(), 1, "WAN request still out");
            (victim, id, _) = r[0];
        }
        // The empty WAN reply arrives while a local request is in flight:
        // the flag is reset; the next WAN request goes with the next local one.
        node.handle(Event::StealReply {
            from: wan_victim,
            id: wan_id,
            job: None,
            now: 20_000_000,
        });
        assert!(requests(&drain(&mut node)).is_empty());
        assert_eq!(node.async_outstanding(), 0);
        node.handle(Event::StealReply {
            from: victim,
            id,
            job: None,
            now: 20_010_000,
        });
        let r = requests(&drain(&mut node));
        assert_eq!(r.len(), 2);
        assert!(!r[0].2 && r[1].2);
    }
}

#[test]
fn crs_local_work_found_does_not_cancel_wan_steal() {
    let mut node = Node::new(NodeId(0), Topology::uniform(2, 2), Policy::Crs, 3);
    node.handle(Event::Idle { now: 0 });
    let r = requests(&drain(&mut node));
    let (wan_victim, wan_id, _) = r[0];
    let (lan_victim, lan_id, _) = r[1];
    node.handle(Event::StealReply {
        from: lan_victim,
        id: lan_id,
        job: Some(JobRef(1)),
        now: 40_000,
    });
    assert_eq!(drain(&mut node).len(), 1);
    assert_eq!(node.async_outstanding(), 1);
    // Idle again soon: local stealing only, the WAN steal is still in flight.
    node.handle(Event::Idle { now: 50_000 });
    let r = requests(&drain(&mut node));
    assert_eq!(r.len(), 1);
    assert!(r[0].2);
    // The WAN job arrives late, while busy or not: it is always enqueued.
    node.handle(Event::Busy { now: 60_000 });
    node.handle(Event::StealReply {
        from: wan_victim,
        id: wan_id,
        job: Some(JobRef(2)),
        now: 20_000_000,
    });
    assert_eq!(
        drain(&mut node),
        vec![Action::EnqueueStolen {
            job: JobRef(2),
            from: wan_victim
        }]
    );
    assert_eq!(node.stats().inter.steal_successes, 1);
    assert_eq!(node.stats().intra.steal_successes, 1);
}

#[test]
fn crs_wan_victims_are_uniform_over_all_remote_nodes() {
    // Own cluster: nodes 0,1. Remote: cluster 1 = {2} (one node),
    // cluster 2 = {3..=9} (seven nodes). Uniform over the 8 remote nodes
    // gives 1/8 each; choosing a cluster first would give node 2 a half.
    let topo = Topology::from_cluster_sizes(&[2, 1, 7]);
    let rounds = 8000u64;
    let mut count = [0u64; 10];
    for seed in 0..rounds {
        let mut node = Node::new(NodeId(0), topo.clone(), Policy::Crs, seed);
        node.handle(Event::Idle { now: 0 });
        let r = requests(&drain(&mut node));
        let (to, _, sync) = r[0];
        assert!(!sync);
        count[to.0 as usize] += 1;
    }
    assert_eq!(count[0] + count[1], 0);
    for (n, &c) in count.iter().enumerate().skip(2) {
        let f = c as f64 / rounds as f64;
        assert!(
            (0.10..=0.15).contains(&f),
            "node {n} chosen with frequency {f:.3}, expected 1/8 ({count:?})"
        );
    }
    // Also along one node's long run (consecutive WAN steals).
    let mut node = Node::new(NodeId(1), topo.clone(), Policy::Crs, 99);
    let mut count = [0u64; 10];
    node.handle(Event::Idle { now: 0 });
    let mut now = 0;
    let mut r = requests(&drain(&mut node));
    for _ in 0..rounds {
        now += 1000;
        let (wto, wid, _) = *r.iter().find(|x| !x.2).expect("a WAN request");
        count[wto.0 as usize] += 1;
        let (lto, lid, _) = *r.iter().find(|x| x.2).expect("a LAN request");
        node.handle(Event::StealReply {
            from: wto,
            id: wid,
            job: None,
            now,
        });
        node.handle(Event::StealReply {
            from: lto,
            id: lid,
            job: None,
            now,
        });
        r = requests(&drain(&mut node));
    }
    for &c in &count[2..] {
        let f = c as f64 / rounds as f64;
        assert!((0.10..=0.15).contains(&f), "{count:?}");
    }
}

#[test]
fn crs_single_node_cluster_sends_no_local_requests() {
    // Node 0 is alone in its cluster.
    let topo = Topology::from_cluster_sizes(&[1, 3, 4]);
    let mut node = Node::new(NodeId(0), topo.clone(), Policy::Crs, 5);
    node.handle(Event::Idle { now: 0 });
    let r = requests(&drain(&mut node));
    assert_eq!(r.len(), 1);
    assert!(!r[0].2);
    // Nothing happens until the WAN reply; then the next WAN request.
    node.handle(Event::Idle { now: 10 });
    assert!(drain(&mut node).is_empty());
    node.handle(Event::StealReply {
        from: r[0].0,
        id: r[0].1,
        job: None,
        now: 20_000_000,
    });
    let r = requests(&drain(&mut node));
    assert_eq!(r.len(), 1);
    assert!(!r[0].2);
    // And under random events, never a synchronous (local) request.
    for seed in 0..30 {
        let node = Node::new(NodeId(0), topo.clone(), Policy::Crs, seed);
        let log = fuzz(node, seed, 2000, false, |n, a| {
            crs_checker(n, a);
            assert!(requests(a).iter().all(|r| !r.2));
        });
        assert!(!requests(&log).is_empty());
    }
}

#[test]
fn crs_on_one_cluster_is_rs() {
    for &size in &[2usize, 5, 16] {
        let topo = Topology::uniform(1, size);
        for seed in 0..30u64 {
            let me = NodeId((seed % size as u64) as u32);
            let rs = Node::new(me, topo.clone(), Policy::Rs, seed);
            let crs = Node::new(me, topo.clone(), Policy::Crs, seed);
            let a = fuzz(rs, seed + 7, 3000, false, |_, _| {});
            let b = fuzz(crs, seed + 7, 3000, false, |_, _| {});
            assert!(!requests(&a).is_empty());
            assert_eq!(a, b, "size {size} seed {seed}");
        }
    }
}

#[test]
fn same_seed_same_actions() {
    let topo = Topology::from_cluster_sizes(&[3, 2, 5]);
    for policy in [
        Policy::Rs,
        Policy::Crs,
        Policy::Cmrs { credits: 2 },
        Policy::Acrs,
    ] {
        let a = fuzz(
            Node::new(NodeId(1), topo.clone(), policy, 4),
            8,
            2000,
            true,
            |_, _| {},
        );
        let b = fuzz(
            Node::new(NodeId(1), topo.clone(), policy, 4),
            8,
            2000,
            true,
            |_, _| {},
        );
        assert_eq!(a, b);
        let c = fuzz(
            Node::new(NodeId(1), topo.clone(), policy, 5),
            8,
            2000,
            true,
            |_, _| {},
        );
        assert_ne!(a, c, "{policy:?}: the seed matters");
    }
}

#[test]
fn node_left_abandons_requests_and_steals_elsewhere() {
    let mut node = Node::new(NodeId(0), Topology::uniform(1, 2), Policy::Rs, 1);
    node.handle(Event::Idle { now: 0 });
    let r = requests(&drain(&mut node));
    assert_eq!(r[0].0, NodeId(1));
    node.handle(Event::NodeJoined {
        node: NodeId(2),
        cluster: ClusterId(0),
        now: 5,
    });
    assert!(drain(&mut node).is_empty(), "still waiting for node 1");
    node.handle(Event::NodeLeft {
        node: NodeId(1),
        now: 10,
    });
    assert_eq!(requests(&drain(&mut node))[0].0, NodeId(2));
    assert_eq!(node.stats().steals_abandoned, 1);
    // A late reply with a job from the departed node is not lost.
    node.handle(Event::StealReply {
        from: NodeId(1),
        id: r[0].1,
        job: Some(JobRef(4)),
        now: 20,
    });
    assert_eq!(
        drain(&mut node),
        vec![Action::EnqueueStolen {
            job: JobRef(4),
            from: NodeId(1)
        }]
    );
}

#[test]
fn backoff_delays_the_next_synchronous_steal() {
    let mut node = Node::try_new(
        NodeId(0),
        Topology::uniform(1, 3),
        Policy::Rs,
        2,
        Config {
            retry_backoff_ns: 1_000,
        },
    )
    .unwrap();
    node.handle(Event::Idle { now: 0 });
    let r = requests(&drain(&mut node));
    node.handle(Event::StealReply {
        from: r[0].0,
        id: r[0].1,
        job: None,
        now: 100,
    });
    let a = drain(&mut node);
    let [Action::SetTimer { id, at: 1_100 }] = a.as_slice() else {
        panic!("{a:?}")
    };
    node.handle(Event::Timer {
        id: *id,
        now: 1_100,
    });
    assert_eq!(requests(&drain(&mut node)).len(), 1);
}

// ---------------------------------------------------------------- CMRS, ACRS

#[test]
fn cmrs_respects_credits_and_spreads_over_clusters() {
    let topo = Topology::from_cluster_sizes(&[2, 3, 3, 3, 3]);
    for seed in 0..40 {
        let node = Node::new(NodeId(0), topo.clone(), Policy::Cmrs { credits: 3 }, seed);
        fuzz(node, seed, 2000, true, |n, _| {
            assert!(n.async_outstanding() <= 3);
            let mut clusters: Vec<ClusterId> = n
                .outstanding()
                .filter(|o| !o.2)
                .map(|o| cluster(n.topology(), o.0))
                .collect();
            let k = clusters.len();
            clusters.sort();
            clusters.dedup();
            // With 4 remote clusters and 3 credits, never two to one cluster.
            assert_eq!(clusters.len(), k);
        });
    }
    // One credit is CRS exactly.
    let a = fuzz(
        Node::new(NodeId(3), topo.clone(), Policy::Crs, 1),
        2,
        3000,
        true,
        |_, _| {},
    );
    let b = fuzz(
        Node::new(NodeId(3), topo.clone(), Policy::Cmrs { credits: 1 }, 1),
        2,
        3000,
        true,
        |_, _| {},
    );
    assert_eq!(a, b);
}

#[test]
fn acrs_prefers_fast_clusters_in_proportion_to_inverse_steal_time() {
    // Thesis table 6.2: clusters 2, 3, 4 at 110, 200, 130 ms:
    // 42.86 %, 23.81 %, 33.33 %. Our node is alone in cluster 0 so every
    // step is one WAN steal.
    let topo = Topology::from_cluster_sizes(&[1, 2, 2, 2]);
    let rtt = |c: ClusterId| -> u64 { [0, 110, 200, 130][c.0 as usize] * 1_000_000 };
    let mut node = Node::new(NodeId(0), topo.clone(), Policy::Acrs, 11);
    node.handle(Event::Idle { now: 0 });
    let mut now = 0u64;
    let mut count = [0u64; 4];
    let rounds = 20_000;
    for round in 0..rounds + 200 {
        let r = requests(&drain(&mut node));
        assert_eq!(r.len(), 1);
        let (to, id, sync) = r[0];
        assert!(!sync);
        let c = cluster(&topo, to);
        if round >= 200 {
            count[c.0 as usize] += 1;
        }
        now += rtt(c);
        node.handle(Event::StealReply {
            from: to,
            id,
            job: None,
            now,
        });
    }
    let expect = [0.0, 0.4286, 0.2381, 0.3333];
    for c in 1..4 {
        let f = count[c] as f64 / rounds as f64;
        assert!((f - expect[c]).abs() < 0.02, "{count:?}");
    }
}

#[test]
fn acrs_never_two_wan_steals_outstanding() {
    let topo = Topology::from_cluster_sizes(&[3, 1, 4, 2]);
    for seed in 0..40 {
        let node = Node::new(NodeId((seed % 10) as u32), topo.clone(), Policy::Acrs, seed);
        fuzz(node, seed, 2000, true, crs_checker);
    }
}

// ---------------------------------------------------------------- master-worker

#[test]
fn master_worker_steals_only_from_the_master() {
    let topo = Topology::from_cluster_sizes(&[3, 3]);
    let policy = Policy::MasterWorker { master: NodeId(0) };
    let mut master = Node::new(NodeId(0), topo.clone(), policy, 1);
    master.handle(Event::Idle { now: 0 });
    assert!(drain(&mut master).is_empty(), "the master never steals");
    for seed in 0..10 {
        let node = Node::new(NodeId(1 + (seed % 5) as u32), topo.clone(), policy, seed);
        let log = fuzz(node, seed, 1000, false, |n, a| {
            assert!(n.outstanding().count() <= 1);
            assert!(requests(a).iter().all(|r| r.0 == NodeId(0) && r.2));
        });
        assert!(!requests(&log).is_empty());
    }
}
