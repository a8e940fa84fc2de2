//! A pool of two processes for the benchmarks: a registry server in the measuring
//! process, which is member 0, and a re-executed copy of the benchmark as member 1.

use std::error::Error;
use std::time::Duration;

use ipl::{Ibis, IbisBuilder};

/// The error type of the single-threaded benchmark drivers.
pub type LocalRes<T> = Result<T, Box<dyn Error>>;

/// For a pool of two: creates the receive port `in` (connections enabled), waits for
/// the pool to close, and connects a send port `out` to the other member's `in`.
pub fn connect_pair(
    ibis: &Ibis,
    t: &ipl::PortType,
    wait: Duration,
) -> LocalRes<(ipl::ReceivePort, ipl::SendPort)> {
    let rp = ibis.create_receive_port(t, "in")?;
    rp.enable_connections();
    ibis.registry().wait_until_pool_closed(Some(wait))?;
    let other = ibis
        .registry()
        .members()?
        .into_iter()
        .find(|m| m != ibis.identifier())
        .ok_or("no peer in the pool")?;
    let mut sp = ibis.create_send_port(t, "out")?;
    sp.connect_to(&other, "in", wait)?;
    Ok((rp, sp))
}

/// A pool of two processes for the benchmarks: a registry server in this process, this
/// process as member 0, and a re-executed copy of this program as member 1.
pub struct PairPool {
    /// The pool's secret.
    pub secret: ipl_auth::PoolSecret,
    /// The pool's name (`NAME-PID`).
    pub pool: String,
    /// The registry server, running until this is dropped.
    pub server: ipl_registry::ServerHandle,
}

impl PairPool {
    /// A fresh secret, a registry server on 127.0.0.1, and the pool name `name-PID`.
    pub fn start(name: &str) -> LocalRes<PairPool> {
        Self::start_at(name, std::net::Ipv4Addr::LOCALHOST.into())
    }

    /// [`start`](Self::start) with the registry server on `address` (the peer runs on
    /// another host).
    pub fn start_at(name: &str, address: std::net::IpAddr) -> LocalRes<PairPool> {
        let secret = ipl_auth::PoolSecret::generate()?;
        let server = ipl_registry::RegistryServer::bind((address, 0), secret.clone())?
            .run_in_background()?;
        let pool = format!("{name}-{}", std::process::id());
        Ok(PairPool {
            secret,
            pool,
            server,
        })
    }

    /// The command that starts member 1: this program with `args`, and the pool in its
    /// environment (`IPL_REGISTRY`, `IPL_POOL`, `IPL_POOL_SIZE=2`, `IPL_POOL_SECRET`,
    /// `IPL_RANK=1`).
    pub fn peer_command<I, S>(&self, args: I) -> LocalRes<std::process::Command>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        self.peer_command_in(None, args)
    }

    /// [`peer_command`](Self::peer_command), in network namespace `netns` if given
    /// (`ip netns exec NETNS`: the peer on another host).
    pub fn peer_command_in<I, S>(
        &self,
        netns: Option<&str>,
        args: I,
    ) -> LocalRes<std::process::Command>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        let exe = std::env::current_exe()?;
        let mut c = match netns {
            Some(ns) => {
                let mut c = std::process::Command::new("ip");
                c.args(["netns", "exec", ns]).arg(exe);
                c
            }
            None => std::process::Command::new(exe),
        };
        c.args(args)
            .env("IPL_REGISTRY", self.server.local_addr().to_string())
            .env("IPL_POOL", &self.pool)
            .env("IPL_POOL_SIZE", "2")
            .env("IPL_POOL_SECRET", self.secret.to_hex())
            .env("IPL_RANK", "1");
        Ok(c)
    }

    /// `builder` set up as member 0 of this pool: its name, registry, secret, size.
    pub fn member0(&self, builder: IbisBuilder, wait: Duration) -> LocalRes<IbisBuilder> {
        Ok(builder
            .pool(self.pool.as_str())
            .registry_backend(std::sync::Arc::new(ipl_registry::NetRegistry::connect(
                self.server.local_addr(),
                &self.secret,
                wait,
            )?))
            .secret(self.secret.clone())
            .pool_size(2)
            .name("member-0"))
    }
}
