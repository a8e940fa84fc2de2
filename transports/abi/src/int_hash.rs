//! A hasher for maps keyed by small integers, such as channel ids: looked up once or
//! more per message by the IPL and by transports, where SipHash (the default) cost more
//! than the rest of the lookup. The keys are chosen by this process or by an
//! authenticated peer; a peer that chose colliding ids would only slow its own
//! channels down.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A `HashMap` with integer-like keys hashed by [`IntHasher`].
pub type IntMap<K, V> = HashMap<K, V, BuildHasherDefault<IntHasher>>;

/// Multiplicative hashing of integer keys (the constant is 2^64 / golden ratio; the
/// high bits, which the table uses, depend on every bit of the key). Keys made of
/// several integers (tuples) are mixed in turn.
#[derive(Debug, Default, Clone, Copy)]
pub struct IntHasher(u64);

const K: u64 = 0x9E37_79B9_7F4A_7C15;

impl Hasher for IntHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(26) ^ n).wrapping_mul(K);
    }

    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_that_differ_in_either_part_hash_apart_and_all_are_found() {
        let mut m: IntMap<(usize, u64), u64> = IntMap::default();
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
        let h = |k: (usize, u64)| {
            let mut s = IntHasher::default();
            std::hash::Hash::hash(&k, &mut s);
            s.finish()
        };
        assert_ne!(h((0, 1)), h((1, 0)));
    }

    #[test]
    fn high_bit_ids_are_kept_apart() {
        let mut m: IntMap<u64, u64> = IntMap::default();
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
}
