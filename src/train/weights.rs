//! Base weights for the trainer's model, from the same files the local judge loads: a Hugging
//! Face folder (config.json + safetensors) or a GGUF file, whose tensors are dequantized to the
//! compute dtype and renamed to Hugging Face names.

use std::collections::HashMap;
use std::path::Path;

use candle_core::quantized::gguf_file;
use candle_core::{DType, Device, Tensor};
use serde_json::Value;

use super::TrainError;
use crate::judge::local::loader::{normalized_config, weight_files, Arch};

/// The shape of a Qwen2/Qwen3 model.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig {
    pub arch: Arch,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_layers: usize,
    pub num_heads: usize,
    pub num_kv_heads: usize,
    pub head_dim: usize,
    pub rope_theta: f64,
    pub rms_norm_eps: f64,
    pub tie_word_embeddings: bool,
    pub max_position_embeddings: usize,
}

/// A model's configuration and tensors under Hugging Face names (`model.layers.0.mlp.up_proj.weight`).
pub struct BaseWeights {
    pub config: ModelConfig,
    pub tensors: HashMap<String, Tensor>,
}

fn bad(path: &Path, msg: impl std::fmt::Display) -> TrainError {
    TrainError::Model(format!("{}: {msg}", path.display()))
}

/// Loads `path` (a model folder or a GGUF file) as `dtype` tensors on `device`.
pub fn load(
    path: &Path,
    arch: Arch,
    device: &Device,
    dtype: DType,
) -> Result<BaseWeights, TrainError> {
    if path.is_dir() {
        load_folder(path, arch, device, dtype)
    } else {
        load_gguf(path, arch, device, dtype)
    }
}

fn load_folder(
    dir: &Path,
    arch: Arch,
    device: &Device,
    dtype: DType,
) -> Result<BaseWeights, TrainError> {
    let cfg_path = dir.join("config.json");
    let text = std::fs::read_to_string(&cfg_path).map_err(|e| bad(&cfg_path, e))?;
    let raw: Value = serde_json::from_str(&text).map_err(|e| bad(&cfg_path, e))?;
    let c =
        normalized_config(&cfg_path, arch, &raw).map_err(|e| TrainError::Model(e.to_string()))?;
    let int = |k: &str| {
        c[k].as_u64()
            .map(|v| v as usize)
            .ok_or_else(|| bad(&cfg_path, format!("no integer {k}")))
    };
    let (hidden, heads) = (int("hidden_size")?, int("num_attention_heads")?);
    let config = ModelConfig {
        arch,
        vocab_size: int("vocab_size")?,
        hidden_size: hidden,
        intermediate_size: int("intermediate_size")?,
        num_layers: int("num_hidden_layers")?,
        num_heads: heads,
        num_kv_heads: int("num_key_value_heads")?,
        head_dim: c["head_dim"]
            .as_u64()
            .map_or(hidden / heads, |v| v as usize),
        rope_theta: c["rope_theta"].as_f64().unwrap_or(10000.0),
        rms_norm_eps: c["rms_norm_eps"].as_f64().unwrap_or(1e-6),
        tie_word_embeddings: c["tie_word_embeddings"].as_bool().unwrap_or(false),
        max_position_embeddings: int("max_position_embeddings")?,
    };
    let mut tensors = HashMap::new();
    for file in weight_files(dir).map_err(|e| TrainError::Model(e.to_string()))? {
        let part = candle_core::safetensors::load(&file, device).map_err(|e| bad(&file, e))?;
        for (name, t) in part {
            let t = t.to_dtype(dtype).map_err(|e| bad(&file, e))?;
            tensors.insert(name, t);
        }
    }
    Ok(BaseWeights { config, tensors })
}

