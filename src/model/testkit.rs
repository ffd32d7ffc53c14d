//! Tiny random-weight Qwen2/Qwen3 models written to disk, for tests: a Hugging Face folder
//! (config.json, tokenizer.json, tokenizer_config.json, generation_config.json, safetensors,
//! optionally sharded) or a GGUF file with the tokenizer in its metadata, both from the same
//! deterministic weights.
//!
//! Test code only, never shipped: `src/model/mod.rs` compiles it under `cfg(test)` for the unit
//! tests, and `tests/common/model.rs` includes this same file (`#[path]`) for the integration
//! tests. So it names nothing of gavel but `super::Arch` and `super::tokenizer`, which both
//! places provide (here `crate::model`, there a shim re-exporting `gavel::model`), and external
//! crates.
//!
//! The tokenizer is a real byte-level BPE in Qwen's format: the 256 byte tokens, a few dozen
//! merges, then `<|endoftext|>`, `<|im_start|>`, `<|im_end|>`; the model's vocabulary is padded
//! past the tokenizer's ids, as Qwen's is.

use std::collections::HashMap;
use std::path::Path;

use candle_core::quantized::{gguf_file, QTensor};
use candle_core::{Device, Tensor};
use serde_json::{json, Value};

// For tests that add GGUF metadata; test binaries that include this file and write none would
// call the re-export unused.
#[allow(unused_imports)]
pub use candle_core::quantized::gguf_file::Value as GgufValue;
pub use candle_core::quantized::GgmlDType;

use super::tokenizer::{bytes_to_unicode, qwen_tokenizer_json, token_type, AddedToken};
use super::Arch;

/// Sizes of the tiny model.
pub const HIDDEN: usize = 32;
pub const LAYERS: usize = 2;
pub const HEADS: usize = 4;
pub const KV_HEADS: usize = 2;
pub const HEAD_DIM: usize = 8;
pub const INTERMEDIATE: usize = 64;
/// Rows of the embedding (the logits length): more than the tokenizer's ids.
pub const VOCAB: usize = 320;
pub const CONTEXT: usize = 256;

/// Pairs merged by the tiny BPE, in priority order (plain text; spaces become `Ġ`).
const MERGES: &[(&str, &str)] = &[
    (" ", "t"),
    ("h", "e"),
    (" t", "he"),
    ("i", "n"),
    ("e", "r"),
    ("o", "n"),
    ("r", "e"),
    ("a", "t"),
    ("e", "n"),
    ("o", "r"),
    ("i", "s"),
    (" ", "a"),
    (" ", "s"),
    (" ", "w"),
    (" ", "c"),
    (" ", "o"),
    (" ", "i"),
    (" i", "s"),
    ("{", "\""),
    ("\"", ":"),
    ("\"", ","),
    (" ", "\""),
    ("s", "c"),
    ("sc", "or"),
    ("scor", "e"),
    ("i", "d"),
    ("0", "."),
    (" ", "0"),
    (" ", "1"),
    ("}", "]"),
    ("]", "}"),
    ("\n", "\n"),
    (" ", " "),
    ("l", "l"),
    ("a", "n"),
];

/// The special tokens, in id order after the BPE tokens.
pub const SPECIALS: &[&str] = &["<|endoftext|>", "<|im_start|>", "<|im_end|>"];

/// The tiny tokenizer: token strings by id (GPT-2 alphabet), merges (`"a b"`), added tokens.
pub fn tiny_vocab() -> (Vec<String>, Vec<String>, Vec<AddedToken>) {
    let table = bytes_to_unicode();
    let enc = |s: &str| -> String { s.bytes().map(|b| table[b as usize]).collect() };
    let mut vocab: Vec<String> = (0..256).map(|b| table[b].to_string()).collect();
    let mut merges = Vec::new();
    for (a, b) in MERGES {
        let (a, b) = (enc(a), enc(b));
        let joined = format!("{a}{b}");
        assert!(vocab.contains(&a) && vocab.contains(&b), "merge {a} {b}");
        if !vocab.contains(&joined) {
            vocab.push(joined);
            merges.push(format!("{a} {b}"));
        }
    }
    let added = SPECIALS
        .iter()
        .enumerate()
        .map(|(i, s)| AddedToken {
            id: (vocab.len() + i) as u32,
            content: s.to_string(),
            special: true,
        })
        .collect::<Vec<_>>();
    vocab.extend(SPECIALS.iter().map(|s| s.to_string()));
    assert!(vocab.len() <= VOCAB);
    (vocab, merges, added)
}

/// The id of a special token of the tiny tokenizer.
pub fn special_id(token: &str) -> u32 {
    let (vocab, _, _) = tiny_vocab();
    vocab
        .iter()
        .position(|t| t == token)
        .expect("a tiny special token") as u32
}

/// The tiny model's config.json.
pub fn config_json(arch: Arch, tied: bool) -> Value {
    let mut c = json!({
        "architectures": [match arch { Arch::Qwen2 => "Qwen2ForCausalLM", Arch::Qwen3 => "Qwen3ForCausalLM" }],
        "model_type": match arch { Arch::Qwen2 => "qwen2", Arch::Qwen3 => "qwen3" },
        "vocab_size": VOCAB, "hidden_size": HIDDEN, "intermediate_size": INTERMEDIATE,
        "num_hidden_layers": LAYERS, "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS,
        "max_position_embeddings": CONTEXT, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6,
        "hidden_act": "silu", "tie_word_embeddings": tied, "use_sliding_window": false,
        "sliding_window": null, "max_window_layers": LAYERS, "torch_dtype": "float32",
        "bos_token_id": special_id("<|endoftext|>"), "eos_token_id": special_id("<|im_end|>")
    });
    if arch == Arch::Qwen3 {
        c["head_dim"] = json!(HEAD_DIM);
        c["attention_bias"] = json!(false);
    }
    c
}

