//! Every kind of call between two runtimes in one process, over the in-process transport
//! and over TCP: blocking, async, one-way; typed remote errors; timeouts; lost servers.

mod common;

use std::time::{Duration, Instant};

use common::*;
use ibis_rmi::{Rmi, RmiError, Stub};

/// A server runtime exporting `obj`, a client runtime, and the client's stub to it.
fn serve(transport: &str, obj: ServiceImpl) -> (Rmi, Rmi, ServiceStub) {
    let (s, c) = pair(transport);
    let r = s.export(ServiceSkeleton::new(obj)).unwrap();
    let stub = c.stub(&r).unwrap();
    (s, c, stub)
}

fn service(transport: &str) -> (Rmi, Rmi, ServiceStub) {
    serve(transport, ServiceImpl::new())
}

/// Runs `test` over every transport with a fresh service (transport, client runtime,
/// stub), then ends both runtimes.
fn over_each_transport(test: impl Fn(&str, &Rmi, &ServiceStub)) {
    for t in TRANSPORTS {
        let (s, c, stub) = service(t);
        test(t, &c, &stub);
        c.end();
        s.end();
    }
}

/// Runs a future to completion on a current-thread executor.
fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(f)
}

#[test]
fn blocking_calls_return_results() {
    over_each_transport(|t, c, stub| {
        assert_eq!(stub.add(20, 22).unwrap(), 42, "{t}");
        assert_eq!(
            stub.concat(vec!["a".into(), "b".into(), "c".into()], "-")
                .unwrap(),
            "a-b-c"
        );
        let data: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        let want: u64 = data.iter().map(|&b| b as u64).sum();
        assert_eq!(stub.checksum(&data).unwrap(), want, "{t}");
        let mut n = 0;
        let tree = Tree::build(10, &mut n).unwrap();
        assert_eq!(n, 1023);
        assert_eq!(stub.tree_sum(&tree).unwrap(), tree.sum(), "{t}");
        // Many calls in a row on one stub, and a second stub to the same object.
        let other = c.stub(&stub.remote_ref()).unwrap();
        for i in 0..200 {
            assert_eq!(stub.add(i, 1).unwrap(), i + 1);
            assert_eq!(other.add(i, 2).unwrap(), i + 2);
        }
    });
}

#[test]
fn array_arguments_arrive_whole_read_in_place_or_on_a_worker() {
    // Odd byte counts before the other arrays put them off their alignment in the
    // request sometimes (read with a copy then) and on it other times (in place).
    let check = |t: &str, stub: &ServiceStub| {
        for n in [0usize, 1, 3, 8, 1000, 100_003] {
            let b: Vec<u8> = (0..n).map(|k| (k * 7 % 256) as u8).collect();
            let i: Vec<i32> = (0..n / 3).map(|k| k as i32 - 50).collect();
            let d: Vec<f64> = (0..n / 5).map(|k| k as f64 * 2.0).collect();
            let o: Vec<i64> = (0..n % 17).map(|k| k as i64 * 1_000_000_007).collect();
            let want = sums(&b, &i, &d, &o);
            assert_eq!(stub.weigh(&b, &i, &d, o.clone()).unwrap(), want, "{t} {n}");
            assert_eq!(stub.weigh_pooled(&b, &i, &d, o).unwrap(), want, "{t} {n}");
        }
    };
    over_each_transport(|t, _, stub| check(t, stub));
    // A serial export runs every call in the receiving thread, in place.
    for t in TRANSPORTS {
        let (s, c) = pair(t);
        let r = s
            .export_serial(ServiceSkeleton::new(ServiceImpl::new()))
            .unwrap();
        check(t, &c.stub(&r).unwrap());
        c.end();
        s.end();
    }
}

#[test]
fn concurrent_callers_get_their_own_replies() {
    over_each_transport(|_, _, stub| {
        let threads: Vec<_> = (0..4)
            .map(|k| {
                let stub = stub.clone();
                std::thread::spawn(move || {
                    for i in 0..100 {
                        assert_eq!(stub.add(k * 1000, i).unwrap(), k * 1000 + i);
                    }
                })
            })
            .collect();
        for th in threads {
            th.join().expect("caller thread");
        }
    });
}

#[test]
fn calls_run_concurrently_on_the_server() {
    for t in TRANSPORTS {
        let (obj, started_rx, release_tx) = ServiceImpl::held();
        let (s, c, stub) = serve(t, obj);
        // `hold` blocks in the server until released ...
        let held = stub.hold_async();
        started_rx.recv_timeout(LONG).expect("hold started");
        // ... and meanwhile other calls are served.
        assert_eq!(stub.add(1, 2).unwrap(), 3, "{t}");
        release_tx.send(()).unwrap();
        held.wait().unwrap();
        c.end();
        s.end();
    }
}

#[test]
fn async_calls_overlap_and_complete_in_any_order() {
    over_each_transport(|t, _, stub| {
        // Futures awaited on an executor.
        let got = block_on(async {
            let slow = stub.sleep_ms_async(50);
            let fast: Vec<_> = (0..10).map(|i| stub.add_async(i, i)).collect();
            let mut sums = Vec::new();
            for f in fast {
                sums.push(f.await.unwrap());
            }
            (slow.await.unwrap(), sums)
        });
        assert_eq!(got.0, 50, "{t}");
        assert_eq!(got.1, (0..10).map(|i| 2 * i).collect::<Vec<_>>());
        // Futures waited for by blocking, in reverse order.
        let pending: Vec<_> = (0..10).map(|i| stub.add_async(i, 100)).collect();
        for (i, p) in pending.into_iter().enumerate().rev() {
            assert_eq!(p.wait().unwrap(), i as i32 + 100);
        }
        // A dropped future does not disturb later calls.
        drop(stub.sleep_ms_async(10));
        assert_eq!(stub.add(1, 1).unwrap(), 2);
    });
}

