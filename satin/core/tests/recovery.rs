//! Rules of crash recovery ([`satin_core::recovery`]), one member driven by hand,
//! and invariants over random event sequences (proptest).

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use satin_core::checkpoint;
use satin_core::recovery::{
    Action, Announcement, Config, FetchId, Lookup, Recovery, STORE_ENTRY_OVERHEAD,
};
use satin_core::{JobKey, JobRef, NodeId};

fn n(i: u32) -> NodeId {
    NodeId(i)
}

fn k(i: u8) -> JobKey {
    JobKey([i; 16])
}

/// The result of `key` in these tests: different lengths and contents per key.
fn value(key: JobKey) -> Vec<u8> {
    vec![key.0[0]; 3 + key.0[0] as usize * 5]
}

fn drain(r: &mut Recovery) -> Vec<Action> {
    std::iter::from_fn(|| r.poll_action()).collect()
}

/// [`drain`] without the empty accounts of deaths (tested on their own below).
fn drain_work(r: &mut Recovery) -> Vec<Action> {
    drain(r)
        .into_iter()
        .filter(|a| {
            !matches!(a, Action::Announce { entries, death: Some(_), .. } if entries.is_empty())
        })
        .collect()
}

/// The survivors `from` send their accounts of `dead`'s death.
fn accounts(r: &mut Recovery, dead: NodeId, from: &[u32]) {
    for &f in from {
        r.account_received(n(f), dead);
    }
}

fn done(key: JobKey) -> Announcement {
    Announcement {
        key,
        pending: false,
    }
}

fn pending(key: JobKey) -> Announcement {
    Announcement { key, pending: true }
}

/// Member 1 of {0, 1, 2, 3}, master 0.
fn member() -> Recovery {
    const fn send<T: Send>() {}
    send::<Recovery>();
    Recovery::new(n(1), [n(0), n(1), n(2), n(3)], n(0), 99)
}

// ------------------------------------------------------------ rule 1: normal run

#[test]
fn a_stolen_jobs_result_goes_home_and_is_kept_without_any_announcement() {
    let mut r = member();
    assert!(!r.active());
    r.stolen_job_started(JobRef(1), n(2), k(1));
    assert!(drain(&mut r).is_empty());
    r.stolen_job_finished(JobRef(1), value(k(1)));
    assert_eq!(
        drain(&mut r),
        vec![Action::SendResult {
            to: n(2),
            handle: JobRef(1),
            bytes: value(k(1))
        }]
    );
    assert_eq!(r.store_len(), 1);
    assert_eq!(r.running_len(), 0);
    assert!(r.active(), "a stored result can be reused");
    assert_eq!(r.stats().announce_messages, 0);
    // Finishing it again is ignored, not a second result.
    r.stolen_job_finished(JobRef(1), value(k(1)));
    assert!(drain(&mut r).is_empty());
    assert_eq!(r.stats().ignored, 1);
}

#[test]
fn a_returned_result_forgets_the_given_job_so_the_thiefs_death_redoes_nothing() {
    let mut r = member();
    r.job_given(JobRef(7), n(2), k(1), 10);
    assert_eq!(r.given_len(), 1);
    assert!(r.result_received(JobRef(7)));
    assert!(!r.result_received(JobRef(7)), "a second result is unknown");
    r.node_died(n(2), 100);
    assert!(drain_work(&mut r).is_empty());
    assert_eq!(r.stats().jobs_redone, 0);
}

#[test]
fn a_discarded_result_is_neither_found_nor_served_again() {
    let mut r = member();
    r.stolen_job_started(JobRef(1), n(2), k(1));
    r.stolen_job_finished(JobRef(1), value(k(1)));
    drain(&mut r);
    assert_eq!(r.lookup(JobRef(5), k(1)), Lookup::Local(value(k(1))));
    assert!(r.discard(k(1)));
    assert!(!r.discard(k(1)), "once");
    assert_eq!((r.store_len(), r.store_bytes()), (0, 0));
    assert_eq!(r.lookup(JobRef(6), k(1)), Lookup::Miss);
    r.fetch_requested(n(3), FetchId(1), k(1));
    assert_eq!(
        drain(&mut r),
        vec![Action::SendFetched {
            to: n(3),
            id: FetchId(1),
            bytes: None
        }]
    );
    assert_eq!(r.stats().discarded, 1);
}

#[test]
fn a_failed_stolen_job_is_reported_to_its_owner_and_not_stored() {
    let mut r = member();
    r.stolen_job_started(JobRef(1), n(2), k(1));
    r.stolen_job_failed(JobRef(1));
    assert_eq!(
        drain(&mut r),
        vec![Action::SendFailure {
            to: n(2),
            handle: JobRef(1)
        }]
    );
    assert_eq!(r.store_len(), 0);
}

// ------------------------------------------------------------ rule 2: a member dies

#[test]
fn death_redoes_the_jobs_given_to_the_dead_and_measures_the_work_lost() {
    let mut r = member();
    r.job_given(JobRef(1), n(2), k(1), 100);
    r.job_given(JobRef(2), n(3), k(2), 150);
    r.job_given(JobRef(3), n(2), k(3), 300);
    r.node_died(n(2), 1_000);
    assert_eq!(
        drain_work(&mut r),
        vec![
            Action::Redo { handle: JobRef(1) },
            Action::Redo { handle: JobRef(3) }
        ]
    );
    assert_eq!(r.stats().jobs_redone, 2);
    assert_eq!(r.stats().work_lost_ns, 900 + 700);
    assert_eq!(r.given_len(), 1, "the job given to 3 is still out");
    // A late result of a redone job is unknown.
    assert!(!r.result_received(JobRef(1)));
}

