//! TQ2_0 · q8_K: the four 2-bit fields of the 64 code bytes against the quants by `vpdpbusd`, in the haswell or
//! x64 float order; the tile kernel through the parent module's ternary driver (`mul_mat_tq`). `docs/tq2_0.md`.

use super::*;

/// `Σ c·q` and `Σ q` of one TQ2_0 block against its q8_K quants as eight i32 lanes each, lane `L` over the
/// elements with `e mod 32 ∈ [4L, 4L + 4)` (the lanes of stock's AVX2 kernel after its `madd`). Each 32-byte
/// half of the codes is broadcast to both halves of a 512-bit vector and one AND keeps field `l` in the low half
/// and field `l + 1` in the high half *in place* (`c·4^l`), which meet 64 contiguous quants; four `vpdpbusd`
/// cover the block, and the fields' powers of four come off at the end with exact arithmetic shifts (every
/// partial is a multiple of its `4^l`). No per-field shifts or GFNI: ANDs run on every vector pipe.
///
/// # Safety
/// 64 code bytes at `codes` and 256 quants at `q`; the calling kernel enables the features.
#[inline(always)]
pub(super) unsafe fn tq2_block_sums(codes: *const u8, q: *const u8) -> (__m256i, __m256i) {
    // SAFETY (whole body): reads inside the block and the quants; features from the caller.
    unsafe {
        let ones = _mm256_set1_epi8(1);
        // acc[l]: field l in place (×4^l) against its 32 quants, both code halves.
        let mut acc = [_mm256_setzero_si256(); 4];
        let mut sq = _mm256_setzero_si256();
        for j in 0..2 {
            let c = _mm256_loadu_si256(codes.add(32 * j) as *const __m256i);
            for (l, a) in acc.iter_mut().enumerate() {
                let qv = _mm256_loadu_si256(q.add(128 * j + 32 * l) as *const __m256i);
                let f = _mm256_and_si256(c, _mm256_set1_epi8((3u8 << (2 * l)) as i8));
                *a = _mm256_dpbusd_epi32(*a, f, qv);
                sq = _mm256_dpbusd_epi32(sq, ones, qv);
            }
        }
        let cq = _mm256_add_epi32(
            _mm256_add_epi32(acc[0], _mm256_srai_epi32::<2>(acc[1])),
            _mm256_add_epi32(
                _mm256_srai_epi32::<4>(acc[2]),
                _mm256_srai_epi32::<6>(acc[3]),
            ),
        );
        (cq, sq)
    }
}

