//! What the scorer plans a judge's calls with, as one value: the settings a judge is built with
//! and keeps while it runs (budgets, deadline, context window, default mode). The scorer reads
//! them the same way from every backend, so planning never asks which backend it has; what can
//! change at run time (a remote judge's structured-output dialect) stays a method of the judge.

use std::time::Duration;

use super::config::CommonSettings;
pub use super::config::DEFAULT_PAIRWISE_OPPONENTS;
use crate::domain::prompt::JudgeMode;

/// A judge's static settings, built once in its constructor ([`super::Judge::settings`]).
#[derive(Debug, Clone, PartialEq)]
pub struct JudgeSettings {
    /// The completion budget of one call.
    pub max_tokens: u32,
    /// The verdict deadline: every attempt, wait and re-ask of one verdict together.
    pub deadline: Duration,
    /// The cap on [`super::Judge::answer`], bytes (part of the stored answer's key).
    pub max_reference_bytes: usize,
    /// The judge's context window, when known (larger groups are judged in chunks); `None`
    /// never splits a group.
    pub context_tokens: Option<usize>,
    /// The mode the judge is asked in unless a request says otherwise (its config's `mode`;
    /// unset: pointwise for a local judge, listwise for a remote one).
    pub mode: JudgeMode,
    /// Pairwise mode: how many others each trajectory of a large group meets.
    pub pairwise_opponents: usize,
    /// Probability modes: whether each score gets a decoded explanation (`explain = true`),
    /// asked of the judge's [`super::ProbabilityJudge::explain`]. Part of a probe's cache key.
    pub explains: bool,
}

impl JudgeSettings {
    /// The settings `common` configures, asked in `mode` by default: the default pairwise
    /// opponents and no explanations, which a backend with settings of its own then overrides.
    pub fn from_common(common: &CommonSettings, mode: JudgeMode) -> JudgeSettings {
        JudgeSettings {
            max_tokens: common.max_tokens,
            deadline: Duration::from_secs_f64(common.deadline_s),
            max_reference_bytes: common.max_reference_bytes,
            context_tokens: common.context_tokens,
            mode,
            pairwise_opponents: DEFAULT_PAIRWISE_OPPONENTS,
            explains: false,
        }
    }
}
