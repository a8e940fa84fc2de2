//! Satin shared objects: data replicated on every process of a pool, read locally,
//! written by *global* (write) methods that are applied here at once and broadcast
//! to the other copies, with *guards* that make a stolen job wait until the copy it
//! reads is in the state its spawner saw (the journal paper's section 3.2; the
//! objects are values of [`Replicated`] types of the replicated objects layer).
//!
//! ```
//! use satin::{Ctx, Job, Satin, Shared};
//! use serde::{Deserialize, Serialize};
//!
//! /// The best tour length found so far (a branch-and-bound bound).
//! #[derive(Serialize, Deserialize)]
//! struct Best(u64);
//! impl satin::Replicated for Best {
//!     type Op = u64;
//!     type Output = bool;
//!     fn apply(&mut self, len: &u64) -> bool {
//!         let better = *len < self.0;
//!         if better {
//!             self.0 = *len;
//!         }
//!         better
//!     }
//! }
//!
//! let best = Shared::new("doc-best", Best(u64::MAX)).unwrap();
//! assert!(best.write(17)); // applied here now, broadcast on a pool
//! assert!(!best.write(20));
//! assert_eq!(best.read(|b| b.0), 17); // a local read
//! ```
//!
//! Consistency is the journal's *guard consistency*, nothing more:
//! - a [`write`](Shared::write) changes the local copy before it returns and is sent
//!   to every other member of the pool without waiting (best effort: a member that
//!   joins later, or one whose link breaks, misses it; copies may apply writes of
//!   different writers in different orders);
//! - a job that came from another process runs only once its [`Job::guard`](crate::Job::guard) holds on
//!   the local copies. While it does not, the worker waits for pushed writes, then
//!   asks the process the job came from (which ran its spawner, so its copies are
//!   consistent for the job) for its copies, and waits again ([`GuardPolicy`]);
//!   a guard that does not hold within the patience
//!   ([`SatinBuilder::guard_patience`](crate::SatinBuilder::guard_patience)) fails the
//!   job with [`SatinError::GuardTimeout`].
//!   Jobs that stay in their process are not guarded: their spawner saw the same copy.
//!
//! A shared object is named: every process of the pool creates it under the same name
//! (with [`Shared::new`], before the run), and jobs carry it by reference (a
//! `Shared<T>` field serializes as its name, and a thief's copy of the job refers to
//! the thief's own copy). The object lives while a handle to it lives.

#![forbid(unsafe_code)]

use crate::error::SatinError;
use parking_lot::{Condvar, Mutex, RwLock};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Weak};
use std::time::{Duration, Instant};

pub use ibis_repmi::Replicated;

/// The longest name of a shared object (names travel in every update).
pub const MAX_NAME: usize = 256;

/// A process's handle on a shared object: cheap to clone, carried by jobs by
/// reference (see the [module docs](self)).
pub struct Shared<T: Replicated> {
    obj: Arc<Object<T>>,
}

impl<T: Replicated> Clone for Shared<T> {
    fn clone(&self) -> Self {
        Shared {
            obj: self.obj.clone(),
        }
    }
}

impl<T: Replicated> std::fmt::Debug for Shared<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("name", &self.obj.name)
            .finish_non_exhaustive()
    }
}

struct Object<T> {
    name: String,
    state: RwLock<T>,
}

/// What the table and the pool's driver do with an object whose type they do not
/// know: apply a serialized write, take and restore a snapshot.
trait Erased: Send + Sync {
    fn apply_wire(&self, op: &[u8]) -> Result<(), SatinError>;
    fn snapshot(&self) -> Result<Vec<u8>, SatinError>;
    fn restore(&self, state: &[u8]) -> Result<(), SatinError>;
}

impl<T: Replicated> Erased for Object<T> {
    fn apply_wire(&self, op: &[u8]) -> Result<(), SatinError> {
        let op: T::Op = postcard::from_bytes(op).map_err(|e| {
            SatinError::SharedObject(format!("a write to '{}' does not decode: {e}", self.name))
        })?;
        let _ = self.state.write().apply(&op);
        Ok(())
    }
    fn snapshot(&self) -> Result<Vec<u8>, SatinError> {
        postcard::to_allocvec(&*self.state.read()).map_err(|e| {
            SatinError::SharedObject(format!("the state of '{}' does not encode: {e}", self.name))
        })
    }
    fn restore(&self, state: &[u8]) -> Result<(), SatinError> {
        let v: T = postcard::from_bytes(state).map_err(|e| {
            SatinError::SharedObject(format!("a copy of '{}' does not decode: {e}", self.name))
        })?;
        *self.state.write() = v;
        Ok(())
    }
}

