//! Every tensor of an opened model as a dense tensor of one dtype under its Hugging Face name
//! (`model.layers.0.mlp.up_proj.weight`): safetensors as they are, GGUF tensors dequantized and
//! renamed from llama.cpp's names. The trainer builds its differentiable model from these.

use std::collections::HashMap;

use candle_core::{DType, Device, Tensor};

use super::config::QwenConfig;
use super::error::LocalError;
use super::loader::{ModelFiles, WeightFiles};

/// A model's configuration and tensors under Hugging Face names.
pub struct DenseWeights {
    pub config: QwenConfig,
    pub tensors: HashMap<String, Tensor>,
}

impl ModelFiles {
    /// Reads every tensor as `dtype` on `device` (see the module docs).
    pub fn dense(&self, device: &Device, dtype: DType) -> Result<DenseWeights, LocalError> {
        self.dense_where(device, dtype, |_| true)
    }

    /// [`ModelFiles::dense`] of the tensors whose Hugging Face name `keep` accepts (the judge
    /// trainer reads only the layers it adapts and the output head).
    pub fn dense_where(
        &self,
        device: &Device,
        dtype: DType,
        keep: impl Fn(&str) -> bool,
    ) -> Result<DenseWeights, LocalError> {
        let mut tensors = HashMap::new();
        match &self.weights {
            WeightFiles::Safetensors(files) => {
                for file in files {
                    let bad = |e: candle_core::Error| LocalError::invalid(file, e);
                    let part = candle_core::safetensors::load(file, device).map_err(bad)?;
                    for (name, t) in part.into_iter().filter(|(n, _)| keep(n)) {
                        tensors.insert(name, t.to_dtype(dtype).map_err(bad)?);
                    }
                }
            }
            WeightFiles::Gguf { content, file } => {
                let bad = |e: candle_core::Error| LocalError::invalid(&self.path, e);
                let mut reader = file;
                let mut names: Vec<&String> = content.tensor_infos.keys().collect();
                names.sort();
                for name in names {
                    let Some(hf) = hf_name(name).filter(|h| keep(h)) else {
                        continue;
                    };
                    let q = content.tensor(&mut reader, name, device).map_err(bad)?;
                    let t = q
                        .dequantize(device)
                        .and_then(|t| t.to_dtype(dtype))
                        .map_err(bad)?;
                    tensors.insert(hf, t);
                }
            }
        }
        Ok(DenseWeights {
            config: self.config.clone(),
            tensors,
        })
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::testkit::gguf_name;

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
