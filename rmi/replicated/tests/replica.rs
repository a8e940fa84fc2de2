//! RepMI replicas of several Ibis instances in one process (embedded registry).

mod common;

use std::sync::{Arc, Barrier};
use std::time::Duration;

use common::{member, pool, Entry, Log, LONG};
use ibis_repmi::wire::{ToReplica, ToSequencer};
use ibis_repmi::{declare, replica_type, request_type, Options, RepError, Replica};
use ipl::{EmbeddedRegistry, Ibis, IbisCapabilities as C};

fn opts() -> Options {
    Options::default().timeout(LONG)
}

/// Checks that every writer's entries appear in the order it wrote them, `per` each.
fn assert_writer_order(log: &Log, writers: u32, per: u32) {
    for w in 0..writers {
        let mine: Vec<u32> = log
            .entries
            .iter()
            .filter(|e| e.writer == w)
            .map(|e| e.n)
            .collect();
        assert_eq!(mine, (0..per).collect::<Vec<_>>(), "writer {w}");
    }
}

#[test]
fn concurrent_writes_are_applied_in_the_same_order_by_every_member() {
    const MEMBERS: usize = 4;
    const PER: u32 = 50;
    let reg = EmbeddedRegistry::new();
    let p = pool("order");
    let barrier = Arc::new(Barrier::new(MEMBERS));
    let threads: Vec<_> = (0..MEMBERS as u32)
        .map(|w| {
            let (reg, p, barrier) = (reg.clone(), p.clone(), Arc::clone(&barrier));
            std::thread::spawn(move || {
                let ibis = member(&reg, &p);
                let r = Replica::join_with(&ibis, "log", Log::default, opts()).unwrap();
                barrier.wait(); // everybody joined: all writes below reach everybody
                let mut last = None;
                for n in 0..PER {
                    let op = Entry { writer: w, n };
                    let pos = r.write(op).unwrap();
                    // Read-your-writes: the entry is there when write returns.
                    assert_eq!(r.read(|l| l.entries[pos]), op);
                    assert!(last < Some(pos), "positions grow");
                    last = Some(pos);
                }
                barrier.wait(); // everybody's writes returned
                r.sync().unwrap();
                let log = r.read(Log::clone);
                let seq = r.applied_seq();
                barrier.wait(); // nobody leaves before all have synced
                (log, seq, r.is_sequencer())
            })
        })
        .collect();
    let results: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let first = &results[0].0;
    assert_eq!(first.entries.len(), MEMBERS * PER as usize);
    assert_writer_order(first, MEMBERS as u32, PER);
    for (log, seq, _) in &results {
        assert_eq!(log, first, "applied logs differ");
        assert!(*seq >= (MEMBERS as u64) * PER as u64);
    }
    assert_eq!(results.iter().filter(|r| r.2).count(), 1, "one sequencer");
}

#[test]
fn reads_are_local_and_outlive_the_sequencer_while_writes_fail_typed() {
    let reg = EmbeddedRegistry::new();
    let p = pool("local");
    let a = member(&reg, &p);
    let b = member(&reg, &p);
    let ra = Replica::join_with(&a, "log", Log::default, opts()).unwrap();
    let rb = Replica::join_with(&b, "log", Log::default, opts()).unwrap();
    assert!(ra.is_sequencer());
    assert_eq!(rb.sequencer(), a.identifier());
    for n in 0..10 {
        ra.write(Entry { writer: 0, n }).unwrap();
    }
    rb.sync().unwrap();
    let before = rb.ops_applied();
    // Reading many times applies and sends nothing.
    for _ in 0..1000 {
        assert_eq!(rb.read(|l| l.entries.len()), 10);
    }
    assert_eq!(rb.ops_applied(), before);
    // The sequencer goes away: reads still answer from the local copy...
    drop(ra);
    a.end().unwrap();
    assert_eq!(rb.read(|l| l.entries.len()), 10);
    // ...and writes say why they cannot be ordered.
    match rb.write(Entry { writer: 1, n: 0 }) {
        Err(RepError::SequencerLost(_)) => {}
        other => panic!("expected SequencerLost, got {other:?}"),
    }
    assert!(matches!(rb.sync(), Err(RepError::SequencerLost(_))));
    assert_eq!(rb.read(|l| l.entries.len()), 10);
}