/// One entry of the table: the object under both of its erased views.
struct Entry {
    any: Weak<dyn Any + Send + Sync>,
    erased: Weak<dyn Erased>,
    type_name: &'static str,
}

/// Where writes go besides the local copy: the pool's driver, while a pool runs.
pub(crate) trait Link: Send + Sync {
    /// Broadcasts a serialized write of object `name` to the other members.
    fn write(&self, name: &str, op: Vec<u8>);
}

/// The process's shared objects by name, the pool link, and the change counter that
/// waiting guards sleep on.
struct Table {
    objects: Mutex<HashMap<String, Entry>>,
    link: RwLock<Option<Arc<dyn Link>>>,
    changes: Mutex<u64>,
    changed: Condvar,
}

static TABLE: LazyLock<Table> = LazyLock::new(|| Table {
    objects: Mutex::new(HashMap::new()),
    link: RwLock::new(None),
    changes: Mutex::new(0),
    changed: Condvar::new(),
});

fn bump() {
    *TABLE.changes.lock() += 1;
    TABLE.changed.notify_all();
}

fn erased(name: &str) -> Option<Arc<dyn Erased>> {
    TABLE.objects.lock().get(name)?.erased.upgrade()
}

impl<T: Replicated> Shared<T> {
    /// Creates this process's copy of the shared object `name` with state `value`.
    /// On a pool every process creates it, under the same name and with the same
    /// type, before the jobs that use it run (the initial states may differ: guards
    /// decide what a job needs). A name that a live object of this process already
    /// has is an error ([`SatinError::SharedObject`]), as are an empty name and one
    /// longer than [`MAX_NAME`] bytes.
    pub fn new(name: impl Into<String>, value: T) -> Result<Shared<T>, SatinError> {
        let name = name.into();
        if name.is_empty() || name.len() > MAX_NAME {
            return Err(SatinError::SharedObject(format!(
                "a shared object's name must have 1..={MAX_NAME} bytes (got {})",
                name.len()
            )));
        }
        let obj = Arc::new(Object {
            name: name.clone(),
            state: RwLock::new(value),
        });
        let mut objects = TABLE.objects.lock();
        if let Some(e) = objects.get(&name) {
            if e.erased.strong_count() > 0 {
                return Err(SatinError::SharedObject(format!(
                    "a shared object named '{name}' exists already in this process"
                )));
            }
        }
        let any: Arc<dyn Any + Send + Sync> = obj.clone();
        let erased: Arc<dyn Erased> = obj.clone();
        objects.insert(
            name,
            Entry {
                any: Arc::downgrade(&any),
                erased: Arc::downgrade(&erased),
                type_name: std::any::type_name::<T>(),
            },
        );
        // Dead entries are dropped as names are reused or added.
        objects.retain(|_, e| e.erased.strong_count() > 0);
        drop(objects);
        bump();
        Ok(Shared { obj })
    }

    /// This process's copy of the live shared object `name` of type `T` (as a job
    /// that arrives from another process finds it).
    pub fn lookup(name: &str) -> Result<Shared<T>, SatinError> {
        let objects = TABLE.objects.lock();
        let Some(e) = objects.get(name) else {
            return Err(SatinError::SharedObject(format!(
                "no shared object named '{name}' exists in this process: every process \
                 must create it (satin::Shared::new) before the jobs that use it run"
            )));
        };
        let Some(any) = e.any.upgrade() else {
            return Err(SatinError::SharedObject(format!(
                "the shared object '{name}' was dropped in this process"
            )));
        };
        match any.downcast::<Object<T>>() {
            Ok(obj) => Ok(Shared { obj }),
            Err(_) => Err(SatinError::SharedObject(format!(
                "the shared object '{name}' is a {} here, not a {}",
                e.type_name,
                std::any::type_name::<T>()
            ))),
        }
    }

    /// The object's name.
    pub fn name(&self) -> &str {
        &self.obj.name
    }

    /// Runs `f` on the local copy (a *local* method: no communication). `f` runs
    /// under the copy's read lock: it must not write to the same object.
    pub fn read<R>(&self, f: impl FnOnce(&T) -> R) -> R {
        f(&self.obj.state.read())
    }

