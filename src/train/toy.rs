//! The toy run: a tiny random-init Qwen2 (the judge's test model) learning to continue digit
//! sequences ("3456" → "789") with partial credit from regex verifiers — one point per right
//! digit in place, a little for any digit in place. It needs no judge and no download, so it is
//! the first thing to run (`gavel train toy`) and what the "it learns" test trains.

use std::path::{Path, PathBuf};

use serde_json::json;

use super::config::TrainConfig;
use super::grpo::LossType;
use super::lora::LoraConfig;
use super::TrainError;
use crate::judge::local::loader::Arch;
use crate::judge::local::testkit::{write_folder, TinyOptions};

/// How much the toy model's output projection is scaled up from the test model's.
pub const LM_HEAD_SCALE: f64 = 3.0;

/// First digits of the toy prompts (a tiny random model with adapters learns a couple of
/// prompt-dependent answers in a minute; ten make it collapse onto one answer first).
pub const TOY_STARTS: &[u32] = &[0];

/// Digits the policy must produce after each prompt.
pub const ANSWER_DIGITS: usize = 3;

/// One toy task line: the prompt `start..start+4` (mod 10) and verifiers for the next digits.
pub fn task_line(start: u32) -> serde_json::Value {
    let digit = |k: u32| char::from_digit((start + k) % 10, 10).expect("digit");
    let prompt: String = (0..4).map(digit).collect();
    let mut verifiers = Vec::new();
    let mut weights = serde_json::Map::new();
    for i in 0..ANSWER_DIGITS {
        let any = ".".repeat(i);
        let want = digit(4 + i as u32);
        verifiers.push(json!({"type": "regex", "name": format!("digit{i}"), "pattern": format!("^{any}{want}")}));
        weights.insert(format!("digit{i}"), json!(1.0));
    }
    json!({
        "messages": [{"role": "user", "content": prompt}],
        "verifiers": verifiers,
        "policy": {"type": "weighted", "weights": weights}
    })
}

/// Writes the tiny model and the toy tasks under `dir`; returns (model folder, tasks file).
pub fn write_toy(dir: &Path) -> Result<(PathBuf, PathBuf), TrainError> {
    let model = dir.join("toy-model");
    let io = |e: &dyn std::fmt::Display| TrainError::Io(format!("{}: {e}", model.display()));
    write_folder(&model, &TinyOptions::new(Arch::Qwen2)).map_err(|e| io(&e))?;
    // The test model's output projection is too small (±0.2) for any hidden state to make one
    // token likely; scaled up, the policy can become confident, while the random start is still
    // close to uniform.
    let file = model.join("model.safetensors");
    let mut tensors = candle_core::safetensors::load(&file, &candle_core::Device::Cpu)?;
    let head = tensors
        .remove("lm_head.weight")
        .ok_or_else(|| io(&"no lm_head.weight"))?;
    tensors.insert("lm_head.weight".into(), (head * LM_HEAD_SCALE)?);
    candle_core::safetensors::save(&tensors, &file)?;
    let tasks = dir.join("toy-tasks.jsonl");
    let lines: Vec<String> = TOY_STARTS
        .iter()
        .map(|&s| task_line(s).to_string())
        .collect();
    std::fs::write(&tasks, lines.join("\n") + "\n")
        .map_err(|e| TrainError::Io(format!("{}: {e}", tasks.display())))?;
    Ok((model, tasks))
}

/// The toy run's settings (tuned to learn in about a minute on two cores, debug build).
pub fn toy_config(model: PathBuf, tasks: PathBuf, output_dir: PathBuf) -> TrainConfig {
    let mut c = TrainConfig {
        model,
        tasks: Some(tasks),
        output_dir,
        steps: 90,
        prompts_per_step: 4,
        group_size: 16,
        learning_rate: 3e-3,
        max_grad_norm: 1.0,
        seed: 7,
        lora: LoraConfig {
            r: 8,
            alpha: 16.0,
            ..LoraConfig::default()
        },
        ..TrainConfig::default()
    };
    c.sampling.max_tokens = ANSWER_DIGITS;
    c.grpo.loss_type = LossType::Dapo;
    c
}
