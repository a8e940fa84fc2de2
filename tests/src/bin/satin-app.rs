//! Runs one Satin application by name (`satin-app APP ARGS...`, see
//! `ibis_apps::driver`): in one process, or as a member of a pool under `ipl-run`. The
//! tests of `satin_pool.rs` start pools of it.

#![forbid(unsafe_code)]

use clap::Parser;
use ibis_apps::driver::{exit_status, App};
use std::process::ExitCode;

/// Runs one Satin application by name.
#[derive(Parser, Debug)]
#[command(name = "satin-app")]
struct Cli {
    /// The application and its arguments.
    #[command(subcommand)]
    app: App,
}

fn main() -> ExitCode {
    ipl_tools::init_tracing("warn");
    // Linked in, so that `IPL_TRANSPORT=shm|quic|wan-emu` works without plugin libraries
    // (a test build has not necessarily built them).
    ipl::register_static_plugin(&ipl_transport_shm::PLUGIN);
    ipl::register_static_plugin(&ipl_transport_quic::PLUGIN);
    ipl::register_static_plugin(&ipl_transport_wan_emu::PLUGIN);
    let cli = Cli::parse();
    exit_status("satin-app", cli.app.run())
}
