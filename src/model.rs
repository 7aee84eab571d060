//! Synthetic llama-architecture models shaped like the real low-bit ones, written as GGUF: random ternary weights
//! (−1/0/+1 at 31/38/31 %, as in Ternary-Bonsai-8B) in Q2_0, or in the PrismML fork's PQ2_0 (type 142) and
//! PTQ1_0 (type 143) of the Bonsai 2 models, realistic scales, unit norms, and a real
//! SentencePiece-style vocabulary (control tokens, the 256 byte-fallback tokens, words) so llama.cpp's tools
//! tokenize and print text. Deterministic for a seed. No model files can be downloaded here; these stand in.

use std::io::BufWriter;
use std::path::Path;

use rayon::prelude::*;

use crate::gguf::{self, Tensor, Value};

/// ggml type ids.
pub const GGML_TYPE_F32: u32 = 0;
pub const GGML_TYPE_Q1_0: u32 = 41;
pub const GGML_TYPE_Q2_0: u32 = 42;
pub const GGML_TYPE_TQ2_0: u32 = 35;
pub const GGML_TYPE_TQ1_0: u32 = 34;
pub const GGML_TYPE_IQ2_XXS: u32 = 16;
/// Not served by the library: the 4-bit format a user would otherwise pick, written as a reference for speed.
pub(crate) const GGML_TYPE_Q4_0: u32 = 2;
pub const GGML_TYPE_IQ2_XS: u32 = 17;
pub const GGML_TYPE_IQ3_XXS: u32 = 18;
pub const GGML_TYPE_IQ3_S: u32 = 21;
pub const GGML_TYPE_IQ2_S: u32 = 22;
pub const GGML_TYPE_PQ2_0: u32 = 142;
pub const GGML_TYPE_PTQ1_0: u32 = 143;

#[derive(Clone, Copy, Debug)]
pub struct Preset {
    pub name: &'static str,
    pub n_layer: usize,
    pub n_embd: usize,
    pub n_ff: usize,
    pub n_head: usize,
    pub n_head_kv: usize,
    /// Width of one attention head; `n_head · head_dim` may differ from `n_embd` (Bonsai 2).
    pub head_dim: usize,
    pub n_vocab: usize,
    pub n_ctx: usize,
    /// Experts per layer (0: a dense FFN) and experts used per token; with experts the FFN matrices are
    /// `ffn_{gate,up,down}_exps` (`n_ff` wide each) and ggml computes them with MUL_MAT_ID.
    pub n_expert: usize,
    pub n_expert_used: usize,
}

/// Small enough for tests: a few MB, every matrix row a whole number of 64-weight blocks.
const TINY: Preset = Preset {
    name: "tiny",
    n_layer: 2,
    n_embd: 256,
    n_ff: 512,
    n_head: 4,
    n_head_kv: 2,
    head_dim: 64,
    n_vocab: 1024,
    n_ctx: 512,
    n_expert: 0,
    n_expert_used: 0,
};

pub const PRESETS: [Preset; 5] = [
    TINY,
    // The tiny model with a mixture of experts (Mixtral-style llama): 4 experts, 2 per token.
    Preset {
        name: "tiny-moe",
        n_expert: 4,
        n_expert_used: 2,
        ..TINY
    },
    // Qwen3-1.7B shapes.
    Preset {
        name: "bonsai-1.7b",
        n_layer: 28,
        n_embd: 2048,
        n_ff: 6144,
        n_head: 16,
        n_head_kv: 8,
        head_dim: 128,
        n_vocab: 151669,
        n_ctx: 4096,
        n_expert: 0,
        n_expert_used: 0,
    },
    // Qwen3-8B shapes.
    Preset {
        name: "bonsai-8b",
        n_layer: 36,
        n_embd: 4096,
        n_ff: 12288,
        n_head: 32,
        n_head_kv: 8,
        head_dim: 128,
        n_vocab: 151669,
        n_ctx: 4096,
        n_expert: 0,
        n_expert_used: 0,
    },
    // Bonsai 2 shapes: hidden 5120, FFN 17408, attention 6144 wide (24 heads of 256), as the 27B
    // PQ2_0 / PTQ1_0 models. Layer count, KV heads and vocabulary are this project's assumptions (a plain llama
    // stack of the same widths), not read from a released file.
    Preset {
        name: "bonsai2-27b",
        n_layer: 64,
        n_embd: 5120,
        n_ff: 17408,
        n_head: 24,
        n_head_kv: 4,
        head_dim: 256,
        n_vocab: 151669,
        n_ctx: 4096,
        n_expert: 0,
        n_expert_used: 0,
    },
];

