//! Judges: backends that turn judge messages into a completion.
//!
//! A backend only completes chat messages; parsing the verdict and the structural re-ask live in
//! `score`, so every backend gets them alike. A judge failure is a [`JudgeError`], never a score.

pub mod config;
pub mod limits;
pub mod local;
pub mod remote;

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::{json, Value};

use crate::domain::error_type::ErrorType;
use crate::domain::prompt::{ChatMessage, JudgeMode};
pub use config::{Backend, JudgeConfig};

#[cfg(feature = "local")]
pub use local::LocalJudge;
pub use remote::RemoteJudge;

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
        }
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

/// What the response reports about a judge.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JudgeInfo {
    pub name: String,
    pub model: String,
}

/// Each choice's probability as a judge's next token (pointwise and pairwise judging).
#[derive(Debug, Clone, PartialEq)]
pub struct ChoiceProbabilities {
    /// Renormalised over the choices: they sum to 1.
    pub shares: Vec<f64>,
    /// The choices' total probability before renormalising.
    pub coverage: f64,
    pub prompt_tokens: u64,
    /// Prompt tokens whose KV was reused, not prefilled.
    pub cached_prompt_tokens: u64,
    /// Forward passes the model ran for it (one prefill).
    pub forward_passes: u64,
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

/// The judges gavel can use (a closed set: each backend is a variant).
#[derive(Debug)]
pub enum Judge {
    Remote(Box<RemoteJudge>),
    /// A Qwen model in-process (candle), on its own thread.
    #[cfg(feature = "local")]
    Local(Box<LocalJudge>),
    /// A configured judge that cannot run (for example no API key); every call fails with
    /// [`JudgeError::NotConfigured`] and this message.
    Unconfigured {
        name: String,
        model: String,
        reason: String,
        /// Its config's `structured_output`, so `gavel render` shows the prompt it would send.
        structured_output: bool,
    },
}

impl Judge {
    /// Builds a judge from its configuration. A remote judge that lacks its key is still
    /// built, as [`Judge::Unconfigured`], so the daemon starts and says what is missing; a local
    /// judge loads its model here, and any problem with it (path, architecture, files, device)
    /// is an error: the start fails, not the first request.
    pub fn from_config(name: &str, cfg: &JudgeConfig) -> Result<Judge, JudgeError> {
        match cfg.backend {
            Backend::Local => Judge::local(name, cfg),
            Backend::Openai => Ok(match &cfg.api_key {
                Some(_) => Judge::Remote(Box::new(RemoteJudge::new(name, cfg))),
                None => Judge::Unconfigured {
                    name: name.to_string(),
                    model: cfg.model.clone(),
                    reason: format!(
                        "judge {name:?} has no API key: set the environment variable {} (or, with no config \
                         file, OPENAI_API_KEY, OPENAI_BASE_URL and GAVEL_JUDGE_MODEL; see examples/gavel.toml)",
                        cfg.api_key_env
                    ),
                    structured_output: cfg.structured_output,
                },
            }),
        }
    }

    /// Builds every judge of a configuration, as [`Judge::from_config`] builds one, except
    /// that local judges on the same model share it (see [`local::shared`]): one model in
    /// memory, one owner thread, one prefix cache, an adapter slot per judge.
    pub fn build_all(
        judges: &BTreeMap<String, JudgeConfig>,
    ) -> Result<BTreeMap<String, Judge>, JudgeError> {
        let mut built = BTreeMap::new();
        let mut local = Vec::new();
        for (name, cfg) in judges {
            match cfg.backend {
                Backend::Local => local.push((name.as_str(), cfg)),
                Backend::Openai => {
                    built.insert(name.clone(), Judge::from_config(name, cfg)?);
                }
            }
        }
        built.extend(Judge::local_all(&local)?);
        Ok(built)
    }

    #[cfg(feature = "local")]
    fn local_all(judges: &[(&str, &JudgeConfig)]) -> Result<Vec<(String, Judge)>, JudgeError> {
        let built = local::shared::load_local_judges(judges)
            .map_err(|(tables, e)| JudgeError::NotConfigured(format!("{tables}: {e}")))?;
        Ok(built
            .into_iter()
            .map(|(name, j)| (name, Judge::Local(Box::new(j))))
            .collect())
    }

