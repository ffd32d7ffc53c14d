//! The local judge: a Qwen model run in-process with candle, built on [`crate::model`] (files,
//! config, tokenizer, chat template, devices, errors).
//!
//! - [`constrain`]: the verdict grammar and token masks (pure; always built).
//! - [`model`]: [`model::LocalModelSpec`] → [`model::LoadedModel`] (the opened model files'
//!   tokenizer, byte vocabulary, EOS ids and chat template, and the network built from their
//!   weights) and its forward pass.
//!   The network itself ([`crate::model::infer`]) is shared with the judge trainer.
//! - [`request`]: what the engine is asked and answers; [`engine`]: the owner thread, its
//!   bounded queue, its health (a watch channel) and the cloneable handle; `job` (what a job
//!   asks and answers); `model_thread` (the
//!   thread's loop: jobs in order, generations decoded in batches), `generate` (prefill from
//!   the best cached prefix, constrained decoding, a batch's step), `reading` (a group's choice
//!   probabilities, its prompts packed into batched forwards) and `prefix_cache` run on the
//!   thread.
//! - [`LocalJudge`]: the judge backend (`backend = "local"`) over an engine; [`shared`]: judges
//!   on one model share one engine, each with its own adapter.
//!
//! Everything but `constrain` needs the `local` feature (on by default); `cuda` adds GPUs. This
//! module and `train` never import each other: what both need is in [`crate::model`].

pub mod constrain;

#[cfg(feature = "local")]
pub mod engine;
#[cfg(feature = "local")]
mod generate;
#[cfg(feature = "local")]
mod job;
#[cfg(feature = "local")]
mod judge;
#[cfg(feature = "local")]
pub mod model;
#[cfg(feature = "local")]
mod model_thread;
#[cfg(feature = "local")]
mod prefix_cache;
#[cfg(feature = "local")]
mod reading;
#[cfg(feature = "local")]
pub mod request;
#[cfg(feature = "local")]
pub mod shared;

#[cfg(feature = "local")]
pub use engine::Engine;
#[cfg(feature = "local")]
pub use judge::LocalJudge;
#[cfg(feature = "local")]
pub use model::{LoadedModel, LocalModelSpec};
#[cfg(feature = "local")]
pub use request::{EngineError, EngineSettings, Generated, ReadRequest, Reading, Request};
