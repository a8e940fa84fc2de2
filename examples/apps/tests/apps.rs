//! Every application's Satin version gives the sequential answer with 1 and several
//! workers.

use ibis_apps::{
    driver, fib, ida, integrate, knapsack, matmul, noverk, nqueens, primes, raytrace, sat, scp,
    setcover, tsp, uts,
};
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
        "ibis_apps::sat::Dpll",
        "ibis_apps::ida::Ida",
        "ibis_apps::ida::IdaNode",
        "ibis_apps::tsp::Tsp",
        "ibis_apps::raytrace::Render",
        "ibis_apps::setcover::SetCover",
        "ibis_apps::othello::Node",
        "ibis_apps::barnes::ForcesShared",
        "ibis_apps::barnes::ForcesCopied",
        "ibis_apps::uts::Uts",
        "ibis_apps::uts::UtsNodes",
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
            for chunk in [0, 1, 64] {
                let job = uts::Uts::new(*p, 2).with_chunk(chunk);
                assert_eq!(s.run(job), want, "{p:?} chunk {chunk}");
            }
        }
    }
}

/// The pigeonhole formula: `n + 1` pigeons in `n` holes (unsatisfiable).
fn pigeonhole(n: usize) -> sat::Cnf {
    let var = |p: usize, h: usize| (p * n + h + 1) as i32;
    let mut clauses: Vec<Vec<i32>> = (0..=n)
        .map(|p| (0..n).map(|h| var(p, h)).collect())
        .collect();
    for h in 0..n {
        for p in 0..=n {
            for q in p + 1..=n {
                clauses.push(vec![-var(p, h), -var(q, h)]);
            }
        }
    }
    sat::Cnf {
        vars: (n + 1) * n,
        clauses,
    }
}

#[test]
fn sat_answers() {
    // Random 3-SAT at the threshold (satisfiable and not), a chain with one model,
    // and the pigeonhole formulas (unsatisfiable).
    let mut formulas: Vec<sat::Cnf> = (1..=6)
        .map(|seed| sat::random_3sat(60, 256, seed))
        .collect();
    formulas.push(sat::Cnf::parse("p cnf 3 3\n1 0\n-1 2 0\n-2 3 0\n").unwrap());
    formulas.push(pigeonhole(4));
    formulas.push(pigeonhole(5));
    let want: Vec<sat::Outcome> = formulas.iter().map(sat::sat_seq).collect();
    assert!(want.iter().any(|o| o.model.is_some()) && want.iter().any(|o| o.model.is_none()));
    assert_eq!(want[6].model, Some(vec![false, true, true, true]));
    assert!(want[7].model.is_none() && want[8].model.is_none());
    for s in pools() {
        for (cnf, want) in formulas.iter().zip(&want) {
            let key = sat::set_formula(cnf.clone());
            for (depth, abort) in [(0, true), (6, true), (6, false), (64, true)] {
                let got = sat::sat_satin(&s, key, depth, abort);
                assert_eq!(&got, want, "depth {depth} abort {abort}");
                // A model is reported only if it satisfies every clause.
                if let Some(m) = &got.model {
                    assert!(cnf.satisfied_by(m));
                }
            }
        }
    }
}

#[test]
fn dimacs_is_read_with_comments_wrapped_clauses_and_an_end_marker() {
    let text = "c a comment\nc another\np cnf 4 3\n1 -2\n 3 0 -1 4 0\n2 -3 -4\n0\n%\n0\n";
    let cnf = sat::Cnf::parse(text).unwrap();
    assert_eq!(cnf.vars, 4);
    assert_eq!(
        cnf.clauses,
        vec![vec![1, -2, 3], vec![-1, 4], vec![2, -3, -4]]
    );
    assert_eq!(sat::Cnf::parse(&cnf.to_dimacs()).unwrap(), cnf);
}

