//! The lookup tables of ggml's IQ2/IQ3 formats: the lattice grids (one entry = 8 or 4 unsigned weight
//! magnitudes, one per byte) and the sign tables.
//!
//! The grids are data, not code: `grids/<name>.bin` holds each table's entries as little-endian integers,
//! written by `tests/iq_grids.rs` (`GGML_LOWBIT_BLESS=1`) from the `GGML_TABLE_BEGIN(…, <name>, N)` arrays of the
//! pinned `ggml-common.h`, and that test checks every entry against the pinned source on every run. The sign
//! tables are computed here from their rule (`ksigns_iq2xs[i]` is `i` with bit 7 set when `i` has an odd number of
//! set bits, so every sign byte has even parity) and checked against the pinned source by the same test.

/// One grid table as stored: its name in `ggml-common.h`, the width of one entry in bytes, the raw bytes.
pub struct GridTable {
    pub name: &'static str,
    pub width: usize,
    pub bytes: &'static [u8],
}

/// Every stored grid, for the test that checks them against the pinned source.
pub const GRID_TABLES: [GridTable; 5] = [
    GridTable {
        name: "iq2xxs_grid",
        width: 8,
        bytes: include_bytes!("grids/iq2xxs_grid.bin"),
    },
    GridTable {
        name: "iq2xs_grid",
        width: 8,
        bytes: include_bytes!("grids/iq2xs_grid.bin"),
    },
    GridTable {
        name: "iq2s_grid",
        width: 8,
        bytes: include_bytes!("grids/iq2s_grid.bin"),
    },
    GridTable {
        name: "iq3xxs_grid",
        width: 4,
        bytes: include_bytes!("grids/iq3xxs_grid.bin"),
    },
    GridTable {
        name: "iq3s_grid",
        width: 4,
        bytes: include_bytes!("grids/iq3s_grid.bin"),
    },
];

const fn le_u64s<const N: usize>(bytes: &[u8]) -> [u64; N] {
    assert!(bytes.len() == 8 * N, "grid file has the wrong size");
    let mut out = [0u64; N];
    let mut i = 0;
    while i < N {
        let mut v = 0u64;
        let mut b = 0;
        while b < 8 {
            v |= (bytes[8 * i + b] as u64) << (8 * b);
            b += 1;
        }
        out[i] = v;
        i += 1;
    }
    out
}

const fn le_u32s<const N: usize>(bytes: &[u8]) -> [u32; N] {
    assert!(bytes.len() == 4 * N, "grid file has the wrong size");
    let mut out = [0u32; N];
    let mut i = 0;
    while i < N {
        out[i] = u32::from_le_bytes([
            bytes[4 * i],
            bytes[4 * i + 1],
            bytes[4 * i + 2],
            bytes[4 * i + 3],
        ]);
        i += 1;
    }
    out
}

/// `iq2xxs_grid`: 256 entries of 8 magnitudes.
pub static IQ2XXS_GRID: [u64; 256] = le_u64s(GRID_TABLES[0].bytes);
/// `iq2xs_grid`: 512 entries of 8 magnitudes.
pub static IQ2XS_GRID: [u64; 512] = le_u64s(GRID_TABLES[1].bytes);
/// `iq2s_grid`: 1024 entries of 8 magnitudes (bytes 0x08, 0x19, 0x2b).
pub static IQ2S_GRID: [u64; 1024] = le_u64s(GRID_TABLES[2].bytes);
/// `iq3xxs_grid`: 256 entries of 4 magnitudes.
pub static IQ3XXS_GRID: [u32; 256] = le_u32s(GRID_TABLES[3].bytes);
/// `iq3s_grid`: 512 entries of 4 magnitudes.
pub static IQ3S_GRID: [u32; 512] = le_u32s(GRID_TABLES[4].bytes);

/// The magnitudes of the IQ2 grids (every byte of `iq2xxs_grid`, `iq2xs_grid` and `iq2s_grid` is one of them).
pub const IQ2_LEVELS: [u8; 3] = [0x08, 0x19, 0x2b];
/// The magnitudes of `iq3xxs_grid`.
pub const IQ3XXS_LEVELS: [u8; 8] = [4, 12, 20, 28, 36, 44, 52, 62];
/// The magnitudes of `iq3s_grid`.
pub const IQ3S_LEVELS: [u8; 8] = [1, 3, 5, 7, 9, 11, 13, 15];

/// A grid as per-entry codes: each magnitude byte replaced by its level number (2 bits for the three IQ2
/// levels, 3 for the eight IQ3 ones), packed from the entry's first byte up (16 or 12 bits per entry), split
/// into a table of low bytes and one of high bytes. The AVX-512 kernels look entries up in these with byte
/// permutes instead of loading them one by one (IQ2_S's 1024 entries, eight permutes per table, only two blocks
/// at a time: `dispatch::iq2_s_permutes`).
#[repr(C, align(64))]
pub struct GridCodes<const N: usize> {
    pub lo: [u8; N],
    pub hi: [u8; N],
}

