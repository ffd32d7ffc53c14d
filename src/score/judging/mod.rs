//! The judge's part of scoring a group, in four stages, one child module each, all run by the
//! [`JudgeStage`](super::judge_stage::JudgeStage):
//! - [`plan`]: the samples (each judge of a panel × each of K candidate orders × each chunk of a
//!   group too large for the judge's context), their prompts and cache keys;
//! - [`run`]: each sample through the cache and single-flight (one judge call for concurrent
//!   requests that need the same verdict, across replicas too) to the judge;
//! - [`ask`]: one judge call, parse, one structural re-ask ([`ask_questions`] for a probability
//!   mode: every prompt's reading, then the explanations);
//! - [`aggregate`]: the samples' scores back into one judge component per trajectory.
//!
//! And [`render`]: a request's first prompt, planned as scoring plans it, without a judge call.
//! This module holds the types the stages pass along; `judge_stage.rs` chooses between a
//! remembered plan and the four stages.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::questions::QuestionPlan;
use super::response::{ItemOut, Usage};
use crate::domain::dedup::JudgeInput;
use crate::domain::prompt::RenderedPrompt;
use crate::domain::rubric::Rubric;
use crate::judge::Panel;

mod aggregate;
mod ask;
mod ask_questions;
mod plan;
mod render;
mod run;

pub(super) use plan::check_mode;
pub use run::cache_key;

/// Anchor candidates shared by every chunk of a split group.
const CHUNK_ANCHORS: usize = 2;

/// One prompt to one judge, as far as the store is concerned: which candidates it shows in which
/// order, the ids the judge sees for them, and its cache key.
#[derive(Debug, Clone)]
pub(super) struct SampleSpec {
    judge: usize,
    order_index: u32,
    /// Candidate indices in prompt order.
    order: Vec<usize>,
    /// The ids the judge sees, in prompt order.
    ids: Vec<String>,
    key: String,
}

/// A plan without its rendered prompts: all a request needs when every verdict is cached.
#[derive(Debug)]
pub(super) struct Skeleton {
    samples: Vec<SampleSpec>,
    chunks: usize,
    distinct: usize,
    /// For each request trajectory, its candidate.
    candidate_of: Vec<usize>,
    /// The template (first judge's mode) and its version.
    pub template_name: &'static str,
    pub template_version: String,
}

impl Skeleton {
    #[cfg(test)]
    pub(super) fn empty_for_tests() -> Skeleton {
        Skeleton {
            samples: Vec::new(),
            chunks: 1,
            distinct: 0,
            candidate_of: Vec::new(),
            template_name: crate::domain::prompt::DEFAULT_PROMPT,
            template_version: String::new(),
        }
    }
}

/// Everything computed before the cache lookups.
pub(super) struct Plan<'a> {
    pub rubric: &'a Rubric,
    pub panel: Panel,
    pub input: JudgeInput,
    pub skeleton: Arc<Skeleton>,
    /// The rendered prompt of each sample (parallel to `skeleton.samples`); for a
    /// probability-mode sample, the listwise prompt of the group (its token figures).
    rendered: Vec<Arc<RenderedPrompt>>,
    /// What each probability-mode sample asks (`None`: listwise).
    questions: Vec<Option<QuestionPlan>>,
}

impl Plan<'_> {
    pub fn template_version(&self) -> String {
        self.skeleton.template_version.clone()
    }
}

/// The judge component for one request trajectory.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct JudgeScore {
    pub value: Option<f64>,
    pub explanation: String,
    pub items: Vec<ItemOut>,
    /// Std of the score across orders and judges; `None` with a single sample.
    pub disagreement: Option<f64>,
    /// The probability verdicts' confidence, averaged over the judges that gave one.
    pub confidence: Option<f64>,
    /// Each panel judge's score (only with more than one judge).
    pub per_judge: BTreeMap<String, Option<f64>>,
    /// The stage of a cascade whose verdict this is (none outside a cascade).
    pub stage: Option<String>,
}

pub(super) struct JudgeOutcome {
    pub scores: Vec<JudgeScore>,
    pub usage: Usage,
}

/// One (judge, order)'s chunks: each chunk's candidates and their scores.
type ChunkScores = Vec<(Vec<usize>, Vec<Option<f64>>)>;

/// What one sample's verdict says about its candidates.
struct SampleResult {
    /// Per candidate, in the sample's order.
    scores: Vec<SampleScore>,
    usage: Usage,
}

/// What one sample's verdict says of one candidate.
struct SampleScore {
    /// The judge component.
    value: Option<f64>,
    explanation: String,
    items: Vec<ItemOut>,
    confidence: Option<f64>,
}
