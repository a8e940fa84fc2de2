//! Async variants under tokio: they must register wakers, never block.

use std::time::Duration;

use ipl_registry::{EmbeddedRegistry, Event, JoinRequest, PoolConfig};
use tokio::time::timeout;

const T: Duration = Duration::from_secs(10);

// A current-thread runtime: if any async wait blocked the thread, the task
// that makes progress could never run and the timeout would fire.
#[tokio::test(flavor = "current_thread")]
async fn async_waits_do_not_block_the_executor() {
    let reg = EmbeddedRegistry::new();
    let cfg = PoolConfig::closed_world(2);
    let a = reg.join("p", cfg, JoinRequest::new("c")).unwrap();
    let first = a.next_event_async().await.unwrap();
    assert_eq!(first, Event::Joined(a.identifier().clone()));

    let reg2 = reg.clone();
    let other = tokio::spawn(async move {
        tokio::task::yield_now().await;
        let b = reg2.join("p", cfg, JoinRequest::new("c")).unwrap();
        tokio::task::yield_now().await;
        b.elect("leader").unwrap();
        tokio::task::yield_now().await;
        b.terminate().unwrap();
        b
    });
    timeout(T, a.wait_until_pool_closed_async())
        .await
        .unwrap()
        .unwrap();
    let w = timeout(T, a.get_election_result_async("leader"))
        .await
        .unwrap()
        .unwrap();
    timeout(T, a.wait_until_terminated_async())
        .await
        .unwrap()
        .unwrap();
    let b = other.await.unwrap();
    assert_eq!(&w, b.identifier());

    let mut seen = Vec::new();
    loop {
        let e = timeout(T, a.next_event_async()).await.unwrap().unwrap();
        let done = matches!(e, Event::Terminated { .. });
        seen.push(e);
        if done {
            break;
        }
    }
    assert_eq!(
        seen,
        vec![
            Event::Joined(b.identifier().clone()),
            Event::PoolClosed,
            Event::Elected {
                election: "leader".into(),
                winner: w.clone()
            },
            Event::Terminated { by: w }
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_next_event_wakes_on_other_thread_change() {
    let reg = EmbeddedRegistry::new();
    let a = reg
        .join("p", PoolConfig::default(), JoinRequest::new("c"))
        .unwrap();
    a.next_event_async().await.unwrap();
    // Nothing happens: a bounded async wait expires.
    assert!(timeout(Duration::from_millis(50), a.next_event_async())
        .await
        .is_err());
    assert!(
        timeout(Duration::from_millis(50), a.get_election_result_async("x"))
            .await
            .is_err()
    );

    let reg2 = reg.clone();
    let joiner = std::thread::spawn(move || {
        let b = reg2
            .join("p", PoolConfig::default(), JoinRequest::new("c"))
            .unwrap();
        b.signal("ping", &[b.members().unwrap()[0].clone()])
            .unwrap();
        b
    });
    let e = timeout(T, a.next_event_async()).await.unwrap().unwrap();
    let b = joiner.join().unwrap();
    assert_eq!(e, Event::Joined(b.identifier().clone()));
    let e = timeout(T, a.next_event_async()).await.unwrap().unwrap();
    assert_eq!(
        e,
        Event::Signal {
            signal: "ping".into(),
            source: b.identifier().clone()
        }
    );
}
