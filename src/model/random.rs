//! Qwen2/Qwen3 weights drawn from a fixed generator, for a model of any shape: the toy run's
//! tiny model (`train::toy_model`), the tests' tiny models (`testkit`), and models of the real
//! Qwen2.5 shapes that the device benchmark times (weights do not change speed, and a model made
//! on the machine does not have to travel to it).
//!
//! Every tensor draws from its own seed, in a fixed order of names, so the same shape always
//! gives the same weights: the toy run's figures and the tests' expected logits depend on it
//! (`the_toy_weights_do_not_move`, `tiny_weights_do_not_move`).

use std::collections::HashMap;
use std::path::Path;

use candle_core::{DType, Device, Tensor};
use serde_json::{json, Value};

use super::tokenizer::{bytes_to_unicode, qwen_tokenizer_json, AddedToken};
use super::Arch;

/// The sizes of a Qwen2/Qwen3 decoder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    pub hidden: usize,
    pub layers: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub intermediate: usize,
    /// Rows of the embedding (the logits length).
    pub vocab: usize,
    /// Positions the model takes (`max_position_embeddings`).
    pub context: usize,
}

impl Shape {
    /// The tests' and the toy run's tiny model.
    pub const TINY: Shape = Shape {
        hidden: 32,
        layers: 2,
        heads: 4,
        kv_heads: 2,
        head_dim: 8,
        intermediate: 64,
        vocab: 320,
        context: 256,
    };

    /// Qwen2.5-0.5B (and its Coder and Instruct variants).
    pub const QWEN2_5_0_5B: Shape = Shape {
        hidden: 896,
        layers: 24,
        heads: 14,
        kv_heads: 2,
        head_dim: 64,
        intermediate: 4864,
        vocab: 151_936,
        context: 32_768,
    };

    /// Qwen2.5-1.5B (and its Coder and Instruct variants).
    pub const QWEN2_5_1_5B: Shape = Shape {
        hidden: 1536,
        layers: 28,
        heads: 12,
        kv_heads: 2,
        head_dim: 128,
        intermediate: 8960,
        vocab: 151_936,
        context: 32_768,
    };

    /// The number of weights (with a separate output projection unless `tied`).
    pub fn parameters(&self, arch: Arch, tied: bool) -> usize {
        let (q, kv) = (self.heads * self.head_dim, self.kv_heads * self.head_dim);
        let h = self.hidden;
        let attn = 2 * q * h + 2 * kv * h;
        let extra = match arch {
            Arch::Qwen2 => q + 2 * kv,
            Arch::Qwen3 => 2 * self.head_dim,
        };
        let layer = attn + extra + 3 * self.intermediate * h + 2 * h;
        let head = if tied { 0 } else { self.vocab * h };
        self.vocab * h + head + h + self.layers * layer
    }

    /// A Hugging Face `config.json` for this shape, with `bos` and `eos` as its BOS and EOS ids.
    pub fn config_json(&self, arch: Arch, tied: bool, bos: u32, eos: u32) -> Value {
        let mut c = json!({
            "architectures": [match arch { Arch::Qwen2 => "Qwen2ForCausalLM", Arch::Qwen3 => "Qwen3ForCausalLM" }],
            "model_type": arch.name(),
            "vocab_size": self.vocab, "hidden_size": self.hidden,
            "intermediate_size": self.intermediate, "num_hidden_layers": self.layers,
            "num_attention_heads": self.heads, "num_key_value_heads": self.kv_heads,
            "max_position_embeddings": self.context, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6,
            "hidden_act": "silu", "tie_word_embeddings": tied, "use_sliding_window": false,
            "sliding_window": null, "max_window_layers": self.layers, "torch_dtype": "float32",
            "bos_token_id": bos, "eos_token_id": eos
        });
        if arch == Arch::Qwen3 {
            c["head_dim"] = json!(self.head_dim);
            c["attention_bias"] = json!(false);
        }
        c
    }
}

/// How the draws are scaled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Init {
    /// One fixed range per kind of tensor (±0.3 for projections): the tiny models, whose
    /// weights are pinned.
    Fixed,
    /// Projections scaled by 1/√(fan-in), so activations stay of order one at any width: a
    /// real shape with fixed ranges overflows within a few layers, and NaNs would make the
    /// CUDA-vs-CPU comparison meaningless.
    FanIn,
}

/// Deterministic values in [-scale, scale] (xorshift). Not `domain::rng`: these streams are the
/// test models' weights, which tests and device figures pin.
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

