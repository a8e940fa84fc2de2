//! Waiting for a future from a blocking caller, without `Handle::block_on`.
//!
//! The ABI calls `send` and `connect` from arbitrary host threads, including threads
//! inside a host callback, which this transport runs on its own tokio worker. quinn's
//! stream writes need no runtime context: polling one on the caller's thread appends the
//! bytes to the connection and wakes its driver task. So the caller polls the future
//! itself with a waker that unparks it, and parks only when the future is pending (flow
//! control, a handshake). On a worker thread of a multi-thread runtime (ours, when a
//! callback sends) the wait runs inside `block_in_place`, so the worker's other tasks —
//! among them the connection driver that will make progress — move to another thread.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, Thread};

struct Unpark(Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

thread_local! {
    static WAKER: Waker = Waker::from(Arc::new(Unpark(thread::current())));
}

/// Polls `fut` on this thread until it completes, parking while it is pending.
pub(crate) fn wait<F: Future>(fut: F) -> F::Output {
    let mut fut = pin!(fut);
    let waker = WAKER.with(Waker::clone);
    let mut cx = Context::from_waker(&waker);
    // The common case (a write with window available) completes at once.
    if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
        return v;
    }
    let mut park = move || loop {
        if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            return v;
        }
        thread::park();
    };
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(park)
        }
        _ => park(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_for_a_value_sent_from_another_thread() {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let t = thread::spawn(move || {
            thread::sleep(std::time::Duration::from_millis(20));
            tx.send(7).unwrap();
        });
        assert_eq!(wait(rx).unwrap(), 7);
        t.join().unwrap();
    }

    #[test]
    fn works_inside_a_runtime_worker() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let got = rt.block_on(async {
            tokio::spawn(async {
                let (tx, rx) = tokio::sync::oneshot::channel();
                tokio::spawn(async move {
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                    tx.send(3).unwrap();
                });
                wait(rx).unwrap()
            })
            .await
            .unwrap()
        });
        assert_eq!(got, 3);
    }
}
