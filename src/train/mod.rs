//! `gavel train`: GRPO on LoRA adapters of a small Qwen, with rewards from the gavel pipeline.
//!
//! - [`model`], [`lora`], [`weights`]: a differentiable Qwen2/Qwen3 with LoRA adapters, loaded
//!   from the same files as the local judge.
//! - [`grpo`]: TRL's GRPO loss variants; [`optim`]: AdamW, clipping and LR schedules.
//! - [`crate::rng`]: the one seeded generator everything random draws from.

pub mod checkpoint;
pub mod cli;
pub mod config;
pub mod grpo;
pub mod lora;
pub mod model;
pub mod offline;
pub mod optim;
pub mod rollout;
pub mod scoring;
pub mod tasks;
pub mod toy;
pub mod trainer;
pub mod weights;

#[cfg(test)]
mod model_tests;

/// Everything that can stop training; each message is one line naming what is wrong.
#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    /// Weights or configuration that do not make a model.
    #[error("{0}")]
    Model(String),
    /// A failed tensor operation.
    #[error("tensor operation failed: {0}")]
    Tensor(String),
    /// A bad option or config file.
    #[error("{0}")]
    Config(String),
    /// A bad input file (tasks, scored groups): `FILE:LINE: problem`.
    #[error("{0}")]
    Input(String),
    /// The scorer failed (a judge failure is never turned into a reward).
    #[error("scoring failed: {0}")]
    Score(String),
    /// Checkpoint files missing or inconsistent.
    #[error("{0}")]
    Checkpoint(String),
    #[error("{0}")]
    Io(String),
}

impl From<candle_core::Error> for TrainError {
    fn from(e: candle_core::Error) -> Self {
        TrainError::Tensor(crate::judge::local::error::one_line(&e.to_string()))
    }
}