/// The model's tensors under Hugging Face names, in f32 on the CPU.
pub fn tensors(shape: &Shape, arch: Arch, tied: bool, init: Init) -> HashMap<String, Tensor> {
    let s = shape;
    let mut seed = 1u64;
    let mut t = HashMap::new();
    // Each tensor draws from the next seed: the order below is part of the weights.
    let mut put = |name: String, dims: &[usize], scale: f32, base: f32| {
        seed += 1;
        let scale = match (init, dims) {
            (Init::FanIn, [_, fan_in]) if !name.contains("embed_tokens") => {
                1.0 / (*fan_in as f32).sqrt()
            }
            _ => scale,
        };
        let n = dims.iter().product();
        let v: Vec<f32> = values(n, seed, scale)
            .into_iter()
            .map(|x| x + base)
            .collect();
        t.insert(
            name,
            Tensor::from_vec(v, dims, &Device::Cpu).expect("tensor"),
        );
    };
    let (h, ff) = (s.hidden, s.intermediate);
    let (q, kv) = (s.heads * s.head_dim, s.kv_heads * s.head_dim);
    put("model.embed_tokens.weight".into(), &[s.vocab, h], 1.0, 0.0);
    put("model.norm.weight".into(), &[h], 0.1, 1.0);
    if !tied {
        put("lm_head.weight".into(), &[s.vocab, h], 0.2, 0.0);
    }
    for l in 0..s.layers {
        let p = format!("model.layers.{l}");
        let attn = format!("{p}.self_attn");
        put(format!("{attn}.q_proj.weight"), &[q, h], 0.3, 0.0);
        put(format!("{attn}.k_proj.weight"), &[kv, h], 0.3, 0.0);
        put(format!("{attn}.v_proj.weight"), &[kv, h], 0.3, 0.0);
        put(format!("{attn}.o_proj.weight"), &[h, q], 0.3, 0.0);
        match arch {
            Arch::Qwen2 => {
                put(format!("{attn}.q_proj.bias"), &[q], 0.1, 0.0);
                put(format!("{attn}.k_proj.bias"), &[kv], 0.1, 0.0);
                put(format!("{attn}.v_proj.bias"), &[kv], 0.1, 0.0);
            }
            Arch::Qwen3 => {
                put(format!("{attn}.q_norm.weight"), &[s.head_dim], 0.1, 1.0);
                put(format!("{attn}.k_norm.weight"), &[s.head_dim], 0.1, 1.0);
            }
        }
        put(format!("{p}.mlp.gate_proj.weight"), &[ff, h], 0.3, 0.0);
        put(format!("{p}.mlp.up_proj.weight"), &[ff, h], 0.3, 0.0);
        put(format!("{p}.mlp.down_proj.weight"), &[h, ff], 0.3, 0.0);
        put(format!("{p}.input_layernorm.weight"), &[h], 0.1, 1.0);
        put(
            format!("{p}.post_attention_layernorm.weight"),
            &[h],
            0.1,
            1.0,
        );
    }
    t
}

/// Pairs merged by the tiny byte-level BPE every random model ships, in priority order (plain
/// text; spaces become `Ġ`).
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

/// [`SPECIALS`] as added tokens, numbered from `first`.
pub fn added_specials(first: u32) -> Vec<AddedToken> {
    SPECIALS
        .iter()
        .zip(first..)
        .map(|(s, id)| AddedToken {
            id,
            content: s.to_string(),
            special: true,
        })
        .collect()
}

/// The tiny tokenizer (Qwen's format: the 256 byte tokens, a few dozen merges, then the
/// specials): token strings by id (GPT-2 alphabet), merges (`"a b"`), added tokens.
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
    let added = added_specials(vocab.len() as u32);
    vocab.extend(SPECIALS.iter().map(|s| s.to_string()));
    assert!(vocab.len() <= Shape::TINY.vocab);
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

/// The chat template the random models ship: ChatML with a default system turn.
pub const TINY_TEMPLATE: &str = "{%- if messages[0].role != 'system' %}{{- '<|im_start|>system\\nYou are a judge.<|im_end|>\\n' }}{%- endif %}{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";

/// What [`write_folder`] writes.
#[derive(Debug, Clone)]
pub struct FolderOptions {
    pub shape: Shape,
    pub arch: Arch,
    /// Output projection tied to the embedding (no `lm_head.weight`), as Qwen2.5-0.5B and 1.5B.
    pub tied: bool,
    pub init: Init,
    /// Safetensors shards (1: `model.safetensors`; more: an index and `model-0000N-of-...`).
    pub shards: usize,
    /// The chat template in `tokenizer_config.json`; `None` ships none.
    pub chat_template: Option<String>,
    /// The type the weights are stored in (F32, or BF16 for half the disk and load time).
    pub dtype: DType,
}

impl FolderOptions {
    pub fn new(shape: Shape, arch: Arch) -> FolderOptions {
        FolderOptions {
            shape,
            arch,
            tied: false,
            init: Init::Fixed,
            shards: 1,
            chat_template: Some(TINY_TEMPLATE.to_string()),
            dtype: DType::F32,
        }
    }
}

fn write_json(path: &Path, v: &Value) -> std::io::Result<()> {
    std::fs::write(path, serde_json::to_string_pretty(v)?)
}

