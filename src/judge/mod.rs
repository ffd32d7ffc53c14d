//! Judges: backends that turn judge messages into a completion.
//!
//! A backend only completes chat messages; parsing the verdict and the structural re-ask live in
//! `score`, so every backend gets them alike. A judge failure is a [`JudgeError`], never a score.

pub mod cascade;
pub mod config;
mod config_table;
pub mod limits;
pub mod local;
pub mod panel;
pub mod probability;
pub mod remote;
pub mod settings;
pub mod structured_output;
mod unconfigured;

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;

use crate::domain::error_type::ErrorType;
use crate::domain::prompt::ChatMessage;
pub use config::{Backend, CommonSettings, JudgeConfig, LocalConfig, RemoteConfig};
pub use config_table::deserialize_judges;
pub use probability::{ChoiceProbabilities, ProbabilityJudge};
pub use settings::{JudgeAdapter, JudgeInfo, JudgeSettings, Prices};
pub use structured_output::StructuredOutput;

#[cfg(feature = "local")]
pub use local::LocalJudge;
pub use panel::{Aggregate, Panel};
pub use remote::RemoteJudge;
pub use unconfigured::UnconfiguredJudge;

/// How a judge failed, after its retries. Each maps to one HTTP status and `error.type`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum JudgeError {
    /// The judge answered errors (or could not be reached) through every retry.
    #[error("{0}")]
    Unavailable(String),
    /// The verdict was still unusable after the structural re-ask.
    #[error("{0}")]
    InvalidOutput(String),
    /// Every attempt timed out, or the verdict deadline passed.
    #[error("{0}")]
    Timeout(String),
    /// No judge can be built (no key, no model).
    #[error("{0}")]
    NotConfigured(String),
    /// The judge's own queue is full (a local judge's `max_queue`); retry later.
    #[error("{0}")]
    Overloaded(String),
    /// The judge cannot judge in the mode asked: its server returns no token probabilities.
    #[error("{0}")]
    UnsupportedMode(String),
}

impl JudgeError {
    /// The machine-readable `error.type` of this failure.
    pub fn error_type(&self) -> ErrorType {
        match self {
            JudgeError::Unavailable(_) => ErrorType::JudgeUnavailable,
            JudgeError::InvalidOutput(_) => ErrorType::JudgeInvalidOutput,
            JudgeError::Timeout(_) => ErrorType::JudgeTimeout,
            JudgeError::NotConfigured(_) => ErrorType::NoJudgeConfigured,
            JudgeError::Overloaded(_) => ErrorType::Overloaded,
            JudgeError::UnsupportedMode(_) => ErrorType::JudgeUnsupportedMode,
        }
    }

    /// The same error with `prefix: ` before its message (e.g. which group of a batch).
    pub fn context(self, prefix: &str) -> JudgeError {
        match self {
            JudgeError::Unavailable(m) => JudgeError::Unavailable(format!("{prefix}: {m}")),
            JudgeError::InvalidOutput(m) => JudgeError::InvalidOutput(format!("{prefix}: {m}")),
            JudgeError::Timeout(m) => JudgeError::Timeout(format!("{prefix}: {m}")),
            JudgeError::NotConfigured(m) => JudgeError::NotConfigured(format!("{prefix}: {m}")),
            JudgeError::Overloaded(m) => JudgeError::Overloaded(format!("{prefix}: {m}")),
            JudgeError::UnsupportedMode(m) => JudgeError::UnsupportedMode(format!("{prefix}: {m}")),
        }
    }
}

/// What judging spent: the calls made to the judge and the tokens it reported for them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Spent {
    pub calls: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
}

impl Spent {
    pub fn add(&mut self, o: Spent) {
        self.calls += o.calls;
        self.prompt_tokens += o.prompt_tokens;
        self.completion_tokens += o.completion_tokens;
    }

    /// What a completion cost: its attempts, and the tokens of the one that answered.
    pub fn of(c: &Completion) -> Spent {
        Spent {
            calls: u64::from(c.attempts),
            prompt_tokens: c.prompt_tokens,
            completion_tokens: c.completion_tokens,
        }
    }
}

/// A judge's failure with what was spent on the way to it (every attempt a remote judge made,
/// the tokens of replies that gave no usable verdict). Usage reports count it apart from the
/// calls that gave verdicts, so a run whose judge failed throughout does not read as free.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{error}")]
pub struct JudgeFailure {
    pub error: JudgeError,
    pub spent: Spent,
}

