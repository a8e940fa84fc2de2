//! One member of a launched pool that exercises an IPL capability across processes and
//! checks the outcome itself. Usage (under `ipl-run -n N -- ipl-pool-check SCENARIO`):
//!
//! - `rpc`: the elected root serves add requests by upcall (figure 7.4); every other
//!   member makes calls over TCP and checks the answers;
//! - `multicast`: the root multicasts numbered messages with a large f64 array to all
//!   others, who check order and contents;
//! - `manytoone`: all others send numbered messages to one receive port of the root,
//!   which checks that every sender's messages arrive complete and in order;
//! - `election`: everybody races for one election, sends its view of the winner to the
//!   winner, which checks they agree and signals everybody to finish;
//! - `kill`: member 1 connects to the root, sends, and aborts; the root and the others
//!   must see it die (registry), and the root must see its connection lost.
//! - `transports`: every member connects to every other and sends it one message; the
//!   transport of each connection must be `IPL_CHECK_SAME` (default `shm`) to a member
//!   of its own cluster (run with one cluster per host) and `IPL_CHECK_OTHER` (default
//!   `tcp`) to the others; each member prints `transport <peer> <cluster> <name>` lines.
//! - `cut`: every member prints `ready` once the pool is closed; then the test cuts the
//!   host of member `IPL_CUT_VICTIM` (default `member-2`) off the network. The victim
//!   passes when its registry calls fail (heartbeats) within the wait; the others when
//!   the registry reports the victim `Died` and they then still elect and signal each
//!   other (the pool goes on without it).
//!
//! - `stranger-join`: run with a wrong `IPL_POOL_SECRET`; passes if the registry
//!   refuses the join;
//! - `stranger-connect`: run with a wrong secret and `IPL_TARGET` (a member's identifier,
//!   postcard in hex) outside the pool; passes if connecting to the member's port
//!   `inbox` over TCP is refused for the secret.
//!
//! Exits 0 when the checks pass, 1 with a message otherwise.

#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::time::{Duration, Instant};

use ipl::{
    Event, Ibis, IbisCapabilities as I, IbisIdentifier, PortCapabilities as P, PortType,
    ReadMessage,
};

const WAIT: Duration = Duration::from_secs(60);

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn fail(msg: String) -> Box<dyn std::error::Error> {
    msg.into()
}

fn object_type(extra: P) -> ipl::Result<PortType> {
    PortType::new(
        extra | P::SERIALIZATION_OBJECT | P::COMMUNICATION_RELIABLE | P::COMMUNICATION_FIFO,
    )
}

#[derive(serde::Serialize, serde::Deserialize, Debug)]
enum Req {
    Add(i64, i64),
    Bye,
}

/// One member of a launched pool: runs a scenario across the pool's processes and
/// checks its outcome (run it under `ipl-run`, which sets the pool's environment).
#[derive(clap::Parser, Debug)]
#[command(name = "ipl-pool-check")]
struct Args {
    /// The scenario to run.
    #[arg(value_parser = scenarios())]
    scenario: String,
}

/// Every scenario name: the pool scenarios and the two stranger checks.
fn scenarios() -> clap::builder::PossibleValuesParser {
    let names = ibis_tests::SCENARIOS
        .iter()
        .copied()
        .chain(["stranger-join", "stranger-connect"]);
    clap::builder::PossibleValuesParser::new(names)
}

fn main() {
    let args = <Args as clap::Parser>::parse();
    ipl_tools::init_tracing("warn");
    // Linked in, so that `IPL_TRANSPORT=shm|quic` works without plugin libraries.
    ipl::register_static_plugin(&ipl_transport_shm::PLUGIN);
    ipl::register_static_plugin(&ipl_transport_quic::PLUGIN);
    let scenario = args.scenario;
    match run(&scenario) {
        Ok(()) => println!("{scenario}: ok"),
        Err(e) => {
            println!("{scenario}: FAILED: {e}");
            std::process::exit(1);
        }
    }
}

