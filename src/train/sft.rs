//! `gavel train --sft SFT.jsonl`: supervised fine-tuning of the LoRA adapters on chat examples,
//! with the GRPO trainer's model, adapters, optimizer, schedule, checkpoints and `--resume`.
//!
//! - **Data**: one JSON object a line with `messages` (OpenAI chat messages) and optionally
//!   `tools`; every other field (`gavel select`'s metadata, `reward`, ...) is ignored. This is
//!   what `gavel select` writes and TRL's `SFTTrainer` reads.
//! - **Tokens and masking**: each example is tokenized exactly as `train --offline` tokenizes a
//!   trajectory ([`super::offline::tokenize`]): split at the last user (or system) message, the
//!   part before it is the prompt (chat template, assistant turn opened), the assistant turns after
//!   it and the tool results between them are rendered turn by turn. The loss is the mean
//!   negative log-likelihood of the assistant tokens of the step: prompt and tool-result tokens
//!   are context only, never predicted.
//! - **Order**: steps, not epochs. The examples are read as one endless stream, each pass over
//!   the data in its own order drawn from `seed` and the pass number; step `s` takes stream
//!   positions `s·B .. (s+1)·B` (`B` = `sft_batch_size`). The order is a function of the step,
//!   so `--resume` continues exactly and no order state is saved.
//! - **Micro-batches**: length-bucketed, not packed. The model has only a causal mask (no
//!   per-document attention mask or position reset), so packing several examples into one row
//!   would let each attend to the ones before it; right-padded rows are exact in a causal
//!   model. The step's examples are sorted by length and cut greedily into passes of at most
//!   `sft_micro_batch_tokens` padded tokens (rows × longest row), so neighbours in a pass are of
//!   similar length and padding stays small; the gradient is accumulated over the passes.
//!   Logits are computed only at the positions that predict an assistant token.

use std::collections::HashMap;
use std::path::Path;
use std::time::Instant;

use candle_core::{DType, Tensor, D};
use serde::Serialize;
use serde_json::Value;

use super::config::{TrainConfig, TrainSource};
use super::offline::tokenize;
use super::optim::{accumulate, clip_grad_norm, named_grads};
use super::rollout::PolicyModel;
use super::run_log::MetricsFile;
use super::trainer::{Source, Trainer};
use super::TrainError;
use crate::domain::rng::Rng;
use crate::domain::trajectory::parse_trajectory;
use crate::toolkit::groupfile::{nonblank_lines, read_text};
use crate::toolkit::progress::progress_bar;

/// One tokenized chat example.
#[derive(Debug, Clone, PartialEq)]
pub struct SftExample {
    /// `FILE:LINE` it came from.
    pub at: String,
    /// The prompt's ids (chat template, assistant turn opened).
    pub prompt: Vec<u32>,
    /// The completion's ids: assistant turns and the tool results between them.
    pub tokens: Vec<u32>,
    /// Per completion token: 1 for an assistant token (in the loss), 0 for tool output.
    pub mask: Vec<f32>,
}

