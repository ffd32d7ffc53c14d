//! What `gavel train judge` is asked to do, as plain data (the binary's flags fill it).

use std::path::PathBuf;

use crate::domain::prompt::JudgeMode;
use crate::model::adapter::{LoraConfig, Reach};
use crate::train::TrainError;

/// LoRA training of a local judge's verdict: the data, the model and the fit.
#[derive(Debug, Clone)]
pub struct JudgeTrainOptions {
    /// The local judge's base model: a GGUF file, a model folder, or a Hugging Face model id.
    pub model: PathBuf,
    /// `cpu` or `cuda:N`.
    pub device: String,
    /// Labelled group files to train on (`gavel eval`'s format: a group and its `labels`).
    pub train: Vec<PathBuf>,
    /// Labelled group files that choose the best checkpoint (never trained on).
    pub dev: Vec<PathBuf>,
    /// Distil this judge (a name in `scorer_config`): its scores of `teacher_groups` are soft
    /// targets.
    pub teacher: Option<String>,
    /// Group files the teacher's scores are taken for.
    pub teacher_groups: Vec<PathBuf>,
    /// gavel.toml: rubrics, templates and dedup the prompts are rendered with, and the teacher
    /// judge and its store.
    pub scorer_config: Option<PathBuf>,
    /// Verdict store directory of the teacher's verdicts.
    pub store: Option<PathBuf>,
    /// Modes to train (one adapter serves them all); never listwise.
    pub modes: Vec<JudgeMode>,
    /// Adapt the top K layers.
    pub layers: usize,
    /// Which positions the adapter changes.
    pub reach: Reach,
    pub rank: usize,
    pub alpha: f64,
    pub epochs: u64,
    pub batch_size: usize,
    pub learning_rate: f64,
    /// Measure the dev split (and keep the best checkpoint) every N steps, and at the end.
    pub eval_every: u64,
    /// Weigh examples so that labels favouring the longer and the shorter trajectory count the
    /// same, per mode.
    pub balance_length: bool,
    /// Use at most this many training groups.
    pub max_groups: Option<usize>,
    /// In groups of more than 8 distinct trajectories, the pairs asked.
    pub pairwise_opponents: usize,
    pub seed: u64,
    /// Checkpoints, metrics.jsonl and the best adapter (best/).
    pub output: PathBuf,
    /// Where the frozen model's features of each split are kept [default: OUTPUT/features].
    pub features: Option<PathBuf>,
    /// Continue from the last checkpoint in `output`.
    pub resume: bool,
    /// No progress bar.
    pub quiet: bool,
    /// `--augment attacks`: attacked copies of the training groups.
    pub augment: Option<super::Augment>,
}

impl JudgeTrainOptions {
    /// Refuses options that do not make a run, before anything is read or opened; the
    /// adapter's LoRA configuration.
    pub fn validate(&self) -> Result<LoraConfig, TrainError> {
        let refuse = |m: &str| Err(TrainError::Config(m.to_string()));
        if self.train.is_empty() && self.teacher.is_none() {
            return refuse("train judge needs --train FILE (labelled groups) or --teacher NAME");
        }
        if self.teacher.is_some() == self.teacher_groups.is_empty() {
            return refuse("--teacher and --teacher-groups go together");
        }
        if self.dev.is_empty() && self.teacher.is_none() {
            return refuse("train judge needs --dev FILE: the best checkpoint is chosen on it");
        }
        if self.layers == 0 || self.batch_size == 0 || self.epochs == 0 {
            return refuse("--layers, --batch-size and --epochs must be at least 1");
        }
        let lora = LoraConfig {
            r: self.rank,
            alpha: self.alpha,
            ..LoraConfig::default()
        };
        lora.validate().map_err(TrainError::Config)?;
        Ok(lora)
    }
}
