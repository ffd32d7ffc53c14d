//! The toy run's model (`gavel train toy`): a tiny Qwen2 with deterministic random weights.
//!
//! Its own code, not the tests' fixture (`model/testkit.rs`), although it started as that
//! fixture's Qwen2: the toy run is shipped, its figures are quoted (BENCHMARKS.md, the "it
//! learns" test), and a change to a test model must not move them. Same sizes, same generator,
//! same order of draws: the weights are bit-for-bit those the toy run has always started from.

use std::collections::HashMap;

use candle_core::{Device, Tensor};
use serde_json::{json, Value};

pub const HIDDEN: usize = 32;
pub const LAYERS: usize = 2;
pub const HEADS: usize = 4;
pub const KV_HEADS: usize = 2;
pub const HEAD_DIM: usize = 8;
pub const INTERMEDIATE: usize = 64;
/// Rows of the embedding (the logits length): more than the tokenizer's ids, as Qwen's.
pub const VOCAB: usize = 320;
pub const CONTEXT: usize = 256;

/// The special tokens, in id order after the plain ones.
pub const SPECIALS: &[&str] = &["<|endoftext|>", "<|im_start|>", "<|im_end|>"];

/// The model's config.json, with `bos` and `eos` as its BOS and EOS ids.
pub fn config_json(bos: u32, eos: u32) -> Value {
    json!({
        "architectures": ["Qwen2ForCausalLM"],
        "model_type": "qwen2",
        "vocab_size": VOCAB, "hidden_size": HIDDEN, "intermediate_size": INTERMEDIATE,
        "num_hidden_layers": LAYERS, "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS,
        "max_position_embeddings": CONTEXT, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6,
        "hidden_act": "silu", "tie_word_embeddings": false, "use_sliding_window": false,
        "sliding_window": null, "max_window_layers": LAYERS, "torch_dtype": "float32",
        "bos_token_id": bos, "eos_token_id": eos
    })
}

/// Deterministic values in [-scale, scale] (xorshift), so every run starts from the same model.
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

/// The model's tensors under Hugging Face names.
pub fn tensors() -> HashMap<String, Tensor> {
    let mut seed = 1u64;
    let mut t = HashMap::new();
    // Each tensor draws from the next seed: the order below is part of the weights.
    let mut put = |name: String, shape: &[usize], scale: f32, base: f32| {
        seed += 1;
        let n = shape.iter().product();
        let v: Vec<f32> = values(n, seed, scale)
            .into_iter()
            .map(|x| x + base)
            .collect();
        t.insert(
            name,
            Tensor::from_vec(v, shape, &Device::Cpu).expect("tensor"),
        );
    };
    let (q, kv) = (HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM);
    put(
        "model.embed_tokens.weight".into(),
        &[VOCAB, HIDDEN],
        1.0,
        0.0,
    );
    put("model.norm.weight".into(), &[HIDDEN], 0.1, 1.0);
    put("lm_head.weight".into(), &[VOCAB, HIDDEN], 0.2, 0.0);
    for l in 0..LAYERS {
        let p = format!("model.layers.{l}");
        let attn = format!("{p}.self_attn");
        put(format!("{attn}.q_proj.weight"), &[q, HIDDEN], 0.3, 0.0);
        put(format!("{attn}.k_proj.weight"), &[kv, HIDDEN], 0.3, 0.0);
        put(format!("{attn}.v_proj.weight"), &[kv, HIDDEN], 0.3, 0.0);
        put(format!("{attn}.o_proj.weight"), &[HIDDEN, q], 0.3, 0.0);
        put(format!("{attn}.q_proj.bias"), &[q], 0.1, 0.0);
        put(format!("{attn}.k_proj.bias"), &[kv], 0.1, 0.0);
        put(format!("{attn}.v_proj.bias"), &[kv], 0.1, 0.0);
        let ff = [INTERMEDIATE, HIDDEN];
        put(format!("{p}.mlp.gate_proj.weight"), &ff, 0.3, 0.0);
        put(format!("{p}.mlp.up_proj.weight"), &ff, 0.3, 0.0);
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
