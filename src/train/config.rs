//! `train.toml`: every option of `gavel train` (each is also a flag; see `cli`). Relative paths
//! in the file are read from its folder ([`TrainConfig::from_file`]).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::filter::FilterConfig;
use super::grpo::GrpoConfig;
use super::lora::LoraConfig;
use super::optim::{AdamWConfig, Schedule};
use super::rollout::SamplingConfig;
use super::TrainError;
use crate::domain::config_path::{folder_of, in_folder};
use crate::model::hub::config_model_path;

/// Most extra draws of a step under dynamic sampling.
pub const MAX_DYNAMIC_SAMPLING_ROUNDS: u32 = 16;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TrainConfig {
    /// The policy's base weights: a model folder, a GGUF file, or a Hugging Face model id.
    pub model: PathBuf,
    /// `cpu` or `cuda:N`.
    pub device: String,
    /// Prompts and their scoring (JSONL).
    pub tasks: Option<PathBuf>,
    /// Scored groups to train on without sampling (`gavel rescore` output or request bodies
    /// with rewards); instead of `tasks`.
    pub offline: Option<PathBuf>,
    /// Chat examples to fine-tune on with supervised learning (SFT; `{"messages": [...]}` a
    /// line); instead of `tasks` or `offline`.
    pub sft: Option<PathBuf>,
    /// Start from this adapter (a checkpoint folder or PEFT files): its LoRA weights, a fresh
    /// optimizer and step 0 (`--resume` instead continues a run).
    pub init_adapter: Option<PathBuf>,
    /// SFT: examples per optimizer step.
    pub sft_batch_size: usize,
    /// SFT: padded tokens (rows × longest row) per forward/backward pass; examples of similar
    /// length share a pass, a longer example gets one of its own.
    pub sft_micro_batch_tokens: usize,
    /// Score over HTTP against a running daemon instead of in-process.
    pub scorer_url: Option<String>,
    /// Checkpoints and metrics.jsonl go here.
    pub output_dir: PathBuf,
    /// Optimizer steps in all.
    pub steps: u64,
    /// Prompts per step (each one group, one micro-batch).
    pub prompts_per_step: usize,
    /// Completions per prompt (TRL's num_generations).
    pub group_size: usize,
    /// Groups per forward/backward pass (the gradient is accumulated over the passes of a
    /// step); more is faster for small models, fewer needs less memory.
    pub micro_batch_groups: usize,
    pub learning_rate: f64,
    pub schedule: Schedule,
    pub warmup_steps: u64,
    /// Clip the global gradient norm to this (0 = off).
    pub max_grad_norm: f64,
    pub seed: u64,
    /// Save a checkpoint every N steps (0 = only at the end).
    pub save_every: u64,
    pub sampling: SamplingConfig,
    pub lora: LoraConfig,
    pub grpo: GrpoConfig,
    pub adamw: AdamWConfig,
    /// `[filter]`: sample only tasks the policy sometimes solves (online; off when absent).
    pub filter: Option<FilterConfig>,
    /// A control run: each group's rewards (and their advantages) are permuted at random
    /// within the group before the loss, a reward that carries no information about which
    /// completion earned it (seeded by `seed`, the step and the group).
    pub shuffle_rewards: bool,
    /// Dynamic sampling (DAPO): when groups of an online step tie (every completion the same
    /// reward, so GRPO learns nothing from them), draw prompts again for the missing groups, up
    /// to this many extra rounds a step (0 = off, at most 16). A step then trains on
    /// `prompts_per_step` groups with spread where the rounds find them; tied groups fill what
    /// is still missing.
    pub dynamic_sampling_rounds: u32,
}

impl Default for TrainConfig {
    fn default() -> Self {
        TrainConfig {
            model: PathBuf::new(),
            device: "cpu".into(),
            tasks: None,
            offline: None,
            sft: None,
            init_adapter: None,
            sft_batch_size: 8,
            sft_micro_batch_tokens: 2048,
            scorer_url: None,
            output_dir: PathBuf::from("gavel-train"),
            steps: 100,
            prompts_per_step: 4,
            group_size: 8,
            micro_batch_groups: 1,
            learning_rate: 1e-5,
            schedule: Schedule::Constant,
            warmup_steps: 0,
            max_grad_norm: 1.0,
            seed: 0,
            save_every: 0,
            sampling: SamplingConfig::default(),
            lora: LoraConfig::default(),
            grpo: GrpoConfig::default(),
            adamw: AdamWConfig::default(),
            filter: None,
            shuffle_rewards: false,
            dynamic_sampling_rounds: 0,
        }
    }
}

/// What a run trains on: one of train.toml's `tasks`, `offline` and `sft` (`gavel train judge`
/// is an action of its own, with its own inputs).
#[derive(Debug, Clone, PartialEq)]
pub enum TrainSource {
    /// Prompts the policy answers, scored as it trains (online GRPO).
    Tasks(PathBuf),
    /// Groups scored before, no sampling (offline GRPO).
    Offline(PathBuf),
    /// Chat examples (supervised fine-tuning).
    Sft(PathBuf),
}