fn run(scenario: &str) -> Res<()> {
    if scenario == "stranger-join" || scenario == "stranger-connect" {
        return stranger(scenario);
    }
    let req = object_type(P::CONNECTION_MANY_TO_ONE | P::RECEIVE_AUTO_UPCALLS)?;
    let rep = object_type(P::CONNECTION_ONE_TO_ONE | P::RECEIVE_EXPLICIT | P::RECEIVE_TIMEOUT)?;
    let mc = PortType::new(
        P::CONNECTION_ONE_TO_MANY
            | P::RECEIVE_TIMEOUT
            | P::SERIALIZATION_DATA
            | P::COMMUNICATION_NUMBERED
            | P::COMMUNICATION_RELIABLE
            | P::COMMUNICATION_FIFO,
    )?;
    let sink = PortType::new(
        P::CONNECTION_MANY_TO_ONE
            | P::CONNECTION_UPCALLS
            | P::RECEIVE_TIMEOUT
            | P::SERIALIZATION_OBJECT
            | P::COMMUNICATION_NUMBERED
            | P::COMMUNICATION_RELIABLE
            | P::COMMUNICATION_FIFO,
    )?;
    let ibis = Ibis::builder()
        .capabilities(I::MEMBERSHIP | I::ELECTIONS | I::SIGNALS | I::TERMINATION)
        .from_env()?
        .port_type(req)
        .port_type(rep)
        .port_type(mc)
        .port_type(sink)
        .port_type(mesh_type()?)
        .build()?;
    ibis.registry().wait_until_pool_closed(Some(WAIT))?;
    let members = ibis.registry().members()?;
    let root = ibis.registry().elect("root")?;
    let me = ibis.identifier().clone();
    let is_root = root == me;
    let others: Vec<IbisIdentifier> = members.iter().filter(|m| **m != root).cloned().collect();
    println!(
        "{} in cluster {} of a pool of {}; root {}; transports {}",
        me,
        me.cluster(),
        members.len(),
        root,
        ibis.transports_for(&req)?.join(",")
    );
    match scenario {
        "rpc" => rpc(&ibis, is_root, &root, others.len(), req, rep)?,
        "multicast" => multicast(&ibis, is_root, &others, mc)?,
        "manytoone" => manytoone(&ibis, is_root, &root, others.len(), sink)?,
        "election" => election(&ibis, &members, sink)?,
        "kill" => kill(&ibis, &members, sink)?,
        "transports" => transports(&ibis, &members)?,
        "cut" => cut(&ibis, &members)?,
        other => return Err(fail(format!("unknown scenario {other:?}"))),
    }
    ibis.end()?;
    Ok(())
}

fn rpc(
    ibis: &Ibis,
    is_root: bool,
    root: &IbisIdentifier,
    clients: usize,
    req: PortType,
    rep: PortType,
) -> Res<()> {
    const CALLS: i64 = 300;
    if is_root {
        let (tx, rx) = std::sync::mpsc::channel::<(ipl::SendPortIdentifier, Req)>();
        let port = ibis
            .receive_port(&req, "requests")
            .message_upcall(move |mut m: ReadMessage| {
                if let Ok(r) = m.read_object::<Req>() {
                    let _ = tx.send((m.origin().clone(), r));
                }
            })
            .create()?;
        port.enable_connections();
        port.enable_message_upcalls()?;
        let mut replies: HashMap<String, ipl::SendPort> = HashMap::new();
        let mut byes = 0;
        let deadline = Instant::now() + WAIT;
        while byes < clients {
            let left = deadline.saturating_duration_since(Instant::now());
            let (origin, r) = rx
                .recv_timeout(left)
                .map_err(|_| fail(format!("root: only {byes} of {clients} clients finished")))?;
            match r {
                Req::Bye => byes += 1,
                Req::Add(a, b) => {
                    let key = origin.to_string();
                    if !replies.contains_key(&key) {
                        let mut sp =
                            ibis.create_send_port(&rep, &format!("reply-{}", replies.len()))?;
                        sp.connect_to(&origin.ibis, "replies", WAIT)?;
                        replies.insert(key.clone(), sp);
                    }
                    let sp = replies
                        .get_mut(&key)
                        .ok_or_else(|| fail("reply port vanished".into()))?;
                    let mut w = sp.new_message()?;
                    w.write_object(&(a + b))?;
                    w.finish()?;
                }
            }
        }
        port.close(Some(Duration::from_secs(5)));
    } else {
        let replies = ibis.create_receive_port(&rep, "replies")?;
        replies.enable_connections();
        let mut sp = ibis.create_send_port(&req, "calls")?;
        sp.connect_to(root, "requests", WAIT)?;
        let mine = ibis.identifier().id().get() as i64;
        for i in 0..CALLS {
            let mut w = sp.new_message()?;
            w.write_object(&Req::Add(i, mine))?;
            w.finish()?;
            let mut m = replies.receive_timeout(WAIT)?;
            let sum: i64 = m.read_object()?;
            if sum != i + mine {
                return Err(fail(format!("call {i}: got {sum}, expected {}", i + mine)));
            }
        }
        let mut w = sp.new_message()?;
        w.write_object(&Req::Bye)?;
        w.finish()?;
        sp.close();
    }
    Ok(())
}

