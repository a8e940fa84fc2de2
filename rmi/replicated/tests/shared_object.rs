//! Satin-style shared objects: local-first writes, propagation, guards, refresh.

mod common;

use std::sync::{Arc, Barrier};
use std::time::Duration;

use common::{member, pool, Counter, LONG};
use ibis_repmi::{Options, RepError, SharedObject};
use ipl::EmbeddedRegistry;

fn opts() -> Options {
    Options::default().timeout(LONG)
}

#[test]
fn writes_are_local_at_once_and_reach_everybody() {
    const MEMBERS: usize = 3;
    const PER: u64 = 30;
    let reg = EmbeddedRegistry::new();
    let p = pool("so");
    let barrier = Arc::new(Barrier::new(MEMBERS));
    let threads: Vec<_> = (0..MEMBERS as u64)
        .map(|w| {
            let (reg, p, barrier) = (reg.clone(), p.clone(), Arc::clone(&barrier));
            std::thread::spawn(move || {
                let ibis = member(&reg, &p);
                let so = SharedObject::join_with(&ibis, "sum", Counter::default, opts()).unwrap();
                barrier.wait();
                for _ in 0..PER {
                    let before = so.read(|c| c.total);
                    let after = so.write(w + 1).unwrap();
                    // The writer's copy has the update when write returns.
                    assert!(after > before + w);
                }
                // A guard: wait until everybody's updates have arrived here.
                let total: u64 = (1..=MEMBERS as u64).sum::<u64>() * PER;
                so.guard(|c| c.total == total, LONG).unwrap();
                let updates = so.read(|c| c.updates);
                barrier.wait();
                (updates, so.is_hub())
            })
        })
        .collect();
    let results: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    for (updates, _) in &results {
        assert_eq!(*updates, MEMBERS as u64 * PER, "each update applied once");
    }
    assert_eq!(results.iter().filter(|r| r.1).count(), 1, "one hub");
}

#[test]
fn guard_times_out_typed_and_refresh_keeps_own_writes() {
    let reg = EmbeddedRegistry::new();
    let p = pool("guard");
    let a = member(&reg, &p);
    let b = member(&reg, &p);
    let sa = SharedObject::join_with(&a, "sum", Counter::default, opts()).unwrap();
    let sb = SharedObject::join_with(&b, "sum", Counter::default, opts()).unwrap();
    sb.write(5).unwrap();
    sa.write(7).unwrap();
    match sb.guard(|c| c.total == 1000, Duration::from_millis(200)) {
        Err(RepError::GuardTimeout(_)) => {}
        other => panic!("expected GuardTimeout, got {other:?}"),
    }
    // The guard above refreshed b's copy from the hub: both updates are in it.
    sb.refresh().unwrap();
    assert_eq!(sb.read(|c| c.total), 12);
    sb.write(1).unwrap();
    sa.guard(|c| c.total == 13, LONG).unwrap();
    sb.guard(|c| c.total == 13, LONG).unwrap();
}
