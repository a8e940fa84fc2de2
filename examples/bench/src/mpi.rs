//! Open MPI as the reference of the benchmarks: the project's own small MPI programs
//! (`examples/bench/mpi/*.c`), compiled with Open MPI's `mpicc` at run time into a
//! scratch directory and started with its `mpirun`.
//!
//! Where Open MPI or its compiler is missing, [`compile`] says so and how to install
//! them ([`INSTALL`]); the benchmarks then leave the reference out (pool-bench) or stop
//! (mpi-bench, which exists to compare with it).

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Open MPI's compiler wrapper and launcher, as Debian names them (beside MPICH's).
pub const MPICC: &str = "mpicc.openmpi";
/// See [`MPICC`].
pub const MPIRUN: &str = "mpirun.openmpi";

/// How to install what [`compile`] needs.
pub const INSTALL: &str =
    "install Open MPI and its compiler: apt-get install openmpi-bin libopenmpi-dev";

/// Why the reference program could not be built.
#[derive(Debug)]
pub enum MpiError {
    /// `mpicc.openmpi` or `mpirun.openmpi` is not on the PATH, or the compiler finds
    /// no `mpi.h`.
    Missing(&'static str),
    /// Writing the source or running the compiler failed.
    Io(String),
    /// The compiler rejected the program (its messages).
    Compile(String),
}

impl fmt::Display for MpiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MpiError::Missing(tool) => write!(f, "{tool} is not installed; {INSTALL}"),
            MpiError::Io(e) => f.write_str(e),
            MpiError::Compile(e) => write!(f, "{MPICC} failed: {e}"),
        }
    }
}

impl std::error::Error for MpiError {}

/// Whether `tool` is an executable file in a directory of the PATH.
fn on_path(tool: &str) -> bool {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
        .unwrap_or(false)
}

/// Writes `source` as `dir/name.c` and compiles it with `mpicc.openmpi -O2` into
/// `dir/name`.
pub fn compile(dir: &Path, name: &str, source: &str) -> Result<PathBuf, MpiError> {
    for tool in [MPICC, MPIRUN] {
        if !on_path(tool) {
            return Err(MpiError::Missing(tool));
        }
    }
    let src = dir.join(format!("{name}.c"));
    std::fs::write(&src, source).map_err(|e| MpiError::Io(format!("writing {src:?}: {e}")))?;
    let exe = dir.join(name);
    let out = Command::new(MPICC)
        .arg("-O2")
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .output()
        .map_err(|e| MpiError::Io(format!("{MPICC}: {e}")))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        // Debian's openmpi-bin has the wrapper; the headers come with libopenmpi-dev.
        if err.contains("mpi.h") {
            return Err(MpiError::Missing("mpi.h"));
        }
        return Err(MpiError::Compile(err));
    }
    Ok(exe)
}

/// `mpirun.openmpi -n n` with the options every reference run uses: as root too, more
/// ranks than cores allowed, no binding (both sides placed by the OS, as ours), the ob1
/// messaging layer over the byte transfer layers `btl` (`self,vader`: shared memory;
/// `self,tcp`: TCP), and TCP on the loopback interface only.
pub fn mpirun(n: u32, btl: &str) -> Command {
    let mut c = Command::new(MPIRUN);
    c.args([
        "--allow-run-as-root",
        "--oversubscribe",
        "--bind-to",
        "none",
    ])
    .args(["--mca", "pml", "ob1", "--mca", "btl", btl])
    .args(["--mca", "btl_tcp_if_include", "lo"])
    .arg("-n")
    .arg(n.to_string())
    .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
    .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
    c
}