impl<const N: usize> GridCodes<N> {
    /// The packed code of entry `i`.
    pub fn code(&self, i: usize) -> u16 {
        self.lo[i] as u16 | (self.hi[i] as u16) << 8
    }
}

/// `GridCodes` of the `N` entries of `width` bytes in `bytes` over `levels`; a byte that is not a level stops
/// the build.
const fn grid_codes<const N: usize>(bytes: &[u8], width: usize, levels: &[u8]) -> GridCodes<N> {
    assert!(bytes.len() == N * width, "grid file has the wrong size");
    let bits = if levels.len() <= 4 { 2 } else { 3 };
    let mut lo = [0u8; N];
    let mut hi = [0u8; N];
    let mut i = 0;
    while i < N {
        let mut code = 0u32;
        let mut j = 0;
        while j < width {
            let v = bytes[width * i + j];
            let mut l = 0;
            while l < levels.len() && levels[l] != v {
                l += 1;
            }
            assert!(l < levels.len(), "grid byte outside its levels");
            code |= (l as u32) << (bits * j);
            j += 1;
        }
        lo[i] = code as u8;
        hi[i] = (code >> 8) as u8;
        i += 1;
    }
    GridCodes { lo, hi }
}

pub static IQ2XXS_CODES: GridCodes<256> = grid_codes(GRID_TABLES[0].bytes, 8, &IQ2_LEVELS);
pub static IQ2XS_CODES: GridCodes<512> = grid_codes(GRID_TABLES[1].bytes, 8, &IQ2_LEVELS);
pub static IQ2S_CODES: GridCodes<1024> = grid_codes(GRID_TABLES[2].bytes, 8, &IQ2_LEVELS);
pub static IQ3XXS_CODES: GridCodes<256> = grid_codes(GRID_TABLES[3].bytes, 4, &IQ3XXS_LEVELS);
pub static IQ3S_CODES: GridCodes<512> = grid_codes(GRID_TABLES[4].bytes, 4, &IQ3S_LEVELS);

/// `ksigns_iq2xs`: seven sign bits completed to even parity by bit 7.
pub const KSIGNS_IQ2XS: [u8; 128] = {
    let mut t = [0u8; 128];
    let mut i = 0;
    while i < 128 {
        t[i] = i as u8 | (((i as u8).count_ones() as u8 & 1) << 7);
        i += 1;
    }
    t
};

/// Byte `j` of a grid entry `e` (entries are little-endian: byte 0 is the entry's first weight).
#[inline(always)]
pub fn grid_byte(entry: u64, j: usize) -> u8 {
    (entry >> (8 * j)) as u8
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iq2_grids_hold_only_the_three_magnitudes() {
        for (name, grid) in [
            ("iq2xxs", &IQ2XXS_GRID[..]),
            ("iq2xs", &IQ2XS_GRID[..]),
            ("iq2s", &IQ2S_GRID[..]),
        ] {
            for (i, &e) in grid.iter().enumerate() {
                for j in 0..8 {
                    assert!(
                        matches!(grid_byte(e, j), 0x08 | 0x19 | 0x2b),
                        "{name}[{i}] byte {j}"
                    );
                }
            }
            // Entries are distinct points.
            let mut sorted = grid.to_vec();
            sorted.sort_unstable();
            sorted.dedup();
            assert_eq!(sorted.len(), grid.len(), "{name} has duplicates");
        }
    }

    #[test]
    fn code_tables_decode_to_the_grids() {
        fn check<const N: usize>(codes: &GridCodes<N>, width: usize, levels: &[u8], grid: &[u8]) {
            let bits = if levels.len() <= 4 { 2 } else { 3 };
            for i in 0..N {
                let code = codes.code(i);
                for j in 0..width {
                    let level = (code >> (bits * j)) as usize & ((1 << bits) - 1);
                    assert_eq!(levels[level], grid[width * i + j], "entry {i} byte {j}");
                }
            }
        }
        check(&IQ2XXS_CODES, 8, &IQ2_LEVELS, GRID_TABLES[0].bytes);
        check(&IQ2XS_CODES, 8, &IQ2_LEVELS, GRID_TABLES[1].bytes);
        check(&IQ2S_CODES, 8, &IQ2_LEVELS, GRID_TABLES[2].bytes);
        check(&IQ3XXS_CODES, 4, &IQ3XXS_LEVELS, GRID_TABLES[3].bytes);
        check(&IQ3S_CODES, 4, &IQ3S_LEVELS, GRID_TABLES[4].bytes);
    }

    #[test]
    fn sign_bytes_have_even_parity_and_keep_their_low_seven_bits() {
        for (i, &s) in KSIGNS_IQ2XS.iter().enumerate() {
            assert_eq!(s.count_ones() % 2, 0);
            assert_eq!((s & 0x7f) as usize, i);
        }
        assert_eq!(KSIGNS_IQ2XS[1], 129);
        assert_eq!(KSIGNS_IQ2XS[3], 3);
    }
}
