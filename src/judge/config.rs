//! `[judges.NAME]`: how one judge is reached (remote endpoint or local model) and limited.
//! The judge layer owns its section; `crate::config` only composes it with the others.

use std::path::PathBuf;

use serde::Deserialize;

use crate::domain::seconds::check_seconds;
use crate::domain::secret::Secret;

/// Used when neither the config file nor `OPENAI_BASE_URL` names an endpoint.
pub const OPENAI_BASE_URL: &str = "https://api.openai.com/v1";
/// Used when neither the config file nor `GAVEL_JUDGE_MODEL` names a model.
pub const DEFAULT_MODEL: &str = "gpt-4.1-mini";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// Any OpenAI-compatible `/v1/chat/completions` endpoint.
    Openai,
    /// A Qwen2/Qwen3 model run in-process with candle (`model_path`, `device`).
    Local,
}

/// `[judges.NAME]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JudgeConfig {
    pub backend: Backend,
    /// Base URL of the API, e.g. `https://api.openai.com/v1` or `http://127.0.0.1:8000/v1`.
    #[serde(default = "default_base_url")]
    pub base_url: String,
    /// The model's name (openai: required, sent to the API; local: reported, default the
    /// model's own name).
    #[serde(default)]
    pub model: String,
    /// Environment variable holding the API key.
    #[serde(default = "default_api_key_env")]
    pub api_key_env: String,
    /// The key itself, resolved from `api_key_env` at load time (never read from the file).
    #[serde(skip)]
    pub api_key: Option<Secret>,
    #[serde(default)]
    pub temperature: f32,
    #[serde(default = "default_max_tokens")]
    pub max_tokens: u32,
    /// Limit on one attempt (request and reply), seconds.
    #[serde(default = "default_timeout_s")]
    pub timeout_s: f64,
    /// Limit on a whole verdict: every attempt, backoff and re-ask, seconds.
    #[serde(default = "default_deadline_s")]
    pub deadline_s: f64,
    /// Retries after a failed attempt (timeouts, connection errors, 408/409/429/5xx).
    #[serde(default = "default_max_retries")]
    pub max_retries: u32,
    /// Cap on one backoff wait, seconds (also caps a judge's Retry-After).
    #[serde(default = "default_max_backoff_s")]
    pub max_backoff_s: f64,
    /// Ask for the verdict with a JSON-schema `response_format`; turn off for servers without it.
    #[serde(default = "yes")]
    pub structured_output: bool,
    /// Requests per minute sent to this judge (every attempt counts); unset = unlimited.
    #[serde(default)]
    pub requests_per_minute: Option<u32>,
    /// Tokens per minute (prompt + completion), estimated before a call and corrected after.
    #[serde(default)]
    pub tokens_per_minute: Option<u32>,
    /// Calls in flight to this judge at once; unset = unlimited.
    #[serde(default)]
    pub max_concurrency: Option<usize>,
    /// The judge's context window; a group whose prompt (plus `max_tokens`) exceeds it is judged
    /// in overlapping chunks that share anchor trajectories. Unset = never split.
    #[serde(default)]
    pub context_tokens: Option<usize>,
    /// Price per million prompt tokens (any currency; reported as `usage.cost`).
    #[serde(default)]
    pub prompt_price_per_million: Option<f64>,
    /// Price per million completion tokens.
    #[serde(default)]
    pub completion_price_per_million: Option<f64>,
    /// local: a GGUF file, a Hugging Face model folder, or a Hugging Face model id
    /// (`ORG/NAME`, `ORG/NAME-GGUF:FILE.gguf`) resolved through the Hugging Face cache.
    #[serde(default)]
    pub model_path: Option<PathBuf>,
    /// local: a LoRA adapter folder (PEFT's layout, as `gavel train judge` writes it) run over
    /// the model's weights as a low-rank side path; several judges can share one base model
    /// file with different adapters.
    #[serde(default)]
    pub adapter: Option<PathBuf>,
    /// local: `cpu` or `cuda:N` (`cuda:N` needs a build with the `cuda` feature).
    #[serde(default = "default_device")]
    pub device: crate::model::DeviceSpec,
    /// local: requests queued or running at once; beyond it the daemon answers 429.
    #[serde(default = "default_max_queue")]
    pub max_queue: usize,
    /// local: cap on each explanation, bytes (constrained output).
    #[serde(default = "default_max_explanation_bytes")]
    pub max_explanation_bytes: usize,
    /// local: bytes of prefilled prompts' KV kept for prefix reuse (0 = off). Unset: 32,768
    /// positions of the model's KV, at most an eighth of the machine's memory.
    #[serde(default)]
    pub prefix_cache_bytes: Option<u64>,
    /// local, pointwise and pairwise modes: most suffix tokens of a group's prompts run in one
    /// batched forward after the prefix they share (0: each prompt alone).
    #[serde(default = "default_max_batch_tokens")]
    pub max_batch_tokens: usize,
    /// local, listwise mode and explanations: generations decoded together, one batched
    /// forward a step for all of them (1: one at a time).
    #[serde(default = "default_max_decode_batch")]
    pub max_decode_batch: usize,
    /// local: sampling seed when `temperature` > 0.
    #[serde(default)]
    pub seed: u64,
    /// local: write each score as the model's expected score (probability-weighted over the
    /// digits it could write there) instead of its most likely digits.
    #[serde(default = "yes")]
    pub expected_score: bool,
    /// How the judge is asked (`listwise`, or for local judges `pointwise` / `pairwise`);
    /// a request's `judge_mode` overrides it. Default: `pointwise` for local judges (the most
    /// accurate on the labelled sets, README "Judge quality"), `listwise` for remote ones.
    #[serde(default)]
    pub mode: Option<crate::domain::prompt::JudgeMode>,
    /// local, pairwise mode: in groups of more than 8 distinct trajectories, how many others
    /// each one meets (in both orders); smaller groups meet every pair.
    #[serde(default = "default_pairwise_opponents")]
    pub pairwise_opponents: usize,
    /// local, pointwise and pairwise modes: after a group's scores are read, decode a short
    /// explanation for each trajectory (at most `max_explanation_bytes`). The scores are fixed
    /// before it starts, so it never changes them; it costs decode time.
    #[serde(default)]
    pub explain: bool,
    /// Cap on the judge's own answer to a task (rubrics with `reference = "judge"`), bytes: it
    /// is cut there (at a character boundary) before it is stored and shown to the judge, so
    /// it bounds what it adds to every verdict prompt.
    #[serde(default = "default_max_reference_bytes")]
    pub max_reference_bytes: usize,
}

