//! `[judges.NAME]`: how one judge is reached (remote endpoint or local model) and limited.
//! The judge layer owns its section; `crate::config` only composes it with the others.

use std::path::PathBuf;

use serde::Deserialize;

use crate::domain::device::DeviceSpec;
use crate::domain::prompt::JudgeMode;
use crate::domain::seconds::check_seconds;
use crate::domain::secret::Secret;

pub use super::cascade::CascadeConfig;
pub use super::structured_output::StructuredOutput;

/// Used when neither the config file nor `OPENAI_BASE_URL` names an endpoint.
pub const OPENAI_BASE_URL: &str = "https://api.openai.com/v1";
/// A remote judge's `top_logprobs` unless configured.
pub const DEFAULT_TOP_LOGPROBS: u32 = 20;
/// The most `top_logprobs` a config may ask for.
pub const MAX_TOP_LOGPROBS: u32 = 100;
/// Pairwise mode's opponents per trajectory for a judge that does not configure them (a remote
/// judge; a local judge's `pairwise_opponents` defaults to it too).
pub const DEFAULT_PAIRWISE_OPPONENTS: usize = 4;
/// Used when neither the config file nor `GAVEL_JUDGE_MODEL` names a model.
pub const DEFAULT_MODEL: &str = "gpt-4.1-mini";

/// Which kind of judge a `[judges.NAME]` table configures (its `backend` key).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// Any OpenAI-compatible `/v1/chat/completions` endpoint (`"openai"`, the name it had first,
    /// is still read).
    #[serde(alias = "openai")]
    Remote,
    /// A Qwen2/Qwen3 model run in-process with candle (`model_path`, `device`).
    Local,
    /// Judges tried in turn, cheapest first (`stages`, `thresholds`): see [`super::cascade`].
    Cascade,
}

impl Backend {
    /// The name a config file gives it.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Remote => "remote",
            Backend::Local => "local",
            Backend::Cascade => "cascade",
        }
    }
}

/// `[judges.NAME]`: one table per backend, each with the settings every judge reads. Read from
/// the file's flat table ([`JudgeTable`], by [`deserialize_judges`]), where a key of the other
/// backend is refused.
#[derive(Debug, Clone)]
pub enum JudgeConfig {
    Remote(RemoteConfig),
    Local(LocalConfig),
    Cascade(CascadeConfig),
}

/// What every judge reads, whatever its backend.
#[derive(Debug, Clone, PartialEq)]
pub struct CommonSettings {
    /// The model's name (remote: required, sent to the API; local: reported, default the
    /// model's own name).
    pub model: String,
    pub temperature: f32,
    /// Cap on the tokens of one completion (a verdict, an answer).
    pub max_tokens: u32,
    /// Limit on a whole verdict: every attempt, backoff and re-ask, seconds.
    pub deadline_s: f64,
    /// How the verdict is held to its JSON schema: remote, the `response_format` dialect
    /// (`auto` finds the one the server takes); local, constrained decoding unless `off`.
    pub structured_output: StructuredOutput,
    /// How the judge is asked (`listwise`, `pointwise` or `pairwise`; the last two read token
    /// probabilities: a remote judge's server must return `logprobs`); a request's
    /// `judge_mode` overrides it. Default: `pointwise` for local judges (the most accurate on
    /// the labelled sets, BENCHMARKS.md "Judge quality"), `listwise` for remote ones.
    pub mode: Option<JudgeMode>,
    /// The judge's context window; a group whose prompt (plus `max_tokens`) exceeds it is judged
    /// in overlapping chunks that share anchor trajectories. Unset = never split (local: the
    /// model's own window).
    pub context_tokens: Option<usize>,
    /// Cap on the judge's own answer to a task (rubrics with `reference = "judge"`), bytes: it
    /// is cut there (at a character boundary) before it is stored and shown to the judge, so
    /// it bounds what it adds to every verdict prompt.
    pub max_reference_bytes: usize,
}

