//! Tiny random-weight Qwen2/Qwen3 models written to disk, for tests: a Hugging Face folder
//! (config.json, tokenizer.json, tokenizer_config.json, generation_config.json, safetensors,
//! optionally sharded) or a GGUF file with the tokenizer in its metadata, both from the same
//! deterministic weights.
//!
//! Test code only, never shipped: `src/model/mod.rs` compiles it under `cfg(test)` for the unit
//! tests, and `tests/common/model.rs` includes this same file (`#[path]`) for the integration
//! tests. So it names nothing of gavel but `super::Arch`, `super::random` (the weights) and
//! `super::tokenizer`, which both places provide (here `crate::model`, there a shim
//! re-exporting `gavel::model`), and external crates.
//!
//! The tokenizer is a real byte-level BPE in Qwen's format: the 256 byte tokens, a few dozen
//! merges, then `<|endoftext|>`, `<|im_start|>`, `<|im_end|>`; the model's vocabulary is padded
//! past the tokenizer's ids, as Qwen's is.

use std::collections::HashMap;
use std::path::Path;

use candle_core::quantized::{gguf_file, QTensor};
use candle_core::Tensor;
use serde_json::Value;

// For tests that add GGUF metadata; test binaries that include this file and write none would
// call the re-export unused.
#[allow(unused_imports)]
pub use candle_core::quantized::gguf_file::Value as GgufValue;
pub use candle_core::quantized::GgmlDType;

use super::random::{self, Init, Shape};
pub use super::random::{special_id, tiny_vocab, SPECIALS, TINY_TEMPLATE};
use super::tokenizer::token_type;
use super::Arch;

/// Sizes of the tiny model ([`Shape::TINY`]).
pub const HIDDEN: usize = Shape::TINY.hidden;
pub const LAYERS: usize = Shape::TINY.layers;
pub const HEADS: usize = Shape::TINY.heads;
pub const KV_HEADS: usize = Shape::TINY.kv_heads;
pub const HEAD_DIM: usize = Shape::TINY.head_dim;
pub const INTERMEDIATE: usize = Shape::TINY.intermediate;
/// Rows of the embedding (the logits length): more than the tokenizer's ids.
pub const VOCAB: usize = Shape::TINY.vocab;
pub const CONTEXT: usize = Shape::TINY.context;

/// The tiny model's config.json.
// Used by integration tests that include this file, not by the unit tests.
#[allow(dead_code)]
pub fn config_json(arch: Arch, tied: bool) -> Value {
    Shape::TINY.config_json(
        arch,
        tied,
        special_id("<|endoftext|>"),
        special_id("<|im_end|>"),
    )
}

/// The tiny model's tensors under Hugging Face names.
pub fn tensors(arch: Arch, tied: bool) -> HashMap<String, Tensor> {
    random::tensors(&Shape::TINY, arch, tied, Init::Fixed)
}

/// How to write the tiny model.
#[derive(Debug, Clone)]
pub struct TinyOptions {
    pub arch: Arch,
    /// Output projection tied to the embedding (no `lm_head.weight` / `output.weight`).
    pub tied: bool,
    /// Safetensors shards (1: `model.safetensors`; more: an index and `model-0000N-of-...`).
    pub shards: usize,
    /// The chat template to ship (`tokenizer_config.json` or GGUF metadata); `None` ships none.
    pub chat_template: Option<String>,
    /// GGUF type of the 2-D weights (1-D ones are always F32).
    pub gguf_dtype: GgmlDType,
    /// Positions the model takes ([`CONTEXT`] unless a test needs long prompts).
    pub context_length: usize,
}

impl TinyOptions {
    pub fn new(arch: Arch) -> TinyOptions {
        TinyOptions {
            arch,
            tied: false,
            shards: 1,
            chat_template: Some(TINY_TEMPLATE.to_string()),
            gguf_dtype: GgmlDType::F32,
            context_length: CONTEXT,
        }
    }
}

/// The largest absolute value in a tensor: the scale a difference is measured against.
pub fn max_abs(t: &Tensor) -> f32 {
    t.abs()
        .unwrap()
        .flatten_all()
        .unwrap()
        .max(0)
        .unwrap()
        .to_scalar::<f32>()
        .unwrap()
}