#[test]
fn death_announces_results_kept_for_the_dead_and_its_orphans_in_one_message_per_survivor() {
    let mut r = member();
    // Results returned to 2 (k1, k2) and to 3 (k3); a job of 2 still running (k4).
    for (h, owner, key) in [(1, 2, 1), (2, 2, 2), (3, 3, 3)] {
        r.stolen_job_started(JobRef(h), n(owner), k(key));
        r.stolen_job_finished(JobRef(h), value(k(key)));
    }
    r.stolen_job_started(JobRef(4), n(2), k(4));
    drain(&mut r);
    r.node_died(n(2), 50);
    assert_eq!(
        drain(&mut r),
        vec![Action::Announce {
            to: vec![n(0), n(3)],
            entries: vec![done(k(1)), done(k(2)), pending(k(4))],
            death: Some(n(2)),
        }]
    );
    let s = r.stats();
    assert_eq!(
        (s.results_announced, s.orphans_kept, s.announce_messages),
        (2, 1, 2)
    );
    // The orphan's result is not sent to its dead owner: it is kept and announced.
    r.stolen_job_finished(JobRef(4), value(k(4)));
    assert_eq!(
        drain(&mut r),
        vec![Action::Announce {
            to: vec![n(0), n(3)],
            entries: vec![done(k(4))],
            death: None,
        }]
    );
    assert_eq!(r.stats().orphan_results_announced, 1);
    assert_eq!(r.lookup(JobRef(9), k(4)), Lookup::Local(value(k(4))));
}

#[test]
fn death_is_idempotent_and_nothing_is_announced_twice() {
    let mut r = member();
    r.stolen_job_started(JobRef(1), n(2), k(1));
    r.stolen_job_finished(JobRef(1), value(k(1)));
    r.job_given(JobRef(5), n(2), k(5), 0);
    drain(&mut r);
    r.node_died(n(2), 10);
    assert_eq!(drain(&mut r).len(), 2, "one redo, one announcement");
    r.node_died(n(2), 20);
    assert!(drain(&mut r).is_empty());
    assert_eq!(r.stats().jobs_redone, 1);
    // Another death does not re-announce k1 (returned to 2 only).
    r.node_died(n(3), 30);
    assert!(drain_work(&mut r).is_empty());
}

#[test]
fn death_drops_the_dead_holders_entries_and_redoes_lookups_waiting_for_it() {
    let mut r = member();
    r.announce_received(n(2), &[done(k(1)), done(k(2))]);
    r.announce_received(n(3), &[done(k(3))]);
    assert_eq!(r.lookup(JobRef(1), k(1)), Lookup::Remote { holder: n(2) });
    let fetch = drain(&mut r);
    let [Action::Fetch { to, id, key }] = fetch.as_slice() else {
        panic!("{fetch:?}")
    };
    assert_eq!((*to, *key), (n(2), k(1)));
    r.node_died(n(2), 0);
    assert_eq!(drain_work(&mut r), vec![Action::Redo { handle: JobRef(1) }]);
    assert_eq!(r.lookups_waiting(), 0);
    accounts(&mut r, n(2), &[0, 3]);
    // Its late answer is ignored; its other entry is gone; 3's entry stays.
    r.fetched(n(2), *id, Some(value(k(1))));
    assert!(drain(&mut r).is_empty());
    assert_eq!(r.lookup(JobRef(2), k(2)), Lookup::Miss);
    assert_eq!(r.lookup(JobRef(3), k(3)), Lookup::Remote { holder: n(3) });
    assert_eq!(r.stats().fetches_failed, 1);
}

#[test]
fn death_forgets_the_dead_members_fetch_requests() {
    let mut r = member();
    r.stolen_job_started(JobRef(1), n(0), k(1));
    r.node_died(n(0), 0); // k1 becomes an orphan
    drain(&mut r);
    r.fetch_requested(n(2), FetchId(7), k(1));
    r.fetch_requested(n(3), FetchId(8), k(1));
    assert!(drain(&mut r).is_empty(), "queued until the orphan finishes");
    r.node_died(n(2), 1);
    drain(&mut r);
    r.stolen_job_finished(JobRef(1), value(k(1)));
    let a = drain(&mut r);
    assert_eq!(
        a[0],
        Action::SendFetched {
            to: n(3),
            id: FetchId(8),
            bytes: Some(value(k(1)))
        }
    );
    assert_eq!(a.len(), 2, "the answer to 3 and the announcement: {a:?}");
    assert!(matches!(&a[1], Action::Announce { to, .. } if to == &vec![n(3)]));
}

#[test]
fn a_job_given_to_or_stolen_from_a_member_already_dead_is_redone_or_orphaned_at_once() {
    let mut r = member();
    r.node_died(n(2), 0);
    drain(&mut r);
    r.job_given(JobRef(1), n(2), k(1), 0);
    assert_eq!(drain(&mut r), vec![Action::Redo { handle: JobRef(1) }]);
    r.job_given(JobRef(2), n(9), k(1), 0);
    assert_eq!(
        drain(&mut r),
        vec![Action::Redo { handle: JobRef(2) }],
        "an unknown thief counts as dead"
    );
    r.stolen_job_started(JobRef(1), n(2), k(3));
    assert_eq!(
        drain(&mut r),
        vec![Action::Announce {
            to: vec![n(0), n(3)],
            entries: vec![pending(k(3))],
            death: None,
        }]
    );
    assert_eq!(r.stats().orphans_kept, 1);
    assert!(r.active());
}

#[test]
fn the_masters_death_asks_for_an_election_and_the_new_master_restarts_the_root() {
    let mut r = member();
    r.node_died(n(0), 0);
    assert_eq!(drain_work(&mut r), vec![Action::ElectMaster]);
    assert_eq!(r.master(), None);
    // The registry names a member that is dead too: ask again.
    r.master_elected(n(0));
    assert_eq!(drain(&mut r), vec![Action::ElectMaster]);
    // Another member wins: nothing to do here.
    r.master_elected(n(2));
    assert!(drain(&mut r).is_empty());
    assert_eq!(r.master(), Some(n(2)));
    // It dies too and this member wins: restart the root, once.
    r.node_died(n(2), 5);
    assert_eq!(drain_work(&mut r), vec![Action::ElectMaster]);
    r.master_elected(n(1));
    r.master_elected(n(1));
    assert_eq!(drain(&mut r), vec![Action::RestartRoot]);
    assert_eq!(r.stats().elections, 3);
}

#[test]
fn a_master_missing_from_the_member_list_is_still_replaced_when_it_dies() {
    let mut r = Recovery::new(n(1), [n(1), n(2)], n(0), 1);
    r.node_died(n(0), 0);
    assert_eq!(drain(&mut r), vec![Action::ElectMaster]);
    r.node_died(n(0), 0);
    assert!(drain(&mut r).is_empty(), "once");
}

