//! `ReceivePort::receive_async` under a tokio runtime.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use ipl::{EmbeddedRegistry, IplError};

#[test]
fn receive_async_gets_a_message_sent_later() {
    let t = simple();
    let reg = EmbeddedRegistry::new();
    let p = pool("async");
    let a = ibis(&reg, &p, &[t]);
    let b = ibis(&reg, &p, &[t]);
    let rp = Arc::new(b.create_receive_port(&t, "in").unwrap());
    rp.enable_connections();
    let mut sp = a.create_send_port(&t, "out").unwrap();
    sp.connect(rp.identifier(), LONG).unwrap();

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let rp2 = Arc::clone(&rp);
    let task = rt.spawn(async move {
        let mut m = rp2.receive_async().await?;
        let v = m.read_i32()?;
        m.finish();
        let mut m = rp2.receive_async().await?;
        Ok::<_, IplError>((v, m.read_i32()?))
    });
    std::thread::sleep(Duration::from_millis(20));
    for v in [10, 20] {
        let mut m = sp.new_message().unwrap();
        m.write_i32(v).unwrap();
        m.finish().unwrap();
    }
    let got = rt
        .block_on(async { tokio::time::timeout(LONG, task).await })
        .expect("receive_async completes")
        .unwrap()
        .unwrap();
    assert_eq!(got, (10, 20));
}

#[test]
fn dropped_receive_async_takes_no_message() {
    let t = simple();
    let (_a, rp, mut sp) = connected_loop("asyncdrop", t);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // A receive that gives up (its future is dropped) while nothing is there ...
    let r = rt.block_on(async {
        tokio::time::timeout(Duration::from_millis(20), rp.receive_async()).await
    });
    assert!(r.is_err(), "nothing was sent, so the receive must time out");
    // A future polled once (registering its waker) and then dropped takes nothing either.
    let ready = rt.block_on(async {
        let fut = rp.receive_async();
        tokio::pin!(fut);
        poll_once(fut.as_mut()).await
    });
    assert!(!ready);
    // A later message goes to the next receiver.
    let mut m = sp.new_message().unwrap();
    m.write_u8(5).unwrap();
    m.finish().unwrap();
    let mut got = rp.poll().unwrap().expect("the message is still there");
    assert_eq!(got.read_u8().unwrap(), 5);
}

/// Polls a future once and reports whether it was ready (dropping nothing).
async fn poll_once<F: std::future::Future + Unpin>(f: F) -> bool {
    let mut f = f;
    std::future::poll_fn(|cx| {
        std::task::Poll::Ready(std::pin::Pin::new(&mut f).poll(cx).is_ready())
    })
    .await
}

#[test]
fn receive_async_sees_port_closed() {
    let t = simple();
    let reg = EmbeddedRegistry::new();
    let a = ibis(&reg, &pool("asyncclose"), &[t]);
    let rp = Arc::new(a.create_receive_port(&t, "in").unwrap());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let rp2 = Arc::clone(&rp);
    let task = rt.spawn(async move { rp2.receive_async().await.map(|_| ()) });
    std::thread::sleep(Duration::from_millis(20));
    rp.close(Some(Duration::ZERO));
    let r = rt
        .block_on(async { tokio::time::timeout(LONG, task).await })
        .expect("woken by close")
        .unwrap();
    assert!(matches!(r, Err(IplError::PortClosed)));
}
