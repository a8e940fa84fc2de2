//! 0/1 knapsack: the best total value of a subset of `n` items within a weight limit.
//! Each level decides one item: a subproblem without it and (if it fits, the weight
//! pruning) one with it. Levels below [`SPAWN_DEPTH`] spawn both subproblems.

use satin::{Ctx, Job};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// Items with index `< SPAWN_DEPTH` spawn their two subproblems.
pub const SPAWN_DEPTH: usize = 12;

/// The most items an instance may have: the search is exhaustive, one recursion level
/// per item (so the depth stays far within a thread's stack), and 2^64 subsets is
/// already beyond any machine.
pub const MAX_ITEMS: usize = 64;

/// One item: `(weight, value)`.
pub type Item = (u32, u32);

/// `n` pseudo-random items (deterministic) and a capacity of half their total weight.
pub fn instance(n: usize) -> (Vec<Item>, u32) {
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    let mut items = Vec::with_capacity(n);
    for _ in 0..n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let w = 10 + (x % 90) as u32;
        let v = 10 + ((x >> 20) % 90) as u32;
        items.push((w, v));
    }
    let cap = items.iter().map(|i| i.0).sum::<u32>() / 2;
    (items, cap)
}

fn seq(items: &[Item], i: usize, cap: u32) -> u64 {
    if i == items.len() {
        return 0;
    }
    let (w, v) = items[i];
    let without = seq(items, i + 1, cap);
    if w <= cap {
        without.max(v as u64 + seq(items, i + 1, cap - w))
    } else {
        without
    }
}

/// The best value, sequentially.
pub fn knapsack_seq(items: &[Item], cap: u32) -> u64 {
    seq(items, 0, cap)
}

/// The best value of items `i..` within `cap`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Knapsack {
    /// All items (shared locally, copied when stolen remotely).
    pub items: Arc<Vec<Item>>,
    /// The next item to decide.
    pub i: usize,
    /// Remaining capacity.
    pub cap: u32,
}

#[satin::job(name = "ibis_apps::knapsack::Knapsack")]
impl Job for Knapsack {
    type Output = u64;
    fn run(self, ctx: &mut Ctx) -> u64 {
        let Knapsack { items, i, cap } = self;
        if i >= SPAWN_DEPTH || i == items.len() {
            return seq(&items, i, cap);
        }
        let (w, v) = items[i];
        let mut f = ctx.frame();
        let without = f.spawn(Knapsack {
            items: items.clone(),
            i: i + 1,
            cap,
        });
        let with = (w <= cap).then(|| {
            f.spawn(Knapsack {
                items,
                i: i + 1,
                cap: cap - w,
            })
        });
        let r = f.sync();
        let a = r.get(without);
        match with {
            Some(t) => a.max(v as u64 + r.get(t)),
            None => a,
        }
    }
}
