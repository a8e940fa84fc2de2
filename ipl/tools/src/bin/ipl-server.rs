//! `ipl-server`: a standalone IPL registry server.

#![forbid(unsafe_code)]

use clap::Parser;
use ipl_auth::PoolSecret;
use ipl_registry::RegistryServer;
use ipl_tools::launcher::{ENV_REGISTRY, ENV_SECRET};

/// A standalone IPL registry server. Clients must know the pool secret,
/// taken from IPL_POOL_SECRET or generated and printed at start-up.
#[derive(Parser, Debug)]
#[command(name = "ipl-server", version)]
struct Args {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:7077")]
    bind: String,
}

fn main() -> std::process::ExitCode {
    ipl_tools::init_tracing("info");
    let args = Args::parse();
    let (secret, generated) = match std::env::var(ENV_SECRET) {
        Ok(hex) => match PoolSecret::from_hex(&hex) {
            Ok(s) => (s, false),
            Err(e) => {
                eprintln!("ipl-server: {ENV_SECRET}: {e}");
                return std::process::ExitCode::FAILURE;
            }
        },
        Err(_) => match PoolSecret::generate() {
            Ok(s) => (s, true),
            Err(e) => {
                eprintln!("ipl-server: cannot generate a secret: {e}");
                return std::process::ExitCode::FAILURE;
            }
        },
    };
    let server = match RegistryServer::bind(args.bind.as_str(), secret.clone()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("ipl-server: cannot listen on {}: {e}", args.bind);
            return std::process::ExitCode::FAILURE;
        }
    };
    let addr = server.local_addr();
    println!("ipl-server: registry listening on {addr}");
    if generated {
        println!("ipl-server: {ENV_SECRET} was not set; generated a pool secret.");
        println!("Give it to every process of the pool:");
        println!("  export {ENV_SECRET}={}", secret.to_hex());
        println!("  export {ENV_REGISTRY}={addr}");
    } else {
        println!("ipl-server: using the pool secret from {ENV_SECRET}");
    }
    match server.serve() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ipl-server: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Args;
    use clap::CommandFactory;

    #[test]
    fn cli_is_well_formed() {
        Args::command().debug_assert();
    }
}
