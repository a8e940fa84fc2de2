//! n over k by Pascal's recursion: `C(n, k) = C(n-1, k-1) + C(n-1, k)`.

use satin::{Ctx, Job};
use serde::{Deserialize, Serialize};

/// Below this `n`, recursion is sequential.
pub const SPAWN_MIN_N: u32 = 20;

/// The largest `n`: C(67, 33) is the largest middle coefficient a `u64` holds (C(68, 34)
/// overflows).
pub const MAX_N: u32 = 67;

/// `C(n, k)` by recursion, sequentially.
pub fn noverk_seq(n: u32, k: u32) -> u64 {
    if k == 0 || k == n {
        1
    } else {
        noverk_seq(n - 1, k - 1) + noverk_seq(n - 1, k)
    }
}

/// `C(n, k)`; spawns both terms while `n >= SPAWN_MIN_N`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct NOverK {
    /// n.
    pub n: u32,
    /// k.
    pub k: u32,
}

#[satin::job(name = "ibis_apps::noverk::NOverK")]
impl Job for NOverK {
    type Output = u64;
    fn run(self, ctx: &mut Ctx) -> u64 {
        let NOverK { n, k } = self;
        if k == 0 || k == n {
            return 1;
        }
        if n < SPAWN_MIN_N {
            return noverk_seq(n, k);
        }
        let mut f = ctx.frame();
        let a = f.spawn(NOverK { n: n - 1, k: k - 1 });
        let b = f.spawn(NOverK { n: n - 1, k });
        let r = f.sync();
        r.get(a) + r.get(b)
    }
}