impl TrainConfig {
    /// The one source of training examples the config sets; none, or two, is refused.
    pub fn source(&self) -> Result<TrainSource, TrainError> {
        let err = |m: &str| Err(TrainError::Config(m.into()));
        match (&self.tasks, &self.offline, &self.sft) {
            (Some(t), None, None) => Ok(TrainSource::Tasks(t.clone())),
            (None, Some(o), None) => Ok(TrainSource::Offline(o.clone())),
            (None, None, Some(s)) => Ok(TrainSource::Sft(s.clone())),
            (None, None, None) => err(
                "no tasks: set `tasks` (a JSONL file of prompts), `offline` (scored groups) or \
                 `sft` (chat examples)",
            ),
            (Some(_), Some(_), _) => {
                err("`tasks` and `offline` both set: train on one or the other")
            }
            (_, _, Some(_)) => err(
                "`sft` and `tasks`/`offline` both set: SFT trains on chat examples, not on \
                 prompts or scored groups; set one",
            ),
        }
    }

    /// Reads a `train.toml`. Its relative paths (`model`, unless nothing is there and it reads
    /// as a Hugging Face id; `tasks`, `offline`, `sft`, `init_adapter`, `output_dir`) are read
    /// from the file's folder, as `gavel.toml`'s are; a flag's or environment variable's path
    /// (`--tasks`, `GAVEL_TRAIN_OUTPUT_DIR`) from the current directory.
    pub fn from_file(path: &Path) -> Result<TrainConfig, TrainError> {
        let text = std::fs::read_to_string(path).map_err(TrainError::file(path))?;
        let mut c: TrainConfig = toml::from_str(&text).map_err(|e| {
            let line = e
                .span()
                .map(|s| text[..s.start].matches('\n').count() + 1)
                .unwrap_or(1);
            TrainError::Config(format!(
                "{}:{line}: {}",
                path.display(),
                e.message().lines().next().unwrap_or("invalid")
            ))
        })?;
        c.read_paths_from(folder_of(path), &text);
        Ok(c)
    }

    /// Reads the relative paths the file (`text`) wrote from `folder`, the file's own; the
    /// built-in default of a key it leaves out (`output_dir`) stays the current directory's.
    fn read_paths_from(&mut self, folder: &Path, text: &str) {
        let written = toml::from_str::<toml::Table>(text).unwrap_or_default();
        let has = |key: &str| written.contains_key(key);
        if has("model") {
            self.model = config_model_path(folder, &self.model);
        }
        if has("output_dir") {
            self.output_dir = in_folder(folder, &self.output_dir);
        }
        for p in [
            &mut self.tasks,
            &mut self.offline,
            &mut self.sft,
            &mut self.init_adapter,
        ]
        .into_iter()
        .flatten()
        {
            *p = in_folder(folder, p);
        }
    }

    /// Checks every number and that the inputs are named, for training: a group needs two
    /// completions or more (one has no advantage).
    pub fn validate(&self) -> Result<(), TrainError> {
        self.check(2)
    }

    /// [`TrainConfig::validate`] for `train sample`, where a group of one is a policy's answer
    /// to each task (with `temperature = 0`, its greedy answer: what an evaluation reads).
    pub fn validate_for_sampling(&self) -> Result<(), TrainError> {
        self.check(1)
    }