/// Writes a random model as a Hugging Face folder in `dir` (created if missing): config,
/// the tiny tokenizer, its template and the weights.
pub fn write_folder(dir: &Path, o: &FolderOptions) -> Result<(), candle_core::Error> {
    let io = |e: std::io::Error| candle_core::Error::Msg(format!("{}: {e}", dir.display()));
    std::fs::create_dir_all(dir).map_err(io)?;
    let (bos, eos) = (special_id("<|endoftext|>"), special_id("<|im_end|>"));
    write_json(
        &dir.join("config.json"),
        &o.shape.config_json(o.arch, o.tied, bos, eos),
    )
    .map_err(io)?;
    let (vocab, merges, added) = tiny_vocab();
    let bpe_vocab = &vocab[..vocab.len() - SPECIALS.len()];
    write_json(
        &dir.join("tokenizer.json"),
        &qwen_tokenizer_json(bpe_vocab, &merges, &added),
    )
    .map_err(io)?;
    let mut tc = json!({"tokenizer_class": "Qwen2Tokenizer", "bos_token": null,
        "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "add_bos_token": false});
    if let Some(t) = &o.chat_template {
        tc["chat_template"] = json!(t);
    }
    write_json(&dir.join("tokenizer_config.json"), &tc).map_err(io)?;
    write_json(
        &dir.join("generation_config.json"),
        &json!({"eos_token_id": [eos, bos]}),
    )
    .map_err(io)?;

    let mut tensors = tensors(&o.shape, o.arch, o.tied, o.init);
    if o.dtype != DType::F32 {
        for t in tensors.values_mut() {
            *t = t.to_dtype(o.dtype)?;
        }
    }
    if o.shards <= 1 {
        return candle_core::safetensors::save(&tensors, dir.join("model.safetensors"));
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
    )
    .map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_count_the_tensors() {
        for (arch, tied) in [(Arch::Qwen2, false), (Arch::Qwen3, true)] {
            let t = tensors(&Shape::TINY, arch, tied, Init::Fixed);
            let n: usize = t.values().map(|t| t.elem_count()).sum();
            assert_eq!(Shape::TINY.parameters(arch, tied), n, "{arch:?}");
        }
        // Qwen2.5-0.5B has 494,032,768 weights, 1.5B 1,543,714,304 (their model cards).
        assert_eq!(
            Shape::QWEN2_5_0_5B.parameters(Arch::Qwen2, true),
            494_032_768
        );
        assert_eq!(
            Shape::QWEN2_5_1_5B.parameters(Arch::Qwen2, true),
            1_543_714_304
        );
    }

    #[test]
    fn fan_in_scaling_keeps_wide_projections_small() {
        let wide = Shape {
            hidden: 256,
            intermediate: 512,
            layers: 1,
            ..Shape::TINY
        };
        let t = tensors(&wide, Arch::Qwen2, true, Init::FanIn);
        let max_abs = |t: &Tensor| {
            t.abs()
                .and_then(|a| a.flatten_all())
                .and_then(|a| a.max(0))
                .and_then(|a| a.to_scalar::<f32>())
                .unwrap()
        };
        let max = |name: &str| max_abs(&t[name]);
        assert!(max("model.layers.0.mlp.down_proj.weight") <= 1.0 / 512f32.sqrt());
        assert!(max("model.layers.0.self_attn.q_proj.weight") <= 1.0 / 256f32.sqrt());
        assert!(max("model.layers.0.self_attn.q_proj.weight") > 0.5 / 256f32.sqrt());
        // The embedding keeps its range; norms stay around one.
        assert!(max("model.embed_tokens.weight") > 0.9);
        assert!(max("model.norm.weight") > 1.0);
        let fixed = tensors(&wide, Arch::Qwen2, true, Init::Fixed);
        assert!(max_abs(&fixed["model.layers.0.mlp.down_proj.weight"]) > 0.2);
    }

    #[test]
    fn a_folder_in_bf16_holds_the_same_weights_rounded() {
        let dir = tempfile::tempdir().unwrap();
        let shape = Shape {
            hidden: 64,
            ..Shape::TINY
        };
        let mut o = FolderOptions::new(shape, Arch::Qwen2);
        o.tied = true;
        o.init = Init::FanIn;
        o.dtype = DType::BF16;
        write_folder(dir.path(), &o).unwrap();
        let read =
            candle_core::safetensors::load(dir.path().join("model.safetensors"), &Device::Cpu)
                .unwrap();
        let want = tensors(&shape, Arch::Qwen2, true, Init::FanIn);
        assert_eq!(read.len(), want.len());
        assert!(!read.contains_key("lm_head.weight"));
        for (name, t) in &want {
            let got = &read[name];
            assert_eq!(got.dtype(), DType::BF16, "{name}");
            let diff = crate::model::testkit::max_abs_diff(&got.to_dtype(DType::F32).unwrap(), t);
            // bf16 keeps 8 bits of mantissa: within 1/128 of values of at most ~1.1.
            assert!(diff <= 1.1 / 128.0, "{name}: {diff}");
        }
        let config: Value =
            serde_json::from_str(&std::fs::read_to_string(dir.path().join("config.json")).unwrap())
                .unwrap();
        assert_eq!(config["hidden_size"], 64);
        assert_eq!(config["tie_word_embeddings"], true);
    }
}
