//! UTS reproduces the published sample trees T1-T5 of the reference's
//! `sample_trees.sh` exactly: size, depth and leaves, from the reference program's
//! command lines.

use clap::Parser;
use ibis_apps::driver::{Cli, UtsArgs};
use ibis_apps::uts;

/// The tree of a reference command line, e.g. `-t 1 -a 3 -d 10 -b 4 -r 19`.
fn tree(args: &str) -> uts::Counts {
    let cli = Cli::<UtsArgs>::try_parse_from(std::iter::once("uts").chain(args.split(' ')))
        .expect("a valid command line");
    uts::uts_seq(&cli.app.params())
}

fn check(args: &str, nodes: u64, depth: u32, leaves: u64) {
    assert_eq!(
        tree(args),
        uts::Counts {
            nodes,
            leaves,
            depth
        },
        "uts {args}"
    );
}

#[test]
fn t1_geometric_fixed() {
    check("-t 1 -a 3 -d 10 -b 4 -r 19", 4_130_071, 10, 3_305_118);
}

#[test]
fn t5_geometric_linear() {
    check("-t 1 -a 0 -d 20 -b 4 -r 34", 4_147_582, 20, 2_181_318);
}

#[test]
fn t2_geometric_cyclic() {
    check("-t 1 -a 2 -d 16 -b 6 -r 502", 4_117_769, 81, 2_342_762);
}

#[test]
fn t3_binomial() {
    check(
        "-t 0 -b 2000 -q 0.124875 -m 8 -r 42",
        4_112_897,
        1572,
        3_599_034,
    );
}

#[test]
fn t4_hybrid() {
    check(
        "-t 2 -a 0 -d 16 -b 6 -r 1 -q 0.234375 -m 4",
        4_132_453,
        134,
        3_108_986,
    );
}
