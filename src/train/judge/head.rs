//! The trained part of the judge: the top K layers with LoRA adapters, then the final norm and
//! only the output head's rows of the answers' tokens. A verdict adapter runs them at the
//! verdict position alone, over the frozen context's keys and values; an adapter of every
//! position runs them over the whole prompt from the hidden states entering the first adapted
//! layer (the last layer at the verdict position alone: nothing else of it is read). See
//! [`super::features::Context`]. Written with candle's composed ops (`rms_norm_slow`,
//! `rope_slow`, `softmax`), which have backward passes; the same layer as the inference
//! network's.

use std::collections::HashMap;

use candle_core::{DType, Device, Result, Tensor, Var, D};
use candle_nn::ops::{rms_norm_slow, softmax};
use candle_nn::rotary_emb::rope_slow;

use super::features::{Context, Features};
use crate::domain::rng::Rng;
use crate::model::adapter::{peft_name, LoraConfig, TARGETS};
use crate::model::{ModelFiles, QwenConfig};
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
        let k = self.layers.len();
        let mut x = match &f.context {
            Context::Verdict { hidden, .. } => {
                let mut x = hidden.reshape((1, self.cfg.hidden_size))?;
                for (i, l) in self.layers.iter().enumerate() {
                    let (ck, cv) = f.context(i)?;
                    x = self.layer(l, &x, f.pos, Some((&ck, &cv)), false, adapters)?;
                }
                x
            }
            Context::All { .. } => {
                let mut x = f.all_positions()?;
                if x.dim(0)? != f.pos + 1 {
                    candle_core::bail!("{} hidden states for a prompt of {}", x.dim(0)?, f.pos + 1);
                }
                for (i, l) in self.layers.iter().enumerate() {
                    x = self.layer(l, &x, 0, None, i + 1 == k, adapters)?;
                }
                x
            }
        };
        if k == 0 {
            x = x.narrow(0, x.dim(0)? - 1, 1)?;
        }
        let x = rms_norm_slow(&x, &self.norm, self.eps())?;
        x.matmul(&self.answers[mode].0.t()?)?.flatten_all()
    }

    fn eps(&self) -> f32 {
        self.cfg.rms_norm_eps() as f32
    }

    /// The rotary tables `[n, head_dim / 2]` of positions `start..start + n`.
    fn rope_tables(&self, start: usize, n: usize) -> Result<(Tensor, Tensor)> {
        let half = self.inv_freq.len();
        let angles: Vec<f32> = (start..start + n)
            .flat_map(|p| self.inv_freq.iter().map(move |w| w * p as f32))
            .collect();
        let ang = Tensor::from_vec(angles, (n, half), &self.device)?;
        Ok((ang.cos()?, ang.sin()?))
    }

    /// Layer `l` over the rows `x` `[n, hidden]` at positions `start..start + n`, after the
    /// frozen keys and values `context` of positions `0..start` (`[kv_heads, start, head_dim]`),
    /// causal within the rows. `last_only`: the result is the last row's alone (`[1, hidden]`),
    /// and the other rows' queries and MLP are not computed.
    fn layer(
        &self,
        l: &HeadLayer,
        x: &Tensor,
        start: usize,
        context: Option<(&Tensor, &Tensor)>,
        last_only: bool,
        adapters: bool,
    ) -> Result<Tensor> {
        let c = &self.cfg;
        let eps = self.eps();
        let (d, nh, nkv) = (c.head_dim(), c.num_attention_heads, c.num_kv_heads());
        let n = x.dim(0)?;
        let (cos, sin) = self.rope_tables(start, n)?;
        let h = rms_norm_slow(x, &l.ln1, eps)?;
        // `[rows, heads · d]` → `[1, heads, rows, d]`, normed per head where the model does.
        let heads = |t: Tensor, count: usize, norm: &Option<Tensor>| -> Result<Tensor> {
            let rows = t.dim(0)?;
            let t = t.reshape((rows, count, d))?.transpose(0, 1)?.unsqueeze(0)?;
            match norm {
                Some(w) => rms_norm_slow(&t.contiguous()?, w, eps),
                None => Ok(t),
            }
        };
        let k = heads(l.proj[1].forward(&h, adapters)?, nkv, &l.k_norm)?;
        let k = rope_slow(&k.contiguous()?, &cos, &sin)?.squeeze(0)?;
        let v = heads(l.proj[2].forward(&h, adapters)?, nkv, &None)?.squeeze(0)?;
        let (k, v) = match context {
            Some((ck, cv)) => (
                Tensor::cat(&[ck, &k], 1)?,
                Tensor::cat(&[cv, &v.contiguous()?], 1)?,
            ),
            None => (k, v.contiguous()?),
        };
        let (x, h, q_from) = if last_only && n > 1 {
            (x.narrow(0, n - 1, 1)?, h.narrow(0, n - 1, 1)?, n - 1)
        } else {
            (x.clone(), h, 0)
        };
        let m = n - q_from;
        let q = heads(l.proj[0].forward(&h, adapters)?, nh, &l.q_norm)?;
        let q = rope_slow(
            &q.contiguous()?,
            &cos.narrow(0, q_from, m)?,
            &sin.narrow(0, q_from, m)?,
        )?;
        // Query head j reads key head j / (nh / nkv): `[nkv, group · m, d]`.
        let g = nh / nkv;
        let q = (q.reshape((nkv, g * m, d))? * (1.0 / (d as f64).sqrt()))?;
        let mut scores = q.matmul(&k.t()?)?;
        let keys = k.dim(1)?;
        if m > 1 {
            // Row r of a head group is the query at position start + q_from + r % m: it sees
            // the keys up to its own position.
            let mask: Vec<f32> = (0..m)
                .flat_map(|r| {
                    let own = start + q_from + r;
                    (0..keys).map(move |j| if j > own { f32::NEG_INFINITY } else { 0.0 })
                })
                .collect();
            let mask = Tensor::from_vec(mask, (m, keys), &self.device)?;
            scores = scores
                .reshape((nkv, g, m, keys))?
                .broadcast_add(&mask)?
                .reshape((nkv, g * m, keys))?;
        }
        let att = softmax(&scores, D::Minus1)?;
        let y = att
            .matmul(&v)?
            .reshape((nh, m, d))?
            .transpose(0, 1)?
            .reshape((m, nh * d))?;
        let x = (x + l.proj[3].forward(&y, adapters)?)?;
        let h = rms_norm_slow(&x, &l.ln2, eps)?;
        let gate = l.proj[4].forward(&h, adapters)?.silu()?;
        let up = l.proj[5].forward(&h, adapters)?;
        x + l.proj[6].forward(&(gate * up)?, adapters)?
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