/// `backend = "remote"`: how an OpenAI-compatible endpoint is reached, retried and limited.
#[derive(Debug, Clone)]
pub struct RemoteConfig {
    pub common: CommonSettings,
    /// Base URL of the API, e.g. `https://api.openai.com/v1` or `http://127.0.0.1:8000/v1`.
    pub base_url: String,
    /// Environment variable holding the API key.
    pub api_key_env: String,
    /// Whether the judge cannot run without a key: `api_key_env` was named, or the server is
    /// OpenAI's. A server of one's own (llama.cpp, vLLM on 127.0.0.1) may need none: without
    /// one, no Authorization header is sent.
    pub key_required: bool,
    /// The key itself, resolved from `api_key_env` at load time (never read from the file).
    pub api_key: Option<Secret>,
    /// Limit on one attempt (request and reply), seconds.
    pub timeout_s: f64,
    /// Retries after a failed attempt (timeouts, connection errors, 408/409/429/5xx).
    pub max_retries: u32,
    /// Cap on one backoff wait, seconds (also caps a judge's Retry-After).
    pub max_backoff_s: f64,
    /// Requests per minute sent to this judge (every attempt counts); unset = unlimited.
    pub requests_per_minute: Option<u32>,
    /// Tokens per minute (prompt + completion), estimated before a call and corrected after.
    pub tokens_per_minute: Option<u32>,
    /// Calls in flight to this judge at once; unset = unlimited.
    pub max_concurrency: Option<usize>,
    /// Price per million prompt tokens (any currency; reported as `usage.cost`).
    pub prompt_price_per_million: Option<f64>,
    /// Price per million completion tokens.
    pub completion_price_per_million: Option<f64>,
    /// Probability modes: the alternatives the server lists for the verdict token
    /// (`top_logprobs`; 20 is OpenAI's cap and vLLM's default `--max-logprobs`).
    pub top_logprobs: u32,
}

/// `backend = "local"`: which model runs in-process, where, and how its engine batches.
#[derive(Debug, Clone)]
pub struct LocalConfig {
    pub common: CommonSettings,
    /// A GGUF file, a Hugging Face model folder, or a Hugging Face model id (`ORG/NAME`,
    /// `ORG/NAME-GGUF:FILE.gguf`) resolved through the Hugging Face cache.
    pub model_path: PathBuf,
    /// A LoRA adapter folder (PEFT's layout, as `gavel train judge` writes it) run over the
    /// model's weights as a low-rank side path; several judges can share one base model file
    /// with different adapters.
    pub adapter: Option<PathBuf>,
    /// `cpu` or `cuda:N` (`cuda:N` needs a build with the `cuda` feature).
    pub device: DeviceSpec,
    /// Requests queued or running at once; beyond it the daemon answers 429.
    pub max_queue: usize,
    /// Cap on each explanation, bytes (constrained output).
    pub max_explanation_bytes: usize,
    /// Bytes of prefilled prompts' KV kept for prefix reuse (0 = off). Unset: 32,768 positions
    /// of the model's KV, at most an eighth of the machine's memory.
    pub prefix_cache_bytes: Option<u64>,
    /// Pointwise and pairwise modes: most suffix tokens of a group's prompts run in one batched
    /// forward after the prefix they share (0: each prompt alone).
    pub max_batch_tokens: usize,
    /// Listwise mode and explanations: generations decoded together, one batched forward a
    /// step for all of them (1: one at a time).
    pub max_decode_batch: usize,
    /// Sampling seed when `temperature` > 0.
    pub seed: u64,
    /// Write each score as the model's expected score (probability-weighted over the digits it
    /// could write there) instead of its most likely digits.
    pub expected_score: bool,
    /// Pairwise mode: in groups of more than 8 distinct trajectories, how many others each one
    /// meets (in both orders); smaller groups meet every pair.
    pub pairwise_opponents: usize,
    /// Pointwise and pairwise modes: after a group's scores are read, decode a short
    /// explanation for each trajectory (at most `max_explanation_bytes`). The scores are fixed
    /// before it starts, so it never changes them; it costs decode time.
    pub explain: bool,
}

pub(super) fn default_max_reference_bytes() -> usize {
    1024
}

