//! The inference network: one Qwen2/Qwen3 decoder for GGUF and safetensors weights, with a KV
//! cache gavel controls ([`Qwen`], [`KvState`]), its decoder layer (`layer`), and CPU kernels
//! for quantized weights (`gemv`, `fused`). The local judge serves it; the judge trainer
//! (`train::judge`) runs it to read the frozen base model's keys, values and hidden states, so
//! that training sees exactly the arithmetic serving does. Adapters trained for the verdict
//! position ride on it as a low-rank side path ([`crate::model::adapter`]).
//!
//! The trainer's differentiable model (`train::model`) is a separate network: candle's fused
//! ops used here have no backward pass.

mod fused;
mod gemv;
mod layer;
mod qwen;

pub use layer::AdapterRows;
pub use qwen::{KvState, Qwen};