    #[cfg(not(feature = "local"))]
    fn local_all(judges: &[(&str, &JudgeConfig)]) -> Result<Vec<(String, Judge)>, JudgeError> {
        judges
            .iter()
            .map(|(name, cfg)| Ok((name.to_string(), Judge::local(name, cfg)?)))
            .collect()
    }

    #[cfg(feature = "local")]
    fn local(name: &str, cfg: &JudgeConfig) -> Result<Judge, JudgeError> {
        LocalJudge::new(name, cfg)
            .map(|j| Judge::Local(Box::new(j)))
            .map_err(|e| JudgeError::NotConfigured(format!("[judges.{name}]: {e}")))
    }

    #[cfg(not(feature = "local"))]
    fn local(name: &str, _cfg: &JudgeConfig) -> Result<Judge, JudgeError> {
        Err(JudgeError::NotConfigured(format!(
            "[judges.{name}]: backend \"local\" needs a gavel built with the `local` feature (on by default)"
        )))
    }

    pub fn info(&self) -> JudgeInfo {
        match self {
            Judge::Remote(r) => JudgeInfo {
                name: r.name.clone(),
                model: r.model.clone(),
            },
            #[cfg(feature = "local")]
            Judge::Local(l) => JudgeInfo {
                name: l.name.clone(),
                model: l.model.clone(),
            },
            Judge::Unconfigured { name, model, .. } => JudgeInfo {
                name: name.clone(),
                model: model.clone(),
            },
        }
    }

    /// The LoRA adapter a local judge runs over its model, if any.
    pub fn adapter(&self) -> Option<JudgeAdapter> {
        match self {
            #[cfg(feature = "local")]
            Judge::Local(l) => l.adapter().map(|a| JudgeAdapter {
                path: a.path.display().to_string(),
                sha256: a.sha256.clone(),
                reach: match a.reach {
                    crate::model::adapter::Reach::All => "all",
                    crate::model::adapter::Reach::Verdict => "verdict",
                },
            }),
            _ => None,
        }
    }

    /// Why this judge cannot run, if it cannot.
    pub fn unconfigured_reason(&self) -> Option<&str> {
        match self {
            Judge::Unconfigured { reason, .. } => Some(reason),
            _ => None,
        }
    }

    /// Everything about the judge that decides its verdicts (backend, endpoint, model, sampling
    /// settings): part of every cache key.
    pub fn identity(&self) -> Value {
        match self {
            Judge::Remote(r) => r.identity(),
            #[cfg(feature = "local")]
            Judge::Local(l) => l.identity(),
            Judge::Unconfigured { name, model, .. } => {
                json!({"backend": "unconfigured", "name": name, "model": model})
            }
        }
    }

    /// The judge's context window, when configured (larger groups are judged in chunks).
    pub fn context_tokens(&self) -> Option<usize> {
        match self {
            Judge::Remote(r) => r.context_tokens,
            #[cfg(feature = "local")]
            Judge::Local(l) => Some(l.context_tokens),
            Judge::Unconfigured { .. } => None,
        }
    }

    /// The completion budget of one call.
    pub fn max_tokens(&self) -> u32 {
        match self {
            Judge::Remote(r) => r.max_tokens,
            #[cfg(feature = "local")]
            Judge::Local(l) => l.max_tokens,
            Judge::Unconfigured { .. } => 0,
        }
    }

    /// The cost of a call's tokens, when prices are configured.
    pub fn cost(&self, prompt_tokens: u64, completion_tokens: u64) -> Option<f64> {
        match self {
            Judge::Remote(r) => match (r.prompt_price, r.completion_price) {
                (None, None) => None,
                (p, c) => Some(
                    (prompt_tokens as f64 * p.unwrap_or(0.0)
                        + completion_tokens as f64 * c.unwrap_or(0.0))
                        / 1e6,
                ),
            },
            #[cfg(feature = "local")]
            Judge::Local(_) => None,
            Judge::Unconfigured { .. } => None,
        }
    }

    /// The verdict deadline: every attempt, wait and re-ask of one verdict together.
    pub fn deadline(&self) -> std::time::Duration {
        match self {
            Judge::Remote(r) => r.deadline,
            #[cfg(feature = "local")]
            Judge::Local(l) => l.deadline,
            Judge::Unconfigured { .. } => std::time::Duration::from_secs(1),
        }
    }

    /// The mode the judge is asked in unless a request says otherwise (its config's `mode`;
    /// remote judges are always listwise).
    pub fn mode(&self) -> JudgeMode {
        match self {
            #[cfg(feature = "local")]
            Judge::Local(l) => l.mode,
            _ => JudgeMode::Listwise,
        }
    }

