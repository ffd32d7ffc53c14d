//! The trained part of the judge: the top K layers at the verdict position alone, with LoRA
//! adapters, over the frozen context's keys and values ([`super::features::Features`]), then
//! the final norm and only the output head's rows of the answers' tokens. Written with candle's
//! composed ops (`rms_norm_slow`, `rope_slow`, `softmax`), which have backward passes; the same
//! layer as the inference network's at one position.

use std::collections::HashMap;

use candle_core::{DType, Device, Result, Tensor, Var, D};
use candle_nn::ops::{rms_norm_slow, softmax};
use candle_nn::rotary_emb::rope_slow;

use super::features::Features;
use crate::model::adapter::{peft_name, LoraConfig, TARGETS};
use crate::model::{ModelFiles, QwenConfig};
use crate::rng::Rng;
use crate::train::lora::Linear;
use crate::train::TrainError;

/// The projections of a layer, in the order [`HeadLayer::proj`] holds them.
const MODULES: &[&str] = TARGETS;

struct HeadLayer {
    index: usize,
    ln1: Tensor,
    ln2: Tensor,
    /// In [`MODULES`] order.
    proj: Vec<Linear>,
    q_norm: Option<Tensor>,
    k_norm: Option<Tensor>,
}

/// See the module docs.
pub struct VerdictHead {
    cfg: QwenConfig,
    layers: Vec<HeadLayer>,
    norm: Tensor,
    /// Per mode: the answers' tokens' rows of the output head `[tokens, hidden]`, and how many
    /// of them stand for the first answer (they come first).
    answers: Vec<(Tensor, usize)>,
    inv_freq: Vec<f32>,
    device: Device,
}

impl VerdictHead {
    /// The layers `first..` of `files` as dense f32 tensors, with fresh adapters (B = 0: the
    /// head starts as the base model) drawn from `rng`.
    pub fn new(
        files: &ModelFiles,
        first: usize,
        choices: &[Vec<Vec<u32>>],
        lora: &LoraConfig,
        rng: &mut Rng,
        device: &Device,
    ) -> std::result::Result<VerdictHead, TrainError> {
        let cfg = files.config.clone();
        let wanted = |name: &str| {
            let layer = name
                .strip_prefix("model.layers.")
                .and_then(|r| r.split('.').next())
                .and_then(|n| n.parse::<usize>().ok());
            match layer {
                Some(l) => l >= first,
                None => {
                    name == "model.norm.weight"
                        || name == "lm_head.weight"
                        || name == "model.embed_tokens.weight"
                }
            }
        };
        let mut t = files.dense_where(device, DType::F32, wanted)?.tensors;
        let mut take = |name: &str| {
            t.remove(name)
                .ok_or_else(|| TrainError::Model(format!("no tensor {name} in the weights")))
        };
        let mut layers = Vec::new();
        for l in first..cfg.num_hidden_layers {
            let p = format!("model.layers.{l}");
            let mut proj = Vec::new();
            for m in MODULES {
                let group = if m.starts_with(['q', 'k', 'v', 'o']) {
                    "self_attn"
                } else {
                    "mlp"
                };
                let w = take(&format!("{p}.{group}.{m}.weight"))?;
                let bias = cfg.qkv_bias() && ["q_proj", "k_proj", "v_proj"].contains(m);
                let b = if bias {
                    Some(take(&format!("{p}.{group}.{m}.bias"))?)
                } else {
                    None
                };
                let mut lin = Linear::new(w, b);
                if lora.targets(m) {
                    lin.add_lora(lora, rng)?;
                }
                proj.push(lin);
            }
            let qk = cfg.arch == crate::model::Arch::Qwen3;
            layers.push(HeadLayer {
                index: l,
                ln1: take(&format!("{p}.input_layernorm.weight"))?,
                ln2: take(&format!("{p}.post_attention_layernorm.weight"))?,
                q_norm: if qk {
                    Some(take(&format!("{p}.self_attn.q_norm.weight"))?)
                } else {
                    None
                },
                k_norm: if qk {
                    Some(take(&format!("{p}.self_attn.k_norm.weight"))?)
                } else {
                    None
                },
                proj,
            });
        }
        let norm = take("model.norm.weight")?;
        // The head the inference network uses: a GGUF's `output.weight` when it has one, a
        // folder's `lm_head.weight` unless the config ties it to the embedding.
        let gguf = files.format() == crate::model::ModelFormat::Gguf;
        let head = match take("lm_head.weight") {
            Ok(h) if gguf || !cfg.tie_word_embeddings() => h,
            _ => take("model.embed_tokens.weight")?,
        };
        let answers = choices
            .iter()
            .map(|c| {
                let ids: Vec<u32> = c.iter().flatten().copied().collect();
                let rows = head
                    .index_select(&Tensor::new(ids.as_slice(), device)?, 0)?
                    .contiguous()?;
                Ok((rows, c.first().map_or(0, Vec::len)))
            })
            .collect::<Result<Vec<_>>>()?;
        let d = cfg.head_dim();
        let inv_freq = (0..d / 2)
            .map(|i| (1.0 / cfg.rope_theta().powf(2.0 * i as f64 / d as f64)) as f32)
            .collect();
        Ok(VerdictHead {
            cfg,
            layers,
            norm,
            answers,
            inv_freq,
            device: device.clone(),
        })
    }

