//! One module per ggml format: block layout, decode, and the scalar model of each stock float order.
pub mod iq;
pub mod iq2_s;
pub mod iq2_xs;
pub mod iq2_xxs;
pub mod iq3_s;
pub mod iq3_xxs;
pub mod iq_grids;
pub mod pq2_0;
pub mod ptq1_0;
pub mod q1_0;
pub mod q2_0;
pub mod q8_0;
pub mod q8_k;
pub mod tq1_0;
pub mod tq2_0;

/// xorshift64: the small reproducible generator behind the inputs of the run-time checks (the float-order
/// probe, the agreement rows), so their choices are the same on every run.
pub fn xorshift64(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

/// An activation block type the run-time agreement checks can fill with random content.
pub trait RandomActivation: RawBlock {
    /// Fills `out` (whole blocks) with random quants (−128 among them) and moderate scales, from `state`.
    fn fill_random(out: &mut [u8], state: &mut u64);
}

/// Views raw bytes as blocks. Every block type here is `repr(C)` of bytes only (alignment 1, every bit pattern
/// valid), so this is a plain reinterpretation; a trailing partial block is left out.
pub fn blocks<T: RawBlock>(bytes: &[u8]) -> &[T] {
    let n = bytes.len() / std::mem::size_of::<T>();
    // SAFETY: `T: RawBlock` promises alignment 1 and no invalid bit patterns; `n` whole blocks fit in `bytes`.
    unsafe { std::slice::from_raw_parts(bytes.as_ptr() as *const T, n) }
}

/// Blocks viewed as their raw bytes: the inverse of [`blocks`].
pub fn block_bytes<T: RawBlock>(blocks: &[T]) -> &[u8] {
    // SAFETY: `T: RawBlock` is plain bytes with alignment 1; the view covers exactly the slice.
    unsafe {
        std::slice::from_raw_parts(blocks.as_ptr() as *const u8, std::mem::size_of_val(blocks))
    }
}

/// Mutable form of [`blocks`].
pub fn blocks_mut<T: RawBlock>(bytes: &mut [u8]) -> &mut [T] {
    let n = bytes.len() / std::mem::size_of::<T>();
    // SAFETY: as `blocks`; the borrow of `bytes` is exclusive.
    unsafe { std::slice::from_raw_parts_mut(bytes.as_mut_ptr() as *mut T, n) }
}

/// Marker for block types that are plain bytes.
///
/// # Safety
/// Implementors must have alignment 1 and accept every bit pattern.
pub unsafe trait RawBlock: Copy {}
// SAFETY: both are `repr(C)` structs of `u8`/`i8` arrays and `GgmlHalf([u8; 2])` (asserted in their modules).
unsafe impl RawBlock for q2_0::BlockQ2_0 {}
// SAFETY: as above.
unsafe impl RawBlock for q8_0::BlockQ8_0 {}
// SAFETY: as above.
unsafe impl RawBlock for pq2_0::BlockPQ2_0 {}
// SAFETY: as above.
unsafe impl RawBlock for ptq1_0::BlockPTQ1_0 {}
// SAFETY: as above.
unsafe impl RawBlock for q1_0::BlockQ1_0 {}
// SAFETY: as above (`d` and `bsums` are byte arrays).
unsafe impl RawBlock for q8_k::BlockQ8K {}
// SAFETY: as above.
unsafe impl RawBlock for tq2_0::BlockTQ2_0 {}
// SAFETY: as above.
unsafe impl RawBlock for iq2_s::BlockIQ2S {}
// SAFETY: as above.
unsafe impl RawBlock for iq2_xxs::BlockIQ2XXS {}
// SAFETY: as above.
unsafe impl RawBlock for iq2_xs::BlockIQ2XS {}
// SAFETY: as above.
unsafe impl RawBlock for iq3_xxs::BlockIQ3XXS {}
// SAFETY: as above.
unsafe impl RawBlock for iq3_s::BlockIQ3S {}
// SAFETY: as above.
unsafe impl RawBlock for tq1_0::BlockTQ1_0 {}