fn multicast(ibis: &Ibis, is_root: bool, others: &[IbisIdentifier], mc: PortType) -> Res<()> {
    const MESSAGES: u64 = 200;
    let data: Vec<f64> = (0..100_000).map(|i| i as f64 * 0.5).collect();
    if is_root {
        let mut sp = ibis.create_send_port(&mc, "mc")?;
        for o in others {
            sp.connect_to(o, "mc", WAIT)?;
        }
        for i in 0..MESSAGES {
            let mut w = sp.new_message()?;
            w.write_u64(i)?;
            w.write_array(&data)?;
            w.finish()?;
        }
        sp.close();
    } else {
        let rp = ibis.create_receive_port(&mc, "mc")?;
        rp.enable_connections();
        let mut got = vec![0f64; data.len()];
        for i in 0..MESSAGES {
            let mut m = rp.receive_timeout(WAIT)?;
            let n = m.read_u64()?;
            let seq = m.sequence_number()?;
            m.read_array_into(&mut got)?;
            if n != i || seq != i {
                return Err(fail(format!("message {i} arrived as {n} (seq {seq})")));
            }
            if got != data {
                return Err(fail(format!("message {i}: array differs")));
            }
        }
    }
    Ok(())
}

fn manytoone(
    ibis: &Ibis,
    is_root: bool,
    root: &IbisIdentifier,
    senders: usize,
    sink: PortType,
) -> Res<()> {
    const MESSAGES: u64 = 500;
    if is_root {
        let rp = ibis.create_receive_port(&sink, "sink")?;
        rp.enable_connections();
        let mut next: HashMap<String, u64> = HashMap::new();
        for _ in 0..MESSAGES * senders as u64 {
            let mut m = rp.receive_timeout(WAIT)?;
            let (from, n): (u64, u64) = m.read_object()?;
            let origin = m.origin().clone();
            let expected = next.entry(origin.to_string()).or_insert(0);
            if n != *expected || m.sequence_number()? != n || from != origin.ibis.id().get() {
                return Err(fail(format!("from {origin}: got {n}, expected {expected}")));
            }
            *expected += 1;
        }
        if next.len() != senders || next.values().any(|v| *v != MESSAGES) {
            return Err(fail(format!("counts per sender: {next:?}")));
        }
        // Everybody's messages are in: let the senders go.
        ibis.registry()
            .signal("done", &ibis.registry().members()?)?;
        wait_signal(ibis, "done")?;
    } else {
        let mut sp = ibis.create_send_port(&sink, "to-sink")?;
        sp.connect_to(root, "sink", WAIT)?;
        let me = ibis.identifier().id().get();
        for i in 0..MESSAGES {
            let mut w = sp.new_message()?;
            w.write_object(&(me, i))?;
            w.finish()?;
        }
        wait_signal(ibis, "done")?;
        sp.close();
    }
    Ok(())
}

fn wait_signal(ibis: &Ibis, name: &str) -> Res<()> {
    let deadline = Instant::now() + WAIT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match ibis.registry().next_event(Some(left))? {
            Some(Event::Signal { signal, .. }) if signal == name => return Ok(()),
            Some(_) => {}
            None => return Err(fail(format!("no signal {name:?} within {WAIT:?}"))),
        }
    }
}

fn election(ibis: &Ibis, members: &[IbisIdentifier], sink: PortType) -> Res<()> {
    let winner = ibis.registry().elect("leader")?;
    let rp = if *ibis.identifier() == winner {
        let rp = ibis.create_receive_port(&sink, "votes")?;
        rp.enable_connections();
        Some(rp)
    } else {
        None
    };
    let mut sp = ibis.create_send_port(&sink, "vote")?;
    sp.connect_to(&winner, "votes", WAIT)?;
    let mut w = sp.new_message()?;
    w.write_object(&winner.id().get())?;
    w.finish()?;
    if let Some(rp) = rp {
        for _ in 0..members.len() {
            let mut m = rp.receive_timeout(WAIT)?;
            let vote: u64 = m.read_object()?;
            if vote != winner.id().get() {
                return Err(fail(format!("{} saw winner {vote}", m.origin())));
            }
        }
        println!("all {} members agree on leader {winner}", members.len());
        ibis.registry().signal("done", members)?;
    }
    wait_signal(ibis, "done")?;
    sp.close();
    Ok(())
}

