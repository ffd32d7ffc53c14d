//! The policy (model + tokenizer) and sampling: a group of completions for one prompt, drawn
//! together with a KV cache, with temperature, top-p, stop strings and a token budget; the
//! sampler's per-token log-probs are kept (of the temperature-scaled distribution, which is also
//! what the loss scores, as TRL does).

use std::path::Path;

#[cfg(test)]
use candle_core::Device;
use candle_core::{DType, Tensor, D};
use serde::{Deserialize, Serialize};

use super::kv_cache::KvCache;
use super::lora::LoraConfig;
use super::model::LoraQwen;
use super::TrainError;
use crate::domain::prompt::ChatMessage;
use crate::domain::rng::Rng;
use crate::model::{
    ChatTemplate, DeviceSpec, LoadedTokenizer, LocalError, ModelFiles, OpenDevice, RenderOptions,
};

/// The model being trained and its tokenizer and chat template.
pub struct PolicyModel {
    pub model: LoraQwen,
    tok: LoadedTokenizer,
    template: ChatTemplate,
    /// Ids the tokenizer knows; the rest of the embedding rows (padding) are never sampled.
    pub n_valid: usize,
}

impl PolicyModel {
    /// Loads `path` (model folder or GGUF, dequantized to f32 on CPU) and adds fresh adapters.
    pub fn load(
        path: &Path,
        device: &str,
        lora: &LoraConfig,
        rng: &mut Rng,
    ) -> Result<PolicyModel, TrainError> {
        let dev = DeviceSpec::parse(device)
            .map_err(LocalError::from)
            .and_then(OpenDevice::open)
            .map_err(TrainError::Load)?;
        // One read of the files: config, tokenizer and template parsed once, and the weights
        // read straight into the dense tensors the trainer's model is built from.
        let files = ModelFiles::open(path).map_err(TrainError::Load)?;
        let w = files.dense(&dev, DType::F32).map_err(TrainError::Load)?;
        let mut model = LoraQwen::new(w)?;
        model.add_lora(lora, rng)?;
        let n_valid = files
            .tokenizer
            .tokenizer
            .get_vocab_size(true)
            .min(model.config().vocab_size);
        Ok(PolicyModel {
            model,
            tok: files.tokenizer,
            template: files.template,
            n_valid,
        })
    }

    /// The prompt's token ids: the chat template with the assistant turn opened.
    pub fn prompt_ids(&self, messages: &[ChatMessage]) -> Result<Vec<u32>, TrainError> {
        let text = self
            .template
            .render_with(messages, &RenderOptions::default())
            .map_err(TrainError::Load)?;
        self.encode(&text)
    }

    /// The chat template's text of `messages` (thinking off, as for sampling).
    pub fn render(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
    ) -> Result<String, TrainError> {
        let opts = RenderOptions {
            add_generation_prompt,
            enable_thinking: Some(false),
        };
        self.template
            .render_with(messages, &opts)
            .map_err(TrainError::Load)
    }

    pub fn encode(&self, text: &str) -> Result<Vec<u32>, TrainError> {
        self.tok.encode(text).map_err(TrainError::Load)
    }

    /// The text of `ids` without special tokens.
    pub fn decode(&self, ids: &[u32]) -> Result<String, TrainError> {
        self.tok.decode(ids, true).map_err(TrainError::Load)
    }

    pub fn eos_ids(&self) -> &[u32] {
        &self.tok.eos_ids
    }

    /// Scaled log-softmax over the valid vocabulary of logits `[..., vocab]`.
    pub fn log_probs(&self, logits: &Tensor, temperature: f64) -> candle_core::Result<Tensor> {
        let l = logits.narrow(D::Minus1, 0, self.n_valid)?;
        let t = if temperature > 0.0 { temperature } else { 1.0 };
        candle_nn::ops::log_softmax(&(l / t)?, D::Minus1)
    }
}

/// How completions are drawn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SamplingConfig {
    /// 0 = greedy.
    pub temperature: f64,
    /// Nucleus: the smallest set of tokens whose probability reaches `top_p`.
    pub top_p: f64,
    pub max_tokens: usize,
    /// Generation ends at the first of these; the text is cut before it.
    pub stop: Vec<String>,
}

