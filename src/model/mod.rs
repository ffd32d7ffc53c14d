//! Qwen2/Qwen3 models in candle, as both the local judge (`judge::local`) and the trainer
//! (`train`) read them: this layer knows the files, not what is done with the weights.
//!
//! - [`Arch`] and [`QwenConfig`]: one shape type, deserialised from a Hugging Face
//!   `config.json` or built from a GGUF file's metadata ([`config`]).
//! - [`ModelFiles`]: a model path opened once ([`loader`]): format and weight files found,
//!   config, tokenizer and chat template parsed, the GGUF header read; the weights are not read
//!   yet. The judge builds its inference network from it, the trainer its dense tensors
//!   ([`ModelFiles::dense`], in [`dense`]), so neither reads the files a second time.
//! - [`tokenizer`]: Qwen's byte-level BPE from `tokenizer.json` or GGUF metadata, with the raw
//!   bytes of every token; [`chat_template`]: the model's own template, rendered as
//!   `transformers` does.
//! - [`hub`]: a `model_path` that is a Hugging Face model id (`Qwen/Qwen2.5-1.5B-Instruct`,
//!   `ORG/NAME-GGUF:FILE.gguf`), resolved through the Hugging Face cache and downloaded into it
//!   where the network allows; [`ModelFiles::open`] resolves every path through it.
//! - [`adapter`]: LoRA adapters in PEFT's layout (the trainer writes them, the judge reads them),
//!   with the record of the base model a judge adapter was made on.
//! - [`random`]: weights of any Qwen shape from a fixed generator (the toy run's model, the
//!   tests' tiny models, the device benchmark's real-shape models).
//! - [`DeviceSpec`]: the `device` setting (`cpu`, `cuda:N`); [`LocalError`] and `one_line`:
//!   errors as one line naming the file or setting at fault.
//!
//! - [`infer`]: the inference network (quantized kernels, a KV cache that can be snapshotted and
//!   cut): the local judge serves it, the judge trainer reads the frozen base model through it.
//!   The trainer's policy model (`train::model`) is a differentiable network of its own, because
//!   candle's fused ops have no backward pass.
//!
//! Built with the `local` feature (which `train` turns on). `testkit` (tiny random-weight models
//! written to disk) is compiled for tests only: here under `cfg(test)`, and into the integration
//! tests (and benches) that include `tests/common/`, through `tests/common/model.rs`.

pub mod adapter;
pub mod chat_template;
pub mod config;
pub mod dense;
mod device;
pub mod error;
mod files;
pub mod hub;
mod hub_cache;
mod hub_download;
pub mod infer;
pub mod loader;
pub mod random;
pub mod tokenizer;

#[cfg(test)]
mod hub_tests;
#[cfg(test)]
pub(crate) mod testkit;
#[cfg(test)]
mod testkit_tests;

use serde::{Deserialize, Serialize};

pub use chat_template::{ChatTemplate, RenderOptions, TemplateOrigin};
pub use config::QwenConfig;
pub use dense::DenseWeights;
pub use device::{device_name, DeviceSpec, OpenDevice};
pub use error::LocalError;
pub use loader::{ModelFiles, ModelFormat, ModelInfo, WeightFiles};
pub use tokenizer::LoadedTokenizer;

/// The model families gavel runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Arch {
    /// Qwen2 and Qwen2.5.
    Qwen2,
    Qwen3,
}

impl Arch {
    /// The name in `model_type` and `general.architecture`.
    pub fn name(self) -> &'static str {
        match self {
            Arch::Qwen2 => "qwen2",
            Arch::Qwen3 => "qwen3",
        }
    }
}
