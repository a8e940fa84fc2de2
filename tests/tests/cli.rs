//! Every test program answers `--help` and rejects a bad option cleanly.

#[path = "../common/cli.rs"]
mod cli;

#[test]
fn every_test_program_has_a_clean_command_line() {
    for bin in [
        env!("CARGO_BIN_EXE_ipl-pool-check"),
        env!("CARGO_BIN_EXE_ipl-fault-peer"),
        env!("CARGO_BIN_EXE_rmi-pool-check"),
        env!("CARGO_BIN_EXE_repmi-pool-check"),
        env!("CARGO_BIN_EXE_satin-app"),
        env!("CARGO_BIN_EXE_satin-speedup"),
    ] {
        cli::check(bin);
    }
}