#[test]
fn the_death_of_a_member_that_is_not_the_master_elects_nobody() {
    let mut r = member();
    r.node_died(n(3), 0);
    assert!(drain_work(&mut r).is_empty());
    assert_eq!(r.master(), Some(n(0)));
}

// ------------------------------------------------------------ rule 3: orphans

#[test]
fn a_finished_orphan_answers_remote_and_local_waiters_and_is_announced_done() {
    let mut r = member();
    r.stolen_job_started(JobRef(1), n(0), k(1));
    r.node_died(n(0), 0);
    drain(&mut r);
    r.fetch_requested(n(2), FetchId(1), k(1));
    // A redone job of this member with the same key waits for the orphan too.
    assert_eq!(r.lookup(JobRef(50), k(1)), Lookup::Remote { holder: n(1) });
    assert!(drain(&mut r).is_empty(), "no fetch to oneself");
    assert_eq!(r.stats().lookups_own_orphan, 1);
    r.stolen_job_finished(JobRef(1), value(k(1)));
    assert_eq!(
        drain(&mut r),
        vec![
            Action::SendFetched {
                to: n(2),
                id: FetchId(1),
                bytes: Some(value(k(1)))
            },
            Action::Complete {
                handle: JobRef(50),
                bytes: value(k(1))
            },
            Action::Announce {
                to: vec![n(2), n(3)],
                entries: vec![done(k(1))],
                death: None,
            },
        ]
    );
    assert_eq!(r.stats().hits_local, 1);
    assert_eq!(r.lookups_waiting(), 0);
}

#[test]
fn a_failed_orphan_answers_not_found_and_redoes_local_waiters() {
    let mut r = member();
    r.stolen_job_started(JobRef(1), n(0), k(1));
    r.node_died(n(0), 0);
    drain(&mut r);
    r.fetch_requested(n(2), FetchId(1), k(1));
    assert_eq!(r.lookup(JobRef(50), k(1)), Lookup::Remote { holder: n(1) });
    r.stolen_job_failed(JobRef(1));
    assert_eq!(
        drain(&mut r),
        vec![
            Action::SendFetched {
                to: n(2),
                id: FetchId(1),
                bytes: None
            },
            Action::Redo { handle: JobRef(50) },
        ]
    );
}

// ------------------------------------------------------------ rule 4: announcements

#[test]
fn announcements_from_dead_members_are_ignored_and_done_replaces_pending() {
    let mut r = member();
    r.node_died(n(3), 0);
    drain(&mut r);
    r.announce_received(n(3), &[done(k(1))]);
    assert_eq!(r.directory_len(), 0);
    assert!(r.active(), "the survivors' accounts of 3 may name results");
    accounts(&mut r, n(3), &[0, 2]);
    assert!(!r.active());
    r.announce_received(n(2), &[pending(k(2))]);
    r.announce_received(n(0), &[done(k(2))]);
    assert_eq!(r.lookup(JobRef(1), k(2)), Lookup::Remote { holder: n(0) });
    // Announcements from oneself (a confused driver) are ignored.
    r.announce_received(n(1), &[done(k(5))]);
    assert_eq!(r.lookup(JobRef(2), k(5)), Lookup::Miss);
}

#[test]
fn the_own_store_wins_over_the_directory() {
    let mut r = member();
    r.stolen_job_started(JobRef(1), n(2), k(1));
    r.stolen_job_finished(JobRef(1), value(k(1)));
    drain(&mut r);
    r.announce_received(n(3), &[done(k(1))]);
    assert_eq!(r.lookup(JobRef(1), k(1)), Lookup::Local(value(k(1))));
    assert!(drain(&mut r).is_empty(), "no fetch");
}

// ------------------------------------------------------------ rule 5: lookups

#[test]
fn a_remote_hit_is_fetched_and_completes_the_job() {
    let mut r = member();
    r.announce_received(n(3), &[done(k(2))]);
    assert!(r.active());
    assert_eq!(r.lookup(JobRef(4), k(2)), Lookup::Remote { holder: n(3) });
    let a = drain(&mut r);
    let [Action::Fetch { to, id, key }] = a.as_slice() else {
        panic!("{a:?}")
    };
    assert_eq!((*to, *key), (n(3), k(2)));
    // An answer from another member, or to an unknown id, is ignored.
    r.fetched(n(2), *id, Some(value(k(9))));
    r.fetched(n(3), FetchId(id.0 + 100), Some(value(k(9))));
    assert!(drain(&mut r).is_empty());
    r.fetched(n(3), *id, Some(value(k(2))));
    assert_eq!(
        drain(&mut r),
        vec![Action::Complete {
            handle: JobRef(4),
            bytes: value(k(2))
        }]
    );
    // Exactly once: a repeated answer is ignored.
    r.fetched(n(3), *id, Some(value(k(2))));
    assert!(drain(&mut r).is_empty());
    let s = r.stats();
    assert_eq!(
        (s.lookups, s.hits_remote, s.bytes_fetched),
        (1, 1, value(k(2)).len() as u64)
    );
    assert_eq!(s.ignored, 3);
}

#[test]
fn a_remote_miss_redoes_the_job_and_forgets_the_entry() {
    let mut r = member();
    r.announce_received(n(3), &[done(k(2))]);
    r.lookup(JobRef(4), k(2));
    let Some(Action::Fetch { id, .. }) = r.poll_action() else {
        panic!()
    };
    r.fetched(n(3), id, None);
    assert_eq!(drain(&mut r), vec![Action::Redo { handle: JobRef(4) }]);
    assert_eq!(r.lookup(JobRef(5), k(2)), Lookup::Miss);
    let s = r.stats();
    assert_eq!((s.lookups, s.misses, s.fetches_failed), (2, 1, 1));
}

#[test]
fn a_lookup_with_a_handle_in_use_runs_the_job_here() {
    let mut r = member();
    r.announce_received(n(3), &[done(k(2))]);
    r.job_given(JobRef(4), n(2), k(1), 0);
    assert_eq!(r.lookup(JobRef(4), k(2)), Lookup::Miss);
    assert!(drain(&mut r).is_empty());
    assert_eq!(r.lookups_waiting(), 0);
}