impl From<JudgeError> for JudgeFailure {
    /// A failure that cost nothing (refused before any call: not configured, queue full).
    fn from(error: JudgeError) -> Self {
        JudgeFailure {
            error,
            spent: Spent::default(),
        }
    }
}

impl JudgeFailure {
    pub fn new(error: JudgeError, spent: Spent) -> Self {
        JudgeFailure { error, spent }
    }

    /// The machine-readable `error.type` of this failure.
    pub fn error_type(&self) -> ErrorType {
        self.error.error_type()
    }

    /// The same failure with `prefix: ` before its message.
    pub fn context(self, prefix: &str) -> JudgeFailure {
        JudgeFailure {
            error: self.error.context(prefix),
            spent: self.spent,
        }
    }

    /// The same failure, having also spent `more` before it.
    pub fn after(mut self, more: Spent) -> JudgeFailure {
        self.spent.add(more);
        self
    }
}

/// One completion from a judge.
#[derive(Debug, Clone, PartialEq)]
pub struct Completion {
    pub text: String,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// Prompt tokens the judge did not prefill again: the KV cache of a shared prefix was
    /// reused (local judge; 0 for a remote one).
    pub cached_prompt_tokens: u64,
    /// Forward passes a local judge's model ran for it (0 for a remote judge).
    pub forward_passes: u64,
    /// Attempts made, 1 when the first succeeded.
    pub attempts: u32,
    /// Retries by cause (timeout, connection, http_429, http_5xx, http_408, http_409, bad_reply).
    pub retries: BTreeMap<String, u64>,
}

/// What the scorer asks of a judge: a backend that completes chat messages, with what it is
/// and what bounds its calls ([`Judge::settings`]), and the capabilities it
/// offers ([`Judge::probabilities`]). Remote ([`RemoteJudge`]) and local ([`LocalJudge`]) judges
/// implement it; [`UnconfiguredJudge`] stands in for one that cannot run. The scorer holds
/// `Arc<dyn Judge>` and never asks which backend it has: a capability a backend lacks is one it
/// does not offer, and the defaults below say what that means.
#[async_trait]
pub trait Judge: Send + Sync + std::fmt::Debug {
    /// Everything about the judge that decides its verdicts (backend, endpoint, model, sampling
    /// settings): part of every cache key.
    fn identity(&self) -> Value;

    /// What the judge is (name, model, adapter, prices; why it cannot run, if it cannot) and
    /// the settings the scorer plans its calls with (budgets, deadline, context window,
    /// default mode): one value, built once when the judge is.
    fn settings(&self) -> &JudgeSettings;

    /// How the judge's reply is held to its JSON schema now (`structured_output`: a remote
    /// judge's `response_format` dialect, a local judge's constrained decoding; never `Auto`).
    /// Where it [`StructuredOutput::holds_schema`], the listwise prompt only says what to
    /// write; otherwise the prompt spells the shape out, with an example. Not one of the
    /// [`Judge::settings`]: a remote judge on `auto` steps down a dialect while it runs, when
    /// its server refuses one, so this is asked afresh at each use.
    fn structured_output(&self) -> StructuredOutput;

    /// Whether the judge can serve now (for `/readyz`); `Err` says why not, without secrets.
    /// Costs no tokens.
    async fn probe(&self) -> Result<(), String>;

    /// Checks once, at start, that the judge can do what it is configured for (a remote judge
    /// in a probability mode: that its server gives token probabilities). `Err` is one line
    /// for the log; the judge then refuses what it cannot do, and serves the rest.
    async fn check_capabilities(&self) -> Result<(), String> {
        Ok(())
    }

    /// Completes `messages`; `schema` is the verdict's JSON schema for structured output.
    async fn complete(
        &self,
        messages: &[ChatMessage],
        schema: &Value,
    ) -> Result<Completion, JudgeFailure>;

    /// The judge's own answer to a task, `messages` being the messages that set it (a rubric
    /// with `reference = "judge"` grades against it): free text, as the judge's model answers
    /// the task itself (a local judge without its adapter, a remote one without the verdict's
    /// schema), at most the settings' `max_reference_bytes`.
    async fn answer(&self, messages: &[ChatMessage]) -> Result<Completion, JudgeFailure>;

    /// The judge's token-probability reading (pointwise and pairwise modes), where it offers
    /// it. `None`: it judges listwise only, and the scorer refuses the other modes for it.
    fn probabilities(&self) -> Option<&dyn ProbabilityJudge> {
        None
    }
}