/// The haswell kernel's eight i32 lanes of one TQ2_0 block (`Σ c·q` minus the pair sums of `bsums`), in 512-bit
/// vectors: each 32-byte code half is broadcast to both halves of a vector (a load, no shuffle) and one
/// `vgf2p8affineqb` moves field 0 (or 2) of every byte to bits 0..1 in the low half and field 1 (or 3) in the
/// high half, which meet 64 contiguous quants: four affine steps and four `vpdpbusd` cover the block with every
/// field at weight 1, so no shifts (an AND per field in place and a shift per accumulator, the form before,
/// issued three operations more per block). The first accumulator starts from `−(bsums[2L] + bsums[2L + 1])`
/// (one `vpmaddwd`). `squares` accumulates `bsums[m]²` (saturating `vpdpwssds`) for the wrap test.
///
/// # Safety
/// 64 code bytes at `codes`, 256 quants at `q`, 16 bsums at `bsums`; the calling kernel enables the features.
#[inline(always)]
pub(super) unsafe fn tq2_block_lanes_haswell(
    codes: *const u8,
    q: *const u8,
    bsums: *const u8,
    squares: &mut __m256i,
) -> __m256i {
    // SAFETY (whole body): reads inside the block, its quants and its bsums; features from the caller.
    unsafe {
        // `vgf2p8affineqb` matrices: field `l` of every byte to bits 0..1 (row of output bit `i` in byte
        // `7 − i`), field `l` in the low half and `l + 1` in the high half.
        let field = |l: u32| ((1i64 << (2 * l)) << 56) | ((1i64 << (2 * l + 1)) << 48);
        let m01 =
            _mm512_inserti64x4::<1>(_mm512_set1_epi64(field(0)), _mm256_set1_epi64x(field(1)));
        let m23 =
            _mm512_inserti64x4::<1>(_mm512_set1_epi64(field(2)), _mm256_set1_epi64x(field(3)));
        let c0 = _mm512_broadcast_i64x4(_mm256_loadu_si256(codes as *const __m256i));
        let c1 = _mm512_broadcast_i64x4(_mm256_loadu_si256(codes.add(32) as *const __m256i));
        let bs = _mm256_loadu_si256(bsums as *const __m256i);
        *squares = _mm256_dpwssds_epi32(*squares, bs, bs);
        let neg_pairs = _mm256_madd_epi16(bs, _mm256_set1_epi16(-1));
        let q_at = |k: usize| _mm512_loadu_si512(q.add(64 * k) as *const __m512i);
        let f = |c: __m512i, m: __m512i| _mm512_gf2p8affine_epi64_epi8::<0>(c, m);
        let mut a = _mm512_dpbusd_epi32(_mm512_zextsi256_si512(neg_pairs), f(c0, m01), q_at(0));
        a = _mm512_dpbusd_epi32(a, f(c1, m01), q_at(2));
        let mut b = _mm512_dpbusd_epi32(_mm512_setzero_si512(), f(c0, m23), q_at(1));
        b = _mm512_dpbusd_epi32(b, f(c1, m23), q_at(3));
        let s = _mm512_add_epi32(a, b);
        _mm256_add_epi32(_mm512_castsi512_si256(s), _mm512_extracti64x4_epi64::<1>(s))
    }
}

/// `ggml_vec_dot_tq2_0_q8_K` with the haswell build's order (`HASWELL = true`) or the x64 build's.
///
/// Haswell: `tq2_block_lanes_haswell` gives `Σ c·q` per lane minus the pair sums of `bsums`; stock subtracts
/// `bsums` in sixteen i16 lanes with wrap-around, which equals subtracting the pair sums whenever no i16 lane
/// can wrap: a lane's `Σ c·q` is at most 16·3·128 = 6144 in magnitude, so every `|bsums[m]| ≤ 26623` is
/// enough. The kernel sums the squares of the bsums per lane pair, saturating: a bsum beyond 26623 makes its
/// lane exceed 26623², and so does a long row of large ones (a 21,504-weight row at the quantizer's largest
/// possible |bsum| of 2048 at the earliest); either way the row is redone by the scalar model, which is always
/// exact. Then stock's float steps (convert, one FMA with `y.d·d0`, `scale_product`) on eight lanes and
/// `hsum_float_8`.
///
/// x64: `tq2_block_sums` (256-bit) per block, `sumi = Σ c·q − Σ q` (exact) and the generic chain
/// `sumf += (float)sumi · d`.
///
/// # Safety
/// The CPU must have AVX-512 F/BW/VL/VNNI/VBMI, GFNI, AVX2, FMA and F16C; `y.len() >= x.len()`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c,gfni")]
pub unsafe fn vec_dot_tq2_0_q8_k<const HASWELL: bool>(x: &[BlockTQ2_0], y: &[BlockQ8K]) -> f32 {
    debug_assert!(y.len() >= x.len());
    // SAFETY (whole block): block `i` of x and y are inside the slices; this function enables the features.
    unsafe {
        let mut acc = _mm256_setzero_ps();
        let mut sumf = 0f32;
        let mut bsum_squares = _mm256_setzero_si256();
        for (xb, yb) in x.iter().zip(y) {
            prefetch_ahead(
                xb as *const BlockTQ2_0 as *const u8,
                size_of::<BlockTQ2_0>(),
            );
            if HASWELL {
                let lanes = tq2_block_lanes_haswell(
                    xb.qs.as_ptr(),
                    yb.qs.as_ptr() as *const u8,
                    yb.bsums.as_ptr(),
                    &mut bsum_squares,
                );
                let d = scale_product(&yb.d, xb.d.to_bits());
                acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lanes), d, acc);
            } else {
                let (cq, sq) = tq2_block_sums(xb.qs.as_ptr(), yb.qs.as_ptr() as *const u8);
                sumf += hsum_epi32(_mm256_sub_epi32(cq, sq)) as f32
                    * formats::tq2_0::block_scale(xb, yb);
            }
        }
        if !HASWELL {
            return sumf;
        }
        // A bsum beyond ±26623 somewhere in the row (never the quantizer's own) shows as a lane of squares
        // beyond 26623²: stock's i16 lanes may have wrapped, so the row is redone by the model, which wraps
        // exactly as stock does. Checked once per row, not per block: a per-block test and branch cost a fifth
        // of the kernel's time.
        let beyond = _mm256_cmpgt_epi32_mask(bsum_squares, _mm256_set1_epi32(26623 * 26623));
        if beyond != 0 {
            return formats::tq2_0::vec_dot_tq2_0_q8_k_haswell_model(x, y);
        }
        hsum_float_8_ps(acc)
    }
}

