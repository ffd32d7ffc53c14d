//! The local judge: a Qwen model run in-process with candle.
//!
//! - [`constrain`]: the verdict grammar and token masks (pure; always built).
//! - [`model`]: [`model::LocalModelSpec`] → [`model::LoadedModel`] (weights from a GGUF file or
//!   a Hugging Face folder, tokenizer, byte vocabulary, EOS ids, chat template) and its forward
//!   pass.
//! - [`tokenizer`], [`chat_template`], [`loader`]: the parts of loading and prompting.
//! - `qwen`: the network (Qwen2/Qwen3, GGUF or safetensors) with a KV cache that can be
//!   snapshotted and cut, for prefix reuse.
//! - [`engine`]: the owner thread, its bounded queue and the cloneable handle; `generate`
//!   (prefill from the best cached prefix, constrained decoding) and `prefix_cache` run on it.
//! - [`LocalJudge`]: the judge backend (`backend = "local"`) over an engine.
//! - [`testkit`]: tiny random-weight models written to disk, for tests.
//!
//! Everything but `constrain` needs the `local` feature (on by default); `cuda` adds GPUs.

pub mod constrain;

#[cfg(feature = "local")]
pub mod chat_template;
#[cfg(feature = "local")]
pub mod engine;
#[cfg(feature = "local")]
pub mod error;
#[cfg(feature = "local")]
mod fused;
#[cfg(feature = "local")]
mod gemv;
#[cfg(feature = "local")]
mod generate;
#[cfg(feature = "local")]
mod judge;
#[cfg(feature = "local")]
mod layer;
#[cfg(feature = "local")]
pub mod loader;
#[cfg(feature = "local")]
pub mod model;
#[cfg(feature = "local")]
mod prefix_cache;
#[cfg(feature = "local")]
mod qwen;
#[cfg(feature = "local")]
#[doc(hidden)]
pub mod testkit;
#[cfg(feature = "local")]
pub mod tokenizer;

#[cfg(feature = "local")]
pub use chat_template::{ChatTemplate, RenderOptions, TemplateOrigin};
#[cfg(feature = "local")]
pub use engine::{Engine, EngineError, EngineSettings, Generated, ProbeRequest, Probed, Request};
#[cfg(feature = "local")]
pub use error::LocalError;
#[cfg(feature = "local")]
pub use judge::LocalJudge;
#[cfg(feature = "local")]
pub use loader::{Arch, ModelFormat, ModelInfo};
#[cfg(feature = "local")]
pub use model::{DeviceSpec, LoadedModel, LocalModelSpec};
