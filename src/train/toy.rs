//! The toy run: a tiny random-init Qwen2 learning to continue digit sequences ("3456" → "789",
//! one prompt per start digit, so each prompt has its own answer) with partial credit from regex
//! verifiers — the fraction of answer digits right in place. It needs no judge and no download,
//! so it is the first thing to run (`gavel train toy`) and what the "it learns" test trains.
//!
//! The model is a tiny random-weight Qwen2 ([`super::toy_model`]) with its own tokenizer: the
//! ten digits, a few distractors and the three specials, and a chat template that is just the
//! prompt (an assistant turn closed by `<|im_end|>`). A small vocabulary keeps exploration cheap; short prompts
//! keep each step to a few milliseconds of tensor work per token.

use std::path::{Path, PathBuf};

use serde_json::json;

use super::config::TrainConfig;
use super::grpo::LossType;
use super::lora::LoraConfig;
use super::optim::Schedule;
use super::toy_model::{config_json, tensors};
use super::TrainError;
use crate::model::random::added_specials;
use crate::model::tokenizer::{bytes_to_unicode, qwen_tokenizer_json, AddedToken};

/// How much the toy model's output projection is scaled up from the generated one.
pub const LM_HEAD_SCALE: f64 = 3.0;

/// First digits of the toy prompts: every digit, so the policy must read the prompt.
pub const TOY_STARTS: &[u32] = &[0, 1, 2, 3, 4, 5, 6, 7, 8, 9];

/// Digits the policy must produce after each prompt.
pub const ANSWER_DIGITS: usize = 3;

/// Plain tokens of the toy tokenizer besides the digits (wrong answers to unlearn).
const DISTRACTORS: &[u8] = b" ,.";

/// The toy chat template: the prompt's text alone, which the answer continues. An assistant
/// turn ends with `<|im_end|>`, so SFT and offline GRPO on written-out completions learn where an
/// answer stops (and an empty answer is that one token, not nothing).
pub const TOY_TEMPLATE: &str = "{%- for message in messages %}{{- message.content }}\
{%- if message.role == 'assistant' %}<|im_end|>{%- endif %}{%- endfor %}";

/// One toy task line: the prompt `start..start+4` (mod 10) and one verifier per answer digit.
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

fn write_json(path: &Path, v: &serde_json::Value) -> Result<(), TrainError> {
    std::fs::write(path, serde_json::to_string_pretty(v).expect("json"))
        .map_err(TrainError::file(path))
}

/// Writes the toy model folder (config, tokenizer, template, weights) in `dir`.
pub fn write_toy_model(dir: &Path) -> Result<(), TrainError> {
    std::fs::create_dir_all(dir).map_err(TrainError::file(dir))?;
    let table = bytes_to_unicode();
    let vocab: Vec<String> = (b'0'..=b'9')
        .chain(DISTRACTORS.iter().copied())
        .map(|b| table[b as usize].to_string())
        .collect();
    let added: Vec<AddedToken> = added_specials(vocab.len() as u32);
    let id = |s: &str| added.iter().find(|t| t.content == s).expect("special").id;
    write_json(
        &dir.join("tokenizer.json"),
        &qwen_tokenizer_json(&vocab, &[], &added),
    )?;
    write_json(
        &dir.join("tokenizer_config.json"),
        &json!({"tokenizer_class": "Qwen2Tokenizer", "bos_token": null,
            "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "add_bos_token": false,
            "chat_template": TOY_TEMPLATE}),
    )?;
    let eos = [id("<|im_end|>"), id("<|endoftext|>")];
    write_json(
        &dir.join("generation_config.json"),
        &json!({"eos_token_id": eos}),
    )?;
    let config = config_json(id("<|endoftext|>"), id("<|im_end|>"));
    write_json(&dir.join("config.json"), &config)?;
    let mut t = tensors();
    // The generated output projection is too small (±0.2) for any hidden state to make one
    // token likely; scaled up, the policy can become confident, while the random start is still
    // far from the answers.
    let head = t.remove("lm_head.weight").expect("an untied model");
    t.insert("lm_head.weight".into(), (head * LM_HEAD_SCALE)?);
    let file = dir.join("model.safetensors");
    candle_core::safetensors::save(&t, &file).map_err(|e| TrainError::checkpoint_file(&file, e))?;
    Ok(())
}

/// Writes the tiny model and the toy tasks under `dir`; returns (model folder, tasks file).
pub fn write_toy(dir: &Path) -> Result<(PathBuf, PathBuf), TrainError> {
    let model = dir.join("toy-model");
    write_toy_model(&model)?;
    let tasks = dir.join("toy-tasks.jsonl");
    let lines: Vec<String> = TOY_STARTS
        .iter()
        .map(|&s| task_line(s).to_string())
        .collect();
    std::fs::write(&tasks, lines.join("\n") + "\n").map_err(TrainError::file(&tasks))?;
    Ok((model, tasks))
}

