//! The shape of a Qwen2/Qwen3 network: one [`QwenConfig`], deserialised from a Hugging Face
//! `config.json` ([`QwenConfig::from_json`]) or built from a GGUF file's metadata
//! ([`QwenConfig::from_gguf`]), the way candle-transformers' model files read theirs.
//!
//! Released configs leave keys out or set them to `null` (`head_dim`, `num_key_value_heads`,
//! `rope_theta` moved under `rope_parameters`, ...). Those keys are `Option`s here and their
//! accessors apply the defaults `transformers` applies, so the rule for each lives in one place
//! whichever file the config came from.

use std::collections::HashMap;
use std::path::Path;

use candle_core::quantized::gguf_file;
use serde::Deserialize;
use serde_json::Value;

use super::error::LocalError;
use super::tokenizer::gguf_int;
use super::Arch;

/// The shape of a Qwen2/Qwen3 model. Required keys are fields; keys with a default are read
/// through the accessor of the same meaning.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct QwenConfig {
    /// Not a key of its own: from `model_type`, else `architectures` (see [`folder_arch`]).
    #[serde(skip, default = "arch_set_after_reading")]
    pub arch: Arch,
    /// Rows of the embedding: the length of every logits vector.
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    #[serde(default)]
    num_key_value_heads: Option<usize>,
    #[serde(default)]
    head_dim: Option<usize>,
    #[serde(default)]
    max_position_embeddings: Option<usize>,
    #[serde(default)]
    rope_theta: Option<f64>,
    /// Where newer `transformers` write `rope_theta`.
    #[serde(default)]
    rope_parameters: Option<Value>,
    #[serde(default)]
    rms_norm_eps: Option<f64>,
    #[serde(default)]
    tie_word_embeddings: Option<bool>,
    #[serde(default)]
    attention_bias: Option<bool>,
}

/// serde needs a value for the skipped field; [`QwenConfig::from_json`] overwrites it.
fn arch_set_after_reading() -> Arch {
    Arch::Qwen2
}

/// Keys a config.json must have as integers: checked before serde so that the message names
/// the key the way a person reads the file.
const REQUIRED: [&str; 5] = [
    "hidden_size",
    "num_attention_heads",
    "num_hidden_layers",
    "vocab_size",
    "intermediate_size",
];

impl QwenConfig {
    /// A `config.json` (parsed as `raw`, read from `path`) of a Qwen2 or Qwen3 model.
    pub fn from_json(path: &Path, raw: &Value) -> Result<QwenConfig, LocalError> {
        let arch = folder_arch(path, raw)?;
        for k in REQUIRED {
            if raw[k].as_u64().is_none() {
                return Err(LocalError::invalid(path, format!("no integer {k}")));
            }
        }
        let mut c: QwenConfig =
            serde_json::from_value(raw.clone()).map_err(|e| LocalError::invalid(path, e))?;
        c.arch = arch;
        if arch == Arch::Qwen2 {
            // transformers' (and candle's) Qwen2 always has q/k/v biases and derives the head
            // size from the hidden size, whatever else the file says.
            c.head_dim = None;
            c.attention_bias = Some(true);
        }
        let (hidden, heads) = (c.hidden_size, c.num_attention_heads);
        if heads == 0 || hidden % heads != 0 {
            return Err(LocalError::invalid(
                path,
                format!("hidden_size {hidden} is not a multiple of num_attention_heads {heads}"),
            ));
        }
        c.check_heads(path)?;
        Ok(c)
    }