/// TQ2_0: the 64 code bytes as one vector, field 0 by an AND, fields 1–3 by one `vgf2p8affineqb` each (to bits
/// 0..1); byte `m` of field `k` is element `32k + m` (`m < 32`) or `128 + 32k + m − 32`.
pub(super) struct Tq2Tiles;
impl TqTileFormat for Tq2Tiles {
    const BYTES: usize = size_of::<BlockTQ2_0>();
    const D_OFFSET: usize = 64;
    const QUANTS: TqQuants = TqQuants::CodeFields;
    #[inline(always)]
    unsafe fn weight_vectors(x: *const u8) -> [__m512i; 4] {
        // SAFETY: the caller's contract (64 code bytes at `x`).
        unsafe {
            // Matrices moving field `l` of every byte to bits 0..1 (output bit `i` from matrix byte `7 − i`).
            let field = |l: u32| {
                _mm512_set1_epi64(((1i64 << (2 * l)) << 56) | ((1i64 << (2 * l + 1)) << 48))
            };
            let c = _mm512_loadu_si512(x as *const __m512i);
            [
                _mm512_and_si512(c, _mm512_set1_epi8(3)),
                _mm512_gf2p8affine_epi64_epi8::<0>(c, field(1)),
                _mm512_gf2p8affine_epi64_epi8::<0>(c, field(2)),
                _mm512_gf2p8affine_epi64_epi8::<0>(c, field(3)),
            ]
        }
    }
}

/// `W · Y` for TQ2_0 weights against q8_K columns, every element with the bits of
/// `vec_dot_tq2_0_q8_k::<HASWELL>` (`mul_mat_tq`).
///
/// # Safety
/// The CPU must have AVX-512 F/BW/VL/VNNI/VBMI, GFNI, AVX2, FMA and F16C; `y.nb() >= x.nb()`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c,gfni")]
pub unsafe fn mul_mat_tq2_0_q8_k<const HASWELL: bool>(
    x: Rows<'_, BlockTQ2_0>,
    y: Rows<'_, BlockQ8K>,
    emit: Emit<'_>,
) {
    // SAFETY (both): the caller's contract covers the kernels' features and sizes.
    let vec_dot = |x: &[BlockTQ2_0], y: &[BlockQ8K]| unsafe { vec_dot_tq2_0_q8_k::<HASWELL>(x, y) };
    unsafe { mul_mat_tq::<Tq2Tiles, _, HASWELL>(x, y, emit, vec_dot) }
}