struct Lost(std::sync::mpsc::Sender<ipl::Disconnect>);

impl ipl::ReceivePortConnectUpcall for Lost {
    fn lost_connection(
        &self,
        _: &ipl::ReceivePortIdentifier,
        _: &ipl::SendPortIdentifier,
        why: &ipl::Disconnect,
    ) {
        let _ = self.0.send(why.clone());
    }
}

/// The port type of the `transports` scenario: everybody to everybody.
fn mesh_type() -> ipl::Result<PortType> {
    PortType::new(
        P::CONNECTION_MANY_TO_ONE
            | P::CONNECTION_ONE_TO_MANY
            | P::RECEIVE_EXPLICIT
            | P::RECEIVE_TIMEOUT
            | P::SERIALIZATION_DATA
            | P::COMMUNICATION_RELIABLE
            | P::COMMUNICATION_FIFO,
    )
}

/// See the module documentation.
fn cut(ibis: &Ibis, members: &[IbisIdentifier]) -> Res<()> {
    use std::io::Write as _;
    let victim_name = std::env::var("IPL_CUT_VICTIM").unwrap_or_else(|_| "member-2".into());
    let victim = members
        .iter()
        .find(|m| m.name() == victim_name)
        .cloned()
        .ok_or_else(|| fail(format!("no {victim_name} in the pool")))?;
    println!("ready");
    std::io::stdout().flush()?;
    let deadline = Instant::now() + WAIT;
    if *ibis.identifier() == victim {
        // Cut off: the registry's heartbeats stop, and a call fails within their bound.
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(fail("cut off, but the registry never failed".into()));
            }
            if let Err(e) = ibis
                .registry()
                .next_event(Some(left.min(Duration::from_secs(1))))
            {
                println!("lost the registry: {e}");
                // Nothing to leave: end without the goodbye.
                std::process::exit(0);
            }
        }
    }
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match ibis.registry().next_event(Some(left))? {
            Some(Event::Died(who)) if who == victim => break,
            Some(_) => {}
            None => return Err(fail(format!("{victim} was not reported dead"))),
        }
    }
    println!("saw {victim} die");
    let survivors: Vec<IbisIdentifier> = members
        .iter()
        .filter(|m| **m != victim && *m != ibis.identifier())
        .cloned()
        .collect();
    let leader = ibis.registry().elect("after-cut")?;
    if leader == victim {
        return Err(fail(
            "the dead member won an election after its death".into(),
        ));
    }
    ibis.registry().signal("alive", &survivors)?;
    for _ in 0..survivors.len() {
        wait_signal(ibis, "alive")?;
    }
    println!(
        "the pool goes on: {} survivors, leader {leader}",
        survivors.len() + 1
    );
    Ok(())
}

/// See the module documentation.
fn transports(ibis: &Ibis, members: &[IbisIdentifier]) -> Res<()> {
    let want = |var: &str, default: &str| std::env::var(var).unwrap_or_else(|_| default.into());
    let (same, other) = (
        want("IPL_CHECK_SAME", "shm"),
        want("IPL_CHECK_OTHER", "tcp"),
    );
    let t = mesh_type()?;
    let me = ibis.identifier().clone();
    let rp = ibis.create_receive_port(&t, "mesh")?;
    rp.enable_connections();
    let mut sp = ibis.create_send_port(&t, "mesh-out")?;
    let peers: Vec<&IbisIdentifier> = members.iter().filter(|m| **m != me).collect();
    for p in &peers {
        sp.connect_to(p, "mesh", WAIT)?;
    }
    let mut wrong = Vec::new();
    for (to, name) in sp.connection_transports() {
        let cluster = to.ibis.cluster().to_string();
        println!("transport {} {cluster} {name}", to.ibis);
        let expected = if cluster == me.cluster() {
            &same
        } else {
            &other
        };
        if name != expected {
            wrong.push(format!("{} ({cluster}): {name}, not {expected}", to.ibis));
        }
    }
    let mut w = sp.new_message()?;
    w.write_u32(me.id().get() as u32)?;
    w.finish()?;
    for _ in 0..peers.len() {
        let mut m = rp.receive_timeout(WAIT)?;
        m.read_u32()?;
        m.finish();
    }
    sp.close();
    rp.close(Some(Duration::from_secs(5)));
    if wrong.is_empty() {
        Ok(())
    } else {
        Err(fail(format!(
            "connections over the wrong transport: {}",
            wrong.join("; ")
        )))
    }
}