#[test]
fn oneway_calls_arrive_without_reply() {
    over_each_transport(|t, _, stub| {
        for i in 1..=10 {
            stub.note(i);
        }
        stub.note_checked(45).unwrap();
        // No reply to wait for: poll (bounded) until all arrived.
        let deadline = Instant::now() + LONG;
        while stub.noted().unwrap() != 100 {
            assert!(Instant::now() < deadline, "one-way calls lost over {t}");
            std::thread::sleep(Duration::from_millis(2));
        }
    });
}

#[test]
fn remote_application_errors_arrive_typed() {
    for t in TRANSPORTS {
        let (s, c) = pair(t);
        let r: BankRef = s.export(BankSkeleton::new(Account::default())).unwrap();
        let bank = c.stub(&r).unwrap();
        assert_eq!(bank.deposit(30).unwrap(), 30);
        assert_eq!(
            bank.withdraw(50),
            Err(BankError::Insufficient { have: 30, want: 50 }),
            "{t}"
        );
        assert_eq!(bank.withdraw(10).unwrap(), 20);
        assert_eq!(bank.balance().unwrap(), 20);
        c.end();
        s.end();
    }
}

#[test]
fn a_panicking_method_is_reported_and_the_server_survives() {
    over_each_transport(|t, _, stub| {
        match stub.boom() {
            Err(RmiError::Panicked(what)) => assert!(what.contains("kaboom"), "{what}"),
            other => panic!("expected Panicked over {t}, got {other:?}"),
        }
        assert_eq!(stub.add(2, 3).unwrap(), 5);
    });
}

#[test]
fn a_slow_server_times_out_typed_and_later_calls_work() {
    over_each_transport(|t, _, stub| {
        let quick = stub.with_timeout(Duration::from_millis(100));
        assert_eq!(
            quick.sleep_ms(1_000),
            Err(RmiError::Timeout(Duration::from_millis(100))),
            "{t}"
        );
        // An async call times out as well.
        let r = block_on(quick.sleep_ms_async(1_000));
        assert!(matches!(r, Err(RmiError::Timeout(_))), "{r:?}");
        // The late replies are dropped; the stub goes on working.
        assert_eq!(stub.add(1, 2).unwrap(), 3);
    });
}

#[test]
fn a_server_that_goes_away_fails_calls_in_flight_with_connection_lost() {
    for t in TRANSPORTS {
        let (obj, started_rx, release_tx) = ServiceImpl::held();
        let (s, c, stub) = serve(t, obj);
        let caller = {
            let stub = stub.clone();
            std::thread::spawn(move || {
                let t0 = Instant::now();
                (stub.hold(), t0.elapsed())
            })
        };
        started_rx.recv_timeout(LONG).expect("hold started");
        // The server ends while the call runs (its worker is released afterwards, so
        // that the runtime's end can join it).
        let ender = std::thread::spawn(move || s.end());
        let (r, took) = caller.join().unwrap();
        assert!(
            matches!(r, Err(RmiError::ConnectionLost(_))),
            "over {t}: {r:?}"
        );
        assert!(took < Duration::from_secs(30), "took {took:?}");
        drop(release_tx);
        ender.join().unwrap();
        // New calls fail too, at once.
        assert!(stub.add(1, 1).unwrap_err().is_communication());
        c.end();
    }
}

#[test]
fn calls_after_end_fail_with_ended() {
    let (s, c, stub) = service("inproc");
    c.end();
    assert_eq!(stub.add(1, 1), Err(RmiError::Ended));
    s.end();
}

#[test]
fn serial_export_runs_calls_in_order_in_one_thread() {
    for t in TRANSPORTS {
        let (s, c) = pair(t);
        // A Cell is not Sync: only a serial export accepts it.
        struct Local(std::cell::Cell<i64>);
        impl Bank for Local {
            fn deposit(&self, amount: i64) -> Result<i64, BankError> {
                self.0.set(self.0.get() + amount);
                Ok(self.0.get())
            }
            fn withdraw(&self, amount: i64) -> Result<i64, BankError> {
                self.deposit(-amount)
            }
            fn balance(&self) -> Result<i64, BankError> {
                Ok(self.0.get())
            }
        }
        let r = s
            .export_serial(BankSkeleton::new(Local(std::cell::Cell::new(0))))
            .unwrap();
        let bank = c.stub(&r).unwrap();
        let pending: Vec<_> = (1..=20).map(|i| bank.deposit_async(i)).collect();
        let results: Vec<i64> = pending.into_iter().map(|p| p.wait().unwrap()).collect();
        // In order: the running sums.
        let want: Vec<i64> = (1..=20)
            .scan(0, |acc, i| {
                *acc += i;
                Some(*acc)
            })
            .collect();
        assert_eq!(results, want, "{t}");
        c.end();
        s.end();
    }
}

#[test]
fn unexport_withdraws_the_object() {
    let (s, c, stub) = service("inproc");
    s.unexport(&stub.remote_ref()).unwrap();
    let e = stub.add(1, 2).unwrap_err();
    assert!(e.is_communication(), "{e:?}");
    assert!(matches!(
        s.unexport(&stub.remote_ref()),
        Err(RmiError::NotBound(_))
    ));
    c.end();
    s.end();
}