    /// The metadata and tensor shapes of a GGUF file (`path`, for messages), as llama.cpp's
    /// converter writes them: `{arch}.embedding_length`, `{arch}.attention.head_count`, ...
    pub fn from_gguf(path: &Path, content: &gguf_file::Content) -> Result<QwenConfig, LocalError> {
        let md = &content.metadata;
        let arch_name = md
            .get("general.architecture")
            .and_then(|v| v.to_string().ok())
            .cloned()
            .unwrap_or_default();
        let arch = match arch_name.as_str() {
            "qwen2" => Arch::Qwen2,
            "qwen3" => Arch::Qwen3,
            _ => {
                return Err(LocalError::UnsupportedArchitecture {
                    path: path.to_path_buf(),
                    found: format!("general.architecture {arch_name:?}"),
                })
            }
        };
        let rows = |name: &str| {
            content
                .tensor_infos
                .get(name)
                .map(|t| t.shape.dims()[0])
                .ok_or_else(|| {
                    LocalError::invalid(path, format!("no tensor {name} in the GGUF file"))
                })
        };
        let int = |key: &str| {
            let key = format!("{arch_name}.{key}");
            md.get(&key)
                .and_then(gguf_int)
                .and_then(|v| usize::try_from(v).ok())
                .ok_or_else(|| LocalError::invalid(path, format!("no {key} in the GGUF metadata")))
        };
        let float = |key: &str| {
            md.get(&format!("{arch_name}.{key}"))
                .and_then(|v| v.to_f32().ok().map(f64::from).or_else(|| v.to_f64().ok()))
        };
        let vocab_size = rows("token_embd.weight")?;
        let max_position_embeddings = int("context_length")?;
        let num_hidden_layers = int("block_count")?;
        let hidden_size = int("embedding_length")?;
        let heads = int("attention.head_count")?;
        if heads == 0 {
            return Err(LocalError::invalid(path, "attention.head_count is 0"));
        }
        let c = QwenConfig {
            arch,
            vocab_size,
            hidden_size,
            // The tensor, not `feed_forward_length`: the weights are what the network runs.
            intermediate_size: rows("blk.0.ffn_up.weight")?,
            num_hidden_layers,
            num_attention_heads: heads,
            num_key_value_heads: Some(int("attention.head_count_kv").unwrap_or(heads)),
            head_dim: Some(int("attention.key_length").unwrap_or(hidden_size / heads)),
            max_position_embeddings: Some(max_position_embeddings),
            rope_theta: float("rope.freq_base"),
            rope_parameters: None,
            rms_norm_eps: float("attention.layer_norm_rms_epsilon"),
            tie_word_embeddings: Some(!content.tensor_infos.contains_key("output.weight")),
            attention_bias: Some(content.tensor_infos.contains_key("blk.0.attn_q.bias")),
        };
        c.check_heads(path)?;
        Ok(c)
    }

    /// Key/value heads (grouped-query attention); default: as many as the query heads.
    pub fn num_kv_heads(&self) -> usize {
        self.num_key_value_heads.unwrap_or(self.num_attention_heads)
    }

    /// Size of one head; default: the hidden size over the heads.
    pub fn head_dim(&self) -> usize {
        self.head_dim
            .unwrap_or(self.hidden_size / self.num_attention_heads.max(1))
    }

    /// Most positions the model takes (prompt and completion); default 32768.
    pub fn context_length(&self) -> usize {
        self.max_position_embeddings.unwrap_or(32768)
    }

    /// RoPE base; default 10000.
    pub fn rope_theta(&self) -> f64 {
        self.rope_theta
            .or_else(|| {
                self.rope_parameters
                    .as_ref()
                    .and_then(|p| p["rope_theta"].as_f64())
            })
            .unwrap_or(10000.0)
    }

    pub fn rms_norm_eps(&self) -> f64 {
        self.rms_norm_eps.unwrap_or(1e-6)
    }

    /// The output projection is the embedding (no `lm_head.weight`).
    pub fn tie_word_embeddings(&self) -> bool {
        self.tie_word_embeddings.unwrap_or(false)
    }

    /// q/k/v projections have biases: always for Qwen2, `attention_bias` for Qwen3.
    pub fn qkv_bias(&self) -> bool {
        self.attention_bias.unwrap_or(false)
    }

    /// Head counts the attention can use: kv heads dividing the query heads, even head size.
    fn check_heads(&self, path: &Path) -> Result<(), LocalError> {
        let (heads, kv, d) = (
            self.num_attention_heads,
            self.num_kv_heads(),
            self.head_dim(),
        );
        if kv == 0 || heads % kv != 0 || d == 0 || d % 2 != 0 {
            return Err(LocalError::invalid(
                path,
                format!(
                    "{heads} attention heads, {kv} kv heads of size {d}: kv heads must divide the \
                     heads and the size must be even"
                ),
            ));
        }
        Ok(())
    }

    /// This shape as the config.json candle-transformers' `qwen2::Config` / `qwen3::Config`
    /// accept (every key they require present), for tests that compare with candle's models.
    #[cfg(test)]
    pub(crate) fn candle_json(&self) -> Value {
        serde_json::json!({
            "vocab_size": self.vocab_size, "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_hidden_layers,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_kv_heads(), "head_dim": self.head_dim(),
            "max_position_embeddings": self.context_length(),
            "sliding_window": self.context_length(), "max_window_layers": self.num_hidden_layers,
            "tie_word_embeddings": self.tie_word_embeddings(), "rope_theta": self.rope_theta(),
            "rms_norm_eps": self.rms_norm_eps(), "use_sliding_window": false,
            "hidden_act": "silu", "attention_bias": self.qkv_bias() && self.arch == Arch::Qwen3
        })
    }
}

