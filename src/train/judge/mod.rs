//! `gavel train judge`: LoRA training of a local judge so that its verdict token says what the
//! labels (or a teacher judge) say.
//!
//! - [`examples`]: each example is a probe prompt rendered exactly as the local judge is asked
//!   it (pointwise: P(yes); pairwise: P(1), both orders of every pair) and its target.
//! - [`features`]: the frozen base model (the inference network the judge serves with) runs
//!   once per example; what the adapted layers need is kept in memory, and on disk
//!   ([`feature_file`]) for later runs on the same data.
//! - [`head`]: the adapted top K layers at the verdict position alone, and the answers' rows of
//!   the output head: an epoch costs K layers at one position per example.
//! - [`fit`]: the loop, the dev figures, the best checkpoint.
//!
//! The adapter changes the verdict position only (`gavel_judge.json`'s `reach = "verdict"`): the
//! context's keys and values stay the base model's, so a tuned judge reuses the base model's
//! prefix cache and training needs no backward pass through the context.

pub mod args;
pub mod examples;
pub mod feature_file;
pub mod features;
pub mod fit;
pub mod head;
mod run;

pub use args::JudgeArgs;
pub use run::run;
