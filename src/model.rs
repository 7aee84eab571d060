//! Synthetic llama-architecture models shaped like the real low-bit ones, written as GGUF: random ternary Q2_0
//! weights (codes 0/1/2 at 31/38/31 %, as in Ternary-Bonsai-8B), realistic scales, unit norms, and a real
//! SentencePiece-style vocabulary (control tokens, the 256 byte-fallback tokens, words) so llama.cpp's tools
//! tokenize and print text. Deterministic for a seed. No model files can be downloaded here; these stand in.

use std::io::BufWriter;
use std::path::Path;

use rayon::prelude::*;

use crate::gguf::{self, Tensor, Value};

/// ggml type ids.
pub const GGML_TYPE_F32: u32 = 0;
pub const GGML_TYPE_Q2_0: u32 = 42;

#[derive(Clone, Copy, Debug)]
pub struct Preset {
    pub name: &'static str,
    pub n_layer: usize,
    pub n_embd: usize,
    pub n_ff: usize,
    pub n_head: usize,
    pub n_head_kv: usize,
    pub n_vocab: usize,
    pub n_ctx: usize,
}

pub const PRESETS: [Preset; 3] = [
    // Small enough for tests: a few MB, every matrix row a whole number of 64-weight blocks.
    Preset {
        name: "tiny",
        n_layer: 2,
        n_embd: 256,
        n_ff: 512,
        n_head: 4,
        n_head_kv: 2,
        n_vocab: 1024,
        n_ctx: 512,
    },
    // Qwen3-1.7B shapes.
    Preset {
        name: "bonsai-1.7b",
        n_layer: 28,
        n_embd: 2048,
        n_ff: 6144,
        n_head: 16,
        n_head_kv: 8,
        n_vocab: 151669,
        n_ctx: 4096,
    },
    // Qwen3-8B shapes.
    Preset {
        name: "bonsai-8b",
        n_layer: 36,
        n_embd: 4096,
        n_ff: 12288,
        n_head: 32,
        n_head_kv: 8,
        n_vocab: 151669,
        n_ctx: 4096,
    },
];

pub fn preset(name: &str) -> Option<Preset> {
    PRESETS.iter().copied().find(|p| p.name == name)
}

/// Weight formats the generator can write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WeightType {
    Q2_0,
}

impl WeightType {
    pub fn parse(s: &str) -> Option<WeightType> {
        match s {
            "q2_0" => Some(WeightType::Q2_0),
            _ => None,
        }
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

/// Fills Q2_0 rows of `k` weights with ternary codes and scales around `scale`.
fn fill_q2_0(buf: &mut [u8], k: usize, scale: f32, seed: u64) {
    let row_bytes = k / 64 * 18;
    buf.par_chunks_mut(row_bytes)
        .enumerate()
        .for_each(|(r, row)| {
            let mut rng = splitmix(seed ^ (r as u64).wrapping_mul(0xd6e8_feb8_6659_fd93));
            for blk in row.chunks_exact_mut(18) {
                let jitter = 0.8 + 0.4 * ((rng() >> 40) as f32 / (1u64 << 24) as f32);
                blk[..2]
                    .copy_from_slice(&half::f16::from_f32(scale * jitter).to_bits().to_le_bytes());
                for quad in blk[2..].chunks_exact_mut(4) {
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
        });
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
    let WeightType::Q2_0 = wtype;
    let head_dim = p.n_embd / p.n_head;
    let kv_dim = head_dim * p.n_head_kv;
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
        ("llama.rope.freq_base".into(), Value::F32(1_000_000.0)),
        ("llama.vocab_size".into(), Value::U32(p.n_vocab as u32)),
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
    let mut matrix = |name: String, k: usize, rows: usize, scale: f32| {
        index += 1;
        let tensor_seed = seed.wrapping_mul(0x2545_f491_4f6c_dd1d) ^ index;
        Tensor {
            name,
            dims: vec![k as u64, rows as u64],
            ggml_type: GGML_TYPE_Q2_0,
            nbytes: rows * k / 64 * 18,
            fill: Box::new(move |buf: &mut [u8]| fill_q2_0(buf, k, scale, tensor_seed)),
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
    tensors.push(matrix("token_embd.weight".into(), p.n_embd, p.n_vocab, 1.0));
    for l in 0..p.n_layer {
        tensors.push(norm(format!("blk.{l}.attn_norm.weight"), p.n_embd));
        tensors.push(matrix(
            format!("blk.{l}.attn_q.weight"),
            p.n_embd,
            p.n_embd,
            inv(p.n_embd),
        ));
        tensors.push(matrix(
            format!("blk.{l}.attn_k.weight"),
            p.n_embd,
            kv_dim,
            inv(p.n_embd),
        ));
        tensors.push(matrix(
            format!("blk.{l}.attn_v.weight"),
            p.n_embd,
            kv_dim,
            inv(p.n_embd),
        ));
        tensors.push(matrix(
            format!("blk.{l}.attn_output.weight"),
            p.n_embd,
            p.n_embd,
            inv(p.n_embd),
        ));
        tensors.push(norm(format!("blk.{l}.ffn_norm.weight"), p.n_embd));
        tensors.push(matrix(
            format!("blk.{l}.ffn_gate.weight"),
            p.n_embd,
            p.n_ff,
            inv(p.n_embd),
        ));
        tensors.push(matrix(
            format!("blk.{l}.ffn_up.weight"),
            p.n_embd,
            p.n_ff,
            inv(p.n_embd),
        ));
        tensors.push(matrix(
            format!("blk.{l}.ffn_down.weight"),
            p.n_ff,
            p.n_embd,
            inv(p.n_ff),
        ));
    }
    tensors.push(norm("output_norm.weight".into(), p.n_embd));
    tensors.push(matrix(
        "output.weight".into(),
        p.n_embd,
        p.n_vocab,
        inv(p.n_embd),
    ));
    let weight_bytes = tensors
        .iter()
        .filter(|t| t.ggml_type == GGML_TYPE_Q2_0)
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