/// The architecture a config.json names (`model_type`, else `architectures`).
pub fn folder_arch(config_path: &Path, config: &Value) -> Result<Arch, LocalError> {
    let model_type = config["model_type"].as_str();
    let archs: Vec<&str> = config["architectures"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let by_arch = |name: &str| archs.contains(&name);
    match model_type {
        Some("qwen2") => return Ok(Arch::Qwen2),
        Some("qwen3") => return Ok(Arch::Qwen3),
        None if by_arch("Qwen2ForCausalLM") => return Ok(Arch::Qwen2),
        None if by_arch("Qwen3ForCausalLM") => return Ok(Arch::Qwen3),
        _ => {}
    }
    let mut found = Vec::new();
    if let Some(t) = model_type {
        found.push(format!("model_type {t:?}"));
    }
    if !archs.is_empty() {
        found.push(format!("architectures {archs:?}"));
    }
    if found.is_empty() {
        found.push("(config.json names no model_type or architectures)".into());
    }
    Err(LocalError::UnsupportedArchitecture {
        path: config_path.to_path_buf(),
        found: found.join(", "),
    })
}

/// A GGUF metadata string.
pub(crate) fn md_string(md: &HashMap<String, gguf_file::Value>, key: &str) -> Option<String> {
    md.get(key).and_then(|v| v.to_string().ok()).cloned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_transformers::models::{qwen2, qwen3};
    use serde_json::json;

    #[test]
    fn config_defaults_are_transformers() {
        let raw = json!({"model_type": "qwen3", "vocab_size": 10, "hidden_size": 32,
            "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
            "sliding_window": null, "rope_parameters": {"rope_theta": 5e6}});
        let c = QwenConfig::from_json(Path::new("c.json"), &raw).unwrap();
        assert_eq!((c.head_dim(), c.num_kv_heads()), (8, 4));
        assert_eq!(c.rope_theta(), 5e6);
        assert!(!c.qkv_bias() && !c.tie_word_embeddings());
        // candle's strict config accepts the same shape.
        let cfg: qwen3::Config = serde_json::from_value(c.candle_json()).unwrap();
        assert_eq!((cfg.head_dim, cfg.num_key_value_heads), (8, 4));
        let raw = json!({"model_type": "qwen2", "vocab_size": 10, "hidden_size": 32,
            "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
            "sliding_window": null, "max_position_embeddings": 128, "head_dim": 16,
            "rms_norm_eps": null});
        let c = QwenConfig::from_json(Path::new("c.json"), &raw).unwrap();
        assert_eq!(
            (c.context_length(), c.head_dim(), c.rms_norm_eps()),
            (128, 8, 1e-6)
        );
        assert!(c.qkv_bias());
        let cfg: qwen2::Config = serde_json::from_value(c.candle_json()).unwrap();
        assert_eq!((cfg.sliding_window, cfg.max_window_layers), (128, 2));
        let e = QwenConfig::from_json(
            Path::new("c.json"),
            &json!({"model_type": "qwen2", "hidden_size": 32}),
        )
        .unwrap_err();
        assert_eq!(e.to_string(), "c.json: no integer num_attention_heads");
    }

    #[test]
    fn architecture_comes_from_model_type_or_architectures() {
        let p = Path::new("config.json");
        assert_eq!(
            folder_arch(p, &json!({"model_type": "qwen2"})).unwrap(),
            Arch::Qwen2
        );
        let a = json!({"architectures": ["Qwen3ForCausalLM"]});
        assert_eq!(folder_arch(p, &a).unwrap(), Arch::Qwen3);
        let e = folder_arch(
            p,
            &json!({"model_type": "llama", "architectures": ["LlamaForCausalLM"]}),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains(r#"model_type "llama", architectures ["LlamaForCausalLM"]"#),
            "{e}"
        );
        let e = folder_arch(p, &json!({"model_type": "qwen2_moe"}))
            .unwrap_err()
            .to_string();
        assert!(e.contains("qwen2_moe"), "{e}");
    }
}