/// `text` trimmed and cut to at most `max_bytes` bytes, at a character boundary (the judge's own
/// answers and explanations).
pub fn cut_text(text: &str, max_bytes: usize) -> String {
    let text = text.trim();
    let mut cut = text.len().min(max_bytes);
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    text[..cut].to_string()
}

/// Judges by name, as a configuration builds them.
pub type Judges = BTreeMap<String, Arc<dyn Judge>>;

/// Builds a judge from its configuration. A remote judge that lacks its key is still built, as
/// an [`UnconfiguredJudge`], so the daemon starts and says what is missing; a local judge loads
/// its model here, and any problem with it (path, architecture, files, device) is an error: the
/// start fails, not the first request.
pub fn build(name: &str, cfg: &JudgeConfig) -> Result<Arc<dyn Judge>, JudgeError> {
    match cfg {
        JudgeConfig::Local(l) => local_judge(name, l),
        JudgeConfig::Remote(r) if r.api_key.is_none() && r.key_required => {
            let info = JudgeInfo {
                name: name.to_string(),
                model: r.common.model.clone(),
            };
            Ok(Arc::new(UnconfiguredJudge::new(
                info,
                missing_key(name, r),
                r.common.structured_output,
            )))
        }
        JudgeConfig::Remote(r) => Ok(Arc::new(RemoteJudge::new(name, r))),
        JudgeConfig::Cascade(_) => Err(JudgeError::NotConfigured(format!(
            "[judges.{name}]: a cascade is built on its stages (cascade::build_cascades), not alone"
        ))),
    }
}

/// What a remote judge without its key is told: the variable to set, and for the judge the
/// environment builds (no config file) the variables that choose another server.
fn missing_key(name: &str, r: &RemoteConfig) -> String {
    let var = &r.api_key_env;
    if var == "OPENAI_API_KEY" {
        format!(
            "judge {name:?} has no API key: set the environment variable OPENAI_API_KEY, or point \
             it at a server of your own that needs none (OPENAI_BASE_URL and GAVEL_JUDGE_MODEL \
             without a config file, base_url in one; see examples/gavel.toml)"
        )
    } else {
        format!(
            "judge {name:?} has no API key: set the environment variable {var} (its api_key_env)"
        )
    }
}

/// Builds every judge of a configuration, as [`build`] builds one, except that local judges on
/// the same model share it (see [`local::shared`]): one model in memory, one owner thread, one
/// prefix cache, an adapter slot per judge.
pub fn build_all(judges: &BTreeMap<String, JudgeConfig>) -> Result<Judges, JudgeError> {
    let mut built = BTreeMap::new();
    let mut local = Vec::new();
    for (name, cfg) in judges {
        match cfg {
            JudgeConfig::Local(l) => local.push((name.as_str(), l)),
            JudgeConfig::Remote(_) => {
                built.insert(name.clone(), build(name, cfg)?);
            }
            // Built by the scorer on these judges (cascade::build_cascades).
            JudgeConfig::Cascade(_) => {}
        }
    }
    built.extend(local_judges(&local)?);
    Ok(built)
}

#[cfg(feature = "local")]
fn local_judges(judges: &[(&str, &LocalConfig)]) -> Result<Judges, JudgeError> {
    let built = local::shared::load_local_judges(judges)
        .map_err(|(tables, e)| JudgeError::NotConfigured(format!("{tables}: {e}")))?;
    Ok(built
        .into_iter()
        .map(|(name, j)| (name, Arc::new(j) as Arc<dyn Judge>))
        .collect())
}

#[cfg(not(feature = "local"))]
fn local_judges(judges: &[(&str, &LocalConfig)]) -> Result<Judges, JudgeError> {
    judges
        .iter()
        .map(|(name, cfg)| Ok((name.to_string(), local_judge(name, cfg)?)))
        .collect()
}

#[cfg(feature = "local")]
fn local_judge(name: &str, cfg: &LocalConfig) -> Result<Arc<dyn Judge>, JudgeError> {
    LocalJudge::new(name, cfg)
        .map(|j| Arc::new(j) as Arc<dyn Judge>)
        .map_err(|e| JudgeError::NotConfigured(format!("[judges.{name}]: {e}")))
}

#[cfg(not(feature = "local"))]
fn local_judge(name: &str, _cfg: &LocalConfig) -> Result<Arc<dyn Judge>, JudgeError> {
    Err(JudgeError::NotConfigured(format!(
        "[judges.{name}]: backend \"local\" needs a gavel built with the `local` feature (on by default)"
    )))
}
