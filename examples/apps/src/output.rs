//! Writing to standard output and error without panicking: when nobody reads the
//! output any more (`fib 30 | head -1`, a closed pipe: `EPIPE`) the rest of it is
//! lost quietly instead of ending the run with a panic, as `println!` would. Every
//! application prints through these (`use ibis_apps::{out, say};`).

/// `println!` that never panics: output nobody reads any more is dropped.
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout().lock(), $($arg)*);
    }};
}

/// `print!` that never panics (see [`out!`]).
#[macro_export]
macro_rules! out_raw {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stdout().lock(), $($arg)*);
    }};
}

/// `eprintln!` that never panics (a closed stderr loses the message).
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr().lock(), $($arg)*);
    }};
}