// ------------------------------------------------------------ rule 5b: accounts

#[test]
fn every_survivor_sends_its_account_of_a_death_even_when_it_has_nothing() {
    let mut r = member();
    r.node_died(n(3), 0);
    assert_eq!(
        drain(&mut r),
        vec![Action::Announce {
            to: vec![n(0), n(2)],
            entries: vec![],
            death: Some(n(3)),
        }]
    );
    assert_eq!(r.stats().announce_messages, 2);
    assert_eq!(r.accounts_awaited(), 1);
    assert!(r.active(), "lookups wait for the accounts");
}

#[test]
fn a_lookup_after_a_death_waits_for_the_accounts_and_fetches_what_one_names() {
    let mut r = member();
    r.node_died(n(2), 0);
    drain(&mut r);
    // Nothing known yet: the lookup waits instead of missing.
    assert_eq!(r.lookup(JobRef(7), k(4)), Lookup::Awaiting);
    assert_eq!(r.stats().lookups_awaited, 1);
    assert_eq!(r.lookups_waiting(), 1);
    assert!(drain(&mut r).is_empty());
    // 0's account names the key: fetched at once, before 3's account.
    r.announce_received(n(0), &[done(k(4))]);
    r.account_received(n(0), n(2));
    let a = drain(&mut r);
    let [Action::Fetch { to, id, key }] = a.as_slice() else {
        panic!("{a:?}")
    };
    assert_eq!((*to, *key), (n(0), k(4)));
    r.fetched(n(0), *id, Some(value(k(4))));
    assert_eq!(
        drain(&mut r),
        vec![Action::Complete {
            handle: JobRef(7),
            bytes: value(k(4))
        }]
    );
    assert_eq!(r.stats().misses, 0);
}

#[test]
fn a_lookup_waiting_for_accounts_is_redone_once_all_came_without_its_key() {
    let mut r = member();
    r.node_died(n(2), 0);
    drain(&mut r);
    assert_eq!(r.lookup(JobRef(7), k(4)), Lookup::Awaiting);
    r.account_received(n(0), n(2));
    r.account_received(n(0), n(2));
    assert!(drain(&mut r).is_empty(), "3 still owes its account");
    r.account_received(n(3), n(2));
    assert_eq!(drain(&mut r), vec![Action::Redo { handle: JobRef(7) }]);
    assert_eq!(r.lookups_waiting(), 0);
    assert_eq!(r.stats().misses, 1);
    // Afterwards lookups miss at once.
    assert_eq!(r.lookup(JobRef(8), k(5)), Lookup::Miss);
}

#[test]
fn an_account_that_comes_before_the_death_counts_and_a_dead_survivor_owes_nothing() {
    let mut r = member();
    // 3 heard of 2's death first.
    r.account_received(n(3), n(2));
    r.node_died(n(2), 0);
    drain(&mut r);
    assert_eq!(r.lookup(JobRef(7), k(4)), Lookup::Awaiting);
    // 0, the last one owing, dies: its own death's account is owed by 3.
    r.node_died(n(0), 1);
    drain_work(&mut r);
    assert_eq!(r.accounts_awaited(), 1);
    assert!(r.lookups_waiting() == 1);
    r.account_received(n(3), n(0));
    let a = drain_work(&mut r);
    assert_eq!(a, vec![Action::Redo { handle: JobRef(7) }]);
    assert_eq!(r.accounts_awaited(), 0);
    // Accounts of unknown deaths, from the dead or from oneself change nothing.
    r.account_received(n(0), n(3));
    r.account_received(n(1), n(3));
    r.account_received(n(3), n(3));
    assert_eq!(r.stats().ignored, 3);
    assert_eq!(r.lookup(JobRef(8), k(4)), Lookup::Miss);
}

#[test]
fn accounts_awaited_longer_than_the_patience_are_given_up() {
    let mut r = member();
    let patience = r.config().account_patience_ns;
    r.node_died(n(2), 1_000);
    drain(&mut r);
    assert_eq!(r.lookup(JobRef(7), k(4)), Lookup::Awaiting);
    r.tick(1_000 + patience - 1);
    assert!(drain(&mut r).is_empty());
    r.tick(1_000 + patience);
    assert_eq!(drain(&mut r), vec![Action::Redo { handle: JobRef(7) }]);
    assert_eq!(r.accounts_awaited(), 0);
}

// ------------------------------------------------------------ rule 6: fetch requests

#[test]
fn fetch_requests_are_answered_from_the_store_or_not_found_at_once() {
    let mut r = member();
    r.stolen_job_started(JobRef(1), n(2), k(1));
    r.stolen_job_finished(JobRef(1), value(k(1)));
    drain(&mut r);
    r.fetch_requested(n(3), FetchId(1), k(1));
    r.fetch_requested(n(3), FetchId(2), k(2));
    // A still running job that is not an orphan was never announced: not found.
    r.stolen_job_started(JobRef(2), n(2), k(3));
    r.fetch_requested(n(0), FetchId(3), k(3));
    assert_eq!(
        drain(&mut r),
        vec![
            Action::SendFetched {
                to: n(3),
                id: FetchId(1),
                bytes: Some(value(k(1)))
            },
            Action::SendFetched {
                to: n(3),
                id: FetchId(2),
                bytes: None
            },
            Action::SendFetched {
                to: n(0),
                id: FetchId(3),
                bytes: None
            },
        ]
    );
    // From a dead member: ignored.
    r.node_died(n(3), 0);
    drain(&mut r);
    r.fetch_requested(n(3), FetchId(4), k(1));
    assert!(drain(&mut r).is_empty());
    assert_eq!(r.stats().fetches_answered, 1);
    assert_eq!(r.stats().fetches_not_found, 2);
}

