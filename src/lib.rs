//! gavel: a reward service for reinforcement learning of LLM agents.
//!
//! The core (`trajectory`, `dedup`, `prompt`, `rubric`, `verdict`, `verify`, `reward`) is plain data and
//! functions; `score` runs the pipeline over them; only `judge` talks to judges, only `store` to
//! databases, only `server` to HTTP; `model` reads the Qwen models that the local judge and
//! `train` run.

pub mod cli;
pub mod config;
pub mod dedup;
#[cfg(feature = "train")]
pub mod devbench;
pub mod diff;
pub mod eval;
pub mod groupfile;
pub mod html;
pub mod input;
pub mod json_text;
pub mod judge;
pub mod lint;
/// Qwen models in candle, shared by the local judge and the trainer (`train` turns `local` on).
#[cfg(feature = "local")]
pub mod model;
pub mod openrlhf;
pub mod output_file;
pub mod prompt;
pub mod rescore;
pub mod reward;
pub mod rng;
pub mod rubric;
pub mod score;
pub mod scored;
pub mod seconds;
pub mod secret;
pub mod select;
pub mod server;
pub mod store;
#[cfg(feature = "train")]
pub mod train;
pub mod trajectory;
pub mod verdict;
pub mod verify;