#[test]
fn a_late_joiner_gets_the_state_and_converges_while_others_write() {
    const PER: u32 = 40;
    let reg = EmbeddedRegistry::new();
    let p = pool("late");
    let a = member(&reg, &p);
    let b = member(&reg, &p);
    let ra = Arc::new(Replica::join_with(&a, "log", Log::default, opts()).unwrap());
    let rb = Arc::new(Replica::join_with(&b, "log", Log::default, opts()).unwrap());
    for n in 0..PER {
        rb.write(Entry { writer: 1, n }).unwrap();
    }
    // The sequencer keeps writing while the third member joins (state transfer races
    // with the stream: the hold-back queue must sort it out).
    let writer = {
        let ra = Arc::clone(&ra);
        std::thread::spawn(move || {
            for n in 0..PER {
                ra.write(Entry { writer: 0, n }).unwrap();
            }
        })
    };
    let c = member(&reg, &p);
    let rc = Replica::join_with(&c, "log", Log::default, opts()).unwrap();
    assert!(
        rc.read(|l| l.entries.len()) >= PER as usize,
        "snapshot has b's writes"
    );
    for n in 0..PER {
        rc.write(Entry { writer: 2, n }).unwrap();
    }
    writer.join().unwrap();
    for r in [&*ra, &*rb, &rc] {
        r.sync().unwrap();
    }
    let logs: Vec<Log> = [&*ra, &*rb, &rc]
        .iter()
        .map(|r| r.read(Log::clone))
        .collect();
    assert_eq!(logs[0].entries.len(), 3 * PER as usize);
    assert_writer_order(&logs[0], 3, PER);
    assert_eq!(logs[1], logs[0]);
    assert_eq!(logs[2], logs[0]);
}

#[test]
fn misuse_gives_typed_errors() {
    let reg = EmbeddedRegistry::new();
    let p = pool("misuse");
    // No elections capability.
    let no_elect = declare(Ibis::builder().pool(&p).registry(&reg))
        .build()
        .unwrap();
    assert!(matches!(
        Replica::join(&no_elect, "log", Log::default),
        Err(RepError::MissingCapability("elections"))
    ));
    // Port types not declared.
    let bare = Ibis::builder()
        .pool(&p)
        .registry(&reg)
        .capabilities(C::MEMBERSHIP | C::ELECTIONS)
        .build()
        .unwrap();
    assert!(matches!(
        Replica::join(&bare, "log", Log::default),
        Err(RepError::PortTypesNotDeclared(_))
    ));
    // Bad names.
    let a = member(&reg, &p);
    for bad in ["", "a/b"] {
        assert!(matches!(
            Replica::join(&a, bad, Log::default),
            Err(RepError::InvalidName(_))
        ));
    }
    // Joining twice, as sequencer and as replica.
    let _ra = Replica::join_with(&a, "log", Log::default, opts()).unwrap();
    assert!(matches!(
        Replica::join(&a, "log", Log::default),
        Err(RepError::AlreadyJoined(_))
    ));
    let b = member(&reg, &p);
    let _rb = Replica::join_with(&b, "log", Log::default, opts()).unwrap();
    assert!(matches!(
        Replica::join(&b, "log", Log::default),
        Err(RepError::AlreadyJoined(_))
    ));
    // Another type under the same name is refused by the sequencer.
    let c = member(&reg, &p);
    match Replica::join_with(&c, "log", common::Counter::default, opts()) {
        Err(RepError::Refused(why)) => assert!(why.contains("Log"), "{why}"),
        other => panic!("expected Refused, got {other:?}"),
    }
}

#[test]
fn joining_a_group_whose_sequencer_never_answers_times_out() {
    let reg = EmbeddedRegistry::new();
    let p = pool("timeout");
    let squatter = member(&reg, &p);
    // Wins the object's election but never starts the sequencer.
    squatter.registry().elect("repmi:log").unwrap();
    let a = member(&reg, &p);
    let short = Options::default().timeout(Duration::from_millis(300));
    match Replica::join_with(&a, "log", Log::default, short) {
        Err(RepError::Timeout { what, .. }) => assert!(what.contains("sequencer"), "{what}"),
        other => panic!("expected Timeout, got {other:?}"),
    }
}