#[test]
fn waiting_fetch_requests_are_bounded() {
    let config = Config {
        max_waiting_fetches: 2,
        ..Config::default()
    };
    let mut r = Recovery::with_config(n(1), [n(0), n(2)], n(0), 1, config);
    r.stolen_job_started(JobRef(1), n(0), k(1));
    r.node_died(n(0), 0);
    drain(&mut r);
    for id in 0..3 {
        r.fetch_requested(n(2), FetchId(id), k(1));
    }
    assert_eq!(
        drain(&mut r),
        vec![Action::SendFetched {
            to: n(2),
            id: FetchId(2),
            bytes: None
        }]
    );
    r.stolen_job_finished(JobRef(1), value(k(1)));
    let answered = drain(&mut r)
        .into_iter()
        .filter(|a| matches!(a, Action::SendFetched { bytes: Some(_), .. }))
        .count();
    assert_eq!(answered, 2);
}

// ------------------------------------------------------------ the store's budget

#[test]
fn an_evicted_announced_result_is_answered_not_found() {
    // Room for 30 result bytes in two entries.
    let budget = 30 + 2 * STORE_ENTRY_OVERHEAD;
    let config = Config {
        store_budget: budget,
        ..Config::default()
    };
    let mut r = Recovery::with_config(n(1), [n(0), n(2), n(3)], n(0), 1, config);
    // k1 (8 bytes) returned to 2, which dies: announced.
    r.stolen_job_started(JobRef(1), n(2), k(1));
    r.stolen_job_finished(JobRef(1), value(k(1)));
    r.node_died(n(2), 0);
    drain(&mut r);
    // k4 (23 bytes) pushes k1 out.
    r.stolen_job_started(JobRef(2), n(3), k(4));
    r.stolen_job_finished(JobRef(2), value(k(4)));
    drain(&mut r);
    assert_eq!(r.stats().evictions, 1);
    assert!(r.store_bytes() <= budget);
    r.fetch_requested(n(3), FetchId(1), k(1));
    assert_eq!(
        drain(&mut r),
        vec![Action::SendFetched {
            to: n(3),
            id: FetchId(1),
            bytes: None
        }]
    );
    // A result larger than the whole budget is sent home but not kept.
    r.stolen_job_started(JobRef(3), n(3), k(9));
    r.stolen_job_finished(JobRef(3), vec![0; budget - STORE_ENTRY_OVERHEAD + 1]);
    assert_eq!(drain(&mut r).len(), 1);
    assert_eq!(r.stats().too_large, 1);
    assert_eq!(r.lookup(JobRef(9), k(4)), Lookup::Local(value(k(4))));
}

// ------------------------------------------------------------ rule 7: leave and join

#[test]
fn leaving_hands_the_store_to_a_seeded_random_live_member() {
    let mut chosen = BTreeSet::new();
    for seed in 0..64 {
        let run = |seed| {
            let mut r = Recovery::new(n(1), [n(0), n(1), n(2), n(3), n(4)], n(0), seed);
            r.stolen_job_started(JobRef(1), n(2), k(1));
            r.stolen_job_finished(JobRef(1), value(k(1)));
            r.stolen_job_started(JobRef(2), n(0), k(2));
            r.stolen_job_finished(JobRef(2), value(k(2)));
            r.node_died(n(4), 0);
            drain(&mut r);
            r.leave();
            let a = drain(&mut r);
            assert_eq!(r.store_len(), 0);
            assert_eq!(r.stats().handed_over, 2);
            a
        };
        let a = run(seed);
        assert_eq!(a, run(seed), "the same seed picks the same member");
        let [Action::HandOver { to, entries }] = a.as_slice() else {
            panic!("{a:?}")
        };
        assert_eq!(
            entries,
            &vec![(k(1), value(k(1))), (k(2), value(k(2)))],
            "oldest first"
        );
        assert_ne!(*to, n(4), "never the dead member");
        chosen.insert(*to);
    }
    assert_eq!(chosen, BTreeSet::from([n(0), n(2), n(3)]));
}

#[test]
fn leaving_answers_waiting_fetches_not_found_and_keeps_the_store_if_alone() {
    let mut r = Recovery::new(n(1), [n(0), n(2)], n(0), 3);
    r.stolen_job_started(JobRef(1), n(0), k(1));
    r.node_died(n(0), 0);
    drain(&mut r);
    r.fetch_requested(n(2), FetchId(5), k(1));
    r.node_died(n(2), 0);
    r.leave();
    assert!(drain(&mut r).is_empty(), "the waiting member is dead");

    let mut r = Recovery::new(n(1), [n(0)], n(0), 3);
    r.stolen_job_started(JobRef(1), n(0), k(1));
    r.stolen_job_finished(JobRef(1), value(k(1)));
    r.node_died(n(0), 0);
    drain(&mut r);
    r.leave();
    assert!(drain(&mut r).is_empty(), "nobody to hand over to");
    assert_eq!(r.store_len(), 1, "kept for a checkpoint");
}

#[test]
fn handed_over_results_are_stored_as_own_and_announced() {
    let mut r = member();
    r.handover_received(n(2), vec![(k(1), value(k(1))), (k(2), value(k(2)))]);
    assert_eq!(
        drain(&mut r),
        vec![Action::Announce {
            to: vec![n(0), n(2), n(3)],
            entries: vec![done(k(1)), done(k(2))],
            death: None,
        }]
    );
    assert_eq!(r.lookup(JobRef(1), k(2)), Lookup::Local(value(k(2))));
    r.fetch_requested(n(3), FetchId(1), k(1));
    assert_eq!(
        drain(&mut r),
        vec![Action::SendFetched {
            to: n(3),
            id: FetchId(1),
            bytes: Some(value(k(1)))
        }]
    );
    assert_eq!(r.stats().handovers_received, 2);
}

#[test]
fn a_joiner_is_told_what_this_member_has_announced_and_nothing_else() {
    let mut r = member();
    r.node_joined(n(5));
    assert!(drain(&mut r).is_empty(), "nothing announced, nothing sent");
    r.stolen_job_started(JobRef(1), n(2), k(1));
    r.stolen_job_finished(JobRef(1), value(k(1)));
    r.stolen_job_started(JobRef(2), n(3), k(2));
    r.stolen_job_finished(JobRef(2), value(k(2)));
    r.stolen_job_started(JobRef(3), n(2), k(3));
    r.node_died(n(2), 0);
    drain(&mut r);
    r.node_joined(n(6));
    assert_eq!(
        drain(&mut r),
        vec![Action::Announce {
            to: vec![n(6)],
            entries: vec![done(k(1)), pending(k(3))],
            death: None,
        }]
    );
    assert!(r.is_live(n(6)));
    // Joining twice, or oneself, changes nothing.
    r.node_joined(n(6));
    r.node_joined(n(1));
    assert!(drain(&mut r).is_empty());
    // The joiner now gets later announcements too.
    r.stolen_job_finished(JobRef(3), value(k(3)));
    assert!(drain(&mut r)
        .iter()
        .any(|a| matches!(a, Action::Announce { to, .. } if to == &vec![n(0), n(3), n(5), n(6)])));
}