#[test]
fn bad_dimacs_is_an_error_naming_the_line() {
    for (text, line, what) in [
        ("1 2 0\n", 1, "before the `p cnf` line"),
        ("c only\n", 1, "no `p cnf` line"),
        ("p cnf 2 1\n1 3 0\n", 2, "beyond 2 variables"),
        ("p cnf 2 2\n1 2 0\n", 2, "the header says 2 clauses"),
        ("p cnf 2 1\n1 x 0\n", 2, "`x` is not a literal"),
        ("p cnf 2 1\n1 2\n", 2, "not ended by 0"),
        ("p cnf 2 99999999999\n", 1, "cannot fit in the file"),
        ("p cnf 99999999999 1\n", 1, "variables (at most"),
        ("p dnf 2 1\n", 1, "expected `p cnf"),
        ("p cnf 2 1\np cnf 2 1\n", 2, "a second `p` line"),
    ] {
        let e = sat::Cnf::parse(text).unwrap_err();
        assert_eq!(e.line, line, "{text:?}: {e}");
        assert!(e.what.contains(what), "{text:?}: {e}");
    }
}

#[test]
fn ida_counts() {
    // Two of Korf's instances (some 860,000 nodes), spawning down to 0, 3 and 8 moves;
    // the first (330,000 nodes) also with every node spawning.
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/korf-easy.txt");
    let korf: Vec<_> = ida::read_puzzles(&path)
        .unwrap()
        .into_iter()
        .take(2)
        .collect();
    let want = ida::ida_seq(&korf);
    for s in pools() {
        for spawn_depth in [0, 3, 8] {
            let got = s.run(ida::Ida {
                puzzles: korf.clone(),
                spawn_depth,
            });
            assert_eq!(got, want, "spawn depth {spawn_depth}");
        }
        let got = s.run(ida::Ida {
            puzzles: korf[..1].to_vec(),
            spawn_depth: ida::MAX_MOVES as u8,
        });
        assert_eq!(got, want[..1], "every node spawning");
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

#[test]
fn raytrace_images_equal_the_rows_image() {
    // Every pixel of the Satin image equals the row-by-row one, whatever the blocks,
    // for a square and a wide image (halved across their longer sides).
    for (size, w, h) in [(2, 40, 40), (3, 61, 17)] {
        let scene = raytrace::scene(size).unwrap();
        let want = raytrace::render_seq(&scene, w, h);
        for (s, block) in pools().iter().zip([3, 8, 64]) {
            let got = raytrace::render_satin(s, size, w, h, block).unwrap();
            assert!(
                got == want,
                "size {size}, {w}x{h} on {} workers, block {block}",
                s.workers()
            );
        }
    }
}

#[test]
fn setcover_finds_the_optimum_of_a_file_and_of_random_instances() {
    // tests/data/scp-small.txt: 30 rows, 20 columns, in the OR-Library's format; its
    // optimum by trying all 2^20 subsets of the columns.
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/scp-small.txt");
    let inst = scp::Instance::read(&path).unwrap();
    assert_eq!((inst.rows, inst.columns()), (30, 20));
    let p = setcover::register(setcover::Problem::new(&inst));
    let brute = (0u32..1 << 20)
        .filter_map(|set| {
            let cols: Vec<u32> = (0..20).filter(|j| set & (1 << j) != 0).collect();
            p.cost_of(&cols)
        })
        .min()
        .unwrap();
    let seq = p.solve_seq();
    assert_eq!(seq.cost, brute);
    let random = setcover::register(setcover::Problem::new(&scp::Instance::random(
        40, 60, 0.08, 5,
    )));
    let random_seq = random.solve_seq();
    for (s, depth) in pools().iter().zip([2, 6, 10]) {
        for (p, want) in [(&p, &seq), (&random, &random_seq)] {
            let got = setcover::solve(s, p, depth).unwrap();
            assert_eq!(
                got.cost,
                want.cost,
                "{} workers, depth {depth}",
                s.workers()
            );
            assert_eq!(
                p.cost_of(&got.columns),
                Some(got.cost),
                "a cover of its cost"
            );
        }
    }
}
