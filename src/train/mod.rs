//! `gavel train`: GRPO (or SFT) on LoRA adapters of a small Qwen, with rewards from the gavel pipeline.
//!
//! - [`model`], [`lora`]: a differentiable Qwen2/Qwen3 with LoRA adapters, built from the dense
//!   tensors of [`crate::model::ModelFiles`] (the same files, config, tokenizer and chat
//!   template the local judge reads, opened once); [`kv_cache`]: its keys and values, and the
//!   left padding that lets prompts of different lengths decode in one batch.
//! - [`rollout`]: the policy (that model, the tokenizer and template) and sampling;
//!   [`trainer`]: the GRPO loop; [`offline`]: training on already-scored groups;
//!   [`scoring`]: rewards from the gavel pipeline; [`tasks`]: the prompts file; [`sft`]:
//!   supervised fine-tuning on chat examples with the same model, optimizer and checkpoints.
//! - [`grpo`]: TRL's GRPO loss variants; [`optim`]: AdamW, clipping and LR schedules;
//!   [`checkpoint`]: PEFT adapter files and optimizer state.
//! - [`filter`]: the difficulty filter (tasks kept by their pass rate under the policy).
//! - [`judge`]: `gavel train judge`, LoRA on a local judge's verdict token (its own model: the
//!   inference network's features, a differentiable head over the top layers).
//! - [`toy`]: `gavel train toy`, with its own tiny model ([`toy_model`]).
//! - [`plan`]: what one `gavel train` runs (the binary's flags make it); [`config`]: the TOML
//!   config the flags override; [`run_dir`]: the output folder a run starts in, continues
//!   (`--resume`) or starts again over (`--overwrite`).
//! - [`crate::domain::rng`]: the one seeded generator everything random draws from.
//!
//! This module and `judge::local` never import each other: what both need is in
//! [`crate::model`].

pub mod checkpoint;
pub mod config;
pub mod filter;
mod frozen;
pub mod grpo;
pub mod judge;
pub mod kv_cache;
pub mod lora;
mod lora_op;
pub mod model;
pub mod offline;
pub mod optim;
pub mod plan;
pub mod rollout;
pub mod run_dir;
pub mod run_log;
pub mod sample;
pub mod scoring;
pub mod sft;
pub mod survey;
pub mod tasks;
pub mod toy;
pub mod toy_model;
pub mod trainer;

#[cfg(test)]
mod model_tests;

