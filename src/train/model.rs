//! A differentiable Qwen2/Qwen3 with LoRA adapters, returning logits at every position.
//!
//! candle's stock models use fused `rms_norm`, `rope` and `softmax_last_dim`, which have no
//! backward pass, and expose no way to add adapters; this one is written with the composed ops
//! (`rms_norm_slow`, `rope_slow`, `softmax`) so gradients flow to every LoRA `Var`. Sequences in
//! a training batch are right-padded: a causal mask is all they need, and padded positions are
//! masked out of the loss. Sampling decodes prompts of different lengths from a left-padded
//! [`KvCache`], whose padding is masked and whose rows keep their own positions.

use candle_core::{DType, Device, Module, Result, Tensor, Var, D};
use candle_nn::ops::{rms_norm_slow, softmax};
use candle_nn::rotary_emb::rope_slow;

use super::kv_cache::KvCache;
use super::lora::{Linear, LoraConfig};
use crate::domain::rng::Rng;
use crate::model::{Arch, DenseWeights, QwenConfig};

struct Attention {
    q: Linear,
    k: Linear,
    v: Linear,
    o: Linear,
    /// Qwen3's per-head RMSNorm of queries and keys.
    q_norm: Option<Tensor>,
    k_norm: Option<Tensor>,
}

struct Mlp {
    gate: Linear,
    up: Linear,
    down: Linear,
}

struct LoraLayer {
    attn: Attention,
    mlp: Mlp,
    ln1: Tensor,
    ln2: Tensor,
}

/// The model: base tensors (constants) plus LoRA `Var`s.
pub struct LoraQwen {
    cfg: QwenConfig,
    embed: Tensor,
    layers: Vec<LoraLayer>,
    norm: Tensor,
    lm_head: Tensor,
    cos: Tensor,
    sin: Tensor,
    device: Device,
}

pub use crate::model::adapter::peft_name;

impl LoraQwen {
    /// Builds the model from base weights, with no adapters.
    pub fn new(w: DenseWeights) -> Result<LoraQwen> {
        let DenseWeights {
            config: cfg,
            mut tensors,
        } = w;
        let mut take = |name: &str| {
            tensors
                .remove(name)
                .ok_or_else(|| candle_core::Error::Msg(format!("no tensor {name} in the weights")))
        };
        let embed = take("model.embed_tokens.weight")?;
        let device = embed.device().clone();
        let dtype = embed.dtype();
        let mut layers = Vec::with_capacity(cfg.num_hidden_layers);
        for l in 0..cfg.num_hidden_layers {
            let p = format!("model.layers.{l}");
            let (qwen2, bias) = (cfg.arch == Arch::Qwen2, cfg.qkv_bias());
            let mut lin = |m: &str, bias: bool| -> Result<Linear> {
                let w = take(&format!("{p}.{m}.weight"))?;
                let b = if bias {
                    Some(take(&format!("{p}.{m}.bias"))?)
                } else {
                    None
                };
                Ok(Linear::new(w, b))
            };
            let attn = Attention {
                q: lin("self_attn.q_proj", bias)?,
                k: lin("self_attn.k_proj", bias)?,
                v: lin("self_attn.v_proj", bias)?,
                o: lin("self_attn.o_proj", false)?,
                q_norm: None,
                k_norm: None,
            };
            let mlp = Mlp {
                gate: lin("mlp.gate_proj", false)?,
                up: lin("mlp.up_proj", false)?,
                down: lin("mlp.down_proj", false)?,
            };
            let mut attn = attn;
            if !qwen2 {
                attn.q_norm = Some(take(&format!("{p}.self_attn.q_norm.weight"))?);
                attn.k_norm = Some(take(&format!("{p}.self_attn.k_norm.weight"))?);
            }
            layers.push(LoraLayer {
                attn,
                mlp,
                ln1: take(&format!("{p}.input_layernorm.weight"))?,
                ln2: take(&format!("{p}.post_attention_layernorm.weight"))?,
            });
        }
        let norm = take("model.norm.weight")?;
        let lm_head = if cfg.tie_word_embeddings() {
            embed.clone()
        } else {
            take("lm_head.weight")?
        };
        let (head_dim, context) = (cfg.head_dim(), cfg.context_length());
        let half = head_dim / 2;
        let inv: Vec<f32> = (0..half)
            .map(|i| 1.0 / cfg.rope_theta().powf(2.0 * i as f64 / head_dim as f64) as f32)
            .collect();
        let inv = Tensor::from_vec(inv, (1, half), &device)?;
        let t = Tensor::arange(0u32, context as u32, &device)?
            .to_dtype(DType::F32)?
            .reshape((context, 1))?;
        let freqs = t.matmul(&inv)?;
        Ok(LoraQwen {
            cos: freqs.cos()?.to_dtype(dtype)?,
            sin: freqs.sin()?.to_dtype(dtype)?,
            cfg,
            embed,
            layers,
            norm,
            lm_head,
            device,
        })
    }

