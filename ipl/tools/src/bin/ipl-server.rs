//! `ipl-server`: a standalone IPL registry server.

#![forbid(unsafe_code)]

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use ipl_auth::{PoolSecret, SECRET_FILE_ENV};
use ipl_registry::net::{Heartbeat, DEFAULT_HEARTBEAT_INTERVAL, DEFAULT_HEARTBEAT_TIMEOUT};
use ipl_registry::net::{DEFAULT_HANDSHAKE_TIMEOUT, DEFAULT_MAX_HANDSHAKES};
use ipl_registry::RegistryServer;
use ipl_tools::launcher::{ENV_REGISTRY, ENV_SECRET};

/// A standalone IPL registry server.
///
/// Serves any number of pools at once, by name; a pool whose members have all
/// left or died is forgotten. Members that vanish without closing their
/// connection (a cut link, a frozen host, a stopped process) are found by
/// heartbeats and reported Died to the others.
///
/// Clients must know the pool secret, taken from --secret-file, else from
/// IPL_POOL_SECRET, else from the file named by IPL_POOL_SECRET_FILE, else
/// generated and printed at start-up. A secret file must belong to the user
/// and be private (chmod 600) and hold 64 hex digits.
#[derive(Parser, Debug)]
#[command(name = "ipl-server", version)]
struct Args {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:7077")]
    bind: String,
    /// Read the pool secret from this file (private to its owner: no
    /// permission for group or others; 64 hex digits and an optional newline),
    /// instead of the environment, where other processes of the user can see it.
    #[arg(long, value_name = "PATH")]
    secret_file: Option<PathBuf>,
    /// Milliseconds between heartbeats on each member connection (members
    /// adopt it when they connect).
    #[arg(long, value_name = "MS", default_value_t = millis(DEFAULT_HEARTBEAT_INTERVAL))]
    heartbeat_interval_ms: u64,
    /// Milliseconds of silence after which a member is declared dead (and a
    /// member gives up a silent server); must exceed the interval. A member is
    /// reported Died within timeout + interval of its last sign of life.
    #[arg(long, value_name = "MS", default_value_t = millis(DEFAULT_HEARTBEAT_TIMEOUT))]
    heartbeat_timeout_ms: u64,
    /// Milliseconds a new connection has to complete the handshake (prove the
    /// pool secret), from accept to authenticated, however slowly its bytes
    /// come; then it is closed.
    #[arg(long, value_name = "MS", default_value_t = millis(DEFAULT_HANDSHAKE_TIMEOUT),
          value_parser = clap::value_parser!(u64).range(1..))]
    handshake_timeout_ms: u64,
    /// At most this many connections in the handshake at once; one beyond
    /// that is turned away at once with a short "busy" answer (members retry
    /// within their join timeout). Each holds a thread and a file descriptor
    /// for at most the handshake timeout.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_HANDSHAKES,
          value_parser = max_handshakes)]
    max_handshakes: usize,
}

