//! One member of a launched pool that exercises RMI across processes (over TCP) and
//! checks the outcome itself. Usage (under the launcher): `rmi-pool-check SCENARIO`:
//!
//! - `calls`: member-0 exports a service and binds it as "svc"; every other member looks
//!   it up and makes blocking, async and one-way calls, gets a typed remote error, and
//!   passes a reference to an object of its own, which the server calls back; then it
//!   reports done, and member-0 ends when all have;
//! - `kill`: member-1 exports a service and binds it as "victim"; member-0 calls its
//!   `hold` method, during which member-1 aborts; member-0 must see
//!   `RmiError::ConnectionLost` well within the call's timeout.
//!
//! Exits 0 when the checks pass, 1 with a message otherwise.

#![forbid(unsafe_code)]

use std::process::ExitCode;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use ibis_rmi::{remote, Rmi, RmiError, Stub};
use ibis_tests::scenario;

const WAIT: Duration = Duration::from_secs(60);

type Res<T> = Result<T, Box<dyn std::error::Error>>;

#[remote]
trait Service {
    fn add(&self, a: i64, b: i64) -> Result<i64, RmiError>;
    fn sum(&self, v: &[f64]) -> Result<f64, RmiError>;
    fn checked_div(&self, a: i64, b: i64) -> Result<i64, DivError>;
    #[oneway]
    fn note(&self, n: i64);
    #[nonblocking]
    fn noted(&self) -> Result<i64, RmiError>;
    fn call_back(&self, c: CallbackRef, n: u32) -> Result<u32, RmiError>;
    /// Blocks (the `kill` scenario's server aborts meanwhile).
    fn hold(&self) -> Result<(), RmiError>;
    #[nonblocking]
    fn done(&self) -> Result<(), RmiError>;
}

#[remote]
trait Callback {
    fn ping(&self, i: u32) -> Result<u32, RmiError>;
}

#[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
enum DivError {
    ByZero,
    Rmi(RmiError),
}

impl From<RmiError> for DivError {
    fn from(e: RmiError) -> Self {
        DivError::Rmi(e)
    }
}

struct Server {
    rmi: Rmi,
    noted: AtomicI64,
    abort_on_hold: bool,
}

impl Service for Server {
    fn add(&self, a: i64, b: i64) -> Result<i64, RmiError> {
        Ok(a + b)
    }
    fn sum(&self, v: &[f64]) -> Result<f64, RmiError> {
        Ok(v.iter().sum())
    }
    fn checked_div(&self, a: i64, b: i64) -> Result<i64, DivError> {
        a.checked_div(b).ok_or(DivError::ByZero)
    }
    fn note(&self, n: i64) {
        self.noted.fetch_add(n, Ordering::SeqCst);
    }
    fn noted(&self) -> Result<i64, RmiError> {
        Ok(self.noted.load(Ordering::SeqCst))
    }
    fn call_back(&self, c: CallbackRef, n: u32) -> Result<u32, RmiError> {
        let stub = self.rmi.stub(&c)?;
        let mut total = 0;
        for i in 0..n {
            total += stub.ping(i)?;
        }
        Ok(total)
    }
    fn hold(&self) -> Result<(), RmiError> {
        if self.abort_on_hold {
            println!("server: call arrived, aborting in 100 ms");
            std::thread::spawn(|| {
                std::thread::sleep(Duration::from_millis(100));
                std::process::abort();
            });
        }
        std::thread::sleep(WAIT);
        Ok(())
    }
    fn done(&self) -> Result<(), RmiError> {
        DONE.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

struct Pinger;

impl Callback for Pinger {
    fn ping(&self, i: u32) -> Result<u32, RmiError> {
        Ok(i * 2)
    }
}

fn check(ok: bool, what: impl FnOnce() -> String) -> Res<()> {
    if ok {
        Ok(())
    } else {
        Err(what().into())
    }
}

fn main() -> ExitCode {
    scenario::main(
        "rmi-pool-check",
        "One member of a launched pool that checks RMI across processes.",
        &["calls", "kill"],
        run,
    )
}

fn run(scenario: &str) -> Res<()> {
    let ibis = ibis_rmi::ibis_builder()?.from_env()?.build()?;
    let name = ibis.identifier().name().to_string();
    let n = ibis.registry().pool_size().unwrap_or(1);
    ibis.registry().wait_until_pool_closed(Some(WAIT))?;
    let members = ibis.registry().members()?.len().max(n);
    let rmi = Rmi::builder()
        .timeout(Duration::from_secs(30))
        .start(ibis)?;
    let r = match scenario {
        "calls" if name == "member-0" => serve(&rmi, "svc", false, members - 1),
        "calls" => client(&rmi),
        "kill" if name == "member-1" => serve(&rmi, "victim", true, 0),
        "kill" if name == "member-0" => kill_client(&rmi),
        "kill" => Ok(()),
        other => Err(format!("unknown scenario {other:?}").into()),
    };
    rmi.end();
    r
}

fn lookup(rmi: &Rmi, name: &str) -> Res<ServiceStub> {
    let deadline = Instant::now() + WAIT;
    loop {
        match rmi.lookup::<dyn Service>(name) {
            Ok(s) => return Ok(s),
            Err(RmiError::NotBound(_)) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20))
            }
            Err(e) => return Err(e.into()),
        }
    }
}

