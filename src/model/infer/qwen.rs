//! One Qwen2/Qwen3 decoder for GGUF and safetensors weights, with a KV cache gavel controls.
//!
//! candle's `quantized_qwen2`, `quantized_qwen3`, `qwen2` and `qwen3` keep their KV caches
//! private and only append to them, so a judge could not reuse the KV of a prompt prefix
//! (system prompt, rubric, shared context) across the permutations of a group. This is the same
//! network (RMSNorm, RoPE, grouped-query attention, SwiGLU; Qwen2's q/k/v biases, Qwen3's
//! per-head q/k norms) over candle's tensors and quantized matmuls, with the cache as plain
//! tensors: [`Qwen::kv_state`] takes a snapshot (shared, never written in place: appending
//! makes new tensors) and [`Qwen::restore`] puts one back cut to any shorter length. The unit
//! tests check its logits against candle's four models.

use candle_core::quantized::{gguf_file, QMatMul, QTensor};
use candle_core::{DType, Device, Result, Tensor};
use candle_nn::VarBuilder;

use super::layer::{AdapterRows, Geometry, Layer, Proj, SidePath, Weight};
use crate::model::adapter::Adapter;
use crate::model::{Arch, LocalError, ModelFiles, QwenConfig, WeightFiles};

/// Most positions one attention call handles during prefill: bounds the score matrix
/// (heads × chunk × context) that a long prompt would otherwise allocate at once.
const PREFILL_CHUNK: usize = 512;

/// Tokens from which a forward dequantizes each layer for an f32 GEMM (see [`Proj::dense`]).
const GEMM_ROWS: usize = 32;

/// The KV cache at some length: per layer, keys and values `[1, kv_heads, len, head_dim]`.
#[derive(Debug, Clone, Default)]
pub struct KvState {
    kv: Vec<Option<(Tensor, Tensor)>>,
    len: usize,
}

impl KvState {
    /// Positions it holds.
    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

/// Where weights come from, under llama.cpp's (GGUF) or Hugging Face's names.
enum Source<'a, R> {
    Gguf {
        content: &'a gguf_file::Content,
        reader: &'a mut R,
    },
    Safetensors {
        vb: VarBuilder<'a>,
    },
}

pub struct Qwen {
    cfg: QwenConfig,
    embed: Tensor,
    layers: Vec<Layer>,
    norm: Tensor,
    lm_head: Proj,
    geo: Geometry,
    cache: KvState,
    /// Forwards of at least this many tokens run dense f32 GEMMs ([`GEMM_ROWS`] by default;
    /// 1 makes every forward take the same arithmetic, see [`Qwen::set_dense_always`]).
    dense_from: usize,
    /// Which attached adapter runs, and on which positions, in the next forwards.
    adapter_rows: AdapterRows,
    /// Adapters attached so far (the next one's slot).
    adapters: usize,
}

impl<R: std::io::Read + std::io::Seek> Source<'_, R> {
    fn qtensor(&mut self, gguf: &str, device: &Device) -> Result<QTensor> {
        match self {
            Source::Gguf { content, reader } => content.tensor(*reader, gguf, device),
            Source::Safetensors { .. } => candle_core::bail!("not a GGUF source"),
        }
    }

    /// A 1-D tensor (norm weight, bias) in `dtype`.
    fn vector(
        &mut self,
        gguf: &str,
        hf: &str,
        n: usize,
        dtype: DType,
        device: &Device,
    ) -> Result<Tensor> {
        let t = match self {
            Source::Gguf { .. } => self.qtensor(gguf, device)?.dequantize(device)?,
            Source::Safetensors { vb, .. } => vb.get(n, hf)?,
        };
        if t.dims1()? != n {
            candle_core::bail!("{gguf}: expected {n} values, found {:?}", t.shape());
        }
        t.to_dtype(dtype)
    }

    fn proj(
        &mut self,
        gguf: &str,
        hf: &str,
        (out, inp): (usize, usize),
        bias: bool,
        dtype: DType,
        device: &Device,
    ) -> Result<Proj> {
        let w = match self {
            Source::Gguf { .. } => {
                let q = self.qtensor(&format!("{gguf}.weight"), device)?;
                if q.shape().dims() != [out, inp] {
                    candle_core::bail!(
                        "{gguf}.weight: expected shape [{out}, {inp}], found {:?}",
                        q.shape()
                    );
                }
                Weight::quantized(q, device)?
            }
            Source::Safetensors { vb, .. } => Weight::Candle(QMatMul::Tensor(
                vb.get((out, inp), &format!("{hf}.weight"))?,
            )),
        };
        let b = if bias {
            Some(self.vector(
                &format!("{gguf}.bias"),
                &format!("{hf}.bias"),
                out,
                dtype,
                device,
            )?)
        } else {
            None
        };
        Ok(Proj {
            w,
            b,
            lora: Vec::new(),
        })
    }
}