pub fn preset(name: &str) -> Option<Preset> {
    PRESETS.iter().copied().find(|p| p.name == name)
}

/// Weight formats the generator can write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WeightType {
    Q2_0,
    /// 1-bit Bonsai: ±d, 128 weights per block.
    Q1_0,
    /// BitNet-style ternary, 256 weights per block (activations in q8_K).
    Tq2_0,
    /// BitNet-style ternary at 1.6875 bits (five digits per byte), 256 weights per block.
    Tq1_0,
    /// The IQ lattice quants (activations in q8_K): 2.0625, 2.3125, 2.5625, 3.0625 and 3.4375 bits.
    Iq2Xxs,
    Iq2Xs,
    Iq2S,
    Iq3Xxs,
    Iq3S,
    /// PrismML fork, type 142: loads only in the fork's llama.cpp.
    Pq2_0,
    /// PrismML fork, type 143: loads only in the fork's llama.cpp.
    Ptq1_0,
    /// 4.5 bits, 32 weights per block: not served by the library; the reference a user would otherwise pick
    /// (stock's repacked GEMM paths), for speed comparisons on the same shape.
    Q4_0,
}

impl WeightType {
    pub const ALL: [WeightType; 12] = [
        WeightType::Q2_0,
        WeightType::Q1_0,
        WeightType::Tq2_0,
        WeightType::Tq1_0,
        WeightType::Iq2Xxs,
        WeightType::Iq2Xs,
        WeightType::Iq2S,
        WeightType::Iq3Xxs,
        WeightType::Iq3S,
        WeightType::Pq2_0,
        WeightType::Ptq1_0,
        WeightType::Q4_0,
    ];