fn serve(rmi: &Rmi, name: &str, abort_on_hold: bool, clients: usize) -> Res<()> {
    let obj = Server {
        rmi: rmi.clone(),
        noted: AtomicI64::new(0),
        abort_on_hold,
    };
    let skel = ServiceSkeleton::new(obj);
    let r = rmi.export(skel)?;
    rmi.bind(name, &r)?;
    println!("{name} bound at {}", r);
    if abort_on_hold {
        // Stay until the client's call makes us abort (bounded).
        std::thread::sleep(WAIT);
        return Err("the client never called hold".into());
    }
    // Serve until every client reported done (bounded).
    let deadline = Instant::now() + WAIT;
    while DONE.load(Ordering::SeqCst) < clients {
        check(Instant::now() < deadline, || {
            format!(
                "only {} of {clients} clients finished",
                DONE.load(Ordering::SeqCst)
            )
        })?;
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// The `done` calls the server got.
static DONE: AtomicUsize = AtomicUsize::new(0);

fn client(rmi: &Rmi) -> Res<()> {
    let svc = lookup(rmi, "svc")?;
    let me: i64 = rmi.identifier().id().get() as i64;
    // Blocking.
    for i in 0..100 {
        check(svc.add(i, me)? == i + me, || {
            format!("add({i}, {me}) wrong")
        })?;
    }
    let v: Vec<f64> = (0..10_000).map(f64::from).collect();
    check(svc.sum(&v)? == v.iter().sum::<f64>(), || "sum wrong".into())?;
    // A typed remote error.
    check(svc.checked_div(1, 0) == Err(DivError::ByZero), || {
        "division by zero not reported as DivError::ByZero".into()
    })?;
    check(svc.checked_div(9, 3) == Ok(3), || "9 / 3 wrong".into())?;
    // Async, awaited out of order.
    let pending: Vec<_> = (0..20).map(|i| svc.add_async(i, 1000)).collect();
    for (i, p) in pending.into_iter().enumerate().rev() {
        check(p.wait()? == i as i64 + 1000, || {
            format!("async add {i} wrong")
        })?;
    }
    // One-way: the server's total grows by our notes (others add theirs too).
    let before = svc.noted()?;
    for _ in 0..10 {
        svc.note(1);
    }
    let deadline = Instant::now() + WAIT;
    while svc.noted()? < before + 10 {
        check(Instant::now() < deadline, || "one-way notes lost".into())?;
        std::thread::sleep(Duration::from_millis(5));
    }
    // A reference to our own object, called back by the server.
    let cb: CallbackRef = rmi.export(CallbackSkeleton::new(Pinger))?;
    check(svc.call_back(cb, 10)? == 90, || {
        "call back sum wrong".into()
    })?;
    // Naming sees the service.
    check(rmi.list()?.contains(&"svc".to_string()), || {
        "svc not listed".into()
    })?;
    check(svc.remote_ref().member() != rmi.identifier(), || {
        "service reference names the wrong member".into()
    })?;
    svc.done()?;
    println!("client {me}: all calls checked");
    Ok(())
}

fn kill_client(rmi: &Rmi) -> Res<()> {
    let victim = lookup(rmi, "victim")?;
    check(victim.add(1, 2)? == 3, || "victim add wrong".into())?;
    let timeout = Duration::from_secs(30);
    let t0 = Instant::now();
    let r = victim.with_timeout(timeout).hold();
    let took = t0.elapsed();
    println!("hold ended after {took:?}: {r:?}");
    check(matches!(r, Err(RmiError::ConnectionLost(_))), || {
        format!("expected ConnectionLost, got {r:?}")
    })?;
    check(took < timeout, || format!("took {took:?}"))?;
    Ok(())
}