impl Qwen {
    /// Builds the network from opened model files, reading their weights; `dtype` is the
    /// activations' dtype (see [`ModelFiles::compute_dtype`]). Any problem is one line naming
    /// the file.
    pub fn from_files(
        files: &ModelFiles,
        dtype: DType,
        device: &Device,
    ) -> std::result::Result<Qwen, LocalError> {
        let cfg = files.config.clone();
        let path = &files.path;
        match &files.weights {
            WeightFiles::Gguf { content, file } => {
                let mut reader = file;
                let src = Source::Gguf {
                    content,
                    reader: &mut reader,
                };
                Qwen::load(cfg, src, dtype, device)
                    .map_err(|e| LocalError::invalid(path, format!("cannot load the weights: {e}")))
            }
            WeightFiles::Safetensors(paths) => {
                // SAFETY: the weights files are memory-mapped, as every candle loader does; they
                // must not be truncated or rewritten while gavel runs (a changed file means a
                // restart anyway).
                let vb = unsafe { VarBuilder::from_mmaped_safetensors(paths, dtype, device) }
                    .map_err(|e| {
                        LocalError::invalid(path, format!("unreadable safetensors: {e}"))
                    })?;
                let src: Source<std::fs::File> = Source::Safetensors { vb };
                Qwen::load(cfg, src, dtype, device).map_err(|e| {
                    LocalError::invalid(path, format!("weights do not fit config.json: {e}"))
                })
            }
        }
    }