    pub fn name(self) -> &'static str {
        match self {
            WeightType::Q2_0 => "q2_0",
            WeightType::Q1_0 => "q1_0",
            WeightType::Tq2_0 => "tq2_0",
            WeightType::Tq1_0 => "tq1_0",
            WeightType::Iq2Xxs => "iq2_xxs",
            WeightType::Iq2Xs => "iq2_xs",
            WeightType::Iq2S => "iq2_s",
            WeightType::Iq3Xxs => "iq3_xxs",
            WeightType::Iq3S => "iq3_s",
            WeightType::Pq2_0 => "pq2_0",
            WeightType::Ptq1_0 => "ptq1_0",
            WeightType::Q4_0 => "q4_0",
        }
    }

    pub fn parse(s: &str) -> Option<WeightType> {
        WeightType::ALL.into_iter().find(|t| t.name() == s)
    }

    pub fn ggml_type(self) -> u32 {
        match self {
            WeightType::Q2_0 => GGML_TYPE_Q2_0,
            WeightType::Q1_0 => GGML_TYPE_Q1_0,
            WeightType::Tq2_0 => GGML_TYPE_TQ2_0,
            WeightType::Tq1_0 => GGML_TYPE_TQ1_0,
            WeightType::Iq2Xxs => GGML_TYPE_IQ2_XXS,
            WeightType::Iq2Xs => GGML_TYPE_IQ2_XS,
            WeightType::Iq2S => GGML_TYPE_IQ2_S,
            WeightType::Iq3Xxs => GGML_TYPE_IQ3_XXS,
            WeightType::Iq3S => GGML_TYPE_IQ3_S,
            WeightType::Pq2_0 => GGML_TYPE_PQ2_0,
            WeightType::Ptq1_0 => GGML_TYPE_PTQ1_0,
            WeightType::Q4_0 => GGML_TYPE_Q4_0,
        }
    }

    /// (weights, bytes) per block.
    pub const fn block(self) -> (usize, usize) {
        match self {
            WeightType::Q2_0 => (64, 18),
            WeightType::Q1_0 => (128, 18),
            WeightType::Tq2_0 => (256, 66),
            WeightType::Tq1_0 => (256, 54),
            WeightType::Iq2Xxs => (256, 66),
            WeightType::Iq2Xs => (256, 74),
            WeightType::Iq2S => (256, 82),
            WeightType::Iq3Xxs => (256, 98),
            WeightType::Iq3S => (256, 110),
            WeightType::Pq2_0 => (128, 34),
            WeightType::Ptq1_0 => (128, 28),
            WeightType::Q4_0 => (32, 18),
        }
    }

    /// Whether this format's activations are q8_K (TQ2_0 and the IQ formats) rather than q8_0.
    pub fn q8_k_activations(self) -> bool {
        matches!(
            self,
            WeightType::Tq2_0
                | WeightType::Tq1_0
                | WeightType::Iq2Xxs
                | WeightType::Iq2Xs
                | WeightType::Iq2S
                | WeightType::Iq3Xxs
                | WeightType::Iq3S
        )
    }

    /// Fills `buf` with rows of `k` ternary weights in this format, scales around `scale`, deterministic for
    /// `seed` (rows in parallel, each from its own stream).
    pub fn fill(self, buf: &mut [u8], k: usize, scale: f32, seed: u64) {
        let (weights, bytes) = self.block();
        let row_bytes = k / weights * bytes;
        buf.par_chunks_mut(row_bytes)
            .enumerate()
            .for_each(|(r, row)| {
                let mut rng = splitmix(seed ^ (r as u64).wrapping_mul(0xd6e8_feb8_6659_fd93));
                for blk in row.chunks_exact_mut(bytes) {
                    let jitter = 0.8 + 0.4 * ((rng() >> 40) as f32 / (1u64 << 24) as f32);
                    let d = half::f16::from_f32(scale * jitter).to_bits().to_le_bytes();
                    match self {
                        WeightType::Q2_0 | WeightType::Pq2_0 => {
                            blk[..2].copy_from_slice(&d);
                            fill_codes(&mut blk[2..], &mut rng);
                        }
                        WeightType::Q1_0 => {
                            // Random signs: bit set +d, clear −d.
                            blk[..2].copy_from_slice(&d);
                            for chunk in blk[2..].chunks_mut(8) {
                                let bits = rng().to_le_bytes();
                                chunk.copy_from_slice(&bits[..chunk.len()]);
                            }
                        }
                        WeightType::Tq2_0 => {
                            // Codes in the element order of `tq2_0::code` do not matter for random ternary
                            // content: four per byte, scale last.
                            fill_codes(&mut blk[..64], &mut rng);
                            blk[64..].copy_from_slice(&d);
                        }
                        WeightType::Iq2Xxs
                        | WeightType::Iq2Xs
                        | WeightType::Iq2S
                        | WeightType::Iq3Xxs
                        | WeightType::Iq3S => {
                            // Random grid points, signs and 4-bit scales (every bit pattern is a valid block);
                            // d is scaled down by the format's mean |weight|/d (IQ2: d·(0.5 + nibble)·0.25 with
                            // magnitudes 8..43, about 47; IQ3_XXS: ·0.5 with 4..62, about 100; IQ3_S:
                            // d·(1 + 2·nibble) with 1..15, about 128) to keep the weights near `scale`.
                            let mean = match self {
                                WeightType::Iq3Xxs => 100.0,
                                WeightType::Iq3S => 128.0,
                                _ => 47.0,
                            };
                            let d = half::f16::from_f32(scale * jitter / mean).to_bits();
                            blk[..2].copy_from_slice(&d.to_le_bytes());
                            for chunk in blk[2..].chunks_mut(8) {
                                let bits = rng().to_le_bytes();
                                chunk.copy_from_slice(&bits[..chunk.len()]);
                            }
                        }
                        WeightType::Tq1_0 => {
                            let source = crate::formats::tq1_0::element_source;
                            fill_trits(&mut blk[..52], 256, source, &mut rng);
                            blk[52..].copy_from_slice(&d);
                        }
                        WeightType::Q4_0 => {
                            // Uniform nibbles, weight = d·(q − 8): d scaled down by the mean |q − 8| (4) to
                            // keep the weights near `scale`.
                            let d = half::f16::from_f32(scale * jitter / 4.0).to_bits();
                            blk[..2].copy_from_slice(&d.to_le_bytes());
                            for chunk in blk[2..].chunks_mut(8) {
                                let bits = rng().to_le_bytes();
                                chunk.copy_from_slice(&bits[..chunk.len()]);
                            }
                        }
                        WeightType::Ptq1_0 => {
                            blk[26..].copy_from_slice(&d);
                            let source = crate::formats::ptq1_0::element_source;
                            fill_trits(&mut blk[..26], 128, source, &mut rng);
                        }
                    }
                }
            });
    }
}

