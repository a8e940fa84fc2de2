//! Every application's Satin version gives the sequential answer with 1 and several
//! workers.

use ibis_apps::{driver, fib, integrate, knapsack, matmul, noverk, nqueens, primes, tsp, uts};
use satin::Satin;
use std::sync::Arc;

fn pools() -> Vec<Satin> {
    [1, 2, 4]
        .iter()
        .map(|&n| Satin::builder().workers(n).build().unwrap())
        .collect()
}

#[test]
fn fib_all_spawn_and_threshold() {
    for s in pools() {
        assert_eq!(
            s.run(fib::Fib {
                n: 22,
                threshold: 0
            }),
            fib::fib_seq(22)
        );
        assert_eq!(
            s.run(fib::Fib {
                n: 25,
                threshold: 12
            }),
            fib::fib_seq(25)
        );
    }
}

#[test]
fn nqueens_counts() {
    for s in pools() {
        assert_eq!(s.run(nqueens::NQueens::new(8)), 92);
        assert_eq!(s.run(nqueens::NQueens::new(9)), nqueens::nqueens_seq(9));
    }
}

#[test]
fn integrate_bitwise_equal() {
    let want = integrate::integrate(0.0, 2000.0, 1e-3);
    for s in pools() {
        let got = s.run(integrate::Integrate::new(0.0, 2000.0, 1e-3));
        assert_eq!(got.to_bits(), want.to_bits());
    }
}

#[test]
fn knapsack_best_value() {
    let (items, cap) = knapsack::instance(18);
    let want = knapsack::knapsack_seq(&items, cap);
    let items = Arc::new(items);
    for s in pools() {
        assert_eq!(
            s.run(knapsack::Knapsack {
                items: items.clone(),
                i: 0,
                cap
            }),
            want
        );
    }
}

#[test]
fn noverk_binomial() {
    for s in pools() {
        assert_eq!(s.run(noverk::NOverK { n: 24, k: 12 }), 2_704_156);
    }
}

#[test]
fn primes_factorization() {
    let n = 2 * 3 * 3 * 5 * 7 * 1009u64;
    let want = primes::primes_seq(n);
    assert_eq!(want.iter().product::<u64>(), n);
    for s in pools() {
        assert_eq!(s.run(primes::Primes::new(n)), want);
    }
}

#[test]
fn matmul_product() {
    let a = Arc::new(matmul::Mat::random(256, 1));
    let b = Arc::new(matmul::Mat::random(256, 2));
    let want = matmul::matmul_seq(&a, &b);
    for s in pools() {
        assert_eq!(s.run(matmul::MatMul::new(a.clone(), b.clone())), want.d);
    }
}

/// The application jobs are registered (remote-capable) under their stable names.
#[test]
fn jobs_are_registered_by_name() {
    let s = Satin::builder().workers(1).build().unwrap();
    for name in [
        "ibis_apps::fib::Fib",
        "ibis_apps::integrate::Integrate",
        "ibis_apps::knapsack::Knapsack",
        "ibis_apps::matmul::MatMul",
        "ibis_apps::noverk::NOverK",
        "ibis_apps::nqueens::NQueens",
        "ibis_apps::primes::Primes",
        "ibis_apps::tsp::Tsp",
    ] {
        assert!(s.registry().contains(name), "{name}: {:?}", s.registry());
    }
}

#[test]
fn uts_counts() {
    // A geometric, a binomial and a hybrid tree of some ten thousand nodes, spawning
    // down to two heights.
    let trees = [
        uts::Params {
            shape: uts::Shape::Fixed,
            depth: 6,
            seed: 19,
            ..uts::Params::default()
        },
        uts::Params {
            tree: uts::TreeType::Binomial,
            b0: 100.0,
            q: 0.124875,
            m: 8,
            seed: 42,
            ..uts::Params::default()
        },
        uts::Params {
            tree: uts::TreeType::Hybrid,
            depth: 8,
            b0: 6.0,
            seed: 1,
            ..uts::Params::default()
        },
    ];
    for s in pools() {
        for p in &trees {
            let want = uts::uts_seq(p);
            assert!(want.nodes > 1000, "{p:?}: {want:?}");
            for spawn_depth in [2, 1000] {
                assert_eq!(s.run(uts::Uts::new(*p, spawn_depth)), want, "{p:?}");
            }
        }
    }
}

/// A tour through every city once, of the length it claims.
fn check_tour(p: &tsp::Problem, t: &tsp::Tour, what: &str) {
    let mut cities = t.cities.clone();
    cities.sort_unstable();
    assert_eq!(
        cities,
        (0..p.cities() as u8).collect::<Vec<_>>(),
        "{what}: not every city once"
    );
    assert_eq!(t.cities[0], 0, "{what}: starts in city 1");
    assert_eq!(p.length(&t.cities), t.length, "{what}: the tour's length");
}

#[test]
fn tsp_finds_the_known_optima_of_tsplib_instances() {
    // Public TSPLIB instances (tests/data) and their published optima: GEO, EXPLICIT
    // LOWER_DIAG_ROW (one row per line in gr17, wrapped anywhere in gr21).
    let data = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    let pools = pools();
    for (file, optimum) in [
        ("burma14.tsp", 3323),
        ("gr17.tsp", 2085),
        ("gr21.tsp", 2707),
        ("ulysses22.tsp", 7013),
    ] {
        let (problem, _) = driver::read_tsp(&data.join(file)).unwrap();
        let p = tsp::register(problem);
        let seq = p.solve_seq();
        assert_eq!(seq.length, optimum, "{file} sequential");
        check_tour(&p, &seq, file);
        // A spawn depth per pool: the pools run 1, 2, 4 workers.
        for (s, depth) in pools.iter().zip([2, 3, 4]) {
            let t = tsp::solve(s, &p, depth).unwrap();
            let what = format!("{file} on {} workers, spawn depth {depth}", s.workers());
            assert_eq!(t.length, optimum, "{what}");
            check_tour(&p, &t, &what);
        }
    }
}
