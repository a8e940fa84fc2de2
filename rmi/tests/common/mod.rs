//! Shared by the RMI integration tests: runtimes in one process over a chosen transport,
//! and the test interfaces.
#![allow(dead_code)]

use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::Mutex;
use std::time::Duration;

use ibis_rmi::{remote, RemoteRef, Rmi, RmiError};
use serde::{Deserialize, Serialize};

#[path = "../../../tests/common/pool.rs"]
mod unique;
pub use unique::pool;

/// A generous bound for anything that should happen "soon" on a loaded machine.
pub const LONG: Duration = Duration::from_secs(20);

/// The transports every test runs over.
pub const TRANSPORTS: [&str; 2] = ["inproc", "tcp"];

/// `n` runtimes in one pool, in this process, over `transport`.
pub fn runtimes(transport: &str, n: usize, builder: ibis_rmi::RmiBuilder) -> Vec<Rmi> {
    let reg = ipl::EmbeddedRegistry::new();
    let secret = ipl_auth::PoolSecret::generate().expect("secret");
    let p = pool(transport);
    (0..n)
        .map(|i| {
            let ibis = ibis_rmi::ibis_builder()
                .expect("port type")
                .pool(p.as_str())
                .name(format!("m{i}"))
                .registry(&reg)
                .secret(secret.clone())
                .prefer_transport(transport)
                .build()
                .expect("ibis builds");
            builder.clone().start(ibis).expect("rmi starts")
        })
        .collect()
}

/// Two runtimes (server, client) with default options.
pub fn pair(transport: &str) -> (Rmi, Rmi) {
    let mut v = runtimes(transport, 2, Rmi::builder());
    let c = v.pop().unwrap();
    let s = v.pop().unwrap();
    (s, c)
}

/// An application error type: the remote side's own failures plus the call's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum BankError {
    /// Not enough money.
    Insufficient { have: i64, want: i64 },
    /// The call itself failed.
    Rmi(RmiError),
}

impl From<RmiError> for BankError {
    fn from(e: RmiError) -> Self {
        BankError::Rmi(e)
    }
}

/// A binary tree, as an argument.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tree {
    pub value: i32,
    pub left: Option<Box<Tree>>,
    pub right: Option<Box<Tree>>,
}

impl Tree {
    pub fn build(depth: u32, next: &mut i32) -> Option<Box<Tree>> {
        if depth == 0 {
            return None;
        }
        *next += 1;
        let value = *next;
        Some(Box::new(Tree {
            value,
            left: Tree::build(depth - 1, next),
            right: Tree::build(depth - 1, next),
        }))
    }
    pub fn sum(&self) -> i64 {
        self.value as i64
            + self.left.as_ref().map_or(0, |t| t.sum())
            + self.right.as_ref().map_or(0, |t| t.sum())
    }
}

#[remote]
pub trait Bank {
    fn deposit(&self, amount: i64) -> Result<i64, BankError>;
    fn withdraw(&self, amount: i64) -> Result<i64, BankError>;
    #[nonblocking]
    fn balance(&self) -> Result<i64, BankError>;
}

#[derive(Default)]
pub struct Account(pub AtomicI64);

impl Bank for Account {
    fn deposit(&self, amount: i64) -> Result<i64, BankError> {
        Ok(self.0.fetch_add(amount, Ordering::SeqCst) + amount)
    }
    fn withdraw(&self, amount: i64) -> Result<i64, BankError> {
        let have = self.0.load(Ordering::SeqCst);
        if have < amount {
            return Err(BankError::Insufficient { have, want: amount });
        }
        Ok(self.0.fetch_sub(amount, Ordering::SeqCst) - amount)
    }
    fn balance(&self) -> Result<i64, BankError> {
        Ok(self.0.load(Ordering::SeqCst))
    }
}

#[remote]
pub trait Service {
    fn add(&self, a: i32, b: i32) -> Result<i32, RmiError>;
    fn concat(&self, parts: Vec<String>, sep: &str) -> Result<String, RmiError>;
    fn checksum(&self, data: &[u8]) -> Result<u64, RmiError>;
    fn tree_sum(&self, t: &Tree) -> Result<i64, RmiError>;
    fn sleep_ms(&self, ms: u64) -> Result<u64, RmiError>;
    fn boom(&self) -> Result<(), RmiError>;
    #[oneway]
    fn note(&self, n: i64);
    #[oneway]
    fn note_checked(&self, n: i64) -> Result<(), RmiError>;
    #[nonblocking]
    fn noted(&self) -> Result<i64, RmiError>;
    /// Blocks until `release` is called (or 20 s pass); reports it started.
    fn hold(&self) -> Result<(), RmiError>;
    /// Sums of primitive arrays, run in the receiving thread: the borrowed ones are
    /// read from the request in place, the owned one copied.
    #[nonblocking]
    fn weigh(&self, b: &[u8], i: &[i32], d: &[f64], owned: Vec<i64>) -> Result<Sums, RmiError>;
    /// `weigh` on a worker (every array copied out of the request first).
    fn weigh_pooled(
        &self,
        b: &[u8],
        i: &[i32],
        d: &[f64],
        owned: Vec<i64>,
    ) -> Result<Sums, RmiError>;
}