fn default_pairwise_opponents() -> usize {
    DEFAULT_PAIRWISE_OPPONENTS
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

pub(super) fn default_base_url() -> String {
    OPENAI_BASE_URL.to_string()
}
fn default_api_key_env() -> String {
    "OPENAI_API_KEY".to_string()
}
pub(super) fn default_max_tokens() -> u32 {
    4096
}
fn default_timeout_s() -> f64 {
    120.0
}
pub(super) fn default_deadline_s() -> f64 {
    600.0
}
fn default_max_retries() -> u32 {
    3
}
fn default_max_backoff_s() -> f64 {
    30.0
}
/// Whether `base_url` is OpenAI's API, which answers nothing without a key.
pub fn is_openai(base_url: &str) -> bool {
    base_url
        .parse::<reqwest::Url>()
        .ok()
        .and_then(|u| {
            u.host_str()
                .map(|h| h.eq_ignore_ascii_case("api.openai.com"))
        })
        .unwrap_or(false)
}

impl CommonSettings {
    /// Every default; `model` named.
    pub fn new(model: impl Into<String>) -> CommonSettings {
        CommonSettings {
            model: model.into(),
            temperature: 0.0,
            max_tokens: default_max_tokens(),
            deadline_s: default_deadline_s(),
            structured_output: StructuredOutput::Auto,
            mode: None,
            context_tokens: None,
            max_reference_bytes: default_max_reference_bytes(),
        }
    }

    /// Checks the shared settings; the error completes "[judges.NAME]: ...".
    fn validate(&self) -> Result<(), String> {
        check_seconds(self.deadline_s, true).map_err(|why| format!("deadline_s {why}"))?;
        if self.max_reference_bytes == 0 {
            return Err("max_reference_bytes must be > 0".into());
        }
        if !(self.temperature.is_finite() && self.temperature >= 0.0) {
            return Err("temperature must be a number >= 0".into());
        }
        Ok(())
    }
}

impl RemoteConfig {
    /// A remote judge with every default, at `base_url`, with `api_key`; the model unnamed.
    pub fn new(base_url: impl Into<String>, api_key: Option<Secret>) -> RemoteConfig {
        RemoteConfig {
            common: CommonSettings::new(""),
            base_url: base_url.into(),
            api_key_env: default_api_key_env(),
            key_required: true,
            api_key,
            timeout_s: default_timeout_s(),
            max_retries: default_max_retries(),
            max_backoff_s: default_max_backoff_s(),
            requests_per_minute: None,
            tokens_per_minute: None,
            max_concurrency: None,
            prompt_price_per_million: None,
            completion_price_per_million: None,
            top_logprobs: DEFAULT_TOP_LOGPROBS,
        }
    }

    fn validate(&self) -> Result<(), String> {
        for (key, value, positive) in [
            ("timeout_s", self.timeout_s, true),
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
        if self.common.model.trim().is_empty() {
            return Err("backend \"remote\" needs model (the API's model name)".into());
        }
        if !(1..=MAX_TOP_LOGPROBS).contains(&self.top_logprobs) {
            return Err(format!(
                "top_logprobs must be 1 to {MAX_TOP_LOGPROBS} (servers cap it: OpenAI at 20, vLLM at its --max-logprobs)"
            ));
        }
        if self.base_url.parse::<reqwest::Url>().is_err() {
            return Err(format!("base_url {:?} is not a URL", self.base_url));
        }
        Ok(())
    }
}

impl LocalConfig {
    /// A local judge with every default, for `model_path`.
    pub fn new(model_path: impl Into<PathBuf>) -> LocalConfig {
        LocalConfig {
            common: CommonSettings::new(""),
            model_path: model_path.into(),
            adapter: None,
            device: DeviceSpec::Cpu,
            max_queue: default_max_queue(),
            max_explanation_bytes: default_max_explanation_bytes(),
            prefix_cache_bytes: None,
            max_batch_tokens: default_max_batch_tokens(),
            max_decode_batch: default_max_decode_batch(),
            seed: 0,
            expected_score: true,
            pairwise_opponents: default_pairwise_opponents(),
            explain: false,
        }
    }

    /// The mode this judge is asked in when a request names none: its `mode`, else pointwise.
    pub fn effective_mode(&self) -> JudgeMode {
        self.common.mode.unwrap_or(JudgeMode::LOCAL_DEFAULT)
    }

    fn validate(&self) -> Result<(), String> {
        if self.max_queue == 0 {
            return Err("max_queue must be > 0".into());
        }
        if self.max_decode_batch == 0 {
            return Err("max_decode_batch must be > 0 (1 decodes one generation at a time)".into());
        }
        if self.pairwise_opponents == 0 {
            return Err("pairwise_opponents must be > 0".into());
        }
        Ok(())
    }
}

impl JudgeConfig {
    /// A remote judge with every default, for `base_url` and `model`.
    pub fn openai(
        base_url: impl Into<String>,
        model: impl Into<String>,
        api_key: Option<Secret>,
    ) -> JudgeConfig {
        let mut r = RemoteConfig::new(base_url, api_key);
        r.common.model = model.into();
        JudgeConfig::Remote(r)
    }

    /// A local judge with every default, for `model_path`.
    pub fn local(model_path: impl Into<PathBuf>) -> JudgeConfig {
        JudgeConfig::Local(LocalConfig::new(model_path))
    }

    /// Which backend this is.
    pub fn backend(&self) -> Backend {
        match self {
            JudgeConfig::Remote(_) => Backend::Remote,
            JudgeConfig::Local(_) => Backend::Local,
            JudgeConfig::Cascade(_) => Backend::Cascade,
        }
    }

    /// What every backend that runs a model reads (a cascade has none of its own).
    pub fn common(&self) -> Option<&CommonSettings> {
        match self {
            JudgeConfig::Remote(r) => Some(&r.common),
            JudgeConfig::Local(l) => Some(&l.common),
            JudgeConfig::Cascade(_) => None,
        }
    }

    pub fn common_mut(&mut self) -> Option<&mut CommonSettings> {
        match self {
            JudgeConfig::Remote(r) => Some(&mut r.common),
            JudgeConfig::Local(l) => Some(&mut l.common),
            JudgeConfig::Cascade(_) => None,
        }
    }

    /// The remote table, if this is a remote judge.
    pub fn as_remote(&self) -> Option<&RemoteConfig> {
        match self {
            JudgeConfig::Remote(r) => Some(r),
            _ => None,
        }
    }

    /// The local table, if this is a local judge.
    pub fn as_local(&self) -> Option<&LocalConfig> {
        match self {
            JudgeConfig::Local(l) => Some(l),
            _ => None,
        }
    }

    pub fn as_remote_mut(&mut self) -> Option<&mut RemoteConfig> {
        match self {
            JudgeConfig::Remote(r) => Some(r),
            _ => None,
        }
    }

    /// The local table, if this is a local judge.
    pub fn as_local_mut(&mut self) -> Option<&mut LocalConfig> {
        match self {
            JudgeConfig::Local(l) => Some(l),
            _ => None,
        }
    }

    /// The cascade table, if this is a cascade.
    pub fn as_cascade(&self) -> Option<&CascadeConfig> {
        match self {
            JudgeConfig::Cascade(c) => Some(c),
            _ => None,
        }
    }

    /// The mode this judge is asked in when a request names none: its `mode`, else pointwise
    /// for a local judge and listwise for a remote one. A cascade has none: each stage is
    /// asked in its own.
    pub fn effective_mode(&self) -> Option<JudgeMode> {
        match self {
            JudgeConfig::Local(l) => Some(l.effective_mode()),
            JudgeConfig::Remote(r) => Some(r.common.mode.unwrap_or(JudgeMode::Listwise)),
            JudgeConfig::Cascade(_) => None,
        }
    }

    /// Checks this judge's settings; the error completes "[judges.NAME]: ...".
    pub fn validate(&self) -> Result<(), String> {
        if let Some(common) = self.common() {
            common.validate()?;
        }
        match self {
            JudgeConfig::Remote(r) => r.validate(),
            JudgeConfig::Local(l) => l.validate(),
            JudgeConfig::Cascade(c) => c.validate(),
        }
    }
}
