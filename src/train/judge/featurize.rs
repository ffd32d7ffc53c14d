//! A split's features: every example's prompt through the frozen base model, one chunk per
//! group and mode (their long common prefix prefilled once), kept on disk
//! ([`super::feature_file`]) so that a later run on the same data and base model reads them.

use std::io::IsTerminal;
use std::path::Path;

use super::examples::{Example, GroupTruth};
use super::feature_file::{self, FeatureKey};
use super::features::BaseModel;
use super::fit::Split;
use crate::domain::prompt::JudgeMode;
use crate::model::ModelFiles;
use crate::toolkit::progress::progress_bar;
use crate::train::TrainError;

/// The answers' token sequences of each mode's verdict choices, as the head reads them.
pub fn choices_tokens(
    files: &ModelFiles,
    choices: &[Vec<Vec<String>>],
) -> Result<Vec<Vec<Vec<u32>>>, TrainError> {
    choices
        .iter()
        .map(|c| Ok(files.tokenizer.choice_tokens(c, files.config.vocab_size)?))
        .collect()
}

/// What a run's features are computed with, and where they are kept.
pub struct Featurizer<'a> {
    pub model: BaseModel,
    pub modes: &'a [JudgeMode],
    /// The base model's fingerprint: features kept for another model are never read.
    pub base: &'a str,
    pub dir: &'a Path,
    /// No progress bar, no progress lines.
    pub quiet: bool,
}

impl Featurizer<'_> {
    /// The features of every example, group by group and mode within a group: read from the
    /// split's file in `dir` where an earlier run kept them, else computed and kept there.
    pub fn split(
        &mut self,
        examples: Vec<Example>,
        truths: Vec<GroupTruth>,
        what: &str,
    ) -> Result<Split, TrainError> {
        let (model, modes, quiet) = (&mut self.model, self.modes, self.quiet);
        // A group's prompts in one mode share the template and the group's context: their common
        // prefix is long (prompts of different modes share only the chat template's start), so it
        // is prefilled and kept once per group and mode: one chunk.
        let mut chunks: Vec<Vec<(Vec<u32>, usize)>> = Vec::new();
        let mut chunk_of = Vec::with_capacity(examples.len());
        for (i, e) in examples.iter().enumerate() {
            let prev = i.checked_sub(1).map(|p| &examples[p]);
            if prev.is_none_or(|p| p.group != e.group || p.mode != e.mode) {
                chunks.push(Vec::new());
            }
            let mi = modes.iter().position(|&m| m == e.mode).unwrap_or(0);
            chunks
                .last_mut()
                .expect("pushed")
                .push((model.tokens(&e.messages)?, mi));
            chunk_of.push(chunks.len() - 1);
        }
        let device = model.device_kind();
        let key = FeatureKey {
            base: self.base,
            device: &device,
            first: model.first,
            reach: model.reach,
            choices: &model.choices,
            chunks: &chunks,
        };
        let path = key.path(self.dir, what);
        let layers = model.files().config.num_hidden_layers - model.first;
        if let Some(features) = feature_file::load(&path, examples.len(), layers, model.reach)? {
            eprintln!("train judge: {what} features read from {}", path.display());
            return Ok(Split {
                examples,
                features,
                truths,
            });
        }
        let bar = progress_bar(
            chunks.len() as u64,
            0,
            &format!("{what} groups × modes"),
            !quiet,
        );
        // Without a terminal (a job's log) the bar draws nothing, and this pass can take an hour:
        // a line every twentieth of it instead.
        let log_every = if quiet || std::io::stderr().is_terminal() {
            usize::MAX
        } else {
            chunks.len().div_ceil(20).max(1)
        };
        let started = std::time::Instant::now();
        let mut features = Vec::with_capacity(examples.len());
        for (done, chunk) in (1..).zip(&chunks) {
            features.extend(model.group(chunk)?);
            bar.inc(1);
            if done % log_every == 0 || (done == chunks.len() && log_every != usize::MAX) {
                let s = started.elapsed().as_secs_f64();
                let left = s / done as f64 * (chunks.len() - done) as f64;
                eprintln!(
                    "train judge: {what} features, {done} of {} groups × modes in {s:.0} s, \
                     about {left:.0} s left",
                    chunks.len()
                );
            }
        }
        bar.finish_and_clear();
        feature_file::save(&path, &features, &chunk_of)?;
        Ok(Split {
            examples,
            features,
            truths,
        })
    }
}
