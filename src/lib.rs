//! gavel: a reward service for reinforcement learning of LLM agents.
//!
//! [`domain`] is plain data and functions (trajectories, rubrics, prompts, verdicts, verifiers,
//! rewards); `score` runs the pipeline over them; only `judge` talks to judges, only `store` to
//! databases, only `server` to HTTP; `model` reads the Qwen models that the local judge and
//! `train` run; [`toolkit`] is what the command-line tools share. ARCHITECTURE.md draws the
//! layers, and `tests/layers.rs` fails when a module imports a layer above it.

pub mod cli;
pub mod config;
#[cfg(feature = "train")]
pub mod devbench;
pub mod diff;
pub mod domain;
pub mod eval;
pub mod judge;
pub mod lint;
/// Qwen models in candle, shared by the local judge and the trainer (`train` turns `local` on).
#[cfg(feature = "local")]
pub mod model;
pub mod openrlhf;
pub mod rescore;
pub mod score;
pub mod server;
pub mod store;
pub mod toolkit;
#[cfg(feature = "train")]
pub mod train;