    /// A *global* (write) method: applies `op` to the local copy now and, on a pool,
    /// sends it to every other member without waiting for them. Returns what the
    /// local application returned. An operation that does not serialize is applied
    /// here only (and logged).
    pub fn write(&self, op: T::Op) -> T::Output {
        let out = self.obj.state.write().apply(&op);
        bump();
        let link = TABLE.link.read().clone();
        if let Some(link) = link {
            match postcard::to_allocvec(&op) {
                Ok(bytes) => link.write(&self.obj.name, bytes),
                Err(e) => tracing::warn!(
                    object = %self.obj.name,
                    error = %e,
                    "a write to a shared object does not serialize: applied here only"
                ),
            }
        }
        out
    }
}

impl<T: Replicated> Serialize for Shared<T> {
    /// A shared object travels by reference: as its name.
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.obj.name)
    }
}

impl<'de, T: Replicated> Deserialize<'de> for Shared<T> {
    /// The name of a shared object, resolved to this process's copy
    /// ([`Shared::lookup`]); an unknown name or another type is an error.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        Shared::lookup(&name).map_err(|e| {
            // postcard drops a custom error's message: kept for the job's decoder.
            let msg = e.to_string();
            DECODE_ERROR.with(|d| *d.borrow_mut() = Some(msg.clone()));
            serde::de::Error::custom(msg)
        })
    }
}

thread_local! {
    static DECODE_ERROR: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
}

/// The message of the last shared object that did not resolve while a value was
/// deserialized on this thread (the decoder's own error may have lost it).
pub(crate) fn take_decode_error() -> Option<String> {
    DECODE_ERROR.with(|d| d.borrow_mut().take())
}

/// Installs the pool's link (writes are broadcast through it from now on).
pub(crate) fn attach(link: Arc<dyn Link>) {
    *TABLE.link.write() = Some(link);
}

/// Removes the pool's link (writes stay local).
pub(crate) fn detach() {
    *TABLE.link.write() = None;
}

/// A write of another member arrived: applied to the local copy. An unknown object
/// (not created here yet, or dropped) is skipped: best effort, guards repair it.
pub(crate) fn apply_remote(name: &str, op: &[u8]) -> Result<bool, SatinError> {
    let Some(obj) = erased(name) else {
        return Ok(false);
    };
    obj.apply_wire(op)?;
    bump();
    Ok(true)
}

/// Snapshots of every live shared object of this process: (name, state).
pub(crate) fn snapshots() -> Vec<(String, Vec<u8>)> {
    let live: Vec<(String, Arc<dyn Erased>)> = TABLE
        .objects
        .lock()
        .iter()
        .filter_map(|(n, e)| Some((n.clone(), e.erased.upgrade()?)))
        .collect();
    live.into_iter()
        .filter_map(|(n, o)| match o.snapshot() {
            Ok(b) => Some((n, b)),
            Err(e) => {
                tracing::warn!(error = %e, "a shared object's copy is not sent");
                None
            }
        })
        .collect()
}

/// Another member's copy of object `name` arrived (a guard asked for it): it
/// replaces the local one. `false` for an object that does not exist here.
pub(crate) fn restore(name: &str, state: &[u8]) -> Result<bool, SatinError> {
    let Some(obj) = erased(name) else {
        return Ok(false);
    };
    obj.restore(state)?;
    bump();
    Ok(true)
}

/// When a guard that does not hold waits, fetches, and gives up: the policy of
/// the wait of a stolen job's guard, a pure function of the time waited ([`GuardPolicy::step`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GuardPolicy {
    /// Wait this long for pushed writes before the first fetch.
    pub first_fetch: Duration,
    /// Fetch again this often while the guard still fails (a copy may have come
    /// before the writes it needs were applied at its sender).
    pub refetch: Duration,
    /// Give up (the job fails) after this long.
    pub patience: Duration,
}

impl Default for GuardPolicy {
    fn default() -> Self {
        GuardPolicy {
            first_fetch: Duration::from_millis(20),
            refetch: Duration::from_millis(500),
            patience: Duration::from_secs(30),
        }
    }
}

/// What a failing guard does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GuardStep {
    /// Ask the job's sender for its copies now.
    Fetch,
    /// Wait for a change of a local copy, at most this long.
    Wait(Duration),
    /// Stop waiting: the job fails.
    GiveUp,
}