    /// Pairwise mode: how many others each trajectory of a large group meets.
    pub fn pairwise_opponents(&self) -> usize {
        match self {
            #[cfg(feature = "local")]
            Judge::Local(l) => l.pairwise_opponents,
            _ => 4,
        }
    }

    /// Probability modes: whether each score gets a decoded explanation (`explain = true`).
    pub fn explains(&self) -> bool {
        match self {
            #[cfg(feature = "local")]
            Judge::Local(l) => l.explain,
            _ => false,
        }
    }

    /// A free-text explanation of each of `prompts`, after probability-mode scores (local
    /// judges that [`Judge::explains`]): a group's explanations at once, decoded together.
    // Only local judges use the arguments.
    #[cfg_attr(not(feature = "local"), allow(unused_variables))]
    pub async fn explain(
        &self,
        prompts: Vec<Vec<ChatMessage>>,
    ) -> Result<Vec<Completion>, JudgeError> {
        match self {
            #[cfg(feature = "local")]
            Judge::Local(l) => l.explain(prompts).await,
            Judge::Unconfigured { reason, .. } => Err(JudgeError::NotConfigured(reason.clone())),
            _ => Err(JudgeError::Unavailable(format!(
                "judge {:?} does not explain probability-mode scores",
                self.info().name
            ))),
        }
    }

    /// Whether the judge's reply is held to its JSON schema (`structured_output`: a remote
    /// judge's `response_format`, a local judge's constrained decoding). The listwise prompt
    /// then only says what to write; without it the prompt spells the shape out, with an example.
    pub fn follows_reply_schema(&self) -> bool {
        match self {
            Judge::Remote(r) => r.structured_output,
            #[cfg(feature = "local")]
            Judge::Local(l) => l.constrained(),
            Judge::Unconfigured {
                structured_output, ..
            } => *structured_output,
        }
    }

    /// Whether the judge can read token probabilities (pointwise and pairwise modes).
    pub fn reads_probabilities(&self) -> bool {
        match self {
            #[cfg(feature = "local")]
            Judge::Local(_) => true,
            _ => false,
        }
    }

    /// How likely each choice is as the first token of the judge's answer to each of
    /// `prompts`, asked together (a group's prompts: a local judge runs them on their shared
    /// prefix). Local judges only; the scorer checks [`Judge::reads_probabilities`] first.
    // Only local judges use the arguments.
    #[cfg_attr(not(feature = "local"), allow(unused_variables))]
    pub async fn choice_probabilities(
        &self,
        prompts: Vec<Vec<ChatMessage>>,
        choices: &[Vec<String>],
    ) -> Result<Vec<ChoiceProbabilities>, JudgeError> {
        match self {
            #[cfg(feature = "local")]
            Judge::Local(l) => l.choice_probabilities(prompts, choices).await,
            Judge::Unconfigured { reason, .. } => Err(JudgeError::NotConfigured(reason.clone())),
            _ => Err(JudgeError::Unavailable(format!(
                "judge {:?} cannot read token probabilities (a remote judge judges listwise)",
                self.info().name
            ))),
        }
    }

    /// Whether the judge can serve now (for `/readyz`); `Err` says why not, without secrets.
    /// Costs no tokens.
    pub async fn probe(&self) -> Result<(), String> {
        match self {
            Judge::Remote(r) => r.probe().await,
            // The model was loaded (or start-up failed) before the daemon listened; its owner
            // thread answers or refuses with 429 from then on, unless it stopped after
            // repeated panics.
            #[cfg(feature = "local")]
            Judge::Local(l) => l
                .engine()
                .health()
                .map_err(|why| format!("judge {:?}: {why}", l.name)),
            Judge::Unconfigured { reason, .. } => Err(reason.clone()),
        }
    }

    /// Completes `messages`; `schema` is the verdict's JSON schema for structured output.
    pub async fn complete(
        &self,
        messages: &[ChatMessage],
        schema: &Value,
    ) -> Result<Completion, JudgeError> {
        match self {
            Judge::Remote(r) => r.complete(messages, schema).await,
            #[cfg(feature = "local")]
            Judge::Local(l) => l.complete(messages, schema).await,
            Judge::Unconfigured { reason, .. } => Err(JudgeError::NotConfigured(reason.clone())),
        }
    }
}