/// Deterministic values in [-scale, scale] (xorshift), so every run writes the same model.
fn values(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ((x >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
        })
        .collect()
}

/// The tiny model's tensors under Hugging Face names.
pub fn tensors(arch: Arch, tied: bool) -> HashMap<String, Tensor> {
    let mut seed = 1u64;
    let mut t = HashMap::new();
    let mut put = |name: String, shape: &[usize], scale: f32, base: f32| {
        seed += 1;
        let n = shape.iter().product();
        let v: Vec<f32> = values(n, seed, scale)
            .into_iter()
            .map(|x| x + base)
            .collect();
        let tensor = Tensor::from_vec(v, shape, &Device::Cpu).expect("tensor");
        t.insert(name, tensor);
    };
    let (q, kv) = (HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM);
    put(
        "model.embed_tokens.weight".into(),
        &[VOCAB, HIDDEN],
        1.0,
        0.0,
    );
    put("model.norm.weight".into(), &[HIDDEN], 0.1, 1.0);
    if !tied {
        put("lm_head.weight".into(), &[VOCAB, HIDDEN], 0.2, 0.0);
    }
    for l in 0..LAYERS {
        let p = format!("model.layers.{l}");
        put(
            format!("{p}.self_attn.q_proj.weight"),
            &[q, HIDDEN],
            0.3,
            0.0,
        );
        put(
            format!("{p}.self_attn.k_proj.weight"),
            &[kv, HIDDEN],
            0.3,
            0.0,
        );
        put(
            format!("{p}.self_attn.v_proj.weight"),
            &[kv, HIDDEN],
            0.3,
            0.0,
        );
        put(
            format!("{p}.self_attn.o_proj.weight"),
            &[HIDDEN, q],
            0.3,
            0.0,
        );
        match arch {
            Arch::Qwen2 => {
                put(format!("{p}.self_attn.q_proj.bias"), &[q], 0.1, 0.0);
                put(format!("{p}.self_attn.k_proj.bias"), &[kv], 0.1, 0.0);
                put(format!("{p}.self_attn.v_proj.bias"), &[kv], 0.1, 0.0);
            }
            Arch::Qwen3 => {
                put(
                    format!("{p}.self_attn.q_norm.weight"),
                    &[HEAD_DIM],
                    0.1,
                    1.0,
                );
                put(
                    format!("{p}.self_attn.k_norm.weight"),
                    &[HEAD_DIM],
                    0.1,
                    1.0,
                );
            }
        }
        put(
            format!("{p}.mlp.gate_proj.weight"),
            &[INTERMEDIATE, HIDDEN],
            0.3,
            0.0,
        );
        put(
            format!("{p}.mlp.up_proj.weight"),
            &[INTERMEDIATE, HIDDEN],
            0.3,
            0.0,
        );
        put(
            format!("{p}.mlp.down_proj.weight"),
            &[HIDDEN, INTERMEDIATE],
            0.3,
            0.0,
        );
        put(format!("{p}.input_layernorm.weight"), &[HIDDEN], 0.1, 1.0);
        put(
            format!("{p}.post_attention_layernorm.weight"),
            &[HIDDEN],
            0.1,
            1.0,
        );
    }
    t
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

/// The tiny model's chat template: ChatML with a default system turn (unlike the fallback).
pub const TINY_TEMPLATE: &str = "{%- if messages[0].role != 'system' %}{{- '<|im_start|>system\\nYou are a judge.<|im_end|>\\n' }}{%- endif %}{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";

fn write_json(path: &Path, v: &Value) -> std::io::Result<()> {
    std::fs::write(path, serde_json::to_string_pretty(v)?)
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
    std::fs::create_dir_all(dir)?;
    let mut config = config_json(o.arch, o.tied);
    config["max_position_embeddings"] = json!(o.context_length);
    write_json(&dir.join("config.json"), &config)?;
    let (vocab, merges, added) = tiny_vocab();
    let bpe_vocab = &vocab[..vocab.len() - SPECIALS.len()];
    write_json(
        &dir.join("tokenizer.json"),
        &qwen_tokenizer_json(bpe_vocab, &merges, &added),
    )?;
    let mut tc = json!({"tokenizer_class": "Qwen2Tokenizer", "bos_token": null,
        "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "add_bos_token": false});
    if let Some(t) = &o.chat_template {
        tc["chat_template"] = json!(t);
    }
    write_json(&dir.join("tokenizer_config.json"), &tc)?;
    let eos = [special_id("<|im_end|>"), special_id("<|endoftext|>")];
    write_json(
        &dir.join("generation_config.json"),
        &json!({"eos_token_id": eos}),
    )?;

    let tensors = tensors(o.arch, o.tied);
    if o.shards <= 1 {
        candle_core::safetensors::save(&tensors, dir.join("model.safetensors"))?;
        return Ok(());
    }
    let mut names: Vec<&String> = tensors.keys().collect();
    names.sort();
    let per = names.len().div_ceil(o.shards);
    let mut weight_map = serde_json::Map::new();
    for (i, chunk) in names.chunks(per).enumerate() {
        let file = format!("model-{:05}-of-{:05}.safetensors", i + 1, o.shards);
        let part: HashMap<&str, Tensor> = chunk
            .iter()
            .map(|n| (n.as_str(), tensors[*n].clone()))
            .collect();
        candle_core::safetensors::save(&part, dir.join(&file))?;
        for n in chunk {
            weight_map.insert(n.to_string(), json!(file));
        }
    }
    write_json(
        &dir.join("model.safetensors.index.json"),
        &json!({"metadata": {"total_size": 0}, "weight_map": weight_map}),
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