fn default_max_reference_bytes() -> usize {
    1024
}

fn default_pairwise_opponents() -> usize {
    4
}

fn default_device() -> crate::model::DeviceSpec {
    crate::model::DeviceSpec::Cpu
}
fn default_max_queue() -> usize {
    64
}
fn default_max_batch_tokens() -> usize {
    1024
}
fn default_max_decode_batch() -> usize {
    8
}
fn default_max_explanation_bytes() -> usize {
    400
}

fn default_base_url() -> String {
    OPENAI_BASE_URL.to_string()
}
fn default_api_key_env() -> String {
    "OPENAI_API_KEY".to_string()
}
fn default_max_tokens() -> u32 {
    4096
}
fn default_timeout_s() -> f64 {
    120.0
}
fn default_deadline_s() -> f64 {
    600.0
}
fn default_max_retries() -> u32 {
    3
}
fn default_max_backoff_s() -> f64 {
    30.0
}
fn yes() -> bool {
    true
}

impl JudgeConfig {
    /// A judge with every default, for `base_url` and `model`.
    pub fn openai(
        base_url: impl Into<String>,
        model: impl Into<String>,
        api_key: Option<Secret>,
    ) -> JudgeConfig {
        JudgeConfig {
            backend: Backend::Openai,
            base_url: base_url.into(),
            model: model.into(),
            api_key_env: default_api_key_env(),
            api_key,
            temperature: 0.0,
            max_tokens: default_max_tokens(),
            timeout_s: default_timeout_s(),
            deadline_s: default_deadline_s(),
            max_retries: default_max_retries(),
            max_backoff_s: default_max_backoff_s(),
            structured_output: true,
            requests_per_minute: None,
            tokens_per_minute: None,
            max_concurrency: None,
            context_tokens: None,
            prompt_price_per_million: None,
            completion_price_per_million: None,
            model_path: None,
            adapter: None,
            device: default_device(),
            max_queue: default_max_queue(),
            max_explanation_bytes: default_max_explanation_bytes(),
            prefix_cache_bytes: None,
            max_batch_tokens: default_max_batch_tokens(),
            max_decode_batch: default_max_decode_batch(),
            seed: 0,
            expected_score: true,
            mode: None,
            pairwise_opponents: default_pairwise_opponents(),
            explain: false,
            max_reference_bytes: default_max_reference_bytes(),
        }
    }