    pub fn config(&self) -> &QwenConfig {
        &self.cfg
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    fn linears_mut(&mut self) -> Vec<(usize, &'static str, &mut Linear)> {
        let mut out = Vec::new();
        for (i, l) in self.layers.iter_mut().enumerate() {
            out.push((i, "q_proj", &mut l.attn.q));
            out.push((i, "k_proj", &mut l.attn.k));
            out.push((i, "v_proj", &mut l.attn.v));
            out.push((i, "o_proj", &mut l.attn.o));
            out.push((i, "gate_proj", &mut l.mlp.gate));
            out.push((i, "up_proj", &mut l.mlp.up));
            out.push((i, "down_proj", &mut l.mlp.down));
        }
        out
    }

    /// Adds fresh adapters to every targeted projection, drawing A from `rng` in layer order.
    pub fn add_lora(&mut self, cfg: &LoraConfig, rng: &mut Rng) -> Result<()> {
        for (_, name, lin) in self.linears_mut() {
            if cfg.targets(name) {
                lin.add_lora(cfg, rng)?;
            }
        }
        Ok(())
    }

    /// Every adapter tensor under its PEFT name, sorted by name.
    pub fn lora_vars(&self) -> Vec<(String, Var)> {
        let mut out = Vec::new();
        for (i, l) in self.layers.iter().enumerate() {
            let all = [
                ("q_proj", &l.attn.q),
                ("k_proj", &l.attn.k),
                ("v_proj", &l.attn.v),
                ("o_proj", &l.attn.o),
                ("gate_proj", &l.mlp.gate),
                ("up_proj", &l.mlp.up),
                ("down_proj", &l.mlp.down),
            ];
            for (m, lin) in all {
                if let Some(lora) = &lin.lora {
                    out.push((peft_name(i, m, "A"), lora.a.clone()));
                    out.push((peft_name(i, m, "B"), lora.b.clone()));
                }
            }
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// Base tensors with the adapters merged in, under Hugging Face names (for `train merge`).
    pub fn merged_tensors(&self) -> Result<Vec<(String, Tensor)>> {
        let mut out = vec![
            ("model.embed_tokens.weight".to_string(), self.embed.clone()),
            ("model.norm.weight".to_string(), self.norm.clone()),
        ];
        if !self.cfg.tie_word_embeddings() {
            out.push(("lm_head.weight".into(), self.lm_head.clone()));
        }
        for (i, l) in self.layers.iter().enumerate() {
            let p = format!("model.layers.{i}");
            let all = [
                ("self_attn.q_proj", &l.attn.q),
                ("self_attn.k_proj", &l.attn.k),
                ("self_attn.v_proj", &l.attn.v),
                ("self_attn.o_proj", &l.attn.o),
                ("mlp.gate_proj", &l.mlp.gate),
                ("mlp.up_proj", &l.mlp.up),
                ("mlp.down_proj", &l.mlp.down),
            ];
            for (m, lin) in all {
                out.push((format!("{p}.{m}.weight"), lin.merged_weight()?));
                if let Some(b) = &lin.bias {
                    out.push((format!("{p}.{m}.bias"), b.clone()));
                }
            }
            if let (Some(q), Some(k)) = (&l.attn.q_norm, &l.attn.k_norm) {
                out.push((format!("{p}.self_attn.q_norm.weight"), q.clone()));
                out.push((format!("{p}.self_attn.k_norm.weight"), k.clone()));
            }
            out.push((format!("{p}.input_layernorm.weight"), l.ln1.clone()));
            out.push((
                format!("{p}.post_attention_layernorm.weight"),
                l.ln2.clone(),
            ));
        }
        Ok(out)
    }

    fn attention(
        &self,
        a: &Attention,
        x: &Tensor,
        offset: usize,
        cache: Option<&mut Option<(Tensor, Tensor)>>,
        padded: Option<&Padded>,
        adapters: bool,
    ) -> Result<Tensor> {
        let c = &self.cfg;
        let (b, t, _) = x.dims3()?;
        let eps = c.rms_norm_eps() as f32;
        let (head_dim, n_heads, n_kv) = (c.head_dim(), c.num_attention_heads, c.num_kv_heads());
        let heads = |y: Tensor, n: usize| -> Result<Tensor> {
            y.reshape((b, t, n, head_dim))?
                .transpose(1, 2)?
                .contiguous()
        };
        let mut q = heads(a.q.forward(x, adapters)?, n_heads)?;
        let mut k = heads(a.k.forward(x, adapters)?, n_kv)?;
        let mut v = heads(a.v.forward(x, adapters)?, n_kv)?;
        if let (Some(qn), Some(kn)) = (&a.q_norm, &a.k_norm) {
            q = rms_norm_slow(&q, qn, eps)?;
            k = rms_norm_slow(&k, kn, eps)?;
        }
        match padded {
            Some(pd) => {
                q = rope_rows(&q, &pd.cos, &pd.sin)?;
                k = rope_rows(&k, &pd.cos, &pd.sin)?;
            }
            None => {
                let cos = self.cos.narrow(0, offset, t)?;
                let sin = self.sin.narrow(0, offset, t)?;
                q = rope_slow(&q, &cos, &sin)?;
                k = rope_slow(&k, &cos, &sin)?;
            }
        }
        if let Some(slot) = cache {
            if let Some((pk, pv)) = slot.as_ref() {
                k = Tensor::cat(&[pk, &k], 2)?;
                v = Tensor::cat(&[pv, &v], 2)?;
            }
            *slot = Some((k.clone(), v.clone()));
        }
        let rep = n_heads / n_kv;
        let k = candle_transformers::utils::repeat_kv(k, rep)?.contiguous()?;
        let v = candle_transformers::utils::repeat_kv(v, rep)?.contiguous()?;
        let s = k.dim(2)?;
        let scale = 1.0 / (head_dim as f64).sqrt();
        let mut scores = (q.matmul(&k.t()?)? * scale)?;
        if let Some(pd) = padded {
            scores = scores.broadcast_add(&pd.mask)?;
        } else if t > 1 {
            let mask: Vec<f32> = (0..t)
                .flat_map(|i| {
                    (0..s).map(move |j| {
                        if j <= i + offset {
                            0.0
                        } else {
                            f32::NEG_INFINITY
                        }
                    })
                })
                .collect();
            let mask = Tensor::from_vec(mask, (t, s), &self.device)?.to_dtype(scores.dtype())?;
            scores = scores.broadcast_add(&mask)?;
        }
        let probs = softmax(&scores, D::Minus1)?;
        let ctx = probs
            .matmul(&v)?
            .transpose(1, 2)?
            .reshape((b, t, n_heads * head_dim))?;
        a.o.forward(&ctx, adapters)
    }

    /// Hidden states after the final norm, `[B, T, hidden]`, for `ids` `[B, T]` at positions
    /// `offset..offset + T`. With a cache, keys and values are appended to it (and `offset` must
    /// be its length).
    pub fn hidden(
        &self,
        ids: &Tensor,
        offset: usize,
        mut cache: Option<&mut KvCache>,
        adapters: bool,
    ) -> Result<Tensor> {
        let eps = self.cfg.rms_norm_eps() as f32;
        let (b, t) = ids.dims2()?;
        let mut h = self.embed.embedding_rows(ids, b, t)?;
        let mut padded = None;
        if let Some(c) = cache.as_deref_mut() {
            if c.layers.len() != self.layers.len() {
                c.layers = vec![None; self.layers.len()];
            }
            padded = self.padded(c, offset, t, h.dtype())?;
        }
        for (i, l) in self.layers.iter().enumerate() {
            let slot = cache.as_deref_mut().map(|c| &mut c.layers[i]);
            let x = rms_norm_slow(&h, &l.ln1, eps)?;
            h = (h + self.attention(&l.attn, &x, offset, slot, padded.as_ref(), adapters)?)?;
            if let Some(c) = cache.as_deref_mut() {
                if let (false, Some((k, v))) = (c.keep_graph, &mut c.layers[i]) {
                    (*k, *v) = (k.detach(), v.detach());
                }
            }
            let x = rms_norm_slow(&h, &l.ln2, eps)?;
            let gate = l.mlp.gate.forward(&x, adapters)?.silu()?;
            let up = l.mlp.up.forward(&x, adapters)?;
            h = (h + l.mlp.down.forward(&(gate * up)?, adapters)?)?;
        }
        rms_norm_slow(&h, &self.norm, eps)
    }

    /// The hidden states that score each token of `completions` (`[G, L]`, right-padded), all
    /// continuing the one prompt `prompt` (`[1, P]`): token j of row i is scored at position
    /// P − 1 + j, as in [`LoraQwen::hidden`] of each row's whole sequence. The prompt runs once and
    /// its keys and values, with their graph, serve the G rows, instead of the prompt running
    /// once per row: a group's completions share their prompt, most of a row's tokens.
    /// `[G, L, hidden]`.
    pub fn completion_hidden(
        &self,
        prompt: &Tensor,
        completions: &Tensor,
        adapters: bool,
    ) -> Result<Tensor> {
        let (_, p) = prompt.dims2()?;
        let (g, l) = completions.dims2()?;
        let mut cache = KvCache::tracked();
        let hp = self.hidden(prompt, 0, Some(&mut cache), adapters)?;
        let last = hp
            .narrow(1, p - 1, 1)?
            .broadcast_as((g, 1, hp.dim(2)?))?
            .contiguous()?;
        if l == 1 {
            return Ok(last);
        }
        let rows = Tensor::zeros(g, DType::U32, prompt.device())?;
        let mut cache = cache.select_rows(&rows)?;
        // The last token of a row scores nothing.
        let hc = self.hidden(
            &completions.narrow(1, 0, l - 1)?,
            p,
            Some(&mut cache),
            adapters,
        )?;
        Tensor::cat(&[&last, &hc], 1)
    }

    /// What `t` new positions after a padded cache need in every layer: each row's rotary
    /// angles at its own positions, and the mask that hides its padding. `None` for a cache
    /// with no padded row, whose rows share the positions `offset..offset + t`.
    fn padded(
        &self,
        cache: &KvCache,
        offset: usize,
        t: usize,
        dtype: DType,
    ) -> Result<Option<Padded>> {
        let (Some(positions), Some(mask)) = (
            cache.positions(offset, t),
            cache.attention_mask(offset, t, dtype, &self.device)?,
        ) else {
            return Ok(None);
        };
        let b = positions.len() / t;
        let positions = Tensor::from_vec(positions, b * t, &self.device)?;
        let angles = |table: &Tensor| -> Result<Tensor> {
            let rows = table.index_select(&positions, 0)?;
            let half = rows.dim(1)?;
            Tensor::cat(&[&rows, &rows], 1)?.reshape((b, 1, t, 2 * half))
        };
        Ok(Some(Padded {
            cos: angles(&self.cos)?,
            sin: angles(&self.sin)?,
            mask,
        }))
    }

    /// Logits `[..., vocab]` of hidden states `[..., hidden]`.
    pub fn logits(&self, hidden: &Tensor) -> Result<Tensor> {
        let lm = Linear::new(self.lm_head.clone(), None);
        lm.forward(hidden, false)
    }

    /// Logits at every position, `[B, T, vocab]`.
    pub fn forward(&self, ids: &Tensor, adapters: bool) -> Result<Tensor> {
        self.logits(&self.hidden(ids, 0, None, adapters)?)
    }
}

/// A padded batch's per-row rotary angles, `[B, 1, t, head_dim]`, and attention mask,
/// `[B, 1, t, s]` ([`LoraQwen::padded`]).
struct Padded {
    cos: Tensor,
    sin: Tensor,
    mask: Tensor,
}

/// The rotary embedding with angles per row (`rope_slow`'s formula: x·cos + rotate_half(x)·sin).
fn rope_rows(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
    let half = x.dim(D::Minus1)? / 2;
    let (x1, x2) = (
        x.narrow(D::Minus1, 0, half)?,
        x.narrow(D::Minus1, half, half)?,
    );
    let rotated = Tensor::cat(&[&x2.neg()?, &x1], D::Minus1)?;
    x.broadcast_mul(cos)? + rotated.broadcast_mul(sin)?
}

/// Row lookup of an embedding matrix (`index_select`, which has a backward pass).
trait EmbeddingRows {
    fn embedding_rows(&self, ids: &Tensor, b: usize, t: usize) -> Result<Tensor>;
}

impl EmbeddingRows for Tensor {
    fn embedding_rows(&self, ids: &Tensor, b: usize, t: usize) -> Result<Tensor> {
        let hidden = self.dim(1)?;
        candle_nn::Embedding::new(self.clone(), hidden)
            .forward(&ids.flatten_all()?)?
            .reshape((b, t, hidden))
    }
}
