//! One GRPO+LoRA step of the trainer on one device, on synthetic scored groups (no sampling, no
//! judge: the step's forward and backward passes are what is timed), with its FLOPs counted.

use std::path::Path;

use serde_json::{json, Value};

use super::BenchError;
use crate::model::random::Shape;
use crate::train::config::TrainConfig;
use crate::train::offline::advantages_of;
use crate::train::rollout::{Finish, SampledCompletion};
use crate::train::trainer::{GroupData, Source, Trainer};

/// Tokens of each synthetic prompt and completion, and the groups of one step.
pub const PROMPT_TOKENS: usize = 256;
pub const COMPLETION_TOKENS: usize = 128;
pub const GROUPS: usize = 2;
pub const GROUP_SIZE: usize = 4;

/// Scored groups of token ids drawn from the tokenizer's first 256 ids (its byte tokens).
fn groups() -> Vec<GroupData> {
    let id = |i: usize, salt: usize| ((i * 31 + salt * 17) % 250 + 3) as u32;
    (0..GROUPS)
        .map(|g| {
            let rewards: Vec<Option<f64>> = (0..GROUP_SIZE)
                .map(|k| Some(k as f64 / GROUP_SIZE as f64))
                .collect();
            GroupData {
                prompts: vec![(0..PROMPT_TOKENS).map(|i| id(i, g)).collect(); GROUP_SIZE],
                completions: (0..GROUP_SIZE)
                    .map(|k| SampledCompletion {
                        tokens: (0..COMPLETION_TOKENS)
                            .map(|i| id(i, 7 + g * 5 + k))
                            .collect(),
                        logp: Vec::new(),
                        text: String::new(),
                        finish: Finish::Eos,
                    })
                    .collect(),
                masks: Vec::new(),
                advantages: advantages_of(&rewards),
                rewards,
                has_sampler_logp: false,
            }
        })
        .collect()
}

/// Weights every token is multiplied by: the layers' projections and the output head.
pub fn matmul_params(s: &Shape) -> usize {
    let (q, kv) = (s.heads * s.head_dim, s.kv_heads * s.head_dim);
    s.layers * (2 * q * s.hidden + 2 * kv * s.hidden + 3 * s.intermediate * s.hidden)
        + s.vocab * s.hidden
}

/// Peak resident memory of this process so far (Linux), bytes.
pub fn peak_rss() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// One warm-up step, then one timed step; FLOPs counted as 4 per matmul weight per token
/// (forward 2, backward 2: the frozen base weights get no gradient of their own, only the
/// input's), attention scores and the LoRA adapters left out (about 1 % at these lengths).
pub fn figures(
    model: &Path,
    shape: &Shape,
    device: &str,
    out: &Path,
    peak_tflops: Option<f64>,
) -> Result<Value, BenchError> {
    let mut cfg = TrainConfig {
        model: model.to_path_buf(),
        device: device.to_string(),
        output_dir: out.to_path_buf(),
        // Only names the source for the config check: the groups are handed over below.
        offline: Some(out.join("synthetic-groups")),
        steps: 2,
        prompts_per_step: GROUPS,
        group_size: GROUP_SIZE,
        micro_batch_groups: GROUPS,
        seed: 1,
        ..TrainConfig::default()
    };
    // No reference model: a KL term would add a third forward pass.
    cfg.grpo.beta = 0.0;
    let err = |e: crate::train::TrainError| BenchError::Train(e.to_string());
    let mut trainer = Trainer::new(cfg, Source::Offline(groups())).map_err(err)?;
    trainer.train_step().map_err(err)?;
    let m = trainer.train_step().map_err(err)?;
    let tokens = GROUPS * GROUP_SIZE * (PROMPT_TOKENS + COMPLETION_TOKENS);
    let flops = 4.0 * matmul_params(shape) as f64 * tokens as f64;
    let achieved = flops / m.train_seconds.max(1e-9);
    Ok(json!({
        "device": device,
        "groups": GROUPS,
        "group_size": GROUP_SIZE,
        "prompt_tokens": PROMPT_TOKENS,
        "completion_tokens": COMPLETION_TOKENS,
        "tokens": tokens,
        "step_s": m.seconds,
        "train_s": m.train_seconds,
        "tokens_per_s": tokens as f64 / m.seconds.max(1e-9),
        "loss": m.loss,
        "grad_norm": m.grad_norm,
        "flops": flops,
        "tflops_per_s": achieved / 1e12,
        "peak_tflops": peak_tflops,
        "mfu": peak_tflops.map(|p| achieved / (p * 1e12)),
        "peak_rss_bytes": peak_rss(),
    }))
}
