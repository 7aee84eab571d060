//! The five IQ formats (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S) against q8_K: one kernel
//! (`vec_dot_iq_q8_k`) over a per-format block decoder (`IqDecode`: grid magnitudes, signs, scales), and the
//! two-block form (`IqPairDecode`) where decoding a pair shares work. `docs/iq.md`.

use super::*;

/// One IQ format's block decode for `vec_dot_iq_q8_k`: the weights' magnitudes, signs and scales, each
/// format from its own fields (`formats/iq*.rs`).
pub trait IqDecode: IqBlock {
    /// The 256 grid magnitudes (unsigned bytes) in element order, 64 per zmm. With `GATHER` IQ2_XS and IQ2_S
    /// fetch their 8-byte grid entries with `vpgatherdq` (fast on Intel, where the permute lookups are short of
    /// shuffle throughput; microcoded and slow on Zen 4), else they look up and expand the 16-bit codes.
    ///
    /// # Safety
    /// Only inside `vec_dot_iq_q8_k`, which enables the features these use (AVX-512 F/BW/VL/VBMI, GFNI).
    unsafe fn magnitudes<const GATHER: bool>(&self) -> [__m512i; 4];
    /// The block's signs (`SignBytes`): the four 64-bit masks read from the block where it stores the sign
    /// bytes, else the computed sign bytes.
    ///
    /// # Safety
    /// As `magnitudes`.
    unsafe fn sign_bytes(&self) -> SignBytes;
    /// The block's scales as the products take them (`BlockScales`): the 4-bit fields' word where the format
    /// keeps them in one (IQ2_XS, IQ2_S, IQ3_S), else the sixteen scale words.
    ///
    /// # Safety
    /// As `magnitudes`.
    unsafe fn block_scales(&self) -> BlockScales;
}

/// The grid entries of 32 indices held four to a qword in `words` (16 bits each), each one scalar load from
/// `table`, eight assembled per zmm: IQ2_S's lookup with `GGML_LOWBIT_FORMS=iq2s-permutes=0`
/// (`dispatch::iq2_s_permutes`; the default on AMD until the two-block permutes measured faster on Zen 4),
/// where this beat the permute lookup of one block (`lookup_bytes` needs eight `vpermi2b` per code table
/// there); taking the indices out four at a time as qwords and splitting them with shifts costs fewer shuffle
/// micro-ops than a `vpextrw` per index. Each pair of entries is a `vmovq` and a `vpinsrq` from memory,
/// written out: the compiler's `vmovq` pair and `vpunpcklqdq` is one instruction more per pair (Zen 5,
/// 2026-12-02: IQ2_S 1.40–1.47× stock against 1.31–1.41×).
///
/// # Safety
/// Every index is inside `table`.
#[inline(always)]
pub(super) unsafe fn entries_by_loads(words: &[u64; 8], table: *const i64) -> [__m512i; 4] {
    // SAFETY (whole body): indices inside `table` by the caller's contract; features are enabled by the calling
    // kernel.
    unsafe {
        let mut out = [_mm512_setzero_si512(); 4];
        for (c, o) in out.iter_mut().enumerate() {
            let (w0, w1) = (words[2 * c], words[2 * c + 1]);
            let e = |w: u64, k: u32| ((w >> (16 * k)) & 0xffff) as usize;
            let pair = |w: u64, k: u32| {
                let v: __m128i;
                // SAFETY: both indices are inside `table` (the caller's contract); the instructions only read
                // the two entries and write `v`; the calling kernel enables AVX.
                std::arch::asm!(
                    "vmovq {v}, qword ptr [{t} + {a} * 8]",
                    "vpinsrq {v}, {v}, qword ptr [{t} + {b} * 8], 1",
                    t = in(reg) table,
                    a = in(reg) e(w, k),
                    b = in(reg) e(w, k + 1),
                    v = out(xmm_reg) v,
                    options(pure, readonly, nostack, preserves_flags),
                );
                v
            };
            let v = _mm512_inserti32x4::<1>(_mm512_castsi128_si512(pair(w0, 0)), pair(w0, 2));
            let v = _mm512_inserti32x4::<2>(v, pair(w1, 0));
            *o = _mm512_inserti32x4::<3>(v, pair(w1, 2));
        }
        out
    }
}

/// Byte `i` of `idx` looked up in the byte table `table` of `128·SLICES` entries: one `vpermi2b` per 128
/// entries on the index's low 7 bits, the slice chosen by bit 7 (`vpmovb2m` of `idx`), then bit 8 (`high[0]`)
/// and bit 9 (`high[1]`) of the index, as k-masks, in a tree of blends.
///
/// # Safety
/// `table` holds `128·SLICES` bytes; features are enabled by the calling kernel.
#[inline(always)]
pub(super) unsafe fn lookup_bytes<const SLICES: usize>(
    table: *const u8,
    idx: __m512i,
    high: [u64; 2],
) -> __m512i {
    // SAFETY (whole body): loads of 64-byte halves of the table's slices, inside it by the caller's contract.
    unsafe {
        // IQ2_S's tables (32 vectors, more than the registers): an opaque pointer, so the compiler loads them
        // inside the loop as the permutes' memory operands instead of hoisting all 32 loads to the kernel's
        // entry and spilling them to the stack there (a cost per row: rows of 16 blocks were no faster than
        // the loads until this; Ice Lake Xeon, 2026-12-03). The smaller tables fit and stay hoisted (measured
        // no faster with this).
        let table = if SLICES == 8 {
            std::hint::black_box(table)
        } else {
            table
        };
        let masks = [_mm512_movepi8_mask(idx), high[0], high[1]];
        let mut parts = [_mm512_setzero_si512(); SLICES];
        for (s, part) in parts.iter_mut().enumerate() {
            let lo = _mm512_loadu_si512(table.add(128 * s) as *const _);
            let hi = _mm512_loadu_si512(table.add(128 * s + 64) as *const _);
            *part = _mm512_permutex2var_epi8(lo, idx, hi);
        }
        let (mut n, mut level) = (SLICES, 0);
        while n > 1 {
            for i in 0..n / 2 {
                parts[i] = _mm512_mask_blend_epi8(masks[level], parts[2 * i], parts[2 * i + 1]);
            }
            n /= 2;
            level += 1;
        }
        parts[0]
    }
}

/// A `vpermb` control that packs the first `run` bytes of every `stride` bytes into the low bytes (the rest
/// zero): one shuffle operation where a down-converting `vpmov*` (`vpmovwb`, `vpmovqd`, …) is two on the Intel
/// cores measured.
pub(super) const fn packed_bytes(stride: usize, run: usize) -> [u8; 64] {
    let mut t = [0u8; 64];
    let mut i = 0;
    while i < 64 / stride * run {
        t[i] = (i / run * stride + i % run) as u8;
        i += 1;
    }
    t
}

/// The low bytes of 32 words; the low dwords of 8 qwords; the low bytes of 16 dwords; of 8 qwords.
pub(super) static WORD_LOW_BYTES: [u8; 64] = packed_bytes(2, 1);
pub(super) static QWORD_LOW_DWORDS: [u8; 64] = packed_bytes(8, 4);
pub(super) static DWORD_LOW_BYTES: [u8; 64] = packed_bytes(4, 1);
pub(super) static QWORD_LOW_BYTES: [u8; 64] = packed_bytes(8, 1);