/// The largest absolute difference between two tensors of the same number of elements.
pub fn max_abs_diff(a: &Tensor, b: &Tensor) -> f32 {
    (a.flatten_all().unwrap() - b.flatten_all().unwrap())
        .unwrap()
        .abs()
        .unwrap()
        .max(0)
        .unwrap()
        .to_scalar::<f32>()
        .unwrap()
}

/// Writes the tiny model as a Hugging Face folder in `dir` (created if missing).
pub fn write_folder(dir: &Path, o: &TinyOptions) -> anyhow::Result<()> {
    let shape = Shape {
        context: o.context_length,
        ..Shape::TINY
    };
    random::write_folder(
        dir,
        &random::FolderOptions {
            shape,
            arch: o.arch,
            tied: o.tied,
            init: Init::Fixed,
            shards: o.shards,
            chat_template: o.chat_template.clone(),
            dtype: candle_core::DType::F32,
        },
    )?;
    Ok(())
}

/// llama.cpp's name for a Hugging Face tensor name.
pub fn gguf_name(hf: &str) -> String {
    let fixed = [
        ("model.embed_tokens.weight", "token_embd.weight"),
        ("model.norm.weight", "output_norm.weight"),
        ("lm_head.weight", "output.weight"),
    ];
    if let Some((_, g)) = fixed.iter().find(|(h, _)| *h == hf) {
        return g.to_string();
    }
    let rest = hf.strip_prefix("model.layers.").expect("a layer tensor");
    let (layer, rest) = rest.split_once('.').expect("layer.name");
    let parts = [
        ("self_attn.q_proj", "attn_q"),
        ("self_attn.k_proj", "attn_k"),
        ("self_attn.v_proj", "attn_v"),
        ("self_attn.o_proj", "attn_output"),
        ("self_attn.q_norm", "attn_q_norm"),
        ("self_attn.k_norm", "attn_k_norm"),
        ("mlp.gate_proj", "ffn_gate"),
        ("mlp.up_proj", "ffn_up"),
        ("mlp.down_proj", "ffn_down"),
        ("input_layernorm", "attn_norm"),
        ("post_attention_layernorm", "ffn_norm"),
    ];
    let (module, kind) = rest.rsplit_once('.').expect("module.kind");
    let g = parts
        .iter()
        .find(|(h, _)| *h == module)
        .expect("a known tensor")
        .1;
    format!("blk.{layer}.{g}.{kind}")
}

/// Writes the tiny model as a GGUF file, with llama.cpp's metadata and tensor names, the
/// tokenizer in `tokenizer.ggml.*` (padded with `[PADn]` unused tokens to the model's vocabulary,
/// as llama.cpp's converter does) and `extra` metadata entries added or overriding.
pub fn write_gguf(
    path: &Path,
    o: &TinyOptions,
    extra: &[(&str, gguf_file::Value)],
) -> anyhow::Result<()> {
    use gguf_file::Value as V;
    let arch = match o.arch {
        Arch::Qwen2 => "qwen2",
        Arch::Qwen3 => "qwen3",
    };
    let (vocab, merges, _) = tiny_vocab();
    let n_bpe = vocab.len() - SPECIALS.len();
    let mut tokens = vocab.clone();
    let mut types = vec![token_type::NORMAL as i32; n_bpe];
    types.extend([token_type::CONTROL as i32; 3]);
    for i in vocab.len()..VOCAB {
        tokens.push(format!("[PAD{i}]"));
        types.push(token_type::UNUSED as i32);
    }
    let u = |x: usize| V::U32(x as u32);
    let mut md: Vec<(String, V)> = vec![
        ("general.architecture".into(), V::String(arch.into())),
        ("general.name".into(), V::String(format!("tiny-{arch}"))),
        (format!("{arch}.context_length"), u(o.context_length)),
        (format!("{arch}.block_count"), u(LAYERS)),
        (format!("{arch}.embedding_length"), u(HIDDEN)),
        (format!("{arch}.feed_forward_length"), u(INTERMEDIATE)),
        (format!("{arch}.attention.head_count"), u(HEADS)),
        (format!("{arch}.attention.head_count_kv"), u(KV_HEADS)),
        (format!("{arch}.attention.key_length"), u(HEAD_DIM)),
        (format!("{arch}.attention.value_length"), u(HEAD_DIM)),
        (
            format!("{arch}.attention.layer_norm_rms_epsilon"),
            V::F32(1e-6),
        ),
        (format!("{arch}.rope.freq_base"), V::F32(1_000_000.0)),
        ("tokenizer.ggml.model".into(), V::String("gpt2".into())),
        ("tokenizer.ggml.pre".into(), V::String("qwen2".into())),
        (
            "tokenizer.ggml.tokens".into(),
            V::Array(tokens.into_iter().map(V::String).collect()),
        ),
        (
            "tokenizer.ggml.token_type".into(),
            V::Array(types.into_iter().map(V::I32).collect()),
        ),
        (
            "tokenizer.ggml.merges".into(),
            V::Array(merges.into_iter().map(V::String).collect()),
        ),
        (
            "tokenizer.ggml.eos_token_id".into(),
            V::U32(special_id("<|im_end|>")),
        ),
        (
            "tokenizer.ggml.padding_token_id".into(),
            V::U32(special_id("<|endoftext|>")),
        ),
        (
            "tokenizer.ggml.bos_token_id".into(),
            V::U32(special_id("<|endoftext|>")),
        ),
        ("tokenizer.ggml.add_bos_token".into(), V::Bool(false)),
    ];
    if let Some(t) = &o.chat_template {
        md.push(("tokenizer.chat_template".into(), V::String(t.clone())));
    }
    for (k, v) in extra {
        md.retain(|(key, _)| key != k);
        md.push((k.to_string(), v.clone()));
    }
    let mut qtensors: Vec<(String, QTensor)> = Vec::new();
    let mut all: Vec<(String, Tensor)> = tensors(o.arch, o.tied).into_iter().collect();
    all.sort_by(|a, b| a.0.cmp(&b.0));
    for (name, t) in all {
        let dtype = if t.rank() == 2 {
            o.gguf_dtype
        } else {
            GgmlDType::F32
        };
        qtensors.push((gguf_name(&name), QTensor::quantize(&t, dtype)?));
    }
    let md_refs: Vec<(&str, &V)> = md.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let t_refs: Vec<(&str, &QTensor)> = qtensors.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let mut f = std::fs::File::create(path)?;
    gguf_file::write(&mut f, &md_refs, &t_refs)?;
    Ok(())
}