impl SftExample {
    /// Tokens in the forward pass.
    pub fn len(&self) -> usize {
        self.prompt.len() + self.tokens.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Tokens in the loss (assistant tokens).
    pub fn loss_tokens(&self) -> usize {
        self.mask.iter().filter(|&&m| m > 0.0).count()
    }
}

/// Reads chat examples and tokenizes them for `policy`; a bad line is `FILE:LINE: problem`.
pub fn read_sft(path: &Path, policy: &PolicyModel) -> Result<Vec<SftExample>, TrainError> {
    let file = path.display().to_string();
    let text = read_text(path).map_err(TrainError::Input)?;
    let mut out = Vec::new();
    for (n, line) in nonblank_lines(&text) {
        let at = format!("{file}:{n}");
        let ex =
            parse_example(line, policy).map_err(|m| TrainError::Input(format!("{at}: {m}")))?;
        out.push(SftExample { at, ..ex });
    }
    if out.is_empty() {
        return Err(TrainError::Input(format!("{file}: no examples")));
    }
    Ok(out)
}

fn parse_example(line: &str, policy: &PolicyModel) -> Result<SftExample, String> {
    let v: Value = serde_json::from_str(line).map_err(|e| format!("not valid JSON: {e}"))?;
    let obj = v.as_object().ok_or("expected a JSON object")?;
    let messages = obj.get("messages").ok_or("messages: missing")?;
    // Only the messages: the rest of the line is metadata.
    let t = parse_trajectory(&serde_json::json!({ "messages": messages }), "")
        .map_err(|e| e.to_string().trim_start_matches('.').to_string())?;
    let (prompt, tokens, mask) = tokenize(&t, policy)?;
    if !mask.iter().any(|&m| m > 0.0) {
        return Err("no assistant tokens to learn".into());
    }
    Ok(SftExample {
        at: String::new(),
        prompt,
        tokens,
        mask,
    })
}

/// What one SFT step did (one JSON line of `metrics.jsonl`).
#[derive(Debug, Clone, Default, Serialize)]
pub struct SftMetrics {
    pub step: u64,
    /// Mean NLL per assistant token of the step's examples (before the update).
    pub loss: f64,
    /// Assistant tokens in the loss.
    pub tokens: usize,
    /// Tokens through the model (prompts, assistant turns and tool results; no padding).
    pub seq_tokens: usize,
    /// Padding tokens added by the micro-batches.
    pub pad_tokens: usize,
    pub micro_batches: usize,
    pub grad_norm: f64,
    pub learning_rate: f64,
    /// `seq_tokens` per second of the step.
    pub tokens_per_s: f64,
    pub seconds: f64,
}

/// The SFT loop over a [`Trainer`] (its policy, optimizer, step, checkpoints and resume; its
/// `source` is unused).
pub struct Sft {
    pub trainer: Trainer,
    pub data: Vec<SftExample>,
}

impl Sft {
    /// Loads the model (and `init_adapter`, if set) and reads `cfg.sft`.
    pub fn new(cfg: TrainConfig) -> Result<Sft, TrainError> {
        let TrainSource::Sft(path) = cfg.source()? else {
            return Err(TrainError::Config(
                "no sft: set `sft` (chat examples)".into(),
            ));
        };
        let trainer = Trainer::new(cfg, Source::Supervised)?;
        let data = read_sft(&path, &trainer.policy)?;
        Ok(Sft { trainer, data })
    }

    /// Indices of the examples of step `step` (0-based): stream positions `step·B ..`, each pass
    /// over the data in its own seeded order.
    pub fn batch(&self, step: u64) -> Vec<usize> {
        let n = self.data.len();
        let b = self.trainer.cfg.sft_batch_size;
        let mut order: Option<(u64, Vec<usize>)> = None;
        (0..b as u64)
            .map(|k| {
                let pos = step * b as u64 + k;
                let pass = pos / n as u64;
                if order.as_ref().is_none_or(|(p, _)| *p != pass) {
                    let mut idx: Vec<usize> = (0..n).collect();
                    let seed = self.trainer.cfg.seed ^ 0x5F7_0000_0000 ^ pass;
                    Rng::new(seed).fork().shuffle(&mut idx);
                    order = Some((pass, idx));
                }
                order.as_ref().expect("set").1[(pos % n as u64) as usize]
            })
            .collect()
    }

    /// `batch` sorted by length and cut into passes of at most `sft_micro_batch_tokens` padded
    /// tokens (a longer example alone).
    pub fn micro_batches(&self, batch: &[usize]) -> Vec<Vec<usize>> {
        let budget = self.trainer.cfg.sft_micro_batch_tokens;
        let mut sorted = batch.to_vec();
        sorted.sort_by_key(|&i| (self.data[i].len(), i));
        let mut out: Vec<Vec<usize>> = Vec::new();
        let mut cur: Vec<usize> = Vec::new();
        for i in sorted {
            // Sorted ascending: this example is the pass's longest row.
            if !cur.is_empty() && (cur.len() + 1) * self.data[i].len() > budget {
                out.push(std::mem::take(&mut cur));
            }
            cur.push(i);
        }
        if !cur.is_empty() {
            out.push(cur);
        }
        out
    }

