//! What the scorer plans a judge's calls with, as one value: the settings a judge is built with
//! and keeps while it runs (budgets, deadline, context window, default mode). The scorer reads
//! them the same way from every backend, so planning never asks which backend it has; what can
//! change at run time (a remote judge's structured-output dialect) stays a method of the judge.

use std::time::Duration;

use serde::Serialize;

use super::config::CommonSettings;
pub use super::config::DEFAULT_PAIRWISE_OPPONENTS;
use crate::domain::prompt::JudgeMode;

/// What a judge is and its static settings, built once in its constructor
/// ([`super::Judge::settings`]).
#[derive(Debug, Clone, PartialEq)]
pub struct JudgeSettings {
    /// Its name and model, as responses report them.
    pub info: JudgeInfo,
    /// The LoRA adapter a local judge runs over its model, if any.
    pub adapter: Option<JudgeAdapter>,
    /// Why the judge cannot run, if it cannot ([`super::UnconfiguredJudge`]): `/readyz` and
    /// `/healthz` say so, and every call fails with it.
    pub unconfigured: Option<String>,
    /// What its tokens cost, when prices are configured.
    pub prices: Prices,
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
    /// asked of the judge's [`super::ProbabilityJudge::explain`]. Part of a question's cache key.
    pub explains: bool,
}

impl JudgeSettings {
    /// The settings `common` configures for the judge `info`, asked in `mode` by default: no
    /// adapter, no prices, the default pairwise opponents and no explanations, which a backend
    /// with settings of its own then overrides.
    pub fn from_common(info: JudgeInfo, common: &CommonSettings, mode: JudgeMode) -> JudgeSettings {
        JudgeSettings {
            info,
            adapter: None,
            unconfigured: None,
            prices: Prices::default(),
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

/// What the response reports about a judge.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JudgeInfo {
    pub name: String,
    pub model: String,
}

/// What identifies the LoRA adapter a local judge runs (for `/healthz`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JudgeAdapter {
    /// Its folder, as configured.
    pub path: String,
    /// SHA-256 of its files: part of the judge's identity.
    pub sha256: String,
    /// `verdict` (the verdict position alone) or `all` (every position).
    pub reach: &'static str,
}

/// A judge's prices in US dollars per million tokens (`prompt_price_per_million`,
/// `completion_price_per_million`); unset, a call's cost is not reported.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Prices {
    pub prompt: Option<f64>,
    pub completion: Option<f64>,
}

impl Prices {
    /// The cost of a call's tokens; `None` when neither price is configured (one unset price
    /// counts as free).
    pub fn cost(&self, prompt_tokens: u64, completion_tokens: u64) -> Option<f64> {
        match (self.prompt, self.completion) {
            (None, None) => None,
            (p, c) => Some(
                (prompt_tokens as f64 * p.unwrap_or(0.0)
                    + completion_tokens as f64 * c.unwrap_or(0.0))
                    / 1e6,
            ),
        }
    }
}