    fn check(&self, min_group: usize) -> Result<(), TrainError> {
        let err = |m: String| Err(TrainError::Config(m));
        if self.model.as_os_str().is_empty() {
            return err(
                "no model: set `model` (a model folder, a GGUF file or a Hugging Face model id)"
                    .into(),
            );
        }
        self.source()?;
        if self.sft_batch_size == 0 || self.sft_micro_batch_tokens == 0 {
            return err("sft_batch_size and sft_micro_batch_tokens must be >= 1".into());
        }
        if self.prompts_per_step == 0 || self.group_size < min_group || self.micro_batch_groups == 0
        {
            return err(format!(
                "prompts_per_step and micro_batch_groups must be >= 1, group_size >= {min_group}"
            ));
        }
        if self.dynamic_sampling_rounds > MAX_DYNAMIC_SAMPLING_ROUNDS {
            return err(format!(
                "dynamic_sampling_rounds must be at most {MAX_DYNAMIC_SAMPLING_ROUNDS} (each round \
                 samples and scores up to prompts_per_step more groups), got {}",
                self.dynamic_sampling_rounds
            ));
        }
        if !(self.learning_rate > 0.0 && self.learning_rate.is_finite()) {
            return err(format!(
                "learning_rate must be > 0, got {}",
                self.learning_rate
            ));
        }
        self.sampling.validate().map_err(TrainError::Config)?;
        self.lora.validate().map_err(TrainError::Config)?;
        self.grpo.validate().map_err(TrainError::Config)?;
        if let Some(f) = &self.filter {
            if self.offline.is_some() {
                return err(
                    "filter: set with `offline`; the difficulty filter surveys `tasks`".into(),
                );
            }
            f.validate().map_err(TrainError::Config)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dynamic_sampling_rounds_are_bounded() {
        let mut c = TrainConfig {
            model: "m.gguf".into(),
            tasks: Some("t.jsonl".into()),
            dynamic_sampling_rounds: MAX_DYNAMIC_SAMPLING_ROUNDS,
            ..TrainConfig::default()
        };
        c.validate().unwrap();
        c.dynamic_sampling_rounds += 1;
        let err = c.validate().unwrap_err().to_string();
        assert!(
            err.contains("dynamic_sampling_rounds must be at most 16"),
            "{err}"
        );
    }

    #[test]
    fn example_config_parses_and_bad_keys_name_the_line() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/train.toml");
        let c = TrainConfig::from_file(Path::new(path)).unwrap();
        assert_eq!(c.lora.r, 16);
        assert_eq!(c.grpo.epsilon_high, Some(0.28));
        assert_eq!(c.schedule, Schedule::Cosine);
        c.validate().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let bad = dir.path().join("t.toml");
        std::fs::write(&bad, "steps = 3\nlearning_rat = 1.0\n").unwrap();
        let e = TrainConfig::from_file(&bad).unwrap_err().to_string();
        assert!(e.contains("t.toml:2: unknown field `learning_rat`"), "{e}");
    }

    /// A group of one is a policy's answer to each task: `train sample` takes it, training
    /// does not (it has no advantage).
    #[test]
    fn a_group_of_one_samples_but_does_not_train() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/train.toml");
        let mut c = TrainConfig::from_file(Path::new(path)).unwrap();
        c.group_size = 1;
        c.validate_for_sampling().unwrap();
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("group_size >= 2"), "{e}");
        c.group_size = 0;
        let e = c.validate_for_sampling().unwrap_err().to_string();
        assert!(e.contains("group_size >= 1"), "{e}");
    }

    /// Exactly one of `tasks`, `offline` and `sft` is the source; none or two are refused,
    /// each with the keys it names.
    #[test]
    fn the_source_is_the_one_input_set() {
        let p = |s: &str| Some(PathBuf::from(s));
        let with = |tasks, offline, sft| TrainConfig {
            tasks,
            offline,
            sft,
            ..TrainConfig::default()
        };
        let t = with(p("t"), None, None).source().unwrap();
        assert_eq!(t, TrainSource::Tasks("t".into()));
        let o = with(None, p("o"), None).source().unwrap();
        assert_eq!(o, TrainSource::Offline("o".into()));
        let s = with(None, None, p("s")).source().unwrap();
        assert_eq!(s, TrainSource::Sft("s".into()));
        for (c, want) in [
            (with(None, None, None), "no tasks"),
            (with(p("t"), p("o"), None), "`tasks` and `offline` both set"),
            (
                with(p("t"), p("o"), p("s")),
                "`tasks` and `offline` both set",
            ),
            (
                with(p("t"), None, p("s")),
                "`sft` and `tasks`/`offline` both set",
            ),
            (
                with(None, p("o"), p("s")),
                "`sft` and `tasks`/`offline` both set",
            ),
        ] {
            let e = c.source().unwrap_err().to_string();
            assert!(e.contains(want), "{e}");
        }
    }

    #[test]
    fn relative_paths_are_read_from_the_file_folder() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cfg/train.toml");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(
            &path,
            "model = \"Qwen/Qwen2.5-0.5B-Instruct\"\ntasks = \"t.jsonl\"\n\
             init_adapter = \"/abs/a\"\noutput_dir = \"../run\"\n",
        )
        .unwrap();
        let c = TrainConfig::from_file(&path).unwrap();
        let folder = dir.path().join("cfg");
        assert_eq!(c.model, Path::new("Qwen/Qwen2.5-0.5B-Instruct"));
        assert_eq!(c.tasks, Some(folder.join("t.jsonl")));
        assert_eq!(c.init_adapter, Some(PathBuf::from("/abs/a")));
        assert_eq!(c.output_dir, folder.join("../run"));
        std::fs::write(&path, "model = \"m.gguf\"\n").unwrap();
        let c = TrainConfig::from_file(&path).unwrap();
        assert_eq!(c.model, folder.join("m.gguf"));
        assert_eq!(
            c.output_dir,
            Path::new("gavel-train"),
            "a default stays the cwd's"
        );
    }

    #[test]
    fn a_partial_lora_table_keeps_the_other_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.toml");
        std::fs::write(&path, "[lora]\nr = 4\n").unwrap();
        let c = TrainConfig::from_file(&path).unwrap();
        assert_eq!(c.lora.r, 4);
        let d = LoraConfig::default();
        assert_eq!(c.lora.alpha, d.alpha);
        assert_eq!(c.lora.target_modules, d.target_modules);
        c.lora.validate().unwrap();
    }
}