// ------------------------------------------------------------ rule 8: checkpoints

#[test]
fn a_checkpoint_written_by_one_member_restores_into_another() {
    let mut a = member();
    for (h, key) in [(1, 1), (2, 2), (3, 3)] {
        a.stolen_job_started(JobRef(h), n(2), k(key));
        a.stolen_job_finished(JobRef(h), value(k(key)));
    }
    let fp = checkpoint::Fingerprint([9; 32]);
    let file = checkpoint::encode(&fp, a.checkpoint_entries());
    let snapshot = checkpoint::encode(&fp, a.checkpoint_snapshot());
    assert_eq!(file, snapshot, "a snapshot encodes as the entries do");
    let read = checkpoint::decode(&file).unwrap();
    assert_eq!(read.fingerprint, fp);
    let entries = read.entries;
    assert_eq!(entries.len(), 3);

    // A new run: member 0 alone at first, then 1 joins.
    let mut b = Recovery::new(n(0), [n(0)], n(0), 5);
    b.restore(entries);
    assert!(drain(&mut b).is_empty(), "nobody to tell yet");
    assert_eq!(b.stats().restored, 3);
    assert_eq!(b.lookup(JobRef(1), k(3)), Lookup::Local(value(k(3))));
    b.node_joined(n(1));
    assert_eq!(
        drain(&mut b),
        vec![Action::Announce {
            to: vec![n(1)],
            entries: vec![done(k(1)), done(k(2)), done(k(3))],
            death: None,
        }]
    );
}

// ------------------------------------------------------------ invariants (proptest)

const ME: NodeId = NodeId(0);
const NODES: u32 = 7;
const KEYS: u8 = 6;

#[derive(Debug, Clone)]
enum Op {
    Give {
        thief: u32,
        key: u8,
    },
    ResultBack {
        pick: usize,
    },
    Start {
        owner: u32,
        key: u8,
    },
    Finish {
        pick: usize,
    },
    Fail {
        pick: usize,
    },
    Die {
        node: u32,
    },
    Join {
        node: u32,
    },
    Elect {
        node: u32,
    },
    Announce {
        from: u32,
        keys: Vec<(u8, bool)>,
    },
    Lookup {
        key: u8,
    },
    Answer {
        pick: usize,
        found: bool,
        wrong_from: bool,
    },
    Request {
        from: u32,
        key: u8,
    },
    HandOver {
        from: u32,
        keys: Vec<u8>,
    },
    Restore {
        keys: Vec<u8>,
    },
    Leave,
    Account {
        from: u32,
        dead: u32,
    },
    Tick,
    Discard {
        key: u8,
    },
    Junk {
        which: u8,
        x: u64,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let node = 0..NODES;
    let key = 0..KEYS;
    prop_oneof![
        3 => (node.clone(), key.clone()).prop_map(|(thief, key)| Op::Give { thief, key }),
        2 => any::<usize>().prop_map(|pick| Op::ResultBack { pick }),
        3 => (node.clone(), key.clone()).prop_map(|(owner, key)| Op::Start { owner, key }),
        2 => any::<usize>().prop_map(|pick| Op::Finish { pick }),
        1 => any::<usize>().prop_map(|pick| Op::Fail { pick }),
        1 => node.clone().prop_map(|node| Op::Die { node }),
        1 => node.clone().prop_map(|node| Op::Join { node }),
        1 => node.clone().prop_map(|node| Op::Elect { node }),
        2 => (node.clone(), proptest::collection::vec((key.clone(), any::<bool>()), 0..4))
            .prop_map(|(from, keys)| Op::Announce { from, keys }),
        3 => key.clone().prop_map(|key| Op::Lookup { key }),
        3 => (any::<usize>(), any::<bool>(), prop::bool::weighted(0.2))
            .prop_map(|(pick, found, wrong_from)| Op::Answer { pick, found, wrong_from }),
        2 => (node.clone(), key.clone()).prop_map(|(from, key)| Op::Request { from, key }),
        1 => (node.clone(), proptest::collection::vec(key.clone(), 0..3))
            .prop_map(|(from, keys)| Op::HandOver { from, keys }),
        1 => proptest::collection::vec(key.clone(), 0..3).prop_map(|keys| Op::Restore { keys }),
        1 => Just(Op::Leave),
        2 => (node.clone(), node.clone()).prop_map(|(from, dead)| Op::Account { from, dead }),
        1 => Just(Op::Tick),
        1 => key.clone().prop_map(|key| Op::Discard { key }),
        1 => (0u8..4, any::<u64>()).prop_map(|(which, x)| Op::Junk { which, x }),
    ]
}

/// The rest of the world as the test sees it, and what it expects of the core.
struct World {
    r: Recovery,
    live: BTreeSet<NodeId>,
    next_handle: u64,
    /// The model's clock (the `now` arguments), never going back.
    clock: u64,
    /// Given jobs not ended: handle -> key.
    given: BTreeMap<JobRef, JobKey>,
    /// Stolen jobs running: handle -> (owner, key, orphan).
    running: BTreeMap<JobRef, (NodeId, JobKey, bool)>,
    /// Handed-over lookups not ended: handle -> key.
    lookups: BTreeMap<JobRef, JobKey>,
    /// Every handle that ended (Redo, Complete or a result received).
    ended: BTreeSet<JobRef>,
    /// Fetches the core sent: (holder, id, key).
    fetches: Vec<(NodeId, FetchId, JobKey)>,
    /// Fetch requests of others not answered yet: (from, id) -> key.
    requests: BTreeMap<(NodeId, FetchId), JobKey>,
    next_request: u64,
}

impl World {
    fn new(seed: u64) -> Self {
        let config = Config {
            // Two or three results: evictions happen.
            store_budget: 40 + 2 * STORE_ENTRY_OVERHEAD,
            directory_capacity: 4,
            max_waiting_fetches: 3,
            account_patience_ns: 1_000,
        };
        let live: BTreeSet<NodeId> = (1..=4).map(NodeId).collect();
        let members = live.iter().copied().chain([ME]);
        World {
            r: Recovery::with_config(ME, members, NodeId(1), seed, config),
            live,
            next_handle: 0,
            clock: 0,
            given: BTreeMap::new(),
            running: BTreeMap::new(),
            lookups: BTreeMap::new(),
            ended: BTreeSet::new(),
            fetches: Vec::new(),
            requests: BTreeMap::new(),
            next_request: 0,
        }
    }