/// splitmix64: a seedable stream per (tensor, row), so rows are generated in parallel and the file is the same
/// for the same seed whatever the thread count.
fn splitmix(mut z: u64) -> impl FnMut() -> u64 {
    move || {
        z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut x = z;
        x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        x ^ (x >> 31)
    }
}

/// Ternary code for 4 random bits: 5/16, 6/16, 5/16 for codes 0, 1, 2 (31/38/31 %).
const TERNARY: [u8; 16] = [0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2];

/// 2-bit codes (least significant first) of ternary weights, four per byte.
fn fill_codes(codes: &mut [u8], rng: &mut impl FnMut() -> u64) {
    for quad in codes.chunks_mut(4) {
        let mut bits = rng();
        for byte in quad {
            let mut v = 0u8;
            for s in 0..4 {
                v |= TERNARY[(bits & 15) as usize] << (2 * s);
                bits >>= 4;
            }
            *byte = v;
        }
    }
}

/// Packed base-3 bytes of one block of ternary weights (31/38/31 %), for PTQ1_0 (26 bytes `qs[24]`, `qh[2]`,
/// 128 weights) and TQ1_0 (52 bytes `qs[48]`, `qh[4]`, 256 weights): each element's digit goes to the byte and
/// digit position `element_source` assigns it (the format's own map; a byte's unused fifth digit stays 0), and
/// each byte is stored as a ternary quantizer does, `ceil(x·256/243)` for `x = Σ dₙ·3^(4−n)`.
fn fill_trits(
    packed: &mut [u8],
    weights: usize,
    element_source: fn(usize) -> (usize, usize),
    rng: &mut impl FnMut() -> u64,
) {
    let mut digits = vec![[0u32; 5]; packed.len()];
    let mut bits = 0u64;
    for e in 0..weights {
        if e % 16 == 0 {
            bits = rng();
        }
        let (byte, n) = element_source(e);
        digits[byte][n] = TERNARY[(bits & 15) as usize] as u32;
        bits >>= 4;
    }
    for (out, d) in packed.iter_mut().zip(digits) {
        let x = d.iter().fold(0, |a, &t| 3 * a + t);
        *out = (x * 256).div_ceil(243) as u8;
    }
}