#[test]
fn malformed_and_foreign_messages_are_dropped_without_harm() {
    let reg = EmbeddedRegistry::new();
    let p = pool("malformed");
    let a = member(&reg, &p);
    let b = member(&reg, &p);
    let ra = Replica::join_with(&a, "log", Log::default, opts()).unwrap();
    let rb = Replica::join_with(&b, "log", Log::default, opts()).unwrap();
    ra.write(Entry { writer: 0, n: 0 }).unwrap();

    let rogue = member(&reg, &p);
    // At the sequencer's request port: garbage, a truncated frame, a write whose
    // operation is not an Entry, an unknown kind.
    let mut req = rogue
        .create_send_port(&request_type(), "rogue-req")
        .unwrap();
    req.connect_to(a.identifier(), "repmi/log/seq", LONG)
        .unwrap();
    let bad_op = ToSequencer::Write {
        req: 1,
        op: &[0xFF; 3],
    }
    .to_bytes();
    let sync = ToSequencer::Sync { req: 9 }.to_bytes();
    for frame in [
        vec![1u8, 2, 3],
        sync[..sync.len() - 2].to_vec(),
        bad_op,
        vec![ibis_repmi::wire::MAGIC, ibis_repmi::wire::VERSION, 99],
        Vec::new(),
    ] {
        let mut m = req.new_message().unwrap();
        m.write_bytes(&frame).unwrap();
        m.finish().unwrap();
    }
    // At a replica's stream port: a well-formed operation from a member that is not the
    // sequencer, and garbage.
    let mut stream = rogue
        .create_send_port(&replica_type(), "rogue-stream")
        .unwrap();
    stream
        .connect_to(b.identifier(), "repmi/log/in", LONG)
        .unwrap();
    let mut forged_op = ipl::MessageWriter::new();
    forged_op
        .write_object(&Entry { writer: 66, n: 66 })
        .unwrap();
    let forged_op = forged_op.into_buffer();
    let forged = ToReplica::Ordered {
        seq: 2,
        origin: 0,
        req: 0,
        op: Some(&forged_op),
    }
    .to_bytes();
    for frame in [forged, vec![0xB5, 1, 17, 0]] {
        let mut m = stream.new_message().unwrap();
        m.write_bytes(&frame).unwrap();
        m.finish().unwrap();
    }
    // The group works on, and nothing of the above was applied anywhere.
    rb.write(Entry { writer: 1, n: 0 }).unwrap();
    ra.sync().unwrap();
    rb.sync().unwrap();
    let expect = vec![Entry { writer: 0, n: 0 }, Entry { writer: 1, n: 0 }];
    assert_eq!(ra.read(|l| l.entries.clone()), expect);
    assert_eq!(rb.read(|l| l.entries.clone()), expect);
    assert_eq!(ra.applied_seq(), rb.applied_seq());
}

#[test]
fn two_objects_share_one_ibis_instance() {
    let reg = EmbeddedRegistry::new();
    let p = pool("two");
    let a = member(&reg, &p);
    let b = member(&reg, &p);
    let a1 = Replica::join_with(&a, "one", Log::default, opts()).unwrap();
    let b2 = Replica::join_with(&b, "two", Log::default, opts()).unwrap();
    let b1 = Replica::join_with(&b, "one", Log::default, opts()).unwrap();
    let a2 = Replica::join_with(&a, "two", Log::default, opts()).unwrap();
    assert!(a1.is_sequencer() && b2.is_sequencer());
    b1.write(Entry { writer: 1, n: 1 }).unwrap();
    a2.write(Entry { writer: 0, n: 2 }).unwrap();
    a1.sync().unwrap();
    b2.sync().unwrap();
    assert_eq!(
        a1.read(|l| l.entries.clone()),
        vec![Entry { writer: 1, n: 1 }]
    );
    assert_eq!(
        b2.read(|l| l.entries.clone()),
        vec![Entry { writer: 0, n: 2 }]
    );
}

#[test]
fn the_last_writes_before_the_sequencer_leaves_reach_everybody() {
    // The sequencer's final writes are still queued at a replica when the stream
    // closes; the replica applies them before it reports the sequencer gone.
    let reg = EmbeddedRegistry::new();
    let p = pool("last");
    let a = member(&reg, &p);
    let b = member(&reg, &p);
    let ra = Replica::join_with(&a, "log", Log::default, opts()).unwrap();
    let rb = Replica::join_with(&b, "log", Log::default, opts()).unwrap();
    for n in 0..100 {
        ra.write(Entry { writer: 0, n }).unwrap();
    }
    drop(ra);
    rb.wait_for(|l| l.entries.len() == 100, LONG).unwrap();
    assert!(matches!(rb.sync(), Err(RepError::SequencerLost(_))));
}

#[test]
fn a_sequencer_whose_ibis_ends_under_it_is_reported_lost() {
    let reg = EmbeddedRegistry::new();
    let p = pool("ended");
    let a = member(&reg, &p);
    let b = member(&reg, &p);
    let ra = Replica::join_with(&a, "log", Log::default, opts()).unwrap();
    let rb = Replica::join_with(&b, "log", Log::default, opts()).unwrap();
    ra.write(Entry { writer: 0, n: 0 }).unwrap();
    rb.sync().unwrap();
    // No End frame: the Ibis instance closes the stream's connection itself.
    a.end().unwrap();
    match rb.write(Entry { writer: 1, n: 0 }) {
        Err(RepError::SequencerLost(_)) => {}
        other => panic!("expected SequencerLost, got {other:?}"),
    }
    assert_eq!(rb.read(|l| l.entries.len()), 1);
    drop(ra);
}