/// `vpermw` controls for the four 64-weight groups of a block: word `w` of group `c` takes word
/// `per_group·c + w / repeat` (each source word `repeat` times in a row).
pub(super) const fn group_words(per_group: usize, repeat: usize) -> [[u16; 32]; 4] {
    let mut t = [[0u16; 32]; 4];
    let mut c = 0;
    while c < 4 {
        let mut w = 0;
        while w < 32 {
            t[c][w] = (per_group * c + w / repeat) as u16;
            w += 1;
        }
        c += 1;
    }
    t
}

/// IQ3 expansion, `vpermt2b` controls grouping one block's looked-up code bytes (the index vector holds entry `e`
/// in byte `e`): vector `h` holds in dword `k` the code of entry `32h + k` (word 0, group `2h`) and of entry
/// `32h + 16 + k` (word 1, group `2h + 1`), so two permutes serve the four groups.
pub(super) static IQ3_GROUPED_CODE_PICK: Align64<[[u8; 64]; 2]> = Align64({
    let mut t = [[0u8; 64]; 2];
    let mut h = 0;
    while h < 2 {
        let mut k = 0;
        while k < 16 {
            let mut w = 0;
            while w < 2 {
                let e = 32 * h + 16 * w + k;
                t[h][4 * k + 2 * w] = e as u8;
                t[h][4 * k + 2 * w + 1] = (64 + e) as u8;
                w += 1;
            }
            k += 1;
        }
        h += 1;
    }
    t
});

/// `vpmultishiftqb` controls of the grouped expansion (`expand_codes`), group `c`: an entry of `width` bytes
/// (8 for IQ2, one per qword; 4 for IQ3, one per dword) has its code in word `c % (width / 2)` of that unit,
/// `bits` per level number; byte `j` of the unit takes the bits of level number `j`.
pub(super) const fn grouped_shifts(width: usize, bits: usize) -> Align64<[[u8; 64]; 4]> {
    let mut t = [[0u8; 64]; 4];
    let mut c = 0;
    while c < 4 {
        let mut b = 0;
        while b < 64 {
            let unit_bit = 8 * width * ((b % 8) / width);
            t[c][b] = (unit_bit + 16 * (c % (width / 2)) + bits * (b % width)) as u8;
            b += 1;
        }
        c += 1;
    }
    Align64(t)
}
pub(super) static IQ3_GROUPED_SHIFT: Align64<[[u8; 64]; 4]> = grouped_shifts(4, 3);

/// A `vpermb` table from level numbers (the low `bits` bits of a byte) to magnitudes.
pub(super) const fn level_table(levels: &[u8], bits: u32) -> [u8; 64] {
    let mut t = [0u8; 64];
    let mut i = 0;
    while i < 64 {
        let l = i & ((1 << bits) - 1);
        t[i] = if l < levels.len() { levels[l] } else { 0 };
        i += 1;
    }
    t
}

/// The `vgf2p8affineqb` matrix and constant that map a level number (the low `bits` bits of a byte, higher bits
/// ignored) to its magnitude, when the magnitudes are an affine image of their numbers over GF(2):
/// `m(n) = m(0) ⊕ Σ nⱼ·(m(2ʲ) ⊕ m(0))` for every level. Output bit `i` is the parity of the input ANDed with
/// matrix byte `7 − i`. `None` when the levels are not affine (IQ3_XXS: 62 where the rule gives 60).
pub(super) const fn affine_levels(levels: &[u8], bits: u32) -> Option<(i64, u8)> {
    let b = levels[0];
    let mut matrix = 0u64;
    let mut j = 0;
    while j < bits {
        let image = levels[1 << j] ^ b;
        let mut i = 0;
        while i < 8 {
            matrix |= (((image >> i) & 1) as u64) << (8 * (7 - i) + j);
            i += 1;
        }
        j += 1;
    }
    let mut n = 0;
    while n < levels.len() {
        let mut v = b;
        let mut j = 0;
        while j < bits {
            if n >> j & 1 == 1 {
                v ^= levels[1 << j] ^ b;
            }
            j += 1;
        }
        if v != levels[n] {
            return None;
        }
        n += 1;
    }
    Some((matrix as i64, b))
}

/// IQ2's 8, 25, 43 are `8 ⊕ 17·n₀ ⊕ 35·n₁`; IQ3_S's 1, 3, …, 15 are `1 ⊕ 2n`.
pub(super) const IQ2_AFFINE: (i64, u8) = affine_levels(&IQ2_LEVELS, 2).unwrap();
pub(super) const IQ3S_AFFINE: (i64, u8) = affine_levels(&IQ3S_LEVELS, 3).unwrap();
const _: () = assert!(affine_levels(&IQ3XXS_LEVELS, 3).is_none());
pub(super) static IQ3XXS_LEVEL_TABLE: [u8; 64] = level_table(&IQ3XXS_LEVELS, 3);