/// The commit [`hub_cache_entry`] files models under.
#[allow(dead_code)]
pub const HUB_COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";

/// Lays out `files` (name in the repository → a file on disk) in the Hugging Face cache folder
/// `cache` as the hub does for the model repository `repo` at [`HUB_COMMIT`], with `refs/main`
/// naming it: each file a blob named by its SHA-256, linked from `snapshots/HUB_COMMIT/NAME` by a
/// relative symlink (`symlinks`), or copied there as a plain file. Returns the snapshot folder.
#[allow(dead_code)]
pub fn hub_cache_entry(
    cache: &Path,
    repo: &str,
    files: &[(&str, &Path)],
    symlinks: bool,
) -> std::io::Result<std::path::PathBuf> {
    use sha2::Digest;
    let dir = cache.join(format!("models--{}", repo.replace('/', "--")));
    let snapshot = dir.join("snapshots").join(HUB_COMMIT);
    std::fs::create_dir_all(dir.join("blobs"))?;
    std::fs::create_dir_all(dir.join("refs"))?;
    std::fs::create_dir_all(&snapshot)?;
    std::fs::write(dir.join("refs").join("main"), HUB_COMMIT)?;
    for (name, src) in files {
        let pointer = snapshot.join(name);
        std::fs::create_dir_all(pointer.parent().expect("in the snapshot"))?;
        let bytes = std::fs::read(src)?;
        if symlinks {
            let blob = hex::encode(sha2::Sha256::digest(&bytes));
            std::fs::write(dir.join("blobs").join(&blob), &bytes)?;
            let up = "../".repeat(2 + name.matches('/').count());
            std::os::unix::fs::symlink(format!("{up}blobs/{blob}"), &pointer)?;
        } else {
            std::fs::write(&pointer, &bytes)?;
        }
    }
    Ok(snapshot)
}

/// Every file of the folder `dir` (not recursive) as (name, path), sorted: the files of a model
/// folder for [`hub_cache_entry`].
#[allow(dead_code)]
pub fn folder_files(dir: &Path) -> std::io::Result<Vec<(String, std::path::PathBuf)>> {
    let mut files = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let p = e?.path();
        if p.is_file() {
            files.push((
                p.file_name()
                    .unwrap_or_default()
                    .to_string_lossy()
                    .into_owned(),
                p,
            ));
        }
    }
    files.sort();
    Ok(files)
}