    /// Every adapter tensor under its PEFT name, sorted by name.
    pub fn lora_vars(&self) -> Vec<(String, Var)> {
        let mut out = Vec::new();
        for l in &self.layers {
            for (m, lin) in MODULES.iter().zip(&l.proj) {
                if let Some(lora) = &lin.lora {
                    out.push((peft_name(l.index, m, "A"), lora.a.clone()));
                    out.push((peft_name(l.index, m, "B"), lora.b.clone()));
                }
            }
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// The answers' logits `[answer tokens]` of mode `mode` (its index) at the verdict position
    /// of `f`.
    pub fn logits(&self, f: &Features, mode: usize, adapters: bool) -> Result<Tensor> {
        let c = &self.cfg;
        let eps = c.rms_norm_eps() as f32;
        let (d, nh, nkv) = (c.head_dim(), c.num_attention_heads, c.num_kv_heads());
        let angles: Vec<f32> = self.inv_freq.iter().map(|w| w * f.pos as f32).collect();
        let ang = Tensor::from_vec(angles, (1, d / 2), &self.device)?;
        let (cos, sin) = (ang.cos()?, ang.sin()?);
        let mut x = f.hidden.reshape((1, c.hidden_size))?;
        for (i, l) in self.layers.iter().enumerate() {
            let h = rms_norm_slow(&x, &l.ln1, eps)?;
            let heads = |p: usize, n: usize, norm: &Option<Tensor>| -> Result<Tensor> {
                let t = l.proj[p].forward(&h, adapters)?.reshape((1, n, 1, d))?;
                match norm {
                    Some(w) => rms_norm_slow(&t, w, eps),
                    None => Ok(t),
                }
            };
            let q = rope_slow(&heads(0, nh, &l.q_norm)?, &cos, &sin)?;
            let k = rope_slow(&heads(1, nkv, &l.k_norm)?, &cos, &sin)?;
            let v = heads(2, nkv, &None)?;
            let (ck, cv) = f.context(i)?;
            let k = Tensor::cat(&[&ck, &k.reshape((nkv, 1, d))?], 1)?;
            let v = Tensor::cat(&[&cv, &v.reshape((nkv, 1, d))?], 1)?;
            let q = (q.reshape((nkv, nh / nkv, d))? * (1.0 / (d as f64).sqrt()))?;
            let att = softmax(&q.matmul(&k.t()?)?, D::Minus1)?;
            let y = att.matmul(&v)?.reshape((1, nh * d))?;
            x = (x + l.proj[3].forward(&y, adapters)?)?;
            let h = rms_norm_slow(&x, &l.ln2, eps)?;
            let gate = l.proj[4].forward(&h, adapters)?.silu()?;
            let up = l.proj[5].forward(&h, adapters)?;
            x = (x + l.proj[6].forward(&(gate * up)?, adapters)?)?;
        }
        let x = rms_norm_slow(&x, &self.norm, eps)?;
        x.matmul(&self.answers[mode].0.t()?)?.flatten_all()
    }

    /// log P(first answer), log P(second answer) from the answers' logits, each answer's
    /// probability its tokens' share of the answers' mass (as the local judge reads it).
    pub fn log_shares(&self, logits: &Tensor, mode: usize) -> Result<(Tensor, Tensor)> {
        let n = logits.dim(0)?;
        let k = self.answers[mode].1;
        let all = log_sum_exp(logits)?;
        let first = log_sum_exp(&logits.narrow(0, 0, k)?)?;
        let second = log_sum_exp(&logits.narrow(0, k, n - k)?)?;
        Ok(((first - &all)?, (second - all)?))
    }
}

/// log Σ exp over a vector, stable (the max is a constant: its gradient cancels).
fn log_sum_exp(x: &Tensor) -> Result<Tensor> {
    let m = x.max(0)?.detach();
    x.broadcast_sub(&m)?.exp()?.sum_all()?.log()? + m
}

/// The adapters' current values, for checkpoints.
pub fn snapshot(vars: &[(String, Var)]) -> HashMap<String, Tensor> {
    vars.iter()
        .map(|(n, v)| (n.clone(), v.as_tensor().clone()))
        .collect()
}