/// A SentencePiece-style vocabulary: `<unk>`, `<s>`, `</s>`, the byte tokens `<0x00>`..`<0xFF>`, then words
/// (`▁` marks a leading space) with descending scores, padded with unique synthetic pieces.
pub fn vocabulary(n_vocab: usize) -> (Vec<String>, Vec<f32>, Vec<i32>) {
    const WORDS: &str = "the of and to a in is that it was for on are as with his they at be this from have or by \
        one had not but what all were when we there can an your which their said if do will each about how up out \
        them then she many some so these would other into has more her two like him see time could no make than \
        first been its who now people my made over did down only way find use may water long little very after \
        words called just where most know get through back much before go good new write our used me man too any \
        day same right look think also around another came come work three word must because does part even place \
        well such here take why things help put years different away again off went old number great tell men say \
        small every found still between name should home big give air line set own under read last never us left \
        end along while might next sound below saw something thought both few those always looked show large often \
        together asked house don world going want school important until form food keep children feet land side \
        without boy once animals life enough took sometimes four head above kind began almost live page got earth \
        need far hand high year mother light parts country father let night following picture being study second \
        eyes soon times story boys since white days ever paper hard near sentence better best across during today \
        others however sure means knew quick brown fox jumps lazy dog model weights token ternary bits";
    let mut tokens: Vec<String> = vec!["<unk>".into(), "<s>".into(), "</s>".into()];
    let mut types = vec![2, 3, 3];
    for b in 0..=255u8 {
        tokens.push(format!("<0x{b:02X}>"));
        types.push(6);
    }
    let mut seen = std::collections::HashSet::new();
    for w in WORDS.split_whitespace() {
        for piece in [format!("\u{2581}{w}"), w.to_string()] {
            if tokens.len() < n_vocab && seen.insert(piece.clone()) {
                tokens.push(piece);
                types.push(1);
            }
        }
    }
    for c in ('a'..='z')
        .chain('A'..='Z')
        .chain(['.', ',', '!', '?', '\'', '-'])
    {
        for piece in [format!("\u{2581}{c}"), c.to_string()] {
            if tokens.len() < n_vocab && seen.insert(piece.clone()) {
                tokens.push(piece);
                types.push(1);
            }
        }
    }
    let mut i = 0;
    while tokens.len() < n_vocab {
        tokens.push(format!("\u{2581}w{i}"));
        types.push(1);
        i += 1;
    }
    tokens.truncate(n_vocab);
    types.truncate(n_vocab);
    let scores = (0..tokens.len())
        .map(|i| if types[i] == 1 { -(i as f32) } else { 0.0 })
        .collect();
    (tokens, scores, types)
}

/// What was written.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ModelInfo {
    pub preset: String,
    pub bytes: u64,
    pub weight_bytes: u64,
}