    fn handle(&mut self) -> JobRef {
        self.next_handle += 1;
        JobRef(self.next_handle)
    }

    /// Removes and returns one running job.
    fn pick_running(&mut self, pick: usize) -> (JobRef, (NodeId, JobKey, bool)) {
        let h = *self.running.keys().nth(pick % self.running.len()).unwrap();
        let job = self.running.remove(&h).unwrap();
        (h, job)
    }

    fn end(&mut self, h: JobRef) -> Result<(), TestCaseError> {
        prop_assert!(self.ended.insert(h), "handle {h:?} ended twice");
        Ok(())
    }

    /// Moves the clock `by` and returns it.
    fn advance(&mut self, by: u64) -> u64 {
        self.clock += by;
        self.clock
    }

    fn apply(&mut self, op: Op) -> Result<(), TestCaseError> {
        match op {
            Op::Give { thief, key } => {
                let h = self.handle();
                self.given.insert(h, k(key));
                let now = self.advance(1);
                self.r.job_given(h, NodeId(thief), k(key), now);
            }
            Op::ResultBack { pick } => {
                if let Some(&h) = self.given.keys().nth(pick % self.given.len().max(1)) {
                    // A result only comes while the core still waits for it: a
                    // result after a redo is the driver's business.
                    prop_assert!(self.r.result_received(h));
                    self.given.remove(&h);
                    self.end(h)?;
                }
            }
            Op::Start { owner, key } => {
                let h = self.handle();
                if NodeId(owner) != ME {
                    let orphan = !self.live.contains(&NodeId(owner));
                    self.running.insert(h, (NodeId(owner), k(key), orphan));
                }
                self.r.stolen_job_started(h, NodeId(owner), k(key));
            }
            Op::Finish { .. } | Op::Fail { .. } if self.running.is_empty() => {}
            Op::Finish { pick } => {
                let (h, (owner, key, orphan)) = self.pick_running(pick);
                self.r.stolen_job_finished(h, value(key));
                let mut sent = 0;
                self.check_with(|a| match a {
                    Action::SendResult { to, handle, bytes } => {
                        prop_assert_eq!((*to, *handle), (owner, h));
                        prop_assert_eq!(bytes, &value(key));
                        sent += 1;
                        Ok(true)
                    }
                    _ => Ok(false),
                })?;
                // The result goes home unless the owner died (an orphan's is kept).
                prop_assert_eq!(sent, usize::from(!orphan));
                return Ok(());
            }
            Op::Fail { pick } => {
                let (h, (owner, _, orphan)) = self.pick_running(pick);
                self.r.stolen_job_failed(h);
                let mut sent = 0;
                self.check_with(|a| match a {
                    Action::SendFailure { to, handle } => {
                        prop_assert_eq!((*to, *handle), (owner, h));
                        sent += 1;
                        Ok(true)
                    }
                    _ => Ok(false),
                })?;
                prop_assert_eq!(sent, usize::from(!orphan));
                return Ok(());
            }
            Op::Die { node } => {
                self.live.remove(&NodeId(node));
                for r in self.running.values_mut() {
                    if r.0 == NodeId(node) {
                        r.2 = true;
                    }
                }
                let now = self.advance(5);
                self.r.node_died(NodeId(node), now);
            }
            Op::Join { node } => {
                if NodeId(node) != ME {
                    self.live.insert(NodeId(node));
                }
                self.r.node_joined(NodeId(node));
            }
            Op::Elect { node } => self.r.master_elected(NodeId(node)),
            Op::Announce { from, keys } => {
                let entries: Vec<Announcement> = keys
                    .into_iter()
                    .map(|(key, pending)| Announcement {
                        key: k(key),
                        pending,
                    })
                    .collect();
                self.r.announce_received(NodeId(from), &entries);
            }
            Op::Lookup { key } => {
                let h = self.handle();
                match self.r.lookup(h, k(key)) {
                    Lookup::Miss => {}
                    Lookup::Local(bytes) => prop_assert_eq!(bytes, value(k(key))),
                    Lookup::Remote { holder } => {
                        prop_assert!(holder == ME || self.live.contains(&holder));
                        self.lookups.insert(h, k(key));
                    }
                    Lookup::Awaiting => {
                        prop_assert!(self.r.accounts_awaited() > 0);
                        self.lookups.insert(h, k(key));
                    }
                }
            }
            Op::Answer {
                pick,
                found,
                wrong_from,
            } => {
                if !self.fetches.is_empty() {
                    let (holder, id, key) = self.fetches[pick % self.fetches.len()];
                    if wrong_from {
                        // Someone else answers, with another key's result.
                        let from = NodeId((holder.0 + 1) % NODES);
                        let other = JobKey([key.0[0] + 1; 16]);
                        self.r.fetched(from, id, Some(value(other)));
                    } else {
                        self.r.fetched(holder, id, found.then(|| value(key)));
                    }
                }
            }
            Op::Request { from, key } => {
                self.next_request += 1;
                let id = FetchId(self.next_request);
                if self.live.contains(&NodeId(from)) {
                    self.requests.insert((NodeId(from), id), k(key));
                }
                self.r.fetch_requested(NodeId(from), id, k(key));
            }
            Op::HandOver { from, keys } => {
                let entries = keys.into_iter().map(|i| (k(i), value(k(i)))).collect();
                self.r.handover_received(NodeId(from), entries);
            }
            Op::Restore { keys } => {
                self.r
                    .restore(keys.into_iter().map(|i| (k(i), value(k(i)))));
            }
            Op::Leave => self.r.leave(),
            Op::Account { from, dead } => self.r.account_received(NodeId(from), NodeId(dead)),
            // Past the patience of every account opened so far.
            Op::Tick => {
                let now = self.advance(1_000);
                self.r.tick(now);
            }
            Op::Discard { key } => {
                let before = self.r.store_len();
                let had = self.r.discard(k(key));
                prop_assert_eq!(self.r.store_len(), before - usize::from(had));
                prop_assert!(!self.r.discard(k(key)), "discarded twice");
            }
            Op::Junk { which, x } => {
                // Handles and ids the core never saw.
                let h = JobRef((1 << 40) + x % 1000);
                match which {
                    0 => {
                        prop_assert!(!self.r.result_received(h));
                    }
                    1 => self.r.stolen_job_finished(h, vec![1, 2, 3]),
                    2 => self.r.stolen_job_failed(h),
                    _ => self.r.fetched(
                        NodeId((x % u64::from(NODES)) as u32),
                        FetchId((1 << 40) + x % 1000),
                        Some(vec![9]),
                    ),
                }
            }
        }
        self.check_with(|_| Ok(false))
    }