/// The Hugging Face name of a llama.cpp tensor name (`blk.0.attn_q.weight`).
pub fn hf_name(gguf: &str) -> Option<String> {
    let fixed = [
        ("token_embd.weight", "model.embed_tokens.weight"),
        ("output_norm.weight", "model.norm.weight"),
        ("output.weight", "lm_head.weight"),
    ];
    if let Some((_, h)) = fixed.iter().find(|(g, _)| *g == gguf) {
        return Some(h.to_string());
    }
    let rest = gguf.strip_prefix("blk.")?;
    let (layer, rest) = rest.split_once('.')?;
    let (module, kind) = rest.rsplit_once('.')?;
    let parts = [
        ("attn_q", "self_attn.q_proj"),
        ("attn_k", "self_attn.k_proj"),
        ("attn_v", "self_attn.v_proj"),
        ("attn_output", "self_attn.o_proj"),
        ("attn_q_norm", "self_attn.q_norm"),
        ("attn_k_norm", "self_attn.k_norm"),
        ("ffn_gate", "mlp.gate_proj"),
        ("ffn_up", "mlp.up_proj"),
        ("ffn_down", "mlp.down_proj"),
        ("attn_norm", "input_layernorm"),
        ("ffn_norm", "post_attention_layernorm"),
    ];
    let hf = parts.iter().find(|(g, _)| *g == module)?.1;
    Some(format!("model.layers.{layer}.{hf}.{kind}"))
}

fn load_gguf(
    path: &Path,
    arch: Arch,
    device: &Device,
    dtype: DType,
) -> Result<BaseWeights, TrainError> {
    let mut file = std::fs::File::open(path).map_err(|e| bad(path, e))?;
    let content = gguf_file::Content::read(&mut file).map_err(|e| bad(path, e))?;
    let a = match arch {
        Arch::Qwen2 => "qwen2",
        Arch::Qwen3 => "qwen3",
    };
    let md = &content.metadata;
    let num = |key: &str| -> Option<f64> {
        let v = md.get(key)?;
        v.to_u32()
            .map(f64::from)
            .or_else(|_| v.to_u64().map(|x| x as f64))
            .or_else(|_| v.to_i32().map(f64::from))
            .or_else(|_| v.to_f32().map(f64::from))
            .or_else(|_| v.to_f64())
            .ok()
    };
    let need = |k: &str| {
        num(&format!("{a}.{k}"))
            .map(|v| v as usize)
            .ok_or_else(|| bad(path, format!("no {a}.{k} in the GGUF metadata")))
    };
    let embd = content
        .tensor_infos
        .get("token_embd.weight")
        .ok_or_else(|| bad(path, "no token_embd.weight"))?;
    let vocab_size = embd.shape.dims()[0];
    let hidden = need("embedding_length")?;
    let heads = need("attention.head_count")?;
    let config = ModelConfig {
        arch,
        vocab_size,
        hidden_size: hidden,
        intermediate_size: need("feed_forward_length")?,
        num_layers: need("block_count")?,
        num_heads: heads,
        num_kv_heads: need("attention.head_count_kv").unwrap_or(heads),
        head_dim: need("attention.key_length").unwrap_or(hidden / heads),
        rope_theta: num(&format!("{a}.rope.freq_base")).unwrap_or(10000.0),
        rms_norm_eps: num(&format!("{a}.attention.layer_norm_rms_epsilon")).unwrap_or(1e-6),
        tie_word_embeddings: !content.tensor_infos.contains_key("output.weight"),
        max_position_embeddings: need("context_length")?,
    };
    let names: Vec<String> = content.tensor_infos.keys().cloned().collect();
    let mut tensors = HashMap::new();
    for name in names {
        let Some(hf) = hf_name(&name) else { continue };
        let q = content
            .tensor(&mut file, &name, device)
            .map_err(|e| bad(path, e))?;
        let t = q
            .dequantize(device)
            .and_then(|t| t.to_dtype(dtype))
            .map_err(|e| bad(path, e))?;
        tensors.insert(hf, t);
    }
    Ok(BaseWeights { config, tensors })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::judge::local::testkit::gguf_name;

    #[test]
    fn gguf_names_map_back() {
        for hf in [
            "model.embed_tokens.weight",
            "lm_head.weight",
            "model.norm.weight",
            "model.layers.3.self_attn.q_proj.bias",
            "model.layers.0.self_attn.k_norm.weight",
            "model.layers.1.mlp.down_proj.weight",
            "model.layers.1.post_attention_layernorm.weight",
        ] {
            assert_eq!(hf_name(&gguf_name(hf)).as_deref(), Some(hf));
        }
        assert_eq!(hf_name("rope_freqs.weight"), None);
    }
}