/// Writes a synthetic model for `preset` with `wtype` weights to `path`.
pub fn write_model(
    path: &Path,
    p: Preset,
    wtype: WeightType,
    seed: u64,
) -> Result<ModelInfo, String> {
    let (block_weights, block_bytes) = wtype.block();
    for (what, k) in [
        ("hidden size", p.n_embd),
        ("FFN size", p.n_ff),
        ("attention width", p.n_head * p.head_dim),
    ] {
        if k % block_weights != 0 {
            return Err(format!(
                "{} {what} {k} is not a multiple of the {}-weight {} block",
                p.name,
                block_weights,
                wtype.name()
            ));
        }
    }
    let head_dim = p.head_dim;
    let kv_dim = head_dim * p.n_head_kv;
    let q_dim = head_dim * p.n_head;
    let (tokens, scores, types) = vocabulary(p.n_vocab);
    let arch = "llama";
    let kv: Vec<(String, Value)> = vec![
        ("general.architecture".into(), Value::Str(arch.into())),
        (
            "general.name".into(),
            Value::Str(format!("ggml-lowbit synthetic {} ({:?})", p.name, wtype)),
        ),
        ("llama.context_length".into(), Value::U32(p.n_ctx as u32)),
        ("llama.embedding_length".into(), Value::U32(p.n_embd as u32)),
        ("llama.block_count".into(), Value::U32(p.n_layer as u32)),
        (
            "llama.feed_forward_length".into(),
            Value::U32(p.n_ff as u32),
        ),
        (
            "llama.attention.head_count".into(),
            Value::U32(p.n_head as u32),
        ),
        (
            "llama.attention.head_count_kv".into(),
            Value::U32(p.n_head_kv as u32),
        ),
        (
            "llama.attention.layer_norm_rms_epsilon".into(),
            Value::F32(1e-6),
        ),
        (
            "llama.rope.dimension_count".into(),
            Value::U32(head_dim as u32),
        ),
        (
            "llama.attention.key_length".into(),
            Value::U32(head_dim as u32),
        ),
        (
            "llama.attention.value_length".into(),
            Value::U32(head_dim as u32),
        ),
        ("llama.rope.freq_base".into(), Value::F32(1_000_000.0)),
        ("llama.vocab_size".into(), Value::U32(p.n_vocab as u32)),
        ("llama.expert_count".into(), Value::U32(p.n_expert as u32)),
        (
            "llama.expert_used_count".into(),
            Value::U32(p.n_expert_used as u32),
        ),
        ("tokenizer.ggml.model".into(), Value::Str("llama".into())),
        ("tokenizer.ggml.tokens".into(), Value::StrArray(tokens)),
        ("tokenizer.ggml.scores".into(), Value::F32Array(scores)),
        ("tokenizer.ggml.token_type".into(), Value::I32Array(types)),
        ("tokenizer.ggml.unknown_token_id".into(), Value::U32(0)),
        ("tokenizer.ggml.bos_token_id".into(), Value::U32(1)),
        ("tokenizer.ggml.eos_token_id".into(), Value::U32(2)),
        ("tokenizer.ggml.add_bos_token".into(), Value::Bool(true)),
    ];
    let mut tensors: Vec<Tensor> = Vec::new();
    let mut index = 0u64;
    // A weight matrix of `rows` rows of `k`, or with `experts > 0` a stack of that many (a 3-D tensor).
    let mut stack = |experts: usize, name: String, k: usize, rows: usize, scale: f32| {
        index += 1;
        let tensor_seed = seed.wrapping_mul(0x2545_f491_4f6c_dd1d) ^ index;
        let mut dims = vec![k as u64, rows as u64];
        if experts > 0 {
            dims.push(experts as u64);
        }
        Tensor {
            name,
            dims,
            ggml_type: wtype.ggml_type(),
            nbytes: rows * experts.max(1) * k / block_weights * block_bytes,
            fill: Box::new(move |buf: &mut [u8]| wtype.fill(buf, k, scale, tensor_seed)),
        }
    };
    let norm = |name: String, n: usize| Tensor {
        name,
        dims: vec![n as u64],
        ggml_type: GGML_TYPE_F32,
        nbytes: 4 * n,
        fill: Box::new(|buf: &mut [u8]| {
            buf.chunks_exact_mut(4)
                .for_each(|c| c.copy_from_slice(&1f32.to_le_bytes()))
        }),
    };
    let inv = |k: usize| 1.0 / (k as f32).sqrt();
    // A router (f32, `n_embd × n_expert`) with seeded values in ±1/sqrt(n_embd): tokens spread over the experts.
    let router = |name: String, n_embd: usize, n_expert: usize, layer: u64| {
        let stream = seed ^ 0x5bd1_e995 ^ (layer << 32);
        Tensor {
            name,
            dims: vec![n_embd as u64, n_expert as u64],
            ggml_type: GGML_TYPE_F32,
            nbytes: 4 * n_embd * n_expert,
            fill: Box::new(move |buf: &mut [u8]| {
                let mut next = splitmix(stream);
                let scale = 1.0 / (n_embd as f32).sqrt();
                for c in buf.chunks_exact_mut(4) {
                    let u = (next() >> 40) as f32 / (1u64 << 24) as f32;
                    c.copy_from_slice(&((2.0 * u - 1.0) * scale).to_le_bytes());
                }
            }),
        }
    };
    tensors.push(stack(
        0,
        "token_embd.weight".into(),
        p.n_embd,
        p.n_vocab,
        1.0,
    ));
    for l in 0..p.n_layer {
        tensors.push(norm(format!("blk.{l}.attn_norm.weight"), p.n_embd));
        tensors.push(stack(
            0,
            format!("blk.{l}.attn_q.weight"),
            p.n_embd,
            q_dim,
            inv(p.n_embd),
        ));
        tensors.push(stack(
            0,
            format!("blk.{l}.attn_k.weight"),
            p.n_embd,
            kv_dim,
            inv(p.n_embd),
        ));
        tensors.push(stack(
            0,
            format!("blk.{l}.attn_v.weight"),
            p.n_embd,
            kv_dim,
            inv(p.n_embd),
        ));
        tensors.push(stack(
            0,
            format!("blk.{l}.attn_output.weight"),
            q_dim,
            p.n_embd,
            inv(q_dim),
        ));
        tensors.push(norm(format!("blk.{l}.ffn_norm.weight"), p.n_embd));
        // Dense: ffn_{gate,up,down}; with experts: the router and ffn_{gate,up,down}_exps stacks.
        let sfx = if p.n_expert > 0 { "_exps" } else { "" };
        if p.n_expert > 0 {
            tensors.push(router(
                format!("blk.{l}.ffn_gate_inp.weight"),
                p.n_embd,
                p.n_expert,
                l as u64,
            ));
        }
        tensors.push(stack(
            p.n_expert,
            format!("blk.{l}.ffn_gate{sfx}.weight"),
            p.n_embd,
            p.n_ff,
            inv(p.n_embd),
        ));
        tensors.push(stack(
            p.n_expert,
            format!("blk.{l}.ffn_up{sfx}.weight"),
            p.n_embd,
            p.n_ff,
            inv(p.n_embd),
        ));
        tensors.push(stack(
            p.n_expert,
            format!("blk.{l}.ffn_down{sfx}.weight"),
            p.n_ff,
            p.n_embd,
            inv(p.n_ff),
        ));
    }
    tensors.push(norm("output_norm.weight".into(), p.n_embd));
    tensors.push(stack(
        0,
        "output.weight".into(),
        p.n_embd,
        p.n_vocab,
        inv(p.n_embd),
    ));
    let weight_bytes = tensors
        .iter()
        .filter(|t| t.ggml_type == wtype.ggml_type())
        .map(|t| t.nbytes as u64)
        .sum();
    let file = std::fs::File::create(path)
        .map_err(|e| format!("cannot create {}: {e}", path.display()))?;
    let mut w = BufWriter::with_capacity(1 << 22, file);
    let bytes = gguf::write(&mut w, &kv, &tensors)
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    std::io::Write::flush(&mut w).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok(ModelInfo {
        preset: p.name.into(),
        bytes,
        weight_bytes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::ptq1_0::{block_trits, BlockPTQ1_0};

    /// The PTQ1_0 packer puts each generated trit where the fork's decoder reads it back.
    #[test]
    fn ptq1_0_blocks_decode_to_the_generated_trits() {
        let mut counts = [0usize; 3];
        for seed in 0..200u64 {
            let mut packed = [0u8; 26];
            let source = crate::formats::ptq1_0::element_source;
            fill_trits(&mut packed, 128, source, &mut splitmix(seed));
            let mut rng = splitmix(seed);
            let mut bits = 0u64;
            let want: Vec<u8> = (0..128)
                .map(|p| {
                    if p % 16 == 0 {
                        bits = rng();
                    }
                    let t = TERNARY[(bits & 15) as usize];
                    bits >>= 4;
                    t
                })
                .collect();
            let block = BlockPTQ1_0 {
                qs: packed[..24].try_into().expect("24"),
                qh: [packed[24], packed[25]],
                d: Default::default(),
            };
            let got = block_trits(&block);
            assert_eq!(&got[..], &want[..], "seed {seed}");
            for t in got {
                counts[t as usize] += 1;
            }
        }
        let total = 200.0 * 128.0;
        let share = counts.map(|c| c as f64 / total);
        assert!(
            (share[0] - 0.3125).abs() < 0.02 && (share[1] - 0.375).abs() < 0.02,
            "{share:?}"
        );
    }

    /// The same packer with TQ1_0's element map: every generated digit reads back through TQ1_0's decoder.
    #[test]
    fn tq1_0_blocks_decode_to_the_generated_digits() {
        use crate::formats::tq1_0::BlockTQ1_0;
        for seed in 0..200u64 {
            let mut packed = [0u8; 52];
            let source = crate::formats::tq1_0::element_source;
            fill_trits(&mut packed, 256, source, &mut splitmix(seed));
            let mut rng = splitmix(seed);
            let mut bits = 0u64;
            let block = BlockTQ1_0 {
                qs: packed[..48].try_into().expect("48"),
                qh: packed[48..].try_into().expect("4"),
                d: Default::default(),
            };
            for e in 0..256 {
                if e % 16 == 0 {
                    bits = rng();
                }
                let want = TERNARY[(bits & 15) as usize];
                bits >>= 4;
                assert_eq!(block.digit_of(e), want, "seed {seed} element {e}");
            }
        }
    }

    #[test]
    fn the_moe_preset_writes_expert_stacks_and_a_router() {
        let dir = std::env::temp_dir().join(format!("ggml-lowbit-moe-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join("tiny-moe.gguf");
        let p = preset("tiny-moe").expect("tiny-moe");
        let info = write_model(&path, p, WeightType::Q2_0, 7).expect("write");
        let types = crate::gguf::tensor_types(&path).expect("read back");
        let ty = |name: &str| types.iter().find(|(n, _)| n == name).map(|(_, t)| *t);
        for l in 0..p.n_layer {
            assert_eq!(
                ty(&format!("blk.{l}.ffn_gate_inp.weight")),
                Some(GGML_TYPE_F32)
            );
            for m in ["gate", "up", "down"] {
                assert_eq!(
                    ty(&format!("blk.{l}.ffn_{m}_exps.weight")),
                    Some(GGML_TYPE_Q2_0)
                );
                assert_eq!(ty(&format!("blk.{l}.ffn_{m}.weight")), None);
            }
        }
        let per_layer = p.n_embd * (2 * p.n_head * p.head_dim + 2 * p.n_head_kv * p.head_dim)
            + 3 * p.n_expert * p.n_embd * p.n_ff;
        let weights = p.n_layer * per_layer + 2 * p.n_vocab * p.n_embd;
        assert_eq!(info.weight_bytes as usize, weights / 64 * 18);
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn tiny_models_of_every_type_have_the_right_tensor_types_and_sizes() {
        let dir = std::env::temp_dir().join(format!("ggml-lowbit-model-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        for t in WeightType::ALL {
            let path = dir.join(format!("tiny-{}.gguf", t.name()));
            let info = write_model(&path, preset("tiny").expect("tiny"), t, 7).expect("write");
            let types = crate::gguf::tensor_types(&path).expect("read back");
            let matrices: Vec<u32> = types
                .iter()
                .filter(|(n, _)| !n.ends_with("norm.weight"))
                .map(|(_, ty)| *ty)
                .collect();
            assert!(!matrices.is_empty() && matrices.iter().all(|&ty| ty == t.ggml_type()));
            let (w, b) = t.block();
            let p = preset("tiny").expect("tiny");
            let per_layer = p.n_embd * (2 * p.n_head * p.head_dim + 2 * p.n_head_kv * p.head_dim)
                + 3 * p.n_embd * p.n_ff;
            let weights = p.n_layer * per_layer + 2 * p.n_vocab * p.n_embd;
            assert_eq!(info.weight_bytes as usize, weights / w * b, "{t:?}");
        }
        std::fs::remove_dir_all(&dir).ok();
    }
}
