//! Every tool answers `--help` and rejects a bad option cleanly.

#[path = "../../../tests/common/cli.rs"]
mod cli;

#[test]
fn every_tool_has_a_clean_command_line() {
    for bin in [
        env!("CARGO_BIN_EXE_ipl-run"),
        env!("CARGO_BIN_EXE_ipl-server"),
        env!("CARGO_BIN_EXE_ipl-run-selftest"),
    ] {
        cli::check(bin);
    }
}
