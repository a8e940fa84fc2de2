//! A small pool of worker threads that run remote calls, grown on demand up to a bound
//! (so that calls that block, waiting for other calls, do not starve the rest).

use std::collections::VecDeque;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

type Job = Box<dyn FnOnce() + Send>;

#[derive(Default)]
struct State {
    jobs: VecDeque<Job>,
    /// Workers waiting for a job.
    idle: usize,
    threads: usize,
    handles: Vec<JoinHandle<()>>,
    ended: bool,
}

struct Shared {
    state: Mutex<State>,
    cond: Condvar,
    max: usize,
}

/// The worker pool of one runtime.
pub(crate) struct Workers {
    shared: Arc<Shared>,
}

impl Workers {
    /// A pool of at most `max` threads (at least 1), started lazily.
    pub(crate) fn new(max: usize) -> Self {
        Workers {
            shared: Arc::new(Shared {
                state: Mutex::new(State::default()),
                cond: Condvar::new(),
                max: max.max(1),
            }),
        }
    }

    /// Runs `job` on a worker: an idle one, or a new one while below the bound; else it
    /// queues until a worker is free.
    pub(crate) fn execute(&self, job: impl FnOnce() + Send + 'static) {
        let mut st = self.shared.state.lock();
        if st.ended {
            tracing::debug!("call dropped: the runtime has ended");
            return;
        }
        st.jobs.push_back(Box::new(job));
        if st.idle >= st.jobs.len() {
            self.shared.cond.notify_one();
            return;
        }
        if st.threads < self.shared.max {
            let shared = Arc::clone(&self.shared);
            match std::thread::Builder::new()
                .name("ibis-rmi-worker".into())
                .spawn(move || work(&shared))
            {
                Ok(h) => {
                    st.threads += 1;
                    st.handles.push(h);
                }
                Err(e) => tracing::error!(error = %e, "cannot start an RMI worker"),
            }
        }
    }

    /// Stops the workers after the queued calls ran.
    pub(crate) fn end(&self) {
        let handles = {
            let mut st = self.shared.state.lock();
            st.ended = true;
            self.shared.cond.notify_all();
            std::mem::take(&mut st.handles)
        };
        let me = std::thread::current().id();
        for h in handles {
            if h.thread().id() != me {
                let _ = h.join();
            }
        }
    }
}

fn work(shared: &Shared) {
    let mut st = shared.state.lock();
    loop {
        if let Some(job) = st.jobs.pop_front() {
            drop(st);
            job();
            st = shared.state.lock();
            continue;
        }
        if st.ended {
            st.threads -= 1;
            return;
        }
        st.idle += 1;
        shared.cond.wait_for(&mut st, Duration::from_secs(5));
        st.idle -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[test]
    fn blocked_jobs_do_not_starve_others_below_the_bound() {
        let w = Workers::new(4);
        let (gate_tx, gate_rx) = mpsc::channel::<()>();
        let gate = Arc::new(Mutex::new(gate_rx));
        let (done_tx, done_rx) = mpsc::channel();
        // Two jobs block until released ...
        for _ in 0..2 {
            let (g, d) = (Arc::clone(&gate), done_tx.clone());
            w.execute(move || {
                let _ = g.lock().recv();
                let _ = d.send("blocked");
            });
        }
        // ... and a third still runs.
        let d = done_tx.clone();
        w.execute(move || {
            let _ = d.send("free");
        });
        assert_eq!(done_rx.recv_timeout(Duration::from_secs(10)), Ok("free"));
        gate_tx.send(()).unwrap();
        gate_tx.send(()).unwrap();
        assert_eq!(done_rx.recv_timeout(Duration::from_secs(10)), Ok("blocked"));
        assert_eq!(done_rx.recv_timeout(Duration::from_secs(10)), Ok("blocked"));
        w.end();
    }
}
