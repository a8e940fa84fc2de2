//! Every application answers `--help` and rejects a bad option cleanly.

#[path = "../../../tests/common/cli.rs"]
mod cli;

#[test]
fn every_application_has_a_clean_command_line() {
    for bin in [
        env!("CARGO_BIN_EXE_fib"),
        env!("CARGO_BIN_EXE_nqueens"),
        env!("CARGO_BIN_EXE_integrate"),
        env!("CARGO_BIN_EXE_knapsack"),
        env!("CARGO_BIN_EXE_noverk"),
        env!("CARGO_BIN_EXE_primes"),
        env!("CARGO_BIN_EXE_matmul"),
        env!("CARGO_BIN_EXE_ida"),
        env!("CARGO_BIN_EXE_sat"),
        env!("CARGO_BIN_EXE_tsp"),
        env!("CARGO_BIN_EXE_raytrace"),
        env!("CARGO_BIN_EXE_setcover"),
        env!("CARGO_BIN_EXE_asp"),
        env!("CARGO_BIN_EXE_tsp-repmi"),
        env!("CARGO_BIN_EXE_rmi-hello"),
        env!("CARGO_BIN_EXE_rpc"),
    ] {
        cli::check(bin);
    }
}