/// What `weigh` returns: the sum and length of each array.
pub type Sums = [(i64, usize); 4];

/// `weigh`'s answer, computed locally.
pub fn sums(b: &[u8], i: &[i32], d: &[f64], owned: &[i64]) -> Sums {
    [
        (b.iter().map(|&x| x as i64).sum(), b.len()),
        (i.iter().map(|&x| x as i64).sum(), i.len()),
        (d.iter().map(|&x| x as i64).sum(), d.len()),
        (owned.iter().sum(), owned.len()),
    ]
}

pub struct ServiceImpl {
    pub noted: AtomicI64,
    pub started: Mutex<Option<mpsc::Sender<()>>>,
    pub release: Mutex<Option<mpsc::Receiver<()>>>,
}

impl ServiceImpl {
    pub fn new() -> Self {
        ServiceImpl {
            noted: AtomicI64::new(0),
            started: Mutex::new(None),
            release: Mutex::new(None),
        }
    }

    /// A service whose `hold` reports its start on the receiver and then waits until
    /// the sender sends or is dropped.
    pub fn held() -> (Self, mpsc::Receiver<()>, mpsc::Sender<()>) {
        let obj = ServiceImpl::new();
        let (started_tx, started_rx) = mpsc::channel();
        let (release_tx, release_rx) = mpsc::channel();
        *obj.started.lock().unwrap() = Some(started_tx);
        *obj.release.lock().unwrap() = Some(release_rx);
        (obj, started_rx, release_tx)
    }
}

impl Service for ServiceImpl {
    fn add(&self, a: i32, b: i32) -> Result<i32, RmiError> {
        Ok(a + b)
    }
    fn concat(&self, parts: Vec<String>, sep: &str) -> Result<String, RmiError> {
        Ok(parts.join(sep))
    }
    fn checksum(&self, data: &[u8]) -> Result<u64, RmiError> {
        Ok(data.iter().map(|&b| b as u64).sum())
    }
    fn tree_sum(&self, t: &Tree) -> Result<i64, RmiError> {
        Ok(t.sum())
    }
    fn sleep_ms(&self, ms: u64) -> Result<u64, RmiError> {
        std::thread::sleep(Duration::from_millis(ms));
        Ok(ms)
    }
    fn boom(&self) -> Result<(), RmiError> {
        panic!("kaboom")
    }
    fn note(&self, n: i64) {
        self.noted.fetch_add(n, Ordering::SeqCst);
    }
    fn note_checked(&self, n: i64) -> Result<(), RmiError> {
        self.noted.fetch_add(n, Ordering::SeqCst);
        Ok(())
    }
    fn noted(&self) -> Result<i64, RmiError> {
        Ok(self.noted.load(Ordering::SeqCst))
    }
    fn weigh(&self, b: &[u8], i: &[i32], d: &[f64], owned: Vec<i64>) -> Result<Sums, RmiError> {
        Ok(sums(b, i, d, &owned))
    }
    fn weigh_pooled(
        &self,
        b: &[u8],
        i: &[i32],
        d: &[f64],
        owned: Vec<i64>,
    ) -> Result<Sums, RmiError> {
        Ok(sums(b, i, d, &owned))
    }
    fn hold(&self) -> Result<(), RmiError> {
        if let Some(tx) = self.started.lock().unwrap().as_ref() {
            let _ = tx.send(());
        }
        let rx = self.release.lock().unwrap().take();
        if let Some(rx) = rx {
            let _ = rx.recv_timeout(LONG);
        }
        Ok(())
    }
}

#[remote]
pub trait Counter {
    fn increment(&self) -> Result<u32, RmiError>;
    fn label(&self) -> Result<String, RmiError>;
}

pub struct CounterImpl {
    pub label: String,
    pub n: AtomicUsize,
}

impl Counter for CounterImpl {
    fn increment(&self) -> Result<u32, RmiError> {
        Ok(self.n.fetch_add(1, Ordering::SeqCst) as u32 + 1)
    }
    fn label(&self) -> Result<String, RmiError> {
        Ok(self.label.clone())
    }
}

#[remote]
pub trait Factory {
    /// Exports a new counter and returns its reference.
    fn make(&self, label: String) -> Result<CounterRef, RmiError>;
    /// Calls `increment` `times` times on the counter behind `r` (a reference passed as
    /// an argument), returning the last value.
    fn bump(&self, r: CounterRef, times: u32) -> Result<u32, RmiError>;
}

pub struct FactoryImpl {
    pub rmi: Rmi,
}

impl Factory for FactoryImpl {
    fn make(&self, label: String) -> Result<CounterRef, RmiError> {
        self.rmi.export(CounterSkeleton::new(CounterImpl {
            label,
            n: AtomicUsize::new(0),
        }))
    }
    fn bump(&self, r: CounterRef, times: u32) -> Result<u32, RmiError> {
        let c = self.rmi.stub(&r)?;
        let mut last = 0;
        for _ in 0..times {
            last = c.increment()?;
        }
        Ok(last)
    }
}

/// A reference to something, for type checks.
pub fn same_member<I: ?Sized>(r: &RemoteRef<I>, rmi: &Rmi) -> bool {
    r.member() == rmi.identifier()
}