/// Everything that can stop training; each message is one line naming what is wrong.
#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    /// Weights or configuration that do not make a model.
    #[error("{0}")]
    Model(String),
    /// The model's files, tokenizer or device refused: the loader's own error, shown as it is.
    #[error(transparent)]
    Load(#[from] crate::model::LocalError),
    /// A failed tensor operation. candle's error is kept for callers to inspect, but is not
    /// this error's `source`: its message can run to several lines (a backtrace), and `main`
    /// prints the whole source chain; the message shows its first line.
    #[error("tensor operation failed: {}", crate::model::error::one_line(&.0.to_string()))]
    Tensor(candle_core::Error),
    /// A bad option or config file.
    #[error("{0}")]
    Config(String),
    /// A bad input file (tasks, scored groups): `FILE:LINE: problem`.
    #[error("{0}")]
    Input(String),
    /// A group got no rewards (a judge failure is never turned into a reward): where (the
    /// task's `FILE:LINE`, when there is one), and why, kept as the source.
    #[error("scoring failed: {}{source}", at.as_deref().map(|a| format!("{a}: ")).unwrap_or_default())]
    Score {
        at: Option<String>,
        source: scoring::ScoreFailure,
    },
    /// Checkpoint or saved-model files missing, inconsistent or not written.
    #[error("{0}")]
    Checkpoint(String),
    /// A file that could not be read, written or made.
    #[error("{}: {source}", path.display())]
    File {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    /// A checkpoint, adapter, model or feature file that could not be read, written or
    /// understood: which file, and why (the reader's or writer's own error, kept as the source).
    #[error("{}: {source}", path.display())]
    CheckpointFile {
        path: std::path::PathBuf,
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The scorer's config or store refused (the in-process scorer of a training run).
    #[error(transparent)]
    Scorer(#[from] crate::cli::CliError),
    /// A scored-groups file that cannot be read, or a line of it that is not a scored group.
    #[error(transparent)]
    Scored(#[from] crate::toolkit::scored::ScoredError),
    /// The verdict store refused (flushing a run's verdicts).
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    /// The blocking thread that runs training panicked or was cancelled.
    #[error("the training thread failed: {0}")]
    Thread(#[source] tokio::task::JoinError),
}

impl TrainError {
    /// `map_err(TrainError::file(path))`: an I/O error on `path`, kept as the source.
    pub fn file(path: &std::path::Path) -> impl Fn(std::io::Error) -> TrainError + Copy + '_ {
        move |source| TrainError::File {
            path: path.to_path_buf(),
            source,
        }
    }

    /// A [`TrainError::CheckpointFile`] for `path`, caused by `source` (an error, or a message
    /// saying what is wrong with the file).
    pub fn checkpoint_file(
        path: &std::path::Path,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> TrainError {
        TrainError::CheckpointFile {
            path: path.to_path_buf(),
            source: source.into(),
        }
    }
}

impl From<candle_core::Error> for TrainError {
    fn from(e: candle_core::Error) -> Self {
        TrainError::Tensor(e)
    }
}

#[cfg(test)]
mod error_tests {
    use std::path::PathBuf;

    use super::TrainError;
    use crate::model::LocalError;

    /// The error as `main` prints it: the error, then each cause it does not already name.
    fn printed(e: TrainError) -> String {
        crate::domain::error_chain::with_causes(&*anyhow::Error::from(e))
    }

    #[test]
    fn tensor_and_load_errors_keep_their_errors_and_print_one_line_once() {
        let e = TrainError::from(candle_core::Error::Msg("shapes differ\n  backtrace".into()));
        let kept =
            matches!(&e, TrainError::Tensor(candle_core::Error::Msg(m)) if m.contains("backtrace"));
        assert!(kept, "{e:?}");
        assert_eq!(printed(e), "tensor operation failed: shapes differ");

        let e = TrainError::from(LocalError::NotFound(PathBuf::from("m.gguf")));
        let kept = matches!(&e, TrainError::Load(LocalError::NotFound(p)) if p.ends_with("m.gguf"));
        assert!(kept, "{e:?}");
        let alone = LocalError::NotFound(PathBuf::from("m.gguf")).to_string();
        assert_eq!(printed(e), alone);
    }

    #[test]
    fn a_file_error_names_the_file_keeps_the_io_error_and_prints_its_cause_once() {
        let dir = std::env::temp_dir().join("gavel-train-error-test-no-such-dir");
        let path = dir.join("metrics.jsonl");
        let e = std::fs::read_to_string(&path)
            .map_err(TrainError::file(&path))
            .expect_err("no such file");
        let kind = match &e {
            TrainError::File { path: p, source } if p == &path => source.kind(),
            other => panic!("{other:?}"),
        };
        assert_eq!(kind, std::io::ErrorKind::NotFound);
        let source = std::error::Error::source(&e).expect("the io error is the source");
        let cause = source.to_string();
        let text = printed(e);
        assert!(text.starts_with(&format!("{}: ", path.display())), "{text}");
        assert_eq!(text.matches(&cause).count(), 1, "{text}");
    }

    #[test]
    fn a_checkpoint_file_error_keeps_the_readers_error() {
        let path = PathBuf::from("run/checkpoint-3/trainer_state.json");
        let parse = serde_json::from_str::<serde_json::Value>("{").unwrap_err();
        let e = TrainError::checkpoint_file(&path, parse);
        let kept = match &e {
            TrainError::CheckpointFile { path: p, source } if p == &path => {
                source.downcast_ref::<serde_json::Error>().is_some()
            }
            other => panic!("{other:?}"),
        };
        assert!(kept, "{e:?}");
        let text = printed(e);
        assert!(
            text.starts_with("run/checkpoint-3/trainer_state.json: EOF while parsing"),
            "{text}"
        );
        assert_eq!(text.matches("EOF while parsing").count(), 1, "{text}");
        // A message about the file reads the same way.
        let e = TrainError::checkpoint_file(&path, "missing (not a checkpoint directory?)");
        assert_eq!(
            printed(e),
            "run/checkpoint-3/trainer_state.json: missing (not a checkpoint directory?)"
        );
    }
}