/// `--max-handshakes`: 1 to 65536.
fn max_handshakes(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if (1..=65536).contains(&n) => Ok(n),
        _ => Err(format!("{s:?} is not a number in 1..=65536")),
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Where the secret came from.
enum Source {
    File(PathBuf),
    Environment,
    Generated,
}

fn secret(args: &Args) -> Result<(PoolSecret, Source), String> {
    if let Some(path) = &args.secret_file {
        let s = PoolSecret::from_file(path).map_err(|e| e.to_string())?;
        return Ok((s, Source::File(path.clone())));
    }
    match PoolSecret::from_env() {
        Ok(s) => Ok((s, Source::Environment)),
        Err(ipl_auth::AuthError::Missing) => PoolSecret::generate()
            .map(|s| (s, Source::Generated))
            .map_err(|e| format!("cannot generate a secret: {e}")),
        Err(e) => Err(e.to_string()),
    }
}

/// `eprintln!` that never panics (a closed stderr loses the message).
macro_rules! say {
    ($($arg:tt)*) => {{
        let _ = writeln!(std::io::stderr().lock(), $($arg)*);
    }};
}

fn main() -> std::process::ExitCode {
    ipl_tools::init_tracing("info");
    let args = Args::parse();
    let heartbeat =
        match Heartbeat::from_millis(args.heartbeat_interval_ms, args.heartbeat_timeout_ms) {
            Ok(h) => h,
            Err(e) => {
                say!("ipl-server: {e}");
                return std::process::ExitCode::FAILURE;
            }
        };
    let (secret, source) = match secret(&args) {
        Ok(s) => s,
        Err(e) => {
            say!("ipl-server: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let server = match RegistryServer::bind(args.bind.as_str(), secret.clone()) {
        Ok(s) => s
            .with_heartbeat(heartbeat)
            .with_handshake_timeout(Duration::from_millis(args.handshake_timeout_ms))
            .with_max_handshakes(args.max_handshakes),
        Err(e) => {
            say!("ipl-server: cannot listen on {}: {e}", args.bind);
            return std::process::ExitCode::FAILURE;
        }
    };
    let addr = server.local_addr();
    let mut banner = format!("ipl-server: registry listening on {addr}\n");
    banner.push_str(&format!(
        "ipl-server: at most {} connections in the handshake at once, each within {} ms\n",
        args.max_handshakes, args.handshake_timeout_ms
    ));
    match source {
        Source::Generated => {
            banner.push_str("ipl-server: no pool secret was given; generated one.\n");
            banner.push_str(&format!("Give it to every process of the pool (or write it to a file only you can read, and set {SECRET_FILE_ENV}):\n"));
            banner.push_str(&format!("  export {ENV_SECRET}={}\n", secret.to_hex()));
            banner.push_str(&format!("  export {ENV_REGISTRY}={addr}\n"));
        }
        Source::File(path) => banner.push_str(&format!(
            "ipl-server: using the pool secret in {}\n",
            path.display()
        )),
        Source::Environment => {
            banner.push_str("ipl-server: using the pool secret from the environment\n")
        }
    }
    // Nobody reads the address and the secret (`ipl-server | head -1` after the first
    // line, a closed pipe): exit quietly, as a writer in a shell pipeline does, instead
    // of panicking in `println!`.
    let mut out = std::io::stdout().lock();
    match out.write_all(banner.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
            return std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            say!("ipl-server: cannot write to standard output: {e}");
            return std::process::ExitCode::FAILURE;
        }
    }
    drop(out);
    match server.serve() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            say!("ipl-server: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_well_formed() {
        Args::command().debug_assert();
    }

    #[test]
    fn heartbeat_and_secret_file_options_parse() {
        let a = Args::try_parse_from([
            "ipl-server",
            "--secret-file",
            "/run/user/1/secret",
            "--heartbeat-interval-ms",
            "250",
            "--heartbeat-timeout-ms",
            "1500",
        ])
        .unwrap();
        assert_eq!(a.secret_file, Some(PathBuf::from("/run/user/1/secret")));
        assert_eq!(
            (a.heartbeat_interval_ms, a.heartbeat_timeout_ms),
            (250, 1500)
        );
        let d = Args::try_parse_from(["ipl-server"]).unwrap();
        assert_eq!(d.heartbeat_interval_ms, millis(DEFAULT_HEARTBEAT_INTERVAL));
        assert!(Args::try_parse_from(["ipl-server", "--heartbeat-timeout-ms", "soon"]).is_err());
    }

    #[test]
    fn handshake_options_parse() {
        let a = Args::try_parse_from([
            "ipl-server",
            "--max-handshakes",
            "3",
            "--handshake-timeout-ms",
            "750",
        ])
        .unwrap();
        assert_eq!((a.max_handshakes, a.handshake_timeout_ms), (3, 750));
        let d = Args::try_parse_from(["ipl-server"]).unwrap();
        assert_eq!(d.max_handshakes, DEFAULT_MAX_HANDSHAKES);
        assert_eq!(d.handshake_timeout_ms, millis(DEFAULT_HANDSHAKE_TIMEOUT));
        for bad in [
            ["--max-handshakes", "0"],
            ["--max-handshakes", "many"],
            ["--handshake-timeout-ms", "0"],
            ["--handshake-timeout-ms", "-5"],
        ] {
            let args = ["ipl-server", bad[0], bad[1]];
            assert!(Args::try_parse_from(args).is_err(), "{args:?}");
        }
    }

    #[test]
    fn a_bad_secret_file_is_an_error_naming_it() {
        let args = Args::try_parse_from(["ipl-server", "--secret-file", "/nonexistent/ipl-secret"])
            .unwrap();
        let err = secret(&args).err().unwrap();
        assert!(err.contains("/nonexistent/ipl-secret"), "{err}");
    }
}