impl Default for SamplingConfig {
    fn default() -> Self {
        SamplingConfig {
            temperature: 1.0,
            top_p: 1.0,
            max_tokens: 256,
            stop: Vec::new(),
        }
    }
}

impl SamplingConfig {
    pub fn validate(&self) -> Result<(), String> {
        if !(self.temperature >= 0.0 && self.temperature.is_finite()) {
            return Err(format!(
                "temperature must be >= 0, got {}",
                self.temperature
            ));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(format!("top_p must be in (0, 1], got {}", self.top_p));
        }
        if self.max_tokens == 0 {
            return Err("max_tokens must be at least 1".into());
        }
        Ok(())
    }
}

/// Why a completion ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Finish {
    Eos,
    Stop,
    Length,
}

/// One sampled completion.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SampledCompletion {
    /// The generated ids (an ending EOS included: the policy chose it).
    pub tokens: Vec<u32>,
    /// The sampler's log-prob of each token.
    pub logp: Vec<f32>,
    pub text: String,
    pub finish: Finish,
}

/// Draws one token from a row of log-probs.
fn draw(lp: &[f32], cfg: &SamplingConfig, rng: &mut Rng) -> usize {
    if cfg.temperature == 0.0 {
        return lp
            .iter()
            .enumerate()
            .fold(
                (0, f32::NEG_INFINITY),
                |b, (i, &v)| if v > b.1 { (i, v) } else { b },
            )
            .0;
    }
    let u = rng.uniform();
    if cfg.top_p >= 1.0 {
        let mut acc = 0.0f64;
        for (i, &v) in lp.iter().enumerate() {
            acc += (v as f64).exp();
            if acc > u {
                return i;
            }
        }
        return lp.len() - 1;
    }
    let mut idx: Vec<usize> = (0..lp.len()).collect();
    idx.sort_by(|&a, &b| lp[b].total_cmp(&lp[a]).then(a.cmp(&b)));
    let mut kept = 0.0f64;
    let mut n = 0;
    for &i in &idx {
        kept += (lp[i] as f64).exp();
        n += 1;
        if kept >= cfg.top_p {
            break;
        }
    }
    let target = u * kept;
    let mut acc = 0.0;
    for &i in &idx[..n] {
        acc += (lp[i] as f64).exp();
        if acc > target {
            return i;
        }
    }
    idx[n - 1]
}

/// Samples `n` completions of `prompt` together.
pub fn sample_group(
    policy: &PolicyModel,
    prompt: &[u32],
    n: usize,
    cfg: &SamplingConfig,
    rng: &mut Rng,
) -> Result<Vec<SampledCompletion>, TrainError> {
    sample_rows(policy, &vec![prompt; n], cfg, rng)
}

/// Samples `k` completions of each prompt, all rows in one batch (see [`sample_rows`]); the
/// draws follow the prompts' order.
pub fn sample_groups(
    policy: &PolicyModel,
    prompts: &[Vec<u32>],
    k: usize,
    cfg: &SamplingConfig,
    rng: &mut Rng,
) -> Result<Vec<Vec<SampledCompletion>>, TrainError> {
    let rows: Vec<&[u32]> = prompts
        .iter()
        .flat_map(|p| std::iter::repeat_n(p.as_slice(), k))
        .collect();
    let mut out = sample_rows(policy, &rows, cfg, rng)?.into_iter();
    Ok(prompts
        .iter()
        .map(|_| out.by_ref().take(k).collect())
        .collect())
}

