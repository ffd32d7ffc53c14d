//! `gavel train judge`: LoRA training of a local judge so that its verdict token says what the
//! labels (or a teacher judge) say.
//!
//! - [`examples`]: each example is a question rendered exactly as the local judge is asked
//!   it (pointwise: P(yes); pairwise: P(1), both orders of every pair) and its target.
//! - [`features`]: the frozen base model (the inference network the judge serves with) runs
//!   once per example; what the adapted layers need is kept in memory, and on disk
//!   ([`feature_file`]) for later runs on the same data.
//! - `sources`: the groups of each split (labelled files, a teacher's scores, attacked copies).
//! - `featurize`: a split's features, computed once and kept on disk.
//! - [`head`]: the adapted top K layers and the answers' rows of the output head.
//! - [`fit`]: the loop, the dev figures, the best checkpoint.
//! - `augment`: with `--augment attacks`, attacked copies of the training groups.
//!
//! Two reaches (`--reach`, recorded as `gavel_judge.json`'s `reach`):
//! - `verdict` (the default): the adapter changes the verdict position only. The context's keys
//!   and values stay the base model's, so a tuned judge could share the base model's prefix
//!   cache, the features are the adapted layers' keys and values, and an epoch costs K layers
//!   at one position per example.
//! - `all`: the adapter changes every position, as PEFT applies one, so it can change what the
//!   context carries to the verdict. The features are the hidden states entering the first
//!   adapted layer at every position, and an epoch runs K layers forward and backward over
//!   every token of every example.

mod augment;
pub mod examples;
pub mod feature_file;
pub mod features;
mod featurize;
pub mod fit;
pub mod head;
mod options;
mod run;
mod sources;

pub use augment::Augment;
pub use options::JudgeTrainOptions;
pub use run::run;
