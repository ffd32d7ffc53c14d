//! The local judge's figures on one device: the bare model's prefill and decode, then whole
//! groups through the scorer in each judging mode, with the prefix cache on and off.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::BenchError;
use crate::config::{Config, JudgeConfig, LocalConfig};
use crate::domain::prompt::{ChatMessage, JudgeMode};
use crate::judge::local::{LoadedModel, LocalModelSpec};
use crate::score::{ScoreRequest, Scorer};
use crate::store::{SledStore, VerdictStore};

/// Group sizes timed (GRPO samples 4–16 per prompt).
pub const GROUP_SIZES: [usize; 2] = [4, 8];

/// A synthetic RAG-style group of `n` distinct answers; `nonce` makes its content (and so its
/// cache keys) new, so every timed group is judged, never answered from the store.
pub fn group(n: usize, nonce: usize) -> Value {
    let passages = (1..=4)
        .map(|i| {
            format!(
                "[{i}] Report {nonce}-{i}: the plant's output rose by {} percent in {} after the \
                 new process, and costs fell by {} percent; permitting added {} months.",
                10 + i * 7,
                2018 + i,
                3 + i * 5,
                6 + i * 3
            )
        })
        .collect::<Vec<_>>()
        .join("\n\n");
    let trajectories: Vec<Value> = (0..n)
        .map(|k| {
            json!({"messages": [
                {"role": "system", "content": "Answer from the passages only and cite them as [n]."},
                {"role": "user", "content": format!("Question {nonce}: how did output change?\n\n{passages}")},
                {"role": "assistant", "content": format!(
                    "Answer {k}: output rose by {} percent [{}], while costs fell [{}].",
                    10 + (k % 4) * 7, 1 + k % 4, 1 + (k + 1) % 4)}
            ]})
        })
        .collect();
    json!({ "trajectories": trajectories })
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// Prefill and decode tokens/s of the bare model on the judge prompt of a 4-answer group.
fn bare_model(model: &Path, device: &str, decode_steps: usize) -> Result<Value, BenchError> {
    let spec = LocalModelSpec::new(model, device.to_string());
    let t = Instant::now();
    let mut m = LoadedModel::load(&spec).map_err(|e| BenchError::Judge(e.to_string()))?;
    let load = t.elapsed();
    let messages = vec![
        ChatMessage {
            role: "system".into(),
            content: "Grade the answers.".into(),
        },
        ChatMessage {
            role: "user".into(),
            content: group(4, 0).to_string(),
        },
    ];
    let err = |e: crate::model::LocalError| BenchError::Judge(e.to_string());
    let ids = m.prompt_tokens(&messages).map_err(err)?;
    // Warm-up: kernels load and caches fill on the first pass.
    m.forward_logits(&ids[..ids.len().min(16)], 0)
        .map_err(err)?;
    let t = Instant::now();
    let mut logits = m.forward_logits(&ids, 0).map_err(err)?;
    let prefill = t.elapsed();
    let t = Instant::now();
    for _ in 0..decode_steps {
        let next = logits
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .map_or(0, |(i, _)| i as u32);
        logits = m.forward_logits(&[next], m.cached_len()).map_err(err)?;
    }
    let decode = t.elapsed();
    Ok(json!({
        "load_s": secs(load),
        "prompt_tokens": ids.len(),
        "prefill_s": secs(prefill),
        "prefill_tok_s": ids.len() as f64 / secs(prefill),
        "decode_tokens": decode_steps,
        "decode_tok_s": decode_steps as f64 / secs(decode),
    }))
}

/// A scorer with one local judge on `device`; `prefix_cache` off sets `prefix_cache_bytes = 0`
/// and `max_batch_tokens = 0` (a group's prompts packed after their shared prefix reuse it too):
/// nothing is reused.
fn scorer(model: &Path, device: &str, prefix_cache: bool) -> Result<Scorer, BenchError> {
    let mut j = LocalConfig::new(model);
    j.device =
        crate::model::DeviceSpec::parse(device).map_err(|e| BenchError::Judge(e.to_string()))?;
    j.max_explanation_bytes = 0;
    j.common.deadline_s = 3600.0;
    if !prefix_cache {
        j.prefix_cache_bytes = Some(0);
        j.max_batch_tokens = 0;
    }
    let mut cfg = Config::from_env(&|_| None).expect("no variables, no error");
    cfg.judges.clear();
    cfg.judges.insert("local".into(), JudgeConfig::Local(j));
    cfg.default_judge = Some("local".into());
    let store: Arc<dyn VerdictStore> =
        Arc::new(SledStore::temporary().map_err(|e| BenchError::Judge(e.to_string()))?);
    Scorer::new(cfg.scorer_parts(), store).map_err(|e| BenchError::Judge(e.to_string()))
}

/// Every figure of the judge on `device`: the bare model, then (with `time_groups`) one group
/// per size × mode × prefix cache on/off, after one warm-up group per scorer.
pub fn figures(
    model: &Path,
    device: &str,
    decode_steps: usize,
    time_groups: bool,
    rt: &tokio::runtime::Runtime,
) -> Result<Value, BenchError> {
    let bare = bare_model(model, device, decode_steps)?;
    let mut groups = Vec::new();
    let mut nonce = 1;
    let caches: &[bool] = if time_groups { &[true, false] } else { &[] };
    for &prefix_cache in caches {
        let scorer = scorer(model, device, prefix_cache)?;
        let mut judge = |n: usize, mode: JudgeMode| -> Result<Value, BenchError> {
            nonce += 1;
            let mut req = ScoreRequest::from_json(&group(n, nonce), 64)
                .map_err(|e| BenchError::Judge(e.to_string()))?;
            req.judge_mode = Some(mode);
            let t = Instant::now();
            let out = rt
                .block_on(scorer.score_group(&req))
                .map_err(|e| BenchError::Judge(e.to_string()))?;
            let u = out.usage;
            Ok(json!({
                "trajectories": n,
                "mode": mode.name(),
                "prefix_cache": prefix_cache,
                "group_s": secs(t.elapsed()),
                "judge_calls": u.judge_calls,
                "prompt_tokens": u.prompt_tokens,
                "reused_tokens": u.cached_prompt_tokens,
                "completion_tokens": u.completion_tokens,
                "forward_passes": u.forward_passes,
            }))
        };
        judge(4, JudgeMode::Listwise)?; // warm-up
        for n in GROUP_SIZES {
            for mode in [
                JudgeMode::Listwise,
                JudgeMode::Pointwise,
                JudgeMode::Pairwise,
            ] {
                groups.push(judge(n, mode)?);
            }
        }
    }
    Ok(json!({ "model": bare, "groups": groups }))
}

/// The last-position logits of one prompt on each device, and how far apart they are.
pub fn logits_check(model: &Path, devices: [&str; 2]) -> Result<Value, BenchError> {
    let messages = vec![ChatMessage {
        role: "user".into(),
        content: group(2, 0).to_string(),
    }];
    let mut rows = Vec::new();
    for d in devices {
        let spec = LocalModelSpec::new(model, d.to_string());
        let mut m = LoadedModel::load(&spec).map_err(|e| BenchError::Judge(e.to_string()))?;
        let err = |e: crate::model::LocalError| BenchError::Judge(e.to_string());
        let ids = m.prompt_tokens(&messages).map_err(err)?;
        rows.push((ids.len(), m.forward_logits(&ids, 0).map_err(err)?));
    }
    let (a, b) = (&rows[0].1, &rows[1].1);
    let max_abs_diff = a
        .iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, f32::max);
    let scale = a.iter().map(|x| x.abs()).fold(0f32, f32::max);
    let argmax = |v: &[f32]| {
        v.iter()
            .enumerate()
            .max_by(|x, y| x.1.total_cmp(y.1))
            .map_or(0, |(i, _)| i)
    };
    // CUDA runs safetensors weights in bf16 (8 mantissa bits) against the CPU's f32: logits
    // agree to a few percent of their range, not to f32 rounding.
    let tolerance = 0.05 * scale;
    Ok(json!({
        "devices": devices,
        "prompt_tokens": rows[0].0,
        "max_abs_diff": max_abs_diff,
        "max_abs_logit": scale,
        "tolerance": tolerance,
        "same_argmax": argmax(a) == argmax(b),
        "agree": max_abs_diff <= tolerance && a.len() == b.len(),
    }))
}