impl GuardPolicy {
    /// The next step of a guard that has failed for `waited` and fetched `fetches`
    /// times so far.
    pub fn step(&self, waited: Duration, fetches: u32) -> GuardStep {
        if waited >= self.patience {
            return GuardStep::GiveUp;
        }
        let next_fetch = self
            .first_fetch
            .saturating_add(self.refetch.saturating_mul(fetches));
        if waited >= next_fetch {
            return GuardStep::Fetch;
        }
        GuardStep::Wait(next_fetch.min(self.patience) - waited)
    }
}

/// What a guard's wait did: for the statistics.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GuardWait {
    pub waited: bool,
    pub fetches: u32,
}

/// Waits until `holds()` (a stolen job's guard) is true, following `policy`:
/// `fetch()` asks the job's sender for its copies; `aborted()` ends the wait early
/// ([`SatinError::Aborted`]). `job` names the job in the timeout's error. Returns what
/// the wait did (for the statistics) and whether the guard came to hold.
pub(crate) fn wait_for_guard(
    job: &str,
    holds: &dyn Fn() -> bool,
    aborted: &dyn Fn() -> bool,
    fetch: Option<&dyn Fn()>,
    policy: GuardPolicy,
) -> (GuardWait, Result<(), SatinError>) {
    let mut w = GuardWait::default();
    let start = Instant::now();
    loop {
        let seen = *TABLE.changes.lock();
        if holds() {
            return (w, Ok(()));
        }
        w.waited = true;
        if aborted() {
            return (w, Err(SatinError::Aborted));
        }
        match policy.step(start.elapsed(), w.fetches) {
            GuardStep::GiveUp => {
                let e = SatinError::GuardTimeout {
                    job: job.to_string(),
                    waited_ms: start.elapsed().as_millis() as u64,
                };
                return (w, Err(e));
            }
            GuardStep::Fetch => {
                w.fetches += 1;
                if let Some(f) = fetch {
                    f();
                }
            }
            GuardStep::Wait(d) => {
                // Bounded: woken by any change of a copy, or at the step's end; the
                // abort flag is read again at least every 100 ms.
                let until = Instant::now() + d.min(Duration::from_millis(100));
                let mut changes = TABLE.changes.lock();
                while *changes == seen {
                    if TABLE.changed.wait_until(&mut changes, until).timed_out() {
                        break;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

    #[derive(Serialize, Deserialize, Debug, PartialEq)]
    struct Counter(u64);
    impl Replicated for Counter {
        type Op = u64;
        type Output = u64;
        fn apply(&mut self, add: &u64) -> u64 {
            self.0 += add;
            self.0
        }
    }

    #[derive(Serialize, Deserialize)]
    struct Other(u8);
    impl Replicated for Other {
        type Op = u8;
        type Output = ();
        fn apply(&mut self, _: &u8) {}
    }

    #[test]
    fn writes_apply_locally_and_return_the_output() {
        let c = Shared::new("t-writes", Counter(1)).unwrap();
        assert_eq!(c.write(2), 3);
        assert_eq!(c.read(|c| c.0), 3);
        assert_eq!(c.clone().write(4), 7);
        assert_eq!(c.name(), "t-writes");
    }

    #[test]
    fn names_are_unique_while_the_object_lives_and_free_after() {
        let a = Shared::new("t-unique", Counter(0)).unwrap();
        let e = Shared::new("t-unique", Counter(0)).unwrap_err();
        assert!(e.to_string().contains("exists already"), "{e}");
        drop(a);
        let b = Shared::new("t-unique", Counter(5)).unwrap();
        assert_eq!(b.read(|c| c.0), 5);
        assert!(Shared::new("", Counter(0)).is_err());
        assert!(Shared::new("x".repeat(MAX_NAME + 1), Counter(0)).is_err());
    }

    #[test]
    fn a_handle_travels_by_name_and_resolves_to_the_local_copy() {
        let c = Shared::new("t-wire", Counter(9)).unwrap();
        let bytes = postcard::to_allocvec(&c).unwrap();
        assert_eq!(bytes.len(), 1 + "t-wire".len());
        let d: Shared<Counter> = postcard::from_bytes(&bytes).unwrap();
        d.write(1);
        assert_eq!(c.read(|c| c.0), 10, "the same copy");
        // Another type under that name, and an unknown name, do not decode.
        assert!(postcard::from_bytes::<Shared<Other>>(&bytes).is_err());
        let _ = take_decode_error();
        let unknown = postcard::to_allocvec("t-nobody").unwrap();
        assert!(postcard::from_bytes::<Shared<Counter>>(&unknown).is_err());
        assert!(take_decode_error().unwrap().contains("'t-nobody'"));
        assert!(Shared::<Counter>::lookup("t-nobody")
            .unwrap_err()
            .to_string()
            .contains("no shared object named 't-nobody'"));
    }

    #[test]
    fn remote_writes_and_copies_apply_and_bad_bytes_are_errors() {
        let c = Shared::new("t-remote", Counter(0)).unwrap();
        let op = postcard::to_allocvec(&5u64).unwrap();
        assert!(apply_remote("t-remote", &op).unwrap());
        assert_eq!(c.read(|c| c.0), 5);
        assert!(!apply_remote("t-absent", &op).unwrap());
        assert!(apply_remote("t-remote", &[0xff, 0xff]).is_err());
        assert_eq!(c.read(|c| c.0), 5, "a bad write changes nothing");
        let snap = snapshots()
            .into_iter()
            .find(|(n, _)| n == "t-remote")
            .unwrap()
            .1;
        c.write(100);
        assert!(restore("t-remote", &snap).unwrap());
        assert_eq!(c.read(|c| c.0), 5);
        assert!(restore("t-remote", &[]).is_err());
        assert_eq!(c.read(|c| c.0), 5);
    }

    #[test]
    fn the_guard_policy_waits_then_fetches_periodically_then_gives_up() {
        let p = GuardPolicy {
            first_fetch: Duration::from_millis(20),
            refetch: Duration::from_millis(500),
            patience: Duration::from_secs(2),
        };
        let ms = Duration::from_millis;
        assert_eq!(p.step(ms(0), 0), GuardStep::Wait(ms(20)));
        assert_eq!(p.step(ms(5), 0), GuardStep::Wait(ms(15)));
        assert_eq!(p.step(ms(20), 0), GuardStep::Fetch);
        assert_eq!(p.step(ms(21), 1), GuardStep::Wait(ms(499)));
        assert_eq!(p.step(ms(520), 1), GuardStep::Fetch);
        assert_eq!(p.step(ms(1900), 4), GuardStep::Wait(ms(100)));
        assert_eq!(p.step(ms(2000), 4), GuardStep::GiveUp);
        assert_eq!(p.step(ms(9000), 0), GuardStep::GiveUp);
    }

    #[test]
    fn a_guard_waits_for_a_write_of_another_thread() {
        let c = Shared::new("t-guard", Counter(0)).unwrap();
        let writer = {
            let c = c.clone();
            std::thread::spawn(move || {
                c.write(1);
            })
        };
        let holds = || c.read(|c| c.0 == 1);
        let (w, r) = wait_for_guard(
            "t",
            &holds,
            &|| false,
            None,
            GuardPolicy {
                patience: Duration::from_secs(60),
                ..GuardPolicy::default()
            },
        );
        r.unwrap();
        writer.join().unwrap();
        assert!(holds());
        // Without a fetcher, fetch steps only count.
        let _ = w;
    }

    #[test]
    fn a_guard_fetches_and_then_gives_up_or_stops_when_aborted() {
        let fetched = AtomicU64::new(0);
        let fetch = || {
            fetched.fetch_add(1, Relaxed);
        };
        let policy = GuardPolicy {
            first_fetch: Duration::ZERO,
            refetch: Duration::from_millis(10),
            patience: Duration::from_millis(50),
        };
        let (w, r) = wait_for_guard("j", &|| false, &|| false, Some(&fetch), policy);
        let e = r.unwrap_err();
        assert!(matches!(e, SatinError::GuardTimeout { ref job, .. } if job == "j"));
        assert!(fetched.load(Relaxed) >= 1);
        assert!(w.waited);
        assert_eq!(u64::from(w.fetches), fetched.load(Relaxed));
        let (_, r) = wait_for_guard("j", &|| false, &|| true, Some(&fetch), policy);
        assert_eq!(r.unwrap_err(), SatinError::Aborted);
        // A guard that holds costs nothing.
        let (w, r) = wait_for_guard("j", &|| true, &|| true, None, policy);
        r.unwrap();
        assert_eq!(w, GuardWait::default());
    }
}