/// How a grid's level numbers become magnitudes: one `vgf2p8affineqb` (a vector ALU operation) with this
/// matrix and the constant `B` of `grid_magnitudes` where the levels are affine over GF(2), else one `vpermb`
/// from this table (a shuffle, and the shuffle pipes are what the IQ kernels are short of).
#[derive(Clone, Copy)]
pub(super) enum Levels {
    Affine(i64),
    Table(&'static [u8; 64]),
}

/// A grid's code tables with their expansion (`CodeExpansion`: `IQ2_CHUNK_DWORDS_CODE_PICK` and
/// `IQ2_GROUPED_SHIFT` for IQ2_XXS's eight-byte entries, `IQ3_GROUPED_*` for the four-byte ones).
pub(super) struct GridExpansion<const N: usize> {
    codes: &'static GridCodes<N>,
    expansion: CodeExpansion,
}

/// How a block's looked-up code bytes become its magnitudes (`expand_codes`): `picks[p]` groups the codes of
/// groups `groups_per_pick·p ..` (one `vpermt2b` each), `shifts[c]` takes group `c`'s level numbers from the
/// grouped vector (one `vpmultishiftqb`), `levels` maps them to magnitudes.
#[derive(Clone, Copy)]
pub(super) struct CodeExpansion {
    picks: &'static [[u8; 64]],
    groups_per_pick: usize,
    shifts: &'static Align64<[[u8; 64]; 4]>,
    levels: Levels,
}

/// The IQ2 grids' expansion of block `blk` of a pair whose index vector has `picks`' layout (a single block is
/// block 0 of the layout it shares).
pub(super) const fn iq2_expansion(
    picks: &'static Align64<[[u8; 64]; 2]>,
    blk: usize,
) -> CodeExpansion {
    CodeExpansion {
        picks: picks.0.split_at(blk).1.split_at(1).0,
        groups_per_pick: 4,
        shifts: &IQ2_GROUPED_SHIFT,
        levels: Levels::Affine(IQ2_AFFINE.0),
    }
}

pub(super) static IQ2XXS_EXPANSION: GridExpansion<256> = GridExpansion {
    codes: &IQ2XXS_CODES,
    expansion: iq2_expansion(&IQ2_CHUNK_DWORDS_CODE_PICK, 0),
};
pub(super) static IQ3XXS_EXPANSION: GridExpansion<256> = GridExpansion {
    codes: &IQ3XXS_CODES,
    expansion: CodeExpansion {
        picks: &IQ3_GROUPED_CODE_PICK.0,
        groups_per_pick: 2,
        shifts: &IQ3_GROUPED_SHIFT,
        levels: Levels::Table(&IQ3XXS_LEVEL_TABLE),
    },
};
pub(super) static IQ3S_EXPANSION: GridExpansion<512> = GridExpansion {
    codes: &IQ3S_CODES,
    expansion: CodeExpansion {
        picks: &IQ3_GROUPED_CODE_PICK.0,
        groups_per_pick: 2,
        shifts: &IQ3_GROUPED_SHIFT,
        levels: Levels::Affine(IQ3S_AFFINE.0),
    },
};

/// The 256 magnitudes of a block from its grid indices: low bytes in `idx` (IQ2_XXS: its 32 where they lie in
/// the block; IQ3: all 64), bit 8 in `high` (IQ2_XS has its own form of these steps, in
/// `BlockIQ2XS::magnitudes`). The codes come from `lookup_bytes` (`SLICES = N / 128` `vpermi2b` per code
/// table); then per 64 weights one `vpermt2b` puts each entry's two code bytes into its qword (IQ2) or dword
/// (IQ3), one `vpmultishiftqb` each level number into its byte, and the level mapping (`Levels`,
/// affine constant `B`) makes it a magnitude.
#[inline(always)]
pub(super) unsafe fn grid_magnitudes<const N: usize, const SLICES: usize, const B: i32>(
    grid: &GridExpansion<N>,
    idx: __m512i,
    high: [u64; 2],
) -> [__m512i; 4] {
    const { assert!(N == 128 * SLICES) };
    // SAFETY (whole body): the code tables hold 128·SLICES bytes each; the other loads are of static 64-byte
    // tables; features are enabled by the calling kernel.
    unsafe {
        let lo = lookup_bytes::<SLICES>(grid.codes.lo.as_ptr(), idx, high);
        let hi = lookup_bytes::<SLICES>(grid.codes.hi.as_ptr(), idx, high);
        expand_codes::<B>(grid.expansion, lo, hi)
    }
}

/// The 256 magnitudes of a block from its looked-up code bytes `lo` and `hi` (`CodeExpansion`): one `vpermt2b`
/// per pick groups the entries' codes so that each 64-weight group's lie one per qword (IQ2) or dword (IQ3) at
/// the same word, then per group one `vpmultishiftqb` puts each level number into its byte and the level mapping
/// (affine constant `B`) makes it a magnitude. Per block one or two permutes where a permute per group picked
/// each group's codes before (the shuffle port is what these kernels are short of).
#[inline(always)]
pub(super) unsafe fn expand_codes<const B: i32>(
    e: CodeExpansion,
    lo: __m512i,
    hi: __m512i,
) -> [__m512i; 4] {
    // SAFETY (whole body): loads of static 64-byte controls; features are enabled by the calling kernel.
    unsafe {
        let mut grouped = [_mm512_setzero_si512(); 2];
        for (g, pick) in grouped.iter_mut().zip(e.picks) {
            *g = _mm512_permutex2var_epi8(lo, _mm512_loadu_si512(pick.as_ptr() as *const _), hi);
        }
        // A loop, not `array::from_fn`: a closure would not inherit the kernel's features.
        let mut out = [_mm512_setzero_si512(); 4];
        for (c, o) in out.iter_mut().enumerate() {
            let shift = _mm512_loadu_si512(e.shifts.0[c].as_ptr() as *const _);
            let numbers = _mm512_multishift_epi64_epi8(shift, grouped[c / e.groups_per_pick]);
            *o = level_magnitudes::<B>(e.levels, numbers);
        }
        out
    }
}

/// The magnitudes of the level numbers in the bytes of `numbers` (`Levels`; affine constant `B`).
#[inline(always)]
pub(super) unsafe fn level_magnitudes<const B: i32>(levels: Levels, numbers: __m512i) -> __m512i {
    // SAFETY: a load of a static 64-byte table; features are enabled by the calling kernel.
    unsafe {
        match levels {
            Levels::Affine(a) => _mm512_gf2p8affine_epi64_epi8::<B>(numbers, _mm512_set1_epi64(a)),
            Levels::Table(t) => {
                _mm512_permutexvar_epi8(numbers, _mm512_loadu_si512(t.as_ptr() as *const _))
            }
        }
    }
}

/// A block's 32 sign bytes (bit `e % 8` of byte `e / 8` set: element `e` is negative), as the products take
/// them: 64 bits per 64 weights as a k-mask.
#[derive(Clone, Copy)]
pub enum SignBytes {
    /// The four masks, read from the block itself (IQ2_S, IQ3_S).
    Masks([u64; 4]),
    /// Computed from the block's sign fields (IQ2_XXS, IQ2_XS, IQ3_XXS), in a vector until the products store
    /// them and read them back as masks (`mask_at`).
    Computed(__m256i),
}

/// The four masks of 32 sign bytes at `p`.
///
/// # Safety
/// 32 readable bytes at `p`.
#[inline(always)]
pub(super) unsafe fn block_sign_masks(p: *const u8) -> SignBytes {
    // SAFETY: the caller's contract.
    SignBytes::Masks(std::array::from_fn(|c| unsafe {
        (p.add(8 * c) as *const u64).read_unaligned()
    }))
}

/// The 64-bit k-mask at `p` by `kmovq k, m64`: a load, where the compiler's own route from a vector (`vmovq`,
/// `vpextrq`, `kmovq k, r64`) spends shuffle-port operations the IQ kernels are short of.
///
/// # Safety
/// 8 readable bytes at `p`; the CPU must have AVX-512 BW.
#[inline]
#[target_feature(enable = "avx512bw")]
pub(super) unsafe fn mask_at(p: *const u8) -> u64 {
    let k: u64;
    // SAFETY: the caller's contract; the instruction only reads the 8 bytes and writes `k`.
    unsafe {
        std::arch::asm!(
            "kmovq {k}, qword ptr [{p}]",
            k = out(kreg) k,
            p = in(reg) p,
            options(pure, readonly, nostack, preserves_flags),
        )
    };
    k
}

/// `ksigns_iq2xs` of the 7-bit fields in the bytes of `fields` (bit 7 ignored): one `vpermi2b` over the
/// 128-byte table.
#[inline(always)]
pub(super) unsafe fn ksigns(fields: __m512i) -> __m512i {
    // SAFETY: loads of the two 64-byte halves of a 128-byte static; features are enabled by the calling
    // kernel.
    unsafe {
        let lo = _mm512_loadu_si512(KSIGNS_IQ2XS.as_ptr() as *const _);
        let hi = _mm512_loadu_si512(KSIGNS_IQ2XS.as_ptr().add(64) as *const _);
        _mm512_permutex2var_epi8(lo, fields, hi)
    }
}

/// Eight per-chunk nibbles (`bytes`, one per byte) as the sixteen scale words `2·nibble + 1`, each chunk's twice.
#[inline(always)]
pub(super) unsafe fn chunk_scales(bytes: __m128i) -> BlockScales {
    // SAFETY: register operations; features are enabled by the calling kernel.
    unsafe {
        let b = _mm_unpacklo_epi8(bytes, bytes);
        let scales = _mm_add_epi8(_mm_add_epi8(b, b), _mm_set1_epi8(1));
        BlockScales::Words(_mm512_castsi256_si512(_mm256_cvtepu8_epi16(scales)))
    }
}

/// `vpmultishiftqb` control that puts bits `2g..2g+8` of the IQ2_S `qh` qword in the high byte of word `g`.
pub(super) const IQ2S_QH_SHIFT: [u8; 64] = {
    let mut t = [0u8; 64];
    let mut g = 0;
    while g < 32 {
        t[2 * g + 1] = (2 * g) as u8;
        g += 1;
    }
    t
};

impl IqDecode for BlockIQ2S {
    #[inline(always)]
    unsafe fn magnitudes<const GATHER: bool>(&self) -> [__m512i; 4] {
        // SAFETY (whole body): the loads read `qs[0..32]` and `qh` of the block; the indices
        // `qs[g] | ((qh >> 2g) & 3) << 8` are 10 bits, inside the 1024-entry grid.
        unsafe {
            let low = _mm512_cvtepu8_epi16(_mm256_loadu_si256(self.qs.as_ptr() as *const __m256i));
            let qh = _mm512_set1_epi64(u64::from_le_bytes(self.qh) as i64);
            let ctrl = _mm512_loadu_si512(IQ2S_QH_SHIFT.as_ptr() as *const _);
            let high = _mm512_multishift_epi64_epi8(ctrl, qh);
            // (high & 0x0300) | low
            let idx = _mm512_ternarylogic_epi32::<0xf8>(low, high, _mm512_set1_epi16(0x0300));
            let mut words = [0u64; 8];
            _mm512_storeu_si512(words.as_mut_ptr() as *mut _, idx);
            if GATHER {
                let mut out = [_mm512_setzero_si512(); 4];
                for (c, o) in out.iter_mut().enumerate() {
                    let ix = _mm256_cvtepu16_epi32(_mm_loadu_si128(
                        words.as_ptr().add(2 * c) as *const _
                    ));
                    *o = _mm512_i32gather_epi64::<8>(ix, IQ2S_GRID.as_ptr() as *const i64);
                }
                return out;
            }
            entries_by_loads(&words, IQ2S_GRID.as_ptr() as *const i64)
        }
    }
    #[inline(always)]
    unsafe fn sign_bytes(&self) -> SignBytes {
        // SAFETY: `qs[32..64]` are the sign bytes.
        unsafe { block_sign_masks(self.qs[32..].as_ptr()) }
    }
    #[inline(always)]
    unsafe fn block_scales(&self) -> BlockScales {
        // SAFETY: an 8-byte load of `scales`; features are enabled by the calling kernel.
        unsafe {
            let q = _mm512_set1_epi64(u64::from_le_bytes(self.scales) as i64);
            BlockScales::Nibbles(q, &IQ2_NIBBLE_SCALE_SHIFT)
        }
    }
}

impl IqDecode for BlockIQ2XS {
    #[inline(always)]
    unsafe fn magnitudes<const GATHER: bool>(&self) -> [__m512i; 4] {
        // SAFETY (whole body): a 64-byte load of `qs`; indices `qs[g] & 511` are inside the 512-entry tables.
        unsafe {
            if GATHER {
                let mut out = [_mm512_setzero_si512(); 4];
                for (c, o) in out.iter_mut().enumerate() {
                    // Words 8c..8c+8 (bytes 16c..16c+16), their low nine bits as dword indices.
                    let w = _mm_loadu_si128(self.qs.as_ptr().add(16 * c) as *const __m128i);
                    let ix = _mm256_and_si256(_mm256_cvtepu16_epi32(w), _mm256_set1_epi32(511));
                    *o = _mm512_i32gather_epi64::<8>(ix, IQ2XS_GRID.as_ptr() as *const i64);
                }
                return out;
            }
            // The index words as they are: byte 2e holds index e's low eight bits (the odd bytes look up
            // entries nobody reads), bit 7 of byte 2e of `w >> 1` its bit 8. The two code tables' bytes for
            // entry e land in byte 2e of `lo` and `hi`, where the grouping permute of block `a` of an
            // interleaved pair takes them.
            let w = _mm512_loadu_si512(self.qs.as_ptr() as *const _);
            let high = [_mm512_movepi8_mask(_mm512_srli_epi16::<1>(w)), 0];
            let lo = lookup_bytes::<4>(IQ2XS_CODES.lo.as_ptr(), w, high);
            let hi = lookup_bytes::<4>(IQ2XS_CODES.hi.as_ptr(), w, high);
            const B: i32 = IQ2_AFFINE.1 as i32;
            expand_codes::<B>(iq2_expansion(&IQ2_INTERLEAVED_CODE_PICK, 0), lo, hi)
        }
    }
    #[inline(always)]
    unsafe fn sign_bytes(&self) -> SignBytes {
        // SAFETY: a 64-byte load of `qs`; the rest are register operations.
        unsafe {
            // The 7-bit sign field of each word (bits 9..15) into bytes 0..32 by one `vpermb` (a `vpmovwb` is
            // two shuffle operations).
            let w = _mm512_loadu_si512(self.qs.as_ptr() as *const _);
            let even = _mm512_loadu_si512(WORD_LOW_BYTES.as_ptr() as *const _);
            let fields = _mm512_permutexvar_epi8(even, _mm512_srli_epi16::<9>(w));
            SignBytes::Computed(_mm512_castsi512_si256(ksigns(fields)))
        }
    }
    #[inline(always)]
    unsafe fn block_scales(&self) -> BlockScales {
        // SAFETY: an 8-byte load of `scales`; features are enabled by the calling kernel.
        unsafe {
            let q = _mm512_set1_epi64(u64::from_le_bytes(self.scales) as i64);
            BlockScales::Nibbles(q, &IQ2_NIBBLE_SCALE_SHIFT)
        }
    }
}

/// The odd bytes of a zmm, as a k-mask.
pub(super) const ODD_BYTES: u64 = 0xaaaa_aaaa_aaaa_aaaa;

/// Where a pair's index vector holds the indices: the byte of block `blk`'s entry `e` (0..32).
#[derive(Clone, Copy)]
pub(super) enum PairLayout {
    /// Byte `2e + blk` (IQ2_XS: block `b`'s low bytes in `a`'s odd bytes).
    Interleaved,
    /// Byte `32·blk + e` (IQ2_S: the two blocks' 32 bytes one after the other).
    Halves,
    /// Byte `8·(e / 4) + e % 4 + 4·blk` (IQ2_XXS: each chunk's qword, `a`'s four in its low dword, `b`'s in its
    /// high one).
    ChunkDwords,
}

impl PairLayout {
    const fn at(self, blk: usize, e: usize) -> usize {
        match self {
            PairLayout::Interleaved => 2 * e + blk,
            PairLayout::Halves => 32 * blk + e,
            PairLayout::ChunkDwords => 8 * (e / 4) + e % 4 + 4 * blk,
        }
    }
}

/// `vpermi2b` controls taking a pair's looked-up code bytes (`lo` and `hi`, in the index vector's `layout`) to
/// each block's codes grouped for the expansion: word `w` of qword `k` holds the code of entry `8w + k`, so
/// qword `k` of every 64-weight group `w` is already in place and the expansion needs no word or byte pick
/// per group.
pub(super) const fn iq2_grouped_code_picks(layout: PairLayout) -> Align64<[[u8; 64]; 2]> {
    let mut t = [[0u8; 64]; 2];
    let mut blk = 0;
    while blk < 2 {
        let mut k = 0;
        while k < 8 {
            let mut w = 0;
            while w < 4 {
                let at = layout.at(blk, 8 * w + k);
                t[blk][8 * k + 2 * w] = at as u8;
                t[blk][8 * k + 2 * w + 1] = (64 + at) as u8;
                w += 1;
            }
            k += 1;
        }
        blk += 1;
    }
    Align64(t)
}
pub(super) static IQ2_INTERLEAVED_CODE_PICK: Align64<[[u8; 64]; 2]> =
    iq2_grouped_code_picks(PairLayout::Interleaved);
pub(super) static IQ2_HALVES_CODE_PICK: Align64<[[u8; 64]; 2]> =
    iq2_grouped_code_picks(PairLayout::Halves);
pub(super) static IQ2_CHUNK_DWORDS_CODE_PICK: Align64<[[u8; 64]; 2]> =
    iq2_grouped_code_picks(PairLayout::ChunkDwords);

/// IQ2: qword `k` holds entry `8c + k`'s code in word `c`, byte `j` takes the bits from `16c + 2j`.
pub(super) static IQ2_GROUPED_SHIFT: Align64<[[u8; 64]; 4]> = grouped_shifts(8, 2);

/// The magnitudes of blocks `a` and `b` of a pair from their looked-up code bytes, laid out as `picks` expects
/// (`iq2_grouped_code_picks`): per block one `vpermt2b` groups its codes, then per 64 weights one
/// `vpmultishiftqb` and one `vgf2p8affineqb` (`expand_codes`). Against code words picked per 64 weights (a
/// `vpermw` each, after a shift and a blend per block) this takes two shuffle operations per block where ten
/// were (a `vpermi2b` occupies the Ice Lake Xeon's shuffle port two cycles, a `vpermw` one).
#[inline(always)]
pub(super) unsafe fn iq2_pair_magnitudes(
    picks: &'static Align64<[[u8; 64]; 2]>,
    lo: __m512i,
    hi: __m512i,
) -> [[__m512i; 4]; 2] {
    const B: i32 = IQ2_AFFINE.1 as i32;
    // SAFETY: features are enabled by the calling kernel.
    unsafe {
        [
            expand_codes::<B>(iq2_expansion(picks, 0), lo, hi),
            expand_codes::<B>(iq2_expansion(picks, 1), lo, hi),
        ]
    }
}

/// `vpermb` control that gathers the even bytes into bytes 0..32 and the odd ones into 32..64.
pub(super) static EVEN_THEN_ODD_BYTES: [u8; 64] = {
    let mut t = [0u8; 64];
    let mut j = 0;
    while j < 64 {
        t[j] = if j < 32 { 2 * j } else { 2 * (j - 32) + 1 } as u8;
        j += 1;
    }
    t
};

impl IqPairDecode for BlockIQ2XS {
    /// Block `a`'s index words with block `b`'s low bytes in their odd bytes (which `magnitudes` wastes on
    /// lookups nobody reads): one lookup of both blocks' 64 indices (`lookup_bytes`, 512 entries: four
    /// `vpermi2b` per code table, the kernel's largest shuffle-port cost) where `magnitudes` does one per block.
    /// Byte `2e` holds `a`'s index `e`, byte `2e + 1` `b`'s (`PairLayout::Interleaved`), their bits 8 go to
    /// bit 7 of the same bytes by two shifts and a blend, and the codes come back interleaved the same way for
    /// `iq2_pair_magnitudes`. The sign fields are interleaved alike, looked up by one `ksigns` for both blocks
    /// and split by one `vpermb`.
    #[inline(always)]
    unsafe fn decode_pair(a: &Self, b: &Self) -> [IqDecoded; 2] {
        // SAFETY (whole body): 64-byte loads of the two blocks' `qs`; every index is 9 bits of a word, inside
        // the 512-entry tables; features are enabled by the calling kernel.
        unsafe {
            let wa = _mm512_loadu_si512(a.qs.as_ptr() as *const _);
            let wb = _mm512_loadu_si512(b.qs.as_ptr() as *const _);
            let idx = _mm512_mask_blend_epi8(ODD_BYTES, wa, _mm512_slli_epi16::<8>(wb));
            let bit8 = _mm512_mask_blend_epi8(
                ODD_BYTES,
                _mm512_srli_epi16::<1>(wa),
                _mm512_slli_epi16::<7>(wb),
            );
            let high = [_mm512_movepi8_mask(bit8), 0];
            let lo = lookup_bytes::<4>(IQ2XS_CODES.lo.as_ptr(), idx, high);
            let hi = lookup_bytes::<4>(IQ2XS_CODES.hi.as_ptr(), idx, high);
            let [ma, mb] = iq2_pair_magnitudes(&IQ2_INTERLEAVED_CODE_PICK, lo, hi);
            // Sign field (bits 9..15 of each word): `a`'s in the even bytes, `b`'s in the odd ones.
            let fields = _mm512_mask_blend_epi8(
                ODD_BYTES,
                _mm512_srli_epi16::<9>(wa),
                _mm512_srli_epi16::<1>(wb),
            );
            let split = _mm512_loadu_si512(EVEN_THEN_ODD_BYTES.as_ptr() as *const _);
            let signs = _mm512_permutexvar_epi8(split, ksigns(fields));
            decoded_pair(
                [a, b],
                [ma, mb],
                [
                    SignBytes::Computed(_mm512_castsi512_si256(signs)),
                    SignBytes::Computed(_mm512_extracti64x4_epi64::<1>(signs)),
                ],
            )
        }
    }
}

/// `vpmultishiftqb` control for IQ2_XXS: byte `l` (0..4) of each qword takes the sign field at bit `32 + 7l`.
pub(super) const IQ2XXS_SIGN_SHIFT: [u8; 64] = {
    let mut t = [0u8; 64];
    let mut b = 0;
    while b < 64 {
        if b % 8 < 4 {
            t[b] = (32 + 7 * (b % 8)) as u8;
        }
        b += 1;
    }
    t
};

/// `vpmultishiftqb` control for IQ3_XXS: byte `4h + l` of each qword takes sign field `l` (at bit `7l`) of the
/// qword's dword `h`, so the 32 bytes come out in chunk order (bit 7 of each, a bit of the next field or of the
/// scale, is ignored by `ksigns`).
pub(super) const IQ3XXS_SIGN_SHIFT: [u8; 64] = {
    let mut t = [0u8; 64];
    let mut b = 0;
    while b < 64 {
        t[b] = (32 * ((b % 8) / 4) + 7 * (b % 4)) as u8;
        b += 1;
    }
    t
};

impl IqDecode for BlockIQ2XXS {
    #[inline(always)]
    unsafe fn magnitudes<const GATHER: bool>(&self) -> [__m512i; 4] {
        // SAFETY (whole body): a 64-byte load of `qs`; the indices are bytes, inside the 256-entry tables.
        unsafe {
            let q = _mm512_loadu_si512(self.qs.as_ptr() as *const _);
            // No gathers here even with `GATHER`: the dispatcher gives IQ2_XXS its two-block lookups on
            // every CPU, which beat its gathers where gathers are fast (`dispatch.rs`); this single-block form
            // serves the pair kernel's last odd block.
            // The low dword of each chunk's qword holds its four index bytes, looked up in place (the other
            // bytes look up entries nobody reads; the grouping permute takes each entry's from its place, as
            // block `a`'s of a pair: `PairLayout::ChunkDwords`).
            grid_magnitudes::<256, 2, { IQ2_AFFINE.1 as i32 }>(&IQ2XXS_EXPANSION, q, [0, 0])
        }
    }
    #[inline(always)]
    unsafe fn sign_bytes(&self) -> SignBytes {
        // SAFETY: a 64-byte load of `qs` and a static control; the rest are register operations.
        unsafe {
            let q = _mm512_loadu_si512(self.qs.as_ptr() as *const _);
            let ctrl = _mm512_loadu_si512(IQ2XXS_SIGN_SHIFT.as_ptr() as *const _);
            let signs = ksigns(_mm512_multishift_epi64_epi8(ctrl, q));
            let pack = _mm512_loadu_si512(QWORD_LOW_DWORDS.as_ptr() as *const _);
            SignBytes::Computed(_mm512_castsi512_si256(_mm512_permutexvar_epi8(pack, signs)))
        }
    }
    #[inline(always)]
    unsafe fn block_scales(&self) -> BlockScales {
        // SAFETY: a 64-byte load of `qs`; the rest are register operations.
        unsafe {
            let q = _mm512_loadu_si512(self.qs.as_ptr() as *const _);
            let pack = _mm512_loadu_si512(QWORD_LOW_BYTES.as_ptr() as *const _);
            let nibbles = _mm512_permutexvar_epi8(pack, _mm512_srli_epi64::<60>(q));
            chunk_scales(_mm512_castsi512_si128(nibbles))
        }
    }
}

impl IqPairDecode for BlockIQ2S {
    /// Not ahead: a decoded pair carried across the loop, next to the tables, left the compiler spilling every
    /// iteration (Ice Lake Xeon: 11–19 % slower than decoding each pair where it is used, six paired runs).
    const DECODE_AHEAD: bool = false;
    /// Both blocks' 64 grid indices in one vector (`PairLayout::Halves`: `a`'s 32 low bytes, then `b`'s, by a
    /// load and an insert from memory; bits 8 and 9 as k-masks gathered from the two `qh` qwords by `pext`),
    /// looked up in the 1024-entry code tables (`lookup_bytes`: eight `vpermi2b` per table and a tree of seven
    /// blends) once for both blocks, where the loads take 32 scalar loads and their inserts per block; each
    /// block's codes grouped and expanded by `iq2_pair_magnitudes`. Signs and scales as `IqDecode`.
    #[inline(always)]
    unsafe fn decode_pair(a: &Self, b: &Self) -> [IqDecoded; 2] {
        // SAFETY (whole body): 32-byte loads of the two blocks' `qs[0..32]` and their `qh`; every index is 10
        // bits, inside the 1024-entry tables; features are enabled by the calling kernel.
        unsafe {
            let la = _mm512_castsi256_si512(_mm256_loadu_si256(a.qs.as_ptr() as *const __m256i));
            let lb = _mm256_loadu_si256(b.qs.as_ptr() as *const __m256i);
            let idx = _mm512_inserti64x4::<1>(la, lb);
            // Index e's bits 8 and 9 are bits 2e and 2e + 1 of `qh`.
            const EVEN: u64 = 0x5555_5555_5555_5555;
            let (qa, qb) = (u64::from_le_bytes(a.qh), u64::from_le_bytes(b.qh));
            use std::arch::x86_64::_pext_u64 as pext;
            let high = [
                pext(qa, EVEN) | pext(qb, EVEN) << 32,
                pext(qa, !EVEN) | pext(qb, !EVEN) << 32,
            ];
            let lo = lookup_bytes::<8>(IQ2S_CODES.lo.as_ptr(), idx, high);
            let hi = lookup_bytes::<8>(IQ2S_CODES.hi.as_ptr(), idx, high);
            decoded_pair(
                [a, b],
                iq2_pair_magnitudes(&IQ2_HALVES_CODE_PICK, lo, hi),
                [a.sign_bytes(), b.sign_bytes()],
            )
        }
    }
}

impl IqPairDecode for BlockIQ2XXS {
    /// Block `b`'s index dwords moved into the high dwords of `a`'s chunks (which hold `a`'s sign and scale
    /// fields, looked up for nothing by `magnitudes`): one lookup of both blocks' 64 indices (two `vpermi2b` per
    /// code table) where `magnitudes` does one per block; each block's grouping permute takes its codes from its
    /// own dwords (`PairLayout::ChunkDwords`, `iq2_pair_magnitudes`). Signs and scales as `IqDecode`.
    #[inline(always)]
    unsafe fn decode_pair(a: &Self, b: &Self) -> [IqDecoded; 2] {
        // SAFETY (whole body): 64-byte loads of the two blocks' `qs`; the indices are bytes, inside the 256-entry
        // tables; features are enabled by the calling kernel.
        unsafe {
            let qa = _mm512_loadu_si512(a.qs.as_ptr() as *const _);
            let qb = _mm512_loadu_si512(b.qs.as_ptr() as *const _);
            let idx = _mm512_mask_blend_epi32(0xaaaa, qa, _mm512_slli_epi64::<32>(qb));
            let lo = lookup_bytes::<2>(IQ2XXS_CODES.lo.as_ptr(), idx, [0, 0]);
            let hi = lookup_bytes::<2>(IQ2XXS_CODES.hi.as_ptr(), idx, [0, 0]);
            decoded_pair(
                [a, b],
                iq2_pair_magnitudes(&IQ2_CHUNK_DWORDS_CODE_PICK, lo, hi),
                [a.sign_bytes(), b.sign_bytes()],
            )
        }
    }
}

impl IqDecode for BlockIQ3XXS {
    #[inline(always)]
    unsafe fn magnitudes<const GATHER: bool>(&self) -> [__m512i; 4] {
        // SAFETY (whole body): a 64-byte load of `qs[0..64]`; the indices are bytes, inside the 256-entry
        // tables.
        unsafe {
            let idx = _mm512_loadu_si512(self.qs.as_ptr() as *const _);
            grid_magnitudes::<256, 2, 0>(&IQ3XXS_EXPANSION, idx, [0, 0])
        }
    }
    #[inline(always)]
    unsafe fn sign_bytes(&self) -> SignBytes {
        // SAFETY: a 32-byte load of `qs[64..96]` and a static control; the rest are register operations.
        unsafe {
            let w = _mm512_zextsi256_si512(_mm256_loadu_si256(
                self.qs.as_ptr().add(64) as *const __m256i
            ));
            let ctrl = _mm512_loadu_si512(IQ3XXS_SIGN_SHIFT.as_ptr() as *const _);
            let signs = ksigns(_mm512_multishift_epi64_epi8(ctrl, w));
            SignBytes::Computed(_mm512_castsi512_si256(signs))
        }
    }
    #[inline(always)]
    unsafe fn block_scales(&self) -> BlockScales {
        // SAFETY: a 32-byte load of `qs[64..96]`; the rest are register operations.
        unsafe {
            let w = _mm256_loadu_si256(self.qs.as_ptr().add(64) as *const __m256i);
            let pack = _mm256_loadu_si256(DWORD_LOW_BYTES.as_ptr() as *const _);
            let nibbles = _mm256_permutexvar_epi8(pack, _mm256_srli_epi32::<28>(w));
            chunk_scales(_mm256_castsi256_si128(nibbles))
        }
    }
}

impl IqDecode for BlockIQ3S {
    #[inline(always)]
    unsafe fn magnitudes<const GATHER: bool>(&self) -> [__m512i; 4] {
        // SAFETY (whole body): a 64-byte load of `qs`; the indices `qs[k] | bit k of qh << 8` are 9 bits,
        // inside the 512-entry tables.
        unsafe {
            let idx = _mm512_loadu_si512(self.qs.as_ptr() as *const _);
            let high = [u64::from_le_bytes(self.qh), 0];
            grid_magnitudes::<512, 4, { IQ3S_AFFINE.1 as i32 }>(&IQ3S_EXPANSION, idx, high)
        }
    }
    #[inline(always)]
    unsafe fn sign_bytes(&self) -> SignBytes {
        // SAFETY: `signs` holds 32 bytes.
        unsafe { block_sign_masks(self.signs.as_ptr()) }
    }
    #[inline(always)]
    unsafe fn block_scales(&self) -> BlockScales {
        // SAFETY: a 4-byte load of `scales`; features are enabled by the calling kernel.
        unsafe {
            let q = _mm512_set1_epi32(i32::from_le_bytes(self.scales));
            BlockScales::Nibbles(q, &IQ3S_NIBBLE_SCALE_SHIFT)
        }
    }
}

/// Scale words for 64-weight group `c` of a block: `vpermw` index into the sixteen scales as words; 128-bit
/// lane `k` of group `c` (elements `64c + 16k..+16`) takes scale `4c + k`.
pub(super) const IQ_SCALE_PERM: [[u16; 32]; 4] = group_words(4, 8);

/// A block's scales for `iq_block_partials`.
#[derive(Clone, Copy)]
pub enum BlockScales {
    /// The sixteen scales `2n + 1` as words, each group's taken by one `vpermw` (`IQ_SCALE_PERM`).
    Words(__m512i),
    /// The scale fields `n` (4 bits each) of one word, broadcast to every qword, with the `vpmultishiftqb`
    /// controls that put each lane's field at bit 1 of every word of the lane; one `vpternlogd` then makes the
    /// words `2n + 1` (`(x & 0x1e) | 1`). Two operations per group, one of them a shuffle, where the words
    /// cost seven per block (two shuffles) and a shuffle per group.
    Nibbles(__m512i, &'static Align64<[[u8; 64]; 4]>),
}

/// `vpmultishiftqb` controls for `BlockScales::Nibbles`, group `c`: the low byte of each word of 128-bit lane `l`
/// takes the 8 bits from one below field `nibbles_per_group·c + l / lanes_per_field` (bit `4m − 1`, wrapping to
/// bit 63 for field 0), so the field lands at bit 1; the high bytes are cleared by the `vpternlogd`.
pub(super) const fn nibble_scale_shift(
    nibbles_per_group: usize,
    lanes_per_field: usize,
) -> [[u8; 64]; 4] {
    let mut t = [[0u8; 64]; 4];
    let mut c = 0;
    while c < 4 {
        let mut b = 0;
        while b < 64 {
            let m = nibbles_per_group * c + (b / 16) / lanes_per_field;
            t[c][b] = if b % 2 == 0 {
                ((4 * m + 63) % 64) as u8
            } else {
                0
            };
            b += 1;
        }
        c += 1;
    }
    t
}

/// IQ2_XS and IQ2_S: sixteen fields, one per 16 elements; IQ3_S: eight, one per 32 (its 4-byte word is broadcast
/// as dwords, so each qword holds it twice and bit 63 is the field 7's top bit, cleared like the rest).
pub(super) static IQ2_NIBBLE_SCALE_SHIFT: Align64<[[u8; 64]; 4]> =
    Align64(nibble_scale_shift(4, 1));
pub(super) static IQ3S_NIBBLE_SCALE_SHIFT: Align64<[[u8; 64]; 4]> =
    Align64(nibble_scale_shift(2, 2));

/// One IQ block decoded: its scales, its four groups' magnitude bytes and sign masks.
#[derive(Clone, Copy)]
pub(crate) struct IqDecoded {
    scales: BlockScales,
    magnitudes: [__m512i; 4],
    signs: SignBytes,
}

/// Decodes block `b` (`IqDecode`) for `iq_block_partials`, so the decode of the next block can run ahead while
/// this one's products are computed.
#[inline(always)]
pub(super) unsafe fn iq_decode_block<B: IqDecode, const GATHER: bool>(b: &B) -> IqDecoded {
    // SAFETY (whole body): the decoder's loads are inside the block or static tables; features are enabled by
    // the calling kernel.
    unsafe {
        IqDecoded {
            scales: b.block_scales(),
            magnitudes: b.magnitudes::<GATHER>(),
            signs: b.sign_bytes(),
        }
    }
}

/// Blocks `a` and `b` decoded from their magnitudes and signs, with each block's scales.
#[inline(always)]
pub(super) unsafe fn decoded_pair<B: IqDecode>(
    [a, b]: [&B; 2],
    [ma, mb]: [[__m512i; 4]; 2],
    [sa, sb]: [SignBytes; 2],
) -> [IqDecoded; 2] {
    // SAFETY: the decoders read their own blocks; features are enabled by the calling kernel.
    unsafe {
        [
            IqDecoded {
                scales: a.block_scales(),
                magnitudes: ma,
                signs: sa,
            },
            IqDecoded {
                scales: b.block_scales(),
                magnitudes: mb,
                signs: sb,
            },
        ]
    }
}

/// Formats that decode two blocks at once for `vec_dot_iq_pairs_q8_k`, sharing the lookups' shuffle work.
pub(crate) trait IqPairDecode: IqDecode {
    /// Blocks `a` and `b` decoded, as `iq_decode_block` without gathers decodes each.
    ///
    /// # Safety
    /// Only inside `vec_dot_iq_pairs_q8_k`, which enables the features these use.
    unsafe fn decode_pair(a: &Self, b: &Self) -> [IqDecoded; 2];
    /// Whether pair `k + 1` is decoded before pair `k`'s products (so its lookups overlap them).
    const DECODE_AHEAD: bool = false;
}

/// The sixteen i32 partials of one IQ block against its q8_K block (lanes 0..8 the even 32-weight chunks,
/// 8..16 the odd ones; lanes `m` and `m + 8` together are the haswell kernels' lane `m`), the sign applied to
/// the q8 byte under a k-mask with wrap-around (as stock's `sign_epi8`). Without `HASWELL`, `negated_min`
/// collects the elements where a −128 was negated (the x64 build does not wrap there).
#[inline(always)]
pub(super) unsafe fn iq_block_partials<const HASWELL: bool>(
    d: &IqDecoded,
    q: &BlockQ8K,
    negated_min: &mut u64,
) -> __m512i {
    // SAFETY (whole body): every load is inside `q` (292 bytes) or a static table; features are enabled by the
    // calling kernel.
    unsafe {
        let q8p = q.qs.as_ptr() as *const u8;
        let mut acc = _mm512_setzero_si512();
        let mut scratch = [0u8; 32];
        if let SignBytes::Computed(v) = d.signs {
            _mm256_storeu_si256(scratch.as_mut_ptr() as *mut _, v);
        }
        for (c, &magnitudes) in d.magnitudes.iter().enumerate() {
            let neg = match d.signs {
                SignBytes::Masks(m) => m[c],
                SignBytes::Computed(_) => mask_at(scratch.as_ptr().add(8 * c)),
            };
            let q8 = _mm512_loadu_si512(q8p.add(64 * c) as *const _);
            if !HASWELL {
                *negated_min |= _mm512_mask_cmpeq_epi8_mask(neg, q8, _mm512_set1_epi8(-128));
            }
            let q8s = _mm512_mask_sub_epi8(q8, neg, _mm512_setzero_si512(), q8);
            let pairs = _mm512_maddubs_epi16(magnitudes, q8s);
            let scale = match d.scales {
                BlockScales::Words(s16) => {
                    let perm = _mm512_loadu_si512(IQ_SCALE_PERM[c].as_ptr() as *const _);
                    _mm512_permutexvar_epi16(perm, s16)
                }
                BlockScales::Nibbles(q, shift) => {
                    let ctrl = _mm512_loadu_si512(shift.0[c].as_ptr() as *const _);
                    _mm512_ternarylogic_epi32::<0xea>(
                        _mm512_multishift_epi64_epi8(ctrl, q),
                        _mm512_set1_epi16(0x1e),
                        _mm512_set1_epi16(1),
                    )
                }
            };
            acc = dpwssd_in_place(acc, pairs, scale);
        }
        acc
    }
}

/// `vpdpwssd` as one instruction: LLVM splits a chain of `_mm512_dpwssd_epi32` into `vpmaddwd` and `vpaddd`
/// pairs to shorten its latency (six of a pair's eight in the IQ kernels), one 512-bit operation more each,
/// where these kernels are short of vector ports rather than of parallel work.
///
/// # Safety
/// The CPU must have AVX-512 VNNI.
#[inline]
#[target_feature(enable = "avx512f,avx512vnni")]
pub(super) unsafe fn dpwssd_in_place(acc: __m512i, a: __m512i, b: __m512i) -> __m512i {
    let mut acc = acc;
    // SAFETY: a register operation on `acc`, `a` and `b`; the caller's contract gives the feature.
    unsafe {
        std::arch::asm!(
            "vpdpwssd {acc}, {a}, {b}",
            acc = inout(zmm_reg) acc,
            a = in(zmm_reg) a,
            b = in(zmm_reg) b,
            options(pure, nomem, nostack, preserves_flags),
        )
    };
    acc
}

/// `ggml_vec_dot_*_q8_K` of an IQ format in the haswell build's eight-lane order (`HASWELL`) or the x64
/// build's chain: per block the format's decode (`IqDecode`, issued a block ahead of its products so the
/// lookups overlap the previous block's arithmetic), the signs as a k-mask on the q8 bytes, `vpmaddubsw` and
/// `vpdpwssd` against the scales. The x64 order's rare negated −128 (never written by the quantizer) sends the
/// row to the model.
///
/// # Safety
/// The CPU must have AVX-512 F/BW/VL/VNNI/VBMI, AVX2, FMA and F16C; `y.len() >= x.len()`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c,gfni")]
pub unsafe fn vec_dot_iq_q8_k<B: IqDecode, const HASWELL: bool, const GATHER: bool>(
    x: &[B],
    y: &[BlockQ8K],
) -> f32 {
    debug_assert!(y.len() >= x.len());
    // SAFETY (whole block): block `i` of x and y are inside the slices; this function enables the features.
    unsafe {
        let mut sums = IqRowSums::new();
        if let Some(first) = x.first() {
            let mut next = iq_decode_block::<B, GATHER>(first);
            for (i, (xb, yb)) in x.iter().zip(y).enumerate() {
                prefetch_ahead(xb as *const B as *const u8, size_of::<B>());
                let cur = next;
                if let Some(after) = x.get(i + 1) {
                    next = iq_decode_block::<B, GATHER>(after);
                }
                sums.block::<B, HASWELL>(&cur, xb, yb);
            }
        }
        iq_row_result::<B, HASWELL>(sums.acc, sums.sumf, sums.negated_min != 0, x, y)
    }
}

/// `vec_dot_iq_q8_k` without gathers for a format that decodes two blocks at once (`IqPairDecode`): pair
/// `k + 1` is decoded while pair `k`'s products are computed (where `DECODE_AHEAD`); an odd last block is
/// decoded alone. The products and float steps are `vec_dot_iq_q8_k`'s, block by block in order, so the bits
/// are the same.
///
/// # Safety
/// The CPU must have AVX-512 F/BW/VL/VNNI/VBMI, AVX2, FMA, F16C, GFNI and BMI2 (IQ2_S's `pext`);
/// `y.len() >= x.len()`.
#[target_feature(
    enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c,gfni,bmi2"
)]
pub(crate) unsafe fn vec_dot_iq_pairs_q8_k<B: IqPairDecode, const HASWELL: bool>(
    x: &[B],
    y: &[BlockQ8K],
) -> f32 {
    debug_assert!(y.len() >= x.len());
    // SAFETY (whole block): blocks `2k`, `2k + 1` and the odd last one of x and y are inside the slices; this
    // function enables the features.
    unsafe {
        let mut sums = IqRowSums::new();
        let (pairs, last) = x.as_chunks::<2>();
        if !B::DECODE_AHEAD {
            for (k, pair) in pairs.iter().enumerate() {
                prefetch_ahead(pair.as_ptr() as *const u8, 2 * size_of::<B>());
                let cur = B::decode_pair(&pair[0], &pair[1]);
                sums.block::<B, HASWELL>(&cur[0], &pair[0], &y[2 * k]);
                sums.block::<B, HASWELL>(&cur[1], &pair[1], &y[2 * k + 1]);
            }
        } else if let Some(first) = pairs.first() {
            let mut next = B::decode_pair(&first[0], &first[1]);
            for (k, pair) in pairs.iter().enumerate() {
                prefetch_ahead(pair.as_ptr() as *const u8, 2 * size_of::<B>());
                let cur = next;
                if let Some(after) = pairs.get(k + 1) {
                    next = B::decode_pair(&after[0], &after[1]);
                }
                sums.block::<B, HASWELL>(&cur[0], &pair[0], &y[2 * k]);
                sums.block::<B, HASWELL>(&cur[1], &pair[1], &y[2 * k + 1]);
            }
        }
        if let Some(xb) = last.first() {
            let i = x.len() - 1;
            sums.block::<B, HASWELL>(&iq_decode_block::<B, false>(xb), xb, &y[i]);
        }
        iq_row_result::<B, HASWELL>(sums.acc, sums.sumf, sums.negated_min != 0, x, y)
    }
}