/// Samples one completion per row, all rows in one batch, so each decoding step reads the
/// weights once for every row: decoding a few rows is bound by memory, not arithmetic. Each
/// distinct prompt is prefilled once, alone; prompts of different lengths then decode together
/// from their caches stacked with left padding ([`KvCache::stack_left_padded`]), each row at its
/// own positions, as it would alone. The random draws go step by step, rows in order.
pub fn sample_rows(
    policy: &PolicyModel,
    prompts: &[&[u32]],
    cfg: &SamplingConfig,
    rng: &mut Rng,
) -> Result<Vec<SampledCompletion>, TrainError> {
    let m = &policy.model;
    let dev = m.device().clone();
    let n = prompts.len();
    if n == 0 {
        return Ok(Vec::new());
    }
    if prompts.iter().any(|r| r.is_empty()) {
        return Err(TrainError::Input("empty prompt".into()));
    }
    let p = prompts.iter().map(|r| r.len()).max().unwrap_or(0);
    let room = m.config().context_length().saturating_sub(p);
    let max_tokens = cfg.max_tokens.min(room);
    if max_tokens == 0 {
        return Err(TrainError::Input(format!(
            "the prompt has {p} tokens: no room left in the model's context"
        )));
    }
    let eos = policy.eos_ids();
    let mut out: Vec<SampledCompletion> = (0..n)
        .map(|_| SampledCompletion {
            tokens: Vec::new(),
            logp: Vec::new(),
            text: String::new(),
            finish: Finish::Length,
        })
        .collect();
    // Each distinct prompt is prefilled once (a group's rows are one prompt repeated); its rows
    // start from copies of its cache.
    let mut distinct: Vec<&[u32]> = Vec::new();
    let mut source = Vec::with_capacity(n);
    for &row in prompts {
        let j = match distinct.iter().position(|&d| d == row) {
            Some(j) => j,
            None => {
                distinct.push(row);
                distinct.len() - 1
            }
        };
        source.push(j as u32);
    }
    let mut caches = Vec::with_capacity(distinct.len());
    let mut last = Vec::with_capacity(distinct.len());
    for d in &distinct {
        let mut cache = KvCache::default();
        let ids = Tensor::new(*d, &dev)?.unsqueeze(0)?;
        // Detached: sampling needs no gradient, and the graph of every prompt's prefill would
        // otherwise stay alive until the first decoding step: it doubled the peak of `train
        // sample` on 8 prompts of the QA test set.
        let h = m.hidden(&ids, 0, Some(&mut cache), true)?.detach();
        last.push(h.narrow(1, d.len() - 1, 1)?);
        caches.push(cache);
    }
    let source = Tensor::new(source, &dev)?;
    let mut cache = KvCache::stack_left_padded(&caches)?.select_rows(&source)?;
    drop(caches);
    let mut logits = m
        .logits(&Tensor::cat(&last, 0)?)?
        .squeeze(1)?
        .index_select(&source, 0)?;
    // The completions still being generated, in the order of the batch's rows: a finished
    // one leaves the batch (and its cache rows) at once.
    let mut active: Vec<usize> = (0..n).collect();
    for step in 0..max_tokens {
        let lp = policy
            .log_probs(&logits, cfg.temperature)?
            .to_dtype(DType::F32)?
            .to_vec2::<f32>()?;
        let mut next = Vec::with_capacity(active.len());
        let mut kept = Vec::with_capacity(active.len());
        for (row, &i) in active.iter().enumerate() {
            let tok = draw(&lp[row], cfg, rng);
            let c = &mut out[i];
            c.tokens.push(tok as u32);
            c.logp.push(lp[row][tok]);
            if eos.contains(&(tok as u32)) {
                c.finish = Finish::Eos;
                continue;
            }
            if !cfg.stop.is_empty() {
                let text = policy.decode(&c.tokens)?;
                if let Some(cut) = cfg.stop.iter().filter_map(|s| text.find(s.as_str())).min() {
                    c.text = text[..cut].to_string();
                    c.finish = Finish::Stop;
                    continue;
                }
            }
            next.push(tok as u32);
            kept.push(row as u32);
        }
        if next.is_empty() || step + 1 == max_tokens {
            break;
        }
        if kept.len() < active.len() {
            cache = cache.select_rows(&Tensor::new(kept.as_slice(), &dev)?)?;
            active = kept.iter().map(|&r| active[r as usize]).collect();
        }
        let input = Tensor::from_vec(next, (active.len(), 1), &dev)?;
        let h = m.hidden(&input, p + step, Some(&mut cache), true)?.detach();
        logits = m.logits(&h)?.squeeze(1)?;
    }
    for c in &mut out {
        if c.finish != Finish::Stop {
            let body = match c.finish {
                Finish::Eos => &c.tokens[..c.tokens.len() - 1],
                _ => &c.tokens[..],
            };
            c.text = policy.decode(body)?;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sampling with the cache (each prompt prefilled once, its rows copied, prompts of two
    /// lengths in one left-padded batch, a finished row leaving the batch) draws what a full
    /// forward of each row's whole sequence at every step draws, token for token, the random
    /// draws taken in the same order; rows stop at different steps.
    #[test]
    fn cached_group_sampling_draws_what_full_forwards_draw() {
        let tmp = tempfile::tempdir().unwrap();
        crate::train::toy::write_toy_model(tmp.path()).unwrap();
        let lora = LoraConfig::default();
        let policy = PolicyModel::load(tmp.path(), "cpu", &lora, &mut Rng::new(3)).unwrap();
        let (a, b, c) = (
            policy.encode("0123").unwrap(),
            policy.encode("5678").unwrap(),
            policy.encode("91").unwrap(),
        );
        assert_ne!(
            a.len(),
            c.len(),
            "the batch must hold prompts of two lengths"
        );
        let prompts: Vec<&[u32]> = vec![&a, &a, &c, &b, &b, &c, &b, &a];
        let cfg = SamplingConfig {
            max_tokens: 8,
            stop: vec![",".into()],
            ..SamplingConfig::default()
        };
        let got = sample_rows(&policy, &prompts, &cfg, &mut Rng::new(7)).unwrap();

        let mut rng = Rng::new(7);
        let mut seqs: Vec<Vec<u32>> = prompts.iter().map(|p| p.to_vec()).collect();
        let mut want: Vec<Vec<u32>> = vec![Vec::new(); prompts.len()];
        let mut done = vec![false; prompts.len()];
        for _ in 0..cfg.max_tokens {
            for i in 0..prompts.len() {
                if done[i] {
                    continue;
                }
                let ids = Tensor::new(seqs[i].as_slice(), &Device::Cpu)
                    .unwrap()
                    .unsqueeze(0)
                    .unwrap();
                let logits = policy.model.forward(&ids, true).unwrap();
                let last = logits.get(0).unwrap().get(seqs[i].len() - 1).unwrap();
                let lp = policy.log_probs(&last, cfg.temperature).unwrap();
                let lp = lp.to_vec1::<f32>().unwrap();
                let tok = draw(&lp, &cfg, &mut rng) as u32;
                let c = &got[i];
                let k = want[i].len();
                assert!(
                    (c.logp[k] - lp[tok as usize]).abs() < 1e-4,
                    "row {i} token {k}"
                );
                seqs[i].push(tok);
                want[i].push(tok);
                let text = policy.decode(&want[i]).unwrap();
                done[i] = policy.eos_ids().contains(&tok) || text.contains(',');
            }
        }
        let tokens: Vec<Vec<u32>> = got.iter().map(|c| c.tokens.clone()).collect();
        assert_eq!(tokens, want);
        let lengths: std::collections::BTreeSet<usize> = want.iter().map(Vec::len).collect();
        assert!(
            lengths.len() > 1,
            "every row stopped at the same step: {want:?}"
        );
    }

    #[test]
    fn top_p_keeps_the_nucleus() {
        let lp: Vec<f32> = [0.5f32, 0.3, 0.15, 0.05].iter().map(|p| p.ln()).collect();
        let cfg = SamplingConfig {
            top_p: 0.75,
            ..SamplingConfig::default()
        };
        let mut rng = Rng::new(9);
        let mut counts = [0usize; 4];
        for _ in 0..4000 {
            counts[draw(&lp, &cfg, &mut rng)] += 1;
        }
        // Nucleus {0, 1} (0.8 ≥ 0.75), renormalised to 0.625 / 0.375.
        assert_eq!(counts[2] + counts[3], 0, "{counts:?}");
        let f = counts[0] as f64 / 4000.0;
        assert!((f - 0.625).abs() < 0.03, "{f}");
        let greedy = SamplingConfig {
            temperature: 0.0,
            ..SamplingConfig::default()
        };
        assert_eq!(draw(&lp, &greedy, &mut rng), 0);
        let full = SamplingConfig::default();
        let mut c3 = 0;
        for _ in 0..4000 {
            c3 += (draw(&lp, &full, &mut rng) == 3) as usize;
        }
        assert!((c3 as f64 / 4000.0 - 0.05).abs() < 0.015, "{c3}");
    }
}
