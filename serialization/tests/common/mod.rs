//! Helpers shared by the integration tests.
#![allow(dead_code)]

/// Copies `bytes` into a `Vec<u64>`-backed buffer starting at byte `offset`;
/// returns the backing words. The byte view starts 8-aligned.
pub fn aligned_copy(bytes: &[u8], offset: usize) -> Vec<u64> {
    let total = offset + bytes.len();
    let mut words = vec![0u64; total.div_ceil(8).max(1)];
    bytemuck::cast_slice_mut::<u64, u8>(&mut words)[offset..total].copy_from_slice(bytes);
    words
}

/// The byte view of `words` truncated to `len` bytes.
pub fn view(words: &[u64], len: usize) -> &[u8] {
    &bytemuck::cast_slice::<u64, u8>(words)[..len]
}