    /// Builds the network from `src`; `dtype` is the activations' dtype (f32 for GGUF).
    fn load<R: std::io::Read + std::io::Seek>(
        cfg: QwenConfig,
        mut src: Source<'_, R>,
        dtype: DType,
        device: &Device,
    ) -> Result<Qwen> {
        let (h, d) = (cfg.hidden_size, cfg.head_dim());
        let (heads, kv_heads) = (cfg.num_attention_heads, cfg.num_kv_heads());
        let (q_out, kv_out) = (heads * d, kv_heads * d);
        let (vocab, n_layers) = (cfg.vocab_size, cfg.num_hidden_layers);
        let gguf = matches!(src, Source::Gguf { .. });
        let qkv_bias = cfg.qkv_bias();
        let (embed, lm_head) = match &mut src {
            Source::Gguf { .. } => {
                let e = src.qtensor("token_embd.weight", device)?;
                if e.shape().dims() != [vocab, h] {
                    candle_core::bail!(
                        "token_embd.weight: expected shape [{vocab}, {h}], found {:?}",
                        e.shape()
                    );
                }
                let embed = e.dequantize(device)?;
                let head = match src.qtensor("output.weight", device) {
                    Ok(o) => o,
                    // Tied: the output projection is the embedding.
                    Err(_) => src.qtensor("token_embd.weight", device)?,
                };
                (embed, Weight::quantized(head, device)?)
            }
            Source::Safetensors { vb } => {
                let embed = vb.get((vocab, h), "model.embed_tokens.weight")?;
                let head = if cfg.tie_word_embeddings() || !vb.contains_tensor("lm_head.weight") {
                    embed.clone()
                } else {
                    vb.get((vocab, h), "lm_head.weight")?
                };
                (embed, Weight::Candle(QMatMul::Tensor(head)))
            }
        };
        let mut layers = Vec::with_capacity(n_layers);
        let ff = cfg.intermediate_size;
        for i in 0..n_layers {
            let (g, f) = (format!("blk.{i}"), format!("model.layers.{i}"));
            let norm = |src: &mut Source<'_, R>, gn: &str, hn: &str, n| {
                src.vector(
                    &format!("{g}.{gn}.weight"),
                    &format!("{f}.{hn}.weight"),
                    n,
                    dtype,
                    device,
                )
            };
            let attn_norm = norm(&mut src, "attn_norm", "input_layernorm", h)?;
            let ffn_norm = norm(&mut src, "ffn_norm", "post_attention_layernorm", h)?;
            let (q_norm, k_norm) = if cfg.arch == Arch::Qwen3 {
                (
                    Some(norm(&mut src, "attn_q_norm", "self_attn.q_norm", d)?),
                    Some(norm(&mut src, "attn_k_norm", "self_attn.k_norm", d)?),
                )
            } else {
                (None, None)
            };
            let mut proj = |gn: &str, hn: &str, shape, bias| {
                src.proj(
                    &format!("{g}.{gn}"),
                    &format!("{f}.{hn}"),
                    shape,
                    bias,
                    dtype,
                    device,
                )
            };
            layers.push(Layer {
                attn_norm,
                q: proj("attn_q", "self_attn.q_proj", (q_out, h), qkv_bias)?,
                k: proj("attn_k", "self_attn.k_proj", (kv_out, h), qkv_bias)?,
                v: proj("attn_v", "self_attn.v_proj", (kv_out, h), qkv_bias)?,
                o: proj("attn_output", "self_attn.o_proj", (h, q_out), false)?,
                q_norm,
                k_norm,
                ffn_norm,
                gate: proj("ffn_gate", "mlp.gate_proj", (ff, h), false)?,
                up: proj("ffn_up", "mlp.up_proj", (ff, h), false)?,
                down: proj("ffn_down", "mlp.down_proj", (h, ff), false)?,
            });
        }
        let norm = src.vector("output_norm.weight", "model.norm.weight", h, dtype, device)?;
        let (cos, sin) = rope_tables(d, cfg.rope_theta(), cfg.context_length(), device)?;
        let embed_dtype = if gguf { DType::F32 } else { dtype };
        Ok(Qwen {
            dense_from: GEMM_ROWS,
            embed: embed.to_dtype(embed_dtype)?,
            layers,
            norm,
            lm_head: Proj {
                w: lm_head,
                b: None,
                lora: Vec::new(),
            },
            adapters: 0,
            adapter_rows: AdapterRows::Off,
            geo: Geometry {
                heads,
                kv_heads,
                head_dim: d,
                eps: cfg.rms_norm_eps() as f32,
                cos: cos.to_dtype(dtype)?,
                sin: sin.to_dtype(dtype)?,
                dtype,
                device: device.clone(),
            },
            cache: KvState {
                kv: vec![None; n_layers],
                len: 0,
            },
            cfg,
        })
    }

    /// Bytes one position of the KV cache takes: keys and values of every layer.
    pub fn kv_bytes_per_token(&self) -> u64 {
        let per_layer = 2 * self.geo.kv_heads * self.geo.head_dim * self.geo.dtype.size_in_bytes();
        (per_layer * self.layers.len()) as u64
    }

    /// Positions the KV cache holds.
    pub fn cached_len(&self) -> usize {
        self.cache.len
    }

    pub fn clear_kv_cache(&mut self) {
        self.cache = KvState {
            kv: vec![None; self.cfg.num_hidden_layers],
            len: 0,
        };
    }

    /// The KV cache as it is now (cheap: the tensors are shared).
    pub fn kv_state(&self) -> KvState {
        self.cache.clone()
    }

    /// Puts `state` back, cut to its first `len` positions (at most its length).
    pub fn restore(&mut self, state: &KvState, len: usize) -> Result<()> {
        let len = len.min(state.len);
        let kv = state
            .kv
            .iter()
            .map(|l| match l {
                Some((k, v)) if len > 0 => Ok(Some((k.narrow(2, 0, len)?, v.narrow(2, 0, len)?))),
                _ => Ok(None),
            })
            .collect::<Result<Vec<_>>>()?;
        self.cache = KvState { kv, len };
        Ok(())
    }

    /// Runs `tokens` after the cached positions and returns the logits after the last one
    /// (`[vocab]`, f32). On an error the cache may hold part of the tokens: clear it.
    ///
    /// Layer by layer, each layer over the tokens in chunks of [`PREFILL_CHUNK`]: a prefill
    /// dequantizes each layer's weights once (see [`Proj::dense`]) however long the prompt,
    /// and holds only one layer's f32 weights at a time.
    /// With `on`, every forward runs the dense f32 path, however few its tokens. A short forward
    /// otherwise runs quantized matmuls, which quantize the activations too: the same prompt then
    /// gets different logits depending on how much of it came from the prefix cache. Reading
    /// probabilities (pointwise, pairwise) needs a prompt's answer not to depend on what ran
    /// before it, so questions turn this on; decoding keeps the fast path.
    pub fn set_dense_always(&mut self, on: bool) {
        self.dense_from = if on { 1 } else { GEMM_ROWS };
    }

    /// Dequantizes once, and keeps, every layer's weights that a dense forward would
    /// dequantize on each call (see [`Proj::dense`]): the same arithmetic as
    /// [`Qwen::set_dense_always`], paid once instead of per forward, for f32 memory (about 4
    /// bytes a parameter of those layers). For a process that forwards thousands of short
    /// prompts on one model, as the judge trainer's feature pass does.
    pub fn keep_dense(&mut self) -> Result<()> {
        if self.geo.device.is_cpu() {
            for layer in &mut self.layers {
                *layer = layer.dense(&self.geo.device)?;
            }
        }
        Ok(())
    }

    /// Puts `adapter`'s matrices beside the projections they adapt (checked against the model's
    /// shapes first: see [`Adapter::check_base`]), in a new slot, which it returns: several
    /// adapters share one base this way, and [`Qwen::set_adapter_rows`] chooses which one the
    /// next forwards run, on which positions (none until then).
    pub fn attach_adapter(&mut self, adapter: &Adapter) -> Result<usize> {
        let slot = self.adapters;
        let scale = adapter.lora.scale();
        let (dtype, device) = (self.geo.dtype, self.geo.device.clone());
        for ((i, module), pair) in &adapter.weights {
            let Some(layer) = self.layers.get_mut(*i) else {
                candle_core::bail!(
                    "the adapter has layer {i}, the model {}",
                    self.cfg.num_hidden_layers
                )
            };
            let proj = match module.as_str() {
                "q_proj" => &mut layer.q,
                "k_proj" => &mut layer.k,
                "v_proj" => &mut layer.v,
                "o_proj" => &mut layer.o,
                "gate_proj" => &mut layer.gate,
                "up_proj" => &mut layer.up,
                "down_proj" => &mut layer.down,
                other => candle_core::bail!("unknown adapter module {other}"),
            };
            if proj.lora.len() <= slot {
                proj.lora.resize(slot + 1, None);
            }
            proj.lora[slot] = Some(SidePath {
                a_t: pair
                    .a
                    .t()?
                    .contiguous()?
                    .to_dtype(dtype)?
                    .to_device(&device)?,
                b_t: (pair.b.t()?.contiguous()? * scale)?
                    .to_dtype(dtype)?
                    .to_device(&device)?,
            });
        }
        self.adapters += 1;
        Ok(slot)
    }

    /// Which attached adapter the next forwards run, on which positions.
    pub fn set_adapter_rows(&mut self, rows: AdapterRows) {
        self.adapter_rows = rows;
    }

    pub fn adapter_rows(&self) -> AdapterRows {
        self.adapter_rows
    }

    pub fn forward(&mut self, tokens: &[u32]) -> Result<Tensor> {
        Ok(self.forward_capturing(tokens, None)?.0)
    }

    /// [`Qwen::forward`], also returning the hidden states of every position of `tokens` as
    /// they enter layer `capture` (`[tokens, hidden]`, f32): what the judge trainer adapts from.
    pub fn forward_capturing(
        &mut self,
        tokens: &[u32],
        capture: Option<usize>,
    ) -> Result<(Tensor, Option<Tensor>)> {
        if tokens.is_empty() {
            candle_core::bail!("no tokens");
        }
        let (s, pos) = (tokens.len(), self.cache.len);
        let device = &self.geo.device;
        let dense = device.is_cpu() && s >= self.dense_from;
        let ids = Tensor::new(tokens, device)?;
        let mut x = self
            .embed
            .index_select(&ids, 0)?
            .to_dtype(self.geo.dtype)?
            .unsqueeze(0)?;
        let mut captured = None;
        for i in 0..self.layers.len() {
            if capture == Some(i) {
                captured = Some(x.squeeze(0)?.to_dtype(DType::F32)?);
            }
            let dense_layer;
            let layer = if dense {
                dense_layer = self.layers[i].dense(device)?;
                &dense_layer
            } else {
                &self.layers[i]
            };
            let mut out = Vec::with_capacity(s.div_ceil(PREFILL_CHUNK));
            for start in (0..s).step_by(PREFILL_CHUNK) {
                let n = PREFILL_CHUNK.min(s - start);
                let xc = x.narrow(1, start, n)?;
                let cache = &mut self.cache.kv[i];
                // The last position of a forward run in chunks is in its last chunk.
                let rows = match self.adapter_rows {
                    AdapterRows::Last(_) if start + n < s => AdapterRows::Off,
                    r => r,
                };
                out.push(self.geo.layer(layer, cache, &xc, pos + start, rows)?);
            }
            x = if out.len() == 1 {
                out.pop().expect("one chunk")
            } else {
                Tensor::cat(&out, 1)?
            };
        }
        if capture.is_some() && captured.is_none() {
            candle_core::bail!(
                "no layer {capture:?} to capture (the model has {})",
                self.layers.len()
            );
        }
        self.cache.len = pos + s;
        let last = x.narrow(1, s - 1, 1)?;
        let last = candle_nn::ops::rms_norm(&last, &self.norm, self.geo.eps)?;
        let logits = self
            .lm_head
            .forward(&last)?
            .flatten_all()?
            .to_dtype(DType::F32)?;
        Ok((logits, captured))
    }

    /// Keys and values the cache holds for `layer`: `[kv_heads, len, head_dim]` each (keys
    /// after RoPE), or None when it holds nothing.
    pub fn cached_kv(&self, layer: usize) -> Option<(Tensor, Tensor)> {
        let (k, v) = self.cache.kv.get(layer)?.as_ref()?;
        Some((k.squeeze(0).ok()?, v.squeeze(0).ok()?))
    }
}

/// RoPE cos/sin tables `[context, head_dim / 2]` (Qwen rotates the two halves of each head).
fn rope_tables(d: usize, theta: f64, context: usize, device: &Device) -> Result<(Tensor, Tensor)> {
    let inv: Vec<f32> = (0..d / 2)
        .map(|i| (1.0 / theta.powf(2.0 * i as f64 / d as f64)) as f32)
        .collect();
    let inv = Tensor::from_vec(inv, (1, d / 2), device)?;
    let t = Tensor::arange(0u32, context as u32, device)?
        .to_dtype(DType::F32)?
        .reshape((context, 1))?;
    let f = t.broadcast_mul(&inv)?;
    Ok((f.cos()?.contiguous()?, f.sin()?.contiguous()?))
}

/// Logits of the last position for one more token: the argmax, used by tests.
#[cfg(test)]
fn argmax(t: &Tensor) -> u32 {
    t.flatten_all()
        .unwrap()
        .argmax(0)
        .unwrap()
        .to_scalar::<u32>()
        .unwrap()
}

#[path = "qwen_batch.rs"]
mod qwen_batch;
#[cfg(test)]
#[path = "qwen_tests.rs"]
mod qwen_tests;
