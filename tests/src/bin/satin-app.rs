//! Runs one Satin application by name (`satin-app APP ARGS...`, see `satin::app`): in
//! one process, or as a member of a pool under `ipl-run`. The tests of `satin_pool.rs`
//! start pools of it.

fn main() {
    let mut args = std::env::args().skip(1);
    let Some(app) = args.next() else {
        eprintln!("usage: satin-app APP ARGS... (APP: fib, nqueens, integrate, knapsack, noverk, primes, matmul)");
        std::process::exit(2);
    };
    let cli = satin::app::Cli::from_args(args, &["--threshold"]);
    match satin::app::run(&app, &cli) {
        Ok(()) => {}
        Err(e) => {
            eprintln!("{app}: {e}");
            std::process::exit(1);
        }
    }
}