    /// The summed NLL of the assistant tokens of `rows` (one right-padded forward pass) as a
    /// differentiable scalar, and the number of those tokens.
    pub fn nll_sum(&self, rows: &[&SftExample]) -> Result<(Tensor, usize), TrainError> {
        let model = &self.trainer.policy.model;
        let dev = model.device().clone();
        let n = rows.len();
        let t = rows.iter().map(|r| r.len()).max().unwrap_or(1).max(1);
        let mut ids = Vec::with_capacity(n * t);
        let (mut at, mut targets) = (Vec::new(), Vec::new());
        for (row, ex) in rows.iter().enumerate() {
            if ex.prompt.is_empty() {
                return Err(TrainError::Input(format!("{}: an empty prompt", ex.at)));
            }
            ids.extend_from_slice(&ex.prompt);
            ids.extend_from_slice(&ex.tokens);
            ids.resize((row + 1) * t, 0);
            // Completion token j sits at p + j and is predicted by the logits at p + j − 1.
            for (j, (&tok, &m)) in ex.tokens.iter().zip(&ex.mask).enumerate() {
                if m > 0.0 {
                    at.push((row * t + ex.prompt.len() - 1 + j) as u32);
                    targets.push(tok);
                }
            }
        }
        let k = at.len();
        let ids = Tensor::from_vec(ids, (n, t), &dev)?;
        let at = Tensor::from_vec(at, k, &dev)?;
        let targets = Tensor::from_vec(targets, (k, 1), &dev)?;
        let h = model.hidden(&ids, 0, None, true)?;
        let hidden = h.dim(D::Minus1)?;
        let h = h.reshape((n * t, hidden))?.index_select(&at, 0)?;
        let lsm = self.trainer.policy.log_probs(&model.logits(&h)?, 1.0)?;
        let nll = lsm.gather(&targets, D::Minus1)?.sum_all()?.neg()?;
        Ok((nll, k))
    }

    /// The mean NLL per assistant token of `examples` under the current adapters (no update).
    pub fn mean_nll(&self, examples: &[&SftExample]) -> Result<f64, TrainError> {
        let (nll, k) = self.nll_sum(examples)?;
        Ok(nll.to_dtype(DType::F64)?.to_scalar::<f64>()? / k.max(1) as f64)
    }

    /// One optimizer step on the next batch.
    pub fn train_step(&mut self) -> Result<SftMetrics, TrainError> {
        let started = Instant::now();
        let batch = self.batch(self.trainer.step);
        let passes = self.micro_batches(&batch);
        let cfg = &self.trainer.cfg;
        let mut m = SftMetrics {
            step: self.trainer.step + 1,
            micro_batches: passes.len(),
            learning_rate: cfg.schedule.lr(
                cfg.learning_rate,
                self.trainer.step,
                cfg.warmup_steps,
                cfg.steps,
            ),
            ..SftMetrics::default()
        };
        m.tokens = batch.iter().map(|&i| self.data[i].loss_tokens()).sum();
        let denom = m.tokens.max(1) as f64;
        let mut grads: HashMap<String, Tensor> = HashMap::new();
        for pass in &passes {
            let rows: Vec<&SftExample> = pass.iter().map(|&i| &self.data[i]).collect();
            let longest = rows.iter().map(|r| r.len()).max().unwrap_or(0);
            let seq: usize = rows.iter().map(|r| r.len()).sum();
            m.seq_tokens += seq;
            m.pad_tokens += rows.len() * longest - seq;
            let (nll, _) = self.nll_sum(&rows)?;
            // Each pass adds its share of the step's mean: the accumulated gradient is that of
            // the mean over all the step's assistant tokens.
            let loss = (nll / denom)?;
            m.loss += loss.to_dtype(DType::F64)?.to_scalar::<f64>()?;
            let store = loss.backward()?;
            accumulate(&mut grads, named_grads(self.trainer.opt.vars(), &store)?)?;
        }
        m.grad_norm = clip_grad_norm(&mut grads, self.trainer.cfg.max_grad_norm)?;
        self.trainer.opt.step(&grads, m.learning_rate)?;
        self.trainer.step += 1;
        m.seconds = started.elapsed().as_secs_f64();
        m.tokens_per_s = m.seq_tokens as f64 / m.seconds.max(1e-9);
        Ok(m)
    }

    /// Runs until `steps`, writing metrics.jsonl and checkpoints; `progress` shows a bar.
    pub fn run(&mut self, progress: bool) -> Result<Vec<SftMetrics>, TrainError> {
        let out = self.trainer.cfg.output_dir.clone();
        let mut metrics = MetricsFile::open(&out, self.trainer.step)?;
        let (steps, every) = (self.trainer.cfg.steps, self.trainer.cfg.save_every);
        let bar = progress_bar(steps, self.trainer.step, "steps", progress);
        let mut all = Vec::new();
        while self.trainer.step < steps {
            let m = self.train_step()?;
            metrics.write(&m)?;
            bar.set_position(self.trainer.step);
            bar.set_message(format!(
                "sft loss {:.4} |g| {:.3} lr {:.1e} tok {} {:.0} tok/s",
                m.loss, m.grad_norm, m.learning_rate, m.tokens, m.tokens_per_s
            ));
            all.push(m);
            let step = self.trainer.step;
            if (every > 0 && step.is_multiple_of(every)) || step == steps {
                self.trainer.save()?;
            }
        }
        bar.finish();
        Ok(all)
    }
}
