//! The toy run's model (`gavel train toy`): a tiny Qwen2 with deterministic random weights.
//!
//! Its own code, not the tests' fixture (`model/testkit.rs`), although it started as that
//! fixture's Qwen2: the toy run is shipped, its figures are quoted (BENCHMARKS.md, the "it
//! learns" test), and a change to a test model must not move them. Same sizes, same generator
//! ([`crate::model::random`]), same order of draws: the weights are bit-for-bit those the toy
//! run has always started from (`the_toy_weights_do_not_move`).

use std::collections::HashMap;

use candle_core::Tensor;
use serde_json::Value;

use crate::model::random::{self, Init, Shape};
use crate::model::Arch;

/// The model's config.json, with `bos` and `eos` as its BOS and EOS ids.
pub fn config_json(bos: u32, eos: u32) -> Value {
    Shape::TINY.config_json(Arch::Qwen2, false, bos, eos)
}

/// The model's tensors under Hugging Face names: a Qwen2 of [`Shape::TINY`] with its own
/// output projection, drawn as [`random::tensors`] draws every model.
pub fn tensors() -> HashMap<String, Tensor> {
    random::tensors(&Shape::TINY, Arch::Qwen2, false, Init::Fixed)
}

#[cfg(test)]
mod tests {
    use sha2::{Digest, Sha256};

    /// A digest of every weight, in name order: the toy run's figures (BENCHMARKS.md) and the
    /// "it learns" test start from exactly these.
    pub(crate) fn weights_digest(
        t: &std::collections::HashMap<String, candle_core::Tensor>,
    ) -> String {
        let mut names: Vec<&String> = t.keys().collect();
        names.sort();
        let mut h = Sha256::new();
        for n in names {
            h.update(n.as_bytes());
            h.update(format!("{:?}", t[n].dims()).as_bytes());
            for v in t[n].flatten_all().unwrap().to_vec1::<f32>().unwrap() {
                h.update(v.to_le_bytes());
            }
        }
        format!("{:x}", h.finalize())
    }

    #[test]
    fn the_toy_weights_do_not_move() {
        assert_eq!(
            weights_digest(&super::tensors()),
            "942e2cfe043ba2f4148df150cbba81fb6cab9cdd709381520931cf57b50bf651"
        );
    }
}