    /// Drains the core's actions and checks each; `special` may claim one.
    fn check_with(
        &mut self,
        mut special: impl FnMut(&Action) -> Result<bool, TestCaseError>,
    ) -> Result<(), TestCaseError> {
        prop_assert!(self.r.store_bytes() <= self.r.config().store_budget);
        while let Some(a) = self.r.poll_action() {
            // No action addresses a dead member or this one.
            let to: Vec<NodeId> = match &a {
                Action::SendResult { to, .. }
                | Action::SendFailure { to, .. }
                | Action::Fetch { to, .. }
                | Action::SendFetched { to, .. }
                | Action::HandOver { to, .. } => vec![*to],
                Action::Announce { to, entries, death } => {
                    // Empty only as a member's account of a death.
                    prop_assert!(!entries.is_empty() || death.is_some());
                    to.clone()
                }
                _ => vec![],
            };
            for t in to {
                prop_assert!(self.live.contains(&t), "{a:?} addresses {t}, not alive");
            }
            if special(&a)? {
                continue;
            }
            match a {
                Action::Redo { handle } => {
                    let was_given = self.given.remove(&handle).is_some();
                    let was_lookup = self.lookups.remove(&handle).is_some();
                    prop_assert!(was_given || was_lookup, "redo of {handle:?}, not out");
                    self.end(handle)?;
                }
                Action::Complete { handle, bytes } => {
                    let key = self.lookups.remove(&handle);
                    prop_assert!(key.is_some(), "complete of {handle:?}, not looked up");
                    // Never a result for another key than the one asked.
                    prop_assert_eq!(bytes, value(key.unwrap()));
                    self.end(handle)?;
                }
                Action::Fetch { to, id, key } => {
                    prop_assert!(!self.fetches.iter().any(|f| f.1 == id), "fetch id reused");
                    self.fetches.push((to, id, key));
                }
                Action::SendFetched { to, id, bytes } => {
                    let key = self.requests.remove(&(to, id));
                    prop_assert!(key.is_some(), "answer to {to}/{id:?}: not asked or twice");
                    if let Some(bytes) = bytes {
                        prop_assert_eq!(bytes, value(key.unwrap()));
                    }
                }
                Action::HandOver { entries, .. } => {
                    for (key, bytes) in entries {
                        prop_assert_eq!(bytes, value(key));
                    }
                }
                Action::SendResult { .. } | Action::SendFailure { .. } => {
                    prop_assert!(false, "{a:?} without a finished job");
                }
                Action::Announce { .. } | Action::ElectMaster | Action::RestartRoot => {}
            }
        }
        Ok(())
    }

    /// Ends the run: every stolen job finishes and every other member dies.
    /// Then nothing may be left out.
    /// Ends the run with the members alive: every stolen job finishes, the accounts'
    /// patience passes, every fetch is answered "not found" and every given job's
    /// result comes back. Then nothing may be left waiting.
    fn finish_alive(&mut self) -> Result<(), TestCaseError> {
        while !self.running.is_empty() {
            self.apply(Op::Finish { pick: 0 })?;
        }
        let now = self.advance(1_000_000);
        self.r.tick(now);
        self.check_with(|_| Ok(false))?;
        prop_assert_eq!(self.r.accounts_awaited(), 0);
        while let Some((holder, id, _)) = self.fetches.pop() {
            self.r.fetched(holder, id, None);
            self.check_with(|_| Ok(false))?;
        }
        for h in std::mem::take(&mut self.given).into_keys() {
            prop_assert!(self.r.result_received(h));
            self.end(h)?;
        }
        self.nothing_left()
    }

    /// Nothing given, looked up or running is left, in the model or the core.
    fn nothing_left(&self) -> Result<(), TestCaseError> {
        prop_assert!(self.given.is_empty(), "given jobs lost: {:?}", self.given);
        prop_assert!(
            self.lookups.is_empty(),
            "lookups never ended: {:?}",
            self.lookups
        );
        prop_assert_eq!(self.r.given_len(), 0);
        prop_assert_eq!(self.r.lookups_waiting(), 0);
        prop_assert_eq!(self.r.running_len(), 0);
        Ok(())
    }

    fn finish(&mut self) -> Result<(), TestCaseError> {
        while !self.running.is_empty() {
            self.apply(Op::Finish { pick: 0 })?;
        }
        for node in 1..NODES {
            self.apply(Op::Die { node })?;
        }
        self.nothing_left()
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn recovery_invariants_hold_for_any_event_sequence(
        seed in any::<u64>(),
        ops in proptest::collection::vec(op(), 0..80),
        members_live_on in any::<bool>(),
    ) {
        let mut w = World::new(seed);
        for op in ops {
            w.apply(op)?;
        }
        // Every lookup ends, whether the other members all die or live on (then
        // through the accounts' patience and the fetches' answers).
        if members_live_on {
            w.finish_alive()?;
        } else {
            w.finish()?;
        }
    }
}