/// Writes `cfg` as a `train.toml`, so every later stage (`train sample`, `--sft`, `--offline`,
/// online GRPO) runs on the toy with `--config` and the same settings. Its paths are written
/// relative to the file's folder (they are under it), as `train.toml`'s paths are read.
pub fn write_toy_config(path: &Path, cfg: &TrainConfig) -> Result<(), TrainError> {
    let folder = path.parent().unwrap_or(Path::new(""));
    let beside = |p: &Path| -> PathBuf {
        match p.strip_prefix(folder) {
            Ok(rel) if !folder.as_os_str().is_empty() => rel.to_path_buf(),
            _ => std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf()),
        }
    };
    let mut cfg = cfg.clone();
    cfg.model = beside(&cfg.model);
    cfg.tasks = cfg.tasks.as_deref().map(beside);
    cfg.output_dir = beside(&cfg.output_dir);
    let body = toml::to_string(&cfg).map_err(|e| {
        TrainError::Config(format!(
            "{}: cannot write the toy config: {e}",
            path.display()
        ))
    })?;
    let text = format!(
        "# The toy run's settings, written by `gavel train toy`. Paths are read from this file's\n\
         # folder; every key is also a flag of `gavel train` (a flag wins).\n\n{body}"
    );
    std::fs::write(path, text).map_err(TrainError::file(path))
}

/// The toy run's optimizer steps, unless `--steps` says otherwise.
pub const TOY_STEPS: u64 = 400;
/// The toy run's seed, unless `--seed` says otherwise.
pub const TOY_SEED: u64 = 7;

/// The toy run's settings: on seeds 1-10 each run ends above a mean reward of 0.8 over its last
/// ten steps, within a minute on two cores (release build; BENCHMARKS.md, "Training: the toy run
/// across seeds"). [`constant_toy_config`] with a cosine schedule and dynamic sampling.
pub fn toy_config(model: PathBuf, tasks: PathBuf, output_dir: PathBuf) -> TrainConfig {
    TrainConfig {
        // Decayed to 0 by the last step: at a constant 1e-2 the policy keeps moving, and the
        // reward of the last steps is wherever it moved (seeds 1-10 ended at 0.56-0.94;
        // experiments/toy-seeds/NOTEBOOK.md).
        schedule: Schedule::Cosine,
        // Groups whose rewards all tie teach nothing; late in the run most are solved ones.
        // Drawing again for their places (DAPO) keeps each step's signal.
        dynamic_sampling_rounds: 2,
        ..constant_toy_config(model, tasks, output_dir)
    }
}

/// The toy's model, sampling and loss at a constant learning rate, every group trained as drawn:
/// what tests start from where a schedule over the run's length (a run resumed to more steps)
/// or groups drawn again would be in the way.
pub fn constant_toy_config(model: PathBuf, tasks: PathBuf, output_dir: PathBuf) -> TrainConfig {
    let mut c = TrainConfig {
        model,
        tasks: Some(tasks),
        output_dir,
        steps: TOY_STEPS,
        prompts_per_step: 8,
        group_size: 16,
        micro_batch_groups: 8,
        learning_rate: 1e-2,
        max_grad_norm: 1.0,
        seed: TOY_SEED,
        lora: LoraConfig {
            r: 8,
            alpha: 16.0,
            ..LoraConfig::default()
        },
        ..TrainConfig::default()
    };
    c.sampling.max_tokens = ANSWER_DIGITS;
    // A little heat and a KL pull toward the random start keep groups from collapsing onto one
    // wrong answer (all rewards tied: no signal) before the right one is found.
    c.sampling.temperature = 1.3;
    c.grpo.beta = 0.04;
    c.grpo.loss_type = LossType::Dapo;
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_written_train_toml_reads_back_as_the_toy_config() {
        let dir = tempfile::tempdir().unwrap();
        let t = dir.path().join("t");
        std::fs::create_dir_all(t.join("toy-model")).unwrap();
        let mut c = toy_config(
            t.join("toy-model"),
            t.join("toy-tasks.jsonl"),
            t.join("run"),
        );
        c.seed = 3;
        let path = t.join("train.toml");
        write_toy_config(&path, &c).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("model = \"toy-model\""), "{text}");
        assert!(text.contains("output_dir = \"run\""), "{text}");
        let back = TrainConfig::from_file(&path).unwrap();
        assert_eq!(back, c);
        back.validate().unwrap();
    }
}