    /// The mode this judge is asked in when a request names none: its `mode`, else pointwise
    /// for a local judge and listwise for a remote one.
    pub fn effective_mode(&self) -> crate::domain::prompt::JudgeMode {
        self.mode.unwrap_or(match self.backend {
            Backend::Local => crate::domain::prompt::JudgeMode::LOCAL_DEFAULT,
            Backend::Openai => crate::domain::prompt::JudgeMode::Listwise,
        })
    }

    /// A local judge with every default, for `model_path`.
    pub fn local(model_path: impl Into<PathBuf>) -> JudgeConfig {
        JudgeConfig {
            backend: Backend::Local,
            model_path: Some(model_path.into()),
            ..JudgeConfig::openai(default_base_url(), "", None)
        }
    }

    /// Checks this judge's settings; the error completes "[judges.NAME]: ...".
    pub fn validate(&self) -> Result<(), String> {
        for (key, value, positive) in [
            ("timeout_s", self.timeout_s, true),
            ("deadline_s", self.deadline_s, true),
            ("max_backoff_s", self.max_backoff_s, false),
        ] {
            check_seconds(value, positive).map_err(|why| format!("{key} {why}"))?;
        }
        for (key, price) in [
            ("prompt_price_per_million", self.prompt_price_per_million),
            (
                "completion_price_per_million",
                self.completion_price_per_million,
            ),
        ] {
            if price.is_some_and(|p| !(p.is_finite() && p >= 0.0)) {
                return Err(format!("{key} must be a number >= 0"));
            }
        }
        match self.backend {
            Backend::Openai if self.model.trim().is_empty() => {
                return Err("backend \"openai\" needs model (the API's model name)".into());
            }
            Backend::Local if self.model_path.is_none() => {
                return Err(
                    "backend \"local\" needs model_path (a GGUF file, a Hugging Face model \
                     folder or a Hugging Face model id)"
                        .into(),
                );
            }
            Backend::Local if self.max_queue == 0 => {
                return Err("max_queue must be > 0".into());
            }
            Backend::Local if self.max_decode_batch == 0 => {
                return Err(
                    "max_decode_batch must be > 0 (1 decodes one generation at a time)".into(),
                );
            }
            Backend::Local if self.pairwise_opponents == 0 => {
                return Err("pairwise_opponents must be > 0".into());
            }
            Backend::Openai if self.adapter.is_some() => {
                return Err("adapter needs backend \"local\"".into());
            }
            Backend::Openai if self.mode.is_some_and(|m| m.reads_probabilities()) => {
                return Err(format!(
                    "mode \"{}\" reads token probabilities: it needs backend \"local\"",
                    self.mode.map_or("", |m| m.name())
                ));
            }
            _ => {}
        }
        if self.max_reference_bytes == 0 {
            return Err("max_reference_bytes must be > 0".into());
        }
        if !(self.temperature.is_finite() && self.temperature >= 0.0) {
            return Err("temperature must be a number >= 0".into());
        }
        if self.base_url.parse::<reqwest::Url>().is_err() {
            return Err(format!("base_url {:?} is not a URL", self.base_url));
        }
        Ok(())
    }
}
