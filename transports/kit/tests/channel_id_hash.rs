//! The maps keyed by channel ids (the IPL's `ChannelMap`, shm's channel tables) hash
//! with FxHash: keys that differ in any part, high-bit wire ids included, stay apart.

use std::hash::BuildHasher;

use rustc_hash::{FxBuildHasher, FxHashMap};

#[test]
fn keys_that_differ_in_either_part_hash_apart_and_all_are_found() {
    let mut m: FxHashMap<(usize, u64), u64> = FxHashMap::default();
    for slot in 0..4usize {
        for ch in 0..1000u64 {
            m.insert((slot, ch), slot as u64 * 10_000 + ch);
        }
    }
    assert_eq!(m.len(), 4000);
    for slot in 0..4usize {
        for ch in 0..1000u64 {
            assert_eq!(m[&(slot, ch)], slot as u64 * 10_000 + ch);
        }
    }
    let h = |k: (usize, u64)| FxBuildHasher.hash_one(k);
    assert_ne!(h((0, 1)), h((1, 0)));
}

#[test]
fn high_bit_ids_are_kept_apart() {
    let mut m: FxHashMap<u64, u64> = FxHashMap::default();
    for ch in 1..2000u64 {
        m.insert(ch, ch * 3);
        m.insert(ch | 1 << 63, ch * 5);
    }
    assert_eq!(m.len(), 3998);
    for ch in 1..2000u64 {
        assert_eq!(m[&ch], ch * 3);
        assert_eq!(m[&(ch | 1 << 63)], ch * 5);
    }
    assert!(!m.contains_key(&0));
}