fn kill(ibis: &Ibis, members: &[IbisIdentifier], sink: PortType) -> Res<()> {
    // The roles come from the member list taken when the pool closed, before anybody
    // can have died: member-0 owns the port, member-1 is the victim.
    let find = |name: &str| {
        members
            .iter()
            .find(|m| m.name() == name)
            .cloned()
            .ok_or_else(|| fail(format!("no {name} in the pool")))
    };
    let (owner, victim) = (find("member-0")?, find("member-1")?);
    let me = ibis.identifier().clone();
    let (tx, rx) = std::sync::mpsc::channel();
    let rp = if me == owner {
        let rp = ibis
            .receive_port(&sink, "sink")
            .connection_upcall(Lost(tx))
            .create()?;
        rp.enable_connections();
        Some(rp)
    } else {
        None
    };
    let root = &owner;
    if me != victim {
        // Tell the victim we are ready to watch it die.
        ibis.registry()
            .signal("armed", std::slice::from_ref(&victim))?;
    } else {
        for _ in 1..members.len() {
            wait_signal(ibis, "armed")?;
        }
    }
    if *ibis.identifier() == victim {
        let mut sp = ibis.create_send_port(&sink, "doomed")?;
        sp.connect_to(root, "sink", WAIT)?;
        let mut w = sp.new_message()?;
        w.write_object(&(0u64, 0u64))?;
        w.finish()?;
        println!("member-1 aborts now");
        std::process::abort();
    }
    // Everybody else: the registry must report the victim dead.
    let deadline = Instant::now() + WAIT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match ibis.registry().next_event(Some(left))? {
            Some(Event::Died(who)) if who == victim => break,
            Some(_) => {}
            None => return Err(fail("the killed member was not reported dead".into())),
        }
    }
    println!("saw {victim} die");
    if let Some(rp) = rp {
        let mut m = rp.receive_timeout(WAIT)?;
        let _: (u64, u64) = m.read_object()?;
        m.finish();
        match rx.recv_timeout(WAIT) {
            Ok(ipl::Disconnect::Lost(why)) => println!("root saw the connection lost: {why}"),
            Ok(other) => return Err(fail(format!("connection ended as {other:?}, not lost"))),
            Err(_) => return Err(fail("the lost connection was not reported".into())),
        }
    }
    Ok(())
}

/// A process without the pool's secret: it must not get in.
fn stranger(scenario: &str) -> Res<()> {
    let t = object_type(P::CONNECTION_MANY_TO_ONE | P::RECEIVE_EXPLICIT)?;
    if scenario == "stranger-join" {
        return match Ibis::builder()
            .from_env()
            .and_then(|b| b.port_type(t).build())
        {
            Ok(_) => Err(fail("a stranger joined the pool".into())),
            Err(e) if e.to_string().contains("secret") => {
                println!("join refused: {e}");
                Ok(())
            }
            Err(e) => Err(fail(format!("join failed, but not for the secret: {e}"))),
        };
    }
    // Outside the pool: an embedded registry of its own, the wrong secret, TCP only.
    let hex = std::env::var("IPL_TARGET").map_err(|_| fail("IPL_TARGET not set".into()))?;
    let bytes: Vec<u8> = (0..hex.len() / 2)
        .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16))
        .collect::<Result<_, _>>()?;
    let target: IbisIdentifier = postcard::from_bytes(&bytes)?;
    let secret = ipl_auth::PoolSecret::from_env()?;
    let reg = ipl::EmbeddedRegistry::new();
    let ibis = Ibis::builder()
        .registry(&reg)
        .secret(secret)
        .prefer_transport("tcp")
        .port_type(t)
        .build()?;
    let mut sp = ibis.create_send_port(&t, "intruder")?;
    match sp.connect_to(&target, "inbox", Duration::from_secs(10)) {
        Ok(_) => Err(fail("a stranger connected to a member".into())),
        Err(e) if e.to_string().contains("secret") => {
            println!("connect refused: {e}");
            Ok(())
        }
        Err(e) => Err(fail(format!("connect failed, but not for the secret: {e}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::Args;
    use clap::{CommandFactory, Parser};

    #[test]
    fn cli_is_well_formed() {
        Args::command().debug_assert();
        assert_eq!(
            Args::try_parse_from(["ipl-pool-check", "stranger-join"])
                .unwrap()
                .scenario,
            "stranger-join"
        );
        assert!(Args::try_parse_from(["ipl-pool-check", "nonsense"]).is_err());
        assert!(Args::try_parse_from(["ipl-pool-check"]).is_err());
    }
}