/// The running sums of an IQ row: the haswell order's eight float lanes (or the x64 chain's `acc`/`sumf`)
/// and the x64 order's record of negated −128s.
pub(super) struct IqRowSums {
    acc: __m256,
    sumf: f32,
    negated_min: u64,
}

impl IqRowSums {
    /// Zero sums.
    ///
    /// # Safety
    /// Only inside the IQ kernels, which enable AVX.
    #[inline(always)]
    unsafe fn new() -> IqRowSums {
        IqRowSums {
            // SAFETY: the caller's contract.
            acc: unsafe { _mm256_setzero_ps() },
            sumf: 0.0,
            negated_min: 0,
        }
    }

    /// One decoded block's products (`iq_block_partials`) and float step: lanes `m` and `m + 8` together are
    /// stock haswell's lane `m`.
    #[inline(always)]
    unsafe fn block<B: IqBlock, const HASWELL: bool>(
        &mut self,
        d: &IqDecoded,
        xb: &B,
        yb: &BlockQ8K,
    ) {
        // SAFETY: register operations and the products' loads inside `yb`; features are enabled by the calling
        // kernel.
        unsafe {
            let p = iq_block_partials::<HASWELL>(d, yb, &mut self.negated_min);
            let lanes =
                _mm256_add_epi32(_mm512_castsi512_si256(p), _mm512_extracti64x4_epi64::<1>(p));
            if HASWELL {
                let d = scale_product(&yb.d, xb.d_bits());
                self.acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(lanes), self.acc);
            } else {
                iq_block_float_step::<false>(
                    &mut self.acc,
                    &mut self.sumf,
                    formats::iq::block_scale(xb, yb),
                    lanes,
                );
            }
        }
    }
}
