//! Every benchmark answers `--help` and rejects a bad option cleanly.

#[path = "../../../tests/common/cli.rs"]
mod cli;

#[test]
fn every_benchmark_has_a_clean_command_line() {
    for bin in [
        env!("CARGO_BIN_EXE_ipl-bench"),
        env!("CARGO_BIN_EXE_satin-bench"),
        env!("CARGO_BIN_EXE_rmi-bench"),
        env!("CARGO_BIN_EXE_wan-bench"),
        env!("CARGO_BIN_EXE_shm-bench"),
        env!("CARGO_BIN_EXE_quic-bench"),
        env!("CARGO_BIN_EXE_pool-bench"),
        env!("CARGO_BIN_EXE_soak-bench"),
        env!("CARGO_BIN_EXE_mpi-bench"),
    ] {
        cli::check(bin);
    }
}
