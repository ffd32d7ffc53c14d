//! Configuration: `gavel.toml` plus environment. Every option has a documented default; the
//! command line (`--config`, `--addr`, `--store`, each with an env twin) overrides the file.
//!
//! Secrets never live in the file: a judge names the environment variable holding its key
//! (`api_key_env`), and the key is kept in a [`Secret`] whose `Debug` and `Display` redact it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::rubric::line_of;
use crate::secret::redact_url;
pub use crate::secret::Secret;

/// Used when neither the config file nor `OPENAI_BASE_URL` names an endpoint.
pub const OPENAI_BASE_URL: &str = "https://api.openai.com/v1";
/// Used when neither the config file nor `GAVEL_JUDGE_MODEL` names a model.
pub const DEFAULT_MODEL: &str = "gpt-4.1-mini";

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{0}: cannot read: {1}")]
    Io(PathBuf, std::io::Error),
    #[error("{file}: {message}")]
    Invalid { file: String, message: String },
}

/// The whole configuration.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The judge used when a request names none.
    #[serde(default)]
    pub default_judge: Option<String>,
    /// Extra or replacement judge templates (`NAME.system.jinja` + `NAME.user.jinja`).
    #[serde(default)]
    pub prompts_dir: Option<PathBuf>,
    /// Extra or replacement rubrics (`*.toml`).
    #[serde(default)]
    pub rubrics_dir: Option<PathBuf>,
    #[serde(default)]
    pub judges: BTreeMap<String, JudgeConfig>,
    #[serde(default)]
    pub server: ServerConfig,
    #[serde(default)]
    pub store: StoreConfig,
    #[serde(default)]
    pub dedup: DedupSection,
    #[serde(default)]
    pub openrlhf: OpenRlhfConfig,
}

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
    /// local: a GGUF file or a Hugging Face model folder.
    #[serde(default)]
    pub model_path: Option<PathBuf>,
    /// local: `cpu` or `cuda:N` (`cuda:N` needs a build with the `cuda` feature).
    #[serde(default = "default_device")]
    pub device: String,
    /// local: requests queued or running at once; beyond it the daemon answers 429.
    #[serde(default = "default_max_queue")]
    pub max_queue: usize,
    /// local: cap on each explanation, bytes (constrained output).
    #[serde(default = "default_max_explanation_bytes")]
    pub max_explanation_bytes: usize,
    /// local: prefilled prompts kept for KV prefix reuse (0 = off).
    #[serde(default = "default_prefix_cache_entries")]
    pub prefix_cache_entries: usize,
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
    pub mode: Option<crate::prompt::JudgeMode>,
    /// local, pairwise mode: in groups of more than 8 distinct trajectories, how many others
    /// each one meets (in both orders); smaller groups meet every pair.
    #[serde(default = "default_pairwise_opponents")]
    pub pairwise_opponents: usize,
    /// local, pointwise and pairwise modes: after a group's scores are read, decode a short
    /// explanation for each trajectory (at most `max_explanation_bytes`). The scores are fixed
    /// before it starts, so it never changes them; it costs decode time.
    #[serde(default)]
    pub explain: bool,
}

fn default_pairwise_opponents() -> usize {
    4
}

fn default_device() -> String {
    "cpu".to_string()
}
fn default_max_queue() -> usize {
    64
}
fn default_max_explanation_bytes() -> usize {
    400
}
fn default_prefix_cache_entries() -> usize {
    4
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
            device: default_device(),
            max_queue: default_max_queue(),
            max_explanation_bytes: default_max_explanation_bytes(),
            prefix_cache_entries: default_prefix_cache_entries(),
            seed: 0,
            expected_score: true,
            mode: None,
            pairwise_opponents: default_pairwise_opponents(),
            explain: false,
        }
    }

    /// The mode this judge is asked in when a request names none: its `mode`, else pointwise
    /// for a local judge and listwise for a remote one.
    pub fn effective_mode(&self) -> crate::prompt::JudgeMode {
        self.mode.unwrap_or(match self.backend {
            Backend::Local => crate::prompt::JudgeMode::LOCAL_DEFAULT,
            Backend::Openai => crate::prompt::JudgeMode::Listwise,
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
}

/// `[server]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    pub addr: String,
    /// Largest request body accepted, bytes.
    pub max_body_bytes: usize,
    /// Most trajectories in one group (at most 64).
    pub max_group_size: usize,
    /// Limit on one HTTP request, seconds; past it the daemon answers 504 `judge_timeout`.
    pub request_timeout_s: f64,
    /// Scoring requests handled at once; beyond it the daemon answers 429 `overloaded` at once.
    pub max_in_flight: usize,
    /// File of API keys, one a line (blank lines and `#` comments skipped). With keys from it or
    /// from `GAVEL_API_KEYS` (comma-separated), every route outside `open_paths` needs
    /// `Authorization: Bearer KEY`.
    pub api_keys_file: Option<PathBuf>,
    /// Routes served without a key when keys are set (default: the probes and `/metrics`, so
    /// kubelet and Prometheus need no secret).
    pub open_paths: Vec<String>,
    /// How long `/readyz` reuses a judge reachability probe, seconds (kubelet probes every few
    /// seconds per pod; judges should not see that traffic).
    pub ready_cache_s: f64,
    /// Serve without API keys on an address other than loopback. Off by default: without
    /// keys on a reachable address anyone could spend the judges' budget, so the daemon refuses
    /// to start unless this says that is meant (e.g. behind an authenticating proxy).
    pub allow_unauthenticated: bool,
    /// How long a client may take to send a request's headers, seconds; a connection that is
    /// slower is closed (slow-header clients would otherwise hold connections for ever).
    pub header_read_timeout_s: f64,
    /// How long a client may take to send a request's body once admitted, seconds; past it the
    /// request gets 408 `request_timeout`.
    pub body_read_timeout_s: f64,
    /// Largest rendered judge prompt of one judge call, bytes; a group whose prompt is larger
    /// gets 413 `payload_too_large` before any judge is asked.
    pub max_prompt_bytes: usize,
    /// The API keys, resolved from `api_keys_file` and `GAVEL_API_KEYS` at load time.
    #[serde(skip)]
    pub api_keys: Vec<Secret>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            addr: "127.0.0.1:8080".into(),
            max_body_bytes: 16 * 1024 * 1024,
            max_group_size: crate::trajectory::MAX_GROUP_SIZE,
            request_timeout_s: 900.0,
            max_in_flight: 256,
            api_keys_file: None,
            open_paths: ["/healthz", "/readyz", "/metrics"]
                .map(String::from)
                .to_vec(),
            ready_cache_s: 5.0,
            allow_unauthenticated: false,
            header_read_timeout_s: 10.0,
            body_read_timeout_s: 30.0,
            max_prompt_bytes: 2 * 1024 * 1024,
            api_keys: Vec::new(),
        }
    }
}

impl ServerConfig {
    /// Reads the API keys from `api_keys_file` and `keys_env` (the value of `GAVEL_API_KEYS`).
    /// The file's lines are keys; `#` starts a comment line. Errors never quote a key.
    pub fn resolve_api_keys(&mut self, keys_env: Option<&str>) -> Result<(), ConfigError> {
        let mut keys = Vec::new();
        if let Some(path) = &self.api_keys_file {
            let text =
                std::fs::read_to_string(path).map_err(|e| ConfigError::Io(path.clone(), e))?;
            keys.extend(
                text.lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty() && !l.starts_with('#'))
                    .map(Secret::new),
            );
            if keys.is_empty() {
                return Err(ConfigError::Invalid {
                    file: path.display().to_string(),
                    message: "api_keys_file holds no keys".into(),
                });
            }
        }
        keys.extend(keys_env.map(key_list).unwrap_or_default());
        self.api_keys = keys;
        Ok(())
    }
}

/// The keys in a comma-separated list.
fn key_list(list: &str) -> Vec<Secret> {
    list.split(',')
        .map(str::trim)
        .filter(|k| !k.is_empty())
        .map(Secret::new)
        .collect()
}

/// `[store]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StoreConfig {
    /// Directory of the embedded sled verdict store (used when `url` is unset).
    pub path: PathBuf,
    /// A shared Postgres store, `postgres://user:password@host:5432/db`: verdicts, cross-replica
    /// single-flight and the scoring log for many replicas. Redacted in logs; prefer passing it
    /// as `GAVEL_STORE_URL` from a secret over writing a password here.
    #[serde(deserialize_with = "secret_url")]
    pub url: Option<Secret>,
    /// Postgres connections one process keeps at most.
    pub pool_size: usize,
    /// Seconds a judge-call claim outlives its holder's last renewal (renewed every third of
    /// it): how long a replica that died mid-call delays others asking for the same verdict.
    pub claim_ttl_s: f64,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            path: PathBuf::from("gavel-store"),
            url: None,
            pool_size: 16,
            claim_ttl_s: 30.0,
        }
    }
}

impl StoreConfig {
    /// Where verdicts go, for logs: the Postgres URL without its password, or the sled path.
    pub fn describe(&self) -> String {
        match &self.url {
            Some(u) => redact_url(u.expose()),
            None => self.path.display().to_string(),
        }
    }

    /// Checks the store settings (also after `--store-url` replaced the file's).
    pub fn validate(&self) -> Result<(), String> {
        if let Some(u) = &self.url {
            let u = u.expose();
            if !(u.starts_with("postgres://") || u.starts_with("postgresql://")) {
                return Err(format!(
                    "[store] url {:?} is not a postgres:// or postgresql:// URL",
                    redact_url(u)
                ));
            }
        }
        if self.pool_size == 0 {
            return Err("[store] pool_size must be > 0".into());
        }
        if !(self.claim_ttl_s.is_finite() && (0.5..=MAX_SECONDS).contains(&self.claim_ttl_s)) {
            return Err("[store] claim_ttl_s must be at least 0.5 and at most 30 days".into());
        }
        Ok(())
    }
}

fn secret_url<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Secret>, D::Error> {
    Ok(Option::<String>::deserialize(d)?
        .filter(|u| !u.is_empty())
        .map(Secret::new))
}

/// `[dedup]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DedupSection {
    /// Recurring message contents of at least this many characters are sent once.
    pub min_shared_chars: usize,
}

impl Default for DedupSection {
    fn default() -> Self {
        DedupSection {
            min_shared_chars: crate::dedup::DedupConfig::default().min_shared_chars,
        }
    }
}

/// `[openrlhf]`: how `POST /get_reward` (OpenRLHF's remote reward model protocol) assembles
/// samples into groups and judges them.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OpenRlhfConfig {
    /// The rubric every group is judged with.
    pub rubric: String,
    /// The judge (a `[judges.NAME]`); unset = `default_judge`.
    pub judge: Option<String>,
    /// Samples per prompt (OpenRLHF's `n_samples_per_prompt`): a group is judged as soon as
    /// this many samples of one prompt have arrived.
    pub group_size: usize,
    /// How long a group waits for its remaining samples after its first one arrived before it
    /// is judged as it is, milliseconds.
    pub wait_ms: u64,
    /// The verifier a sample's label becomes the `expected` answer of: used when the rubric has
    /// a verifier of this name, or when `label_kind` is set.
    pub label_verifier: String,
    /// When set, labels feed an `answer_line` verifier of this kind even if the rubric has none
    /// (merged by name with the rubric's when it has one).
    pub label_kind: Option<String>,
    /// End-of-turn markers cut from the end of each response before judging (OpenRLHF decodes
    /// queries with special tokens, and a verifier reads the response's last line).
    pub strip_suffixes: Vec<String>,
    /// Most samples in one `/get_reward` request; more get 413 `payload_too_large`.
    pub max_samples: usize,
    /// Most groups filling up or being judged at once, across requests; a request that would
    /// start more gets 429 `overloaded`.
    pub max_pending_groups: usize,
}

impl Default for OpenRlhfConfig {
    fn default() -> Self {
        OpenRlhfConfig {
            rubric: "default".into(),
            judge: None,
            group_size: 8,
            wait_ms: 2000,
            label_verifier: "answer_line".into(),
            label_kind: None,
            strip_suffixes: ["<|im_end|>", "<|endoftext|>", "<|eot_id|>", "</s>"]
                .map(String::from)
                .to_vec(),
            max_samples: 1024,
            max_pending_groups: 1024,
        }
    }
}

impl Config {
    /// Reads a TOML config file and resolves judge keys from the environment.
    pub fn from_file(path: &Path) -> Result<Config, ConfigError> {
        let text =
            std::fs::read_to_string(path).map_err(|e| ConfigError::Io(path.to_path_buf(), e))?;
        Config::from_toml(&text, &path.display().to_string(), &|k| {
            std::env::var(k).ok()
        })
    }

    /// Parses TOML text; `env` looks up environment variables (injectable for tests).
    pub fn from_toml(
        text: &str,
        file: &str,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        let mut cfg: Config = toml::from_str(text).map_err(|e| ConfigError::Invalid {
            file: match e.span() {
                Some(span) => format!("{file}:{}", line_of(text, span.start)),
                None => file.to_string(),
            },
            message: e.message().to_string(),
        })?;
        for j in cfg.judges.values_mut() {
            j.api_key = env(&j.api_key_env)
                .filter(|k| !k.is_empty())
                .map(Secret::new);
        }
        cfg.validate(file)?;
        cfg.server
            .resolve_api_keys(env("GAVEL_API_KEYS").as_deref())?;
        Ok(cfg)
    }

    /// The configuration used with no file: one judge named `default` from `OPENAI_BASE_URL`,
    /// `OPENAI_API_KEY` and `GAVEL_JUDGE_MODEL`.
    pub fn from_env(env: &dyn Fn(&str) -> Option<String>) -> Config {
        let mut judge = JudgeConfig::openai(
            env("OPENAI_BASE_URL").unwrap_or_else(default_base_url),
            env("GAVEL_JUDGE_MODEL").unwrap_or_else(|| DEFAULT_MODEL.to_string()),
            env("OPENAI_API_KEY")
                .filter(|k| !k.is_empty())
                .map(Secret::new),
        );
        judge.api_key_env = default_api_key_env();
        Config {
            default_judge: Some("default".into()),
            prompts_dir: None,
            rubrics_dir: None,
            judges: BTreeMap::from([("default".to_string(), judge)]),
            server: ServerConfig {
                api_keys: env("GAVEL_API_KEYS")
                    .as_deref()
                    .map(key_list)
                    .unwrap_or_default(),
                ..ServerConfig::default()
            },
            store: StoreConfig::default(),
            dedup: DedupSection::default(),
            openrlhf: OpenRlhfConfig::default(),
        }
    }

    fn validate(&self, file: &str) -> Result<(), ConfigError> {
        let invalid = |message: String| ConfigError::Invalid {
            file: file.to_string(),
            message,
        };
        if let Some(d) = &self.default_judge {
            if !self.judges.contains_key(d) {
                return Err(invalid(format!(
                    "default_judge {d:?} is not a [judges.NAME] table"
                )));
            }
        }
        for (name, j) in &self.judges {
            for (key, value, positive) in [
                ("timeout_s", j.timeout_s, true),
                ("deadline_s", j.deadline_s, true),
                ("max_backoff_s", j.max_backoff_s, false),
            ] {
                check_seconds(value, positive)
                    .map_err(|why| invalid(format!("[judges.{name}]: {key} {why}")))?;
            }
            for (key, price) in [
                ("prompt_price_per_million", j.prompt_price_per_million),
                (
                    "completion_price_per_million",
                    j.completion_price_per_million,
                ),
            ] {
                if price.is_some_and(|p| !(p.is_finite() && p >= 0.0)) {
                    return Err(invalid(format!(
                        "[judges.{name}]: {key} must be a number >= 0"
                    )));
                }
            }
            match j.backend {
                Backend::Openai if j.model.trim().is_empty() => {
                    return Err(invalid(format!(
                        "[judges.{name}]: backend \"openai\" needs model (the API's model name)"
                    )));
                }
                Backend::Local if j.model_path.is_none() => {
                    return Err(invalid(format!(
                        "[judges.{name}]: backend \"local\" needs model_path (a GGUF file or a \
                         Hugging Face model folder)"
                    )));
                }
                Backend::Local if j.max_queue == 0 => {
                    return Err(invalid(format!("[judges.{name}]: max_queue must be > 0")));
                }
                Backend::Local if j.pairwise_opponents == 0 => {
                    return Err(invalid(format!(
                        "[judges.{name}]: pairwise_opponents must be > 0"
                    )));
                }
                Backend::Openai if j.mode.is_some_and(|m| m.reads_probabilities()) => {
                    return Err(invalid(format!(
                        "[judges.{name}]: mode \"{}\" reads token probabilities: it needs \
                         backend \"local\"",
                        j.mode.map_or("", |m| m.name())
                    )));
                }
                _ => {}
            }
            if !(j.temperature.is_finite() && j.temperature >= 0.0) {
                return Err(invalid(format!(
                    "[judges.{name}]: temperature must be a number >= 0"
                )));
            }
            if j.base_url.parse::<reqwest::Url>().is_err() {
                return Err(invalid(format!(
                    "[judges.{name}]: base_url {:?} is not a URL",
                    j.base_url
                )));
            }
        }
        let s = &self.server;
        if s.max_group_size == 0 || s.max_group_size > crate::trajectory::MAX_GROUP_SIZE {
            return Err(invalid(format!(
                "[server] max_group_size must be 1..={}",
                crate::trajectory::MAX_GROUP_SIZE
            )));
        }
        check_seconds(s.request_timeout_s, true)
            .map_err(|why| invalid(format!("[server] request_timeout_s {why}")))?;
        if s.max_in_flight == 0 {
            return Err(invalid("[server] max_in_flight must be > 0".into()));
        }
        let o = &self.openrlhf;
        if o.group_size == 0 || o.group_size > s.max_group_size {
            return Err(invalid(format!(
                "[openrlhf] group_size must be 1..={} ([server] max_group_size)",
                s.max_group_size
            )));
        }
        if let Some(j) = o.judge.as_ref().filter(|j| !self.judges.contains_key(*j)) {
            return Err(invalid(format!(
                "[openrlhf] judge {j:?} is not a [judges.NAME] table"
            )));
        }
        if let Some(p) = s.open_paths.iter().find(|p| !p.starts_with('/')) {
            return Err(invalid(format!(
                "[server] open_paths: {p:?} is not a path (it must start with /)"
            )));
        }
        check_seconds(s.ready_cache_s, false)
            .map_err(|why| invalid(format!("[server] ready_cache_s {why}")))?;
        for (key, value) in [
            ("header_read_timeout_s", s.header_read_timeout_s),
            ("body_read_timeout_s", s.body_read_timeout_s),
        ] {
            check_seconds(value, true).map_err(|why| invalid(format!("[server] {key} {why}")))?;
        }
        if s.max_prompt_bytes == 0 {
            return Err(invalid("[server] max_prompt_bytes must be > 0".into()));
        }
        if o.max_samples == 0 || o.max_pending_groups == 0 {
            return Err(invalid(
                "[openrlhf] max_samples and max_pending_groups must be > 0".into(),
            ));
        }
        self.store.validate().map_err(invalid)
    }

    /// The judge used when a request names none: `default_judge`, else the only judge.
    pub fn default_judge_name(&self) -> Option<&str> {
        match &self.default_judge {
            Some(d) => Some(d),
            None if self.judges.len() == 1 => self.judges.keys().next().map(String::as_str),
            None => None,
        }
    }
}

/// The longest duration any `*_s` key may name: 30 days. Past about 5.8e11 years a duration
/// no longer fits `std::time::Duration` (`from_secs_f64` panics), and nothing gavel waits for
/// takes a month, so a larger value is a typo, and `inf` would panic on every request.
pub const MAX_SECONDS: f64 = 30.0 * 24.0 * 3600.0;

/// Whether `value` is a usable number of seconds: finite, at most [`MAX_SECONDS`], and > 0
/// (`positive`) or >= 0. The error completes "KEY ...".
pub fn check_seconds(value: f64, positive: bool) -> Result<(), String> {
    let low_ok = if positive { value > 0.0 } else { value >= 0.0 };
    if value.is_finite() && low_ok && value <= MAX_SECONDS {
        return Ok(());
    }
    let low = if positive { "> 0" } else { ">= 0" };
    Err(format!(
        "must be a number of seconds {low} and at most {MAX_SECONDS} (30 days), got {value}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(k: &str) -> Option<String> {
        (k == "MY_KEY").then(|| "sk-secret-123".to_string())
    }

    #[test]
    fn judges_resolve_keys_from_env_and_redact_them() {
        let cfg = Config::from_toml(
            "default_judge = \"a\"\n[judges.a]\nbackend = \"openai\"\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"m\"\napi_key_env = \"MY_KEY\"\n",
            "g.toml",
            &env,
        )
        .unwrap();
        let a = &cfg.judges["a"];
        assert_eq!(a.api_key.as_ref().unwrap().expose(), "sk-secret-123");
        assert!(!format!("{cfg:?}").contains("sk-secret"));
        assert!(a.structured_output);
        assert_eq!(cfg.server.max_body_bytes, 16 * 1024 * 1024);
    }

    #[test]
    fn errors_name_file_and_line() {
        let e = Config::from_toml("[server]\nmax_body = 3\n", "g.toml", &env).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("g.toml:2: unknown field `max_body`"),
            "{e}"
        );
        let e = Config::from_toml("default_judge = \"x\"\n", "g.toml", &env).unwrap_err();
        assert_eq!(
            e.to_string(),
            "g.toml: default_judge \"x\" is not a [judges.NAME] table"
        );
    }

    #[test]
    fn the_shipped_example_config_is_valid() {
        let text = include_str!("../examples/gavel.toml");
        let cfg = Config::from_toml(text, "examples/gavel.toml", &|_| None).unwrap();
        assert_eq!(cfg.default_judge_name(), Some("openai"));
        assert_eq!(cfg.judges["openai"].requests_per_minute, Some(500));
        assert_eq!(cfg.server.max_in_flight, 256);
        assert_eq!(cfg.openrlhf.group_size, 8);
        assert_eq!(cfg.store.pool_size, 16);
        assert!(cfg.store.url.is_none());
        // The commented Postgres line, switched on, is valid too.
        let on = text.replace("# url = \"postgres://", "url = \"postgres://");
        let cfg = Config::from_toml(&on, "examples/gavel.toml", &|_| None).unwrap();
        assert_eq!(
            cfg.store.url.as_ref().map(Secret::expose),
            Some("postgres://gavel@postgres:5432/gavel")
        );
        let local = &cfg.judges["local"];
        assert_eq!(local.backend, Backend::Local);
        assert_eq!((local.device.as_str(), local.max_queue), ("cpu", 64));
        assert!(local.model_path.is_some() && local.structured_output);
    }

    #[test]
    fn openrlhf_section_is_checked() {
        let e = Config::from_toml("[openrlhf]\ngroup_size = 0\n", "g.toml", &env).unwrap_err();
        assert_eq!(
            e.to_string(),
            "g.toml: [openrlhf] group_size must be 1..=64 ([server] max_group_size)"
        );
        let e = Config::from_toml("[openrlhf]\njudge = \"nope\"\n", "g.toml", &env).unwrap_err();
        assert_eq!(
            e.to_string(),
            "g.toml: [openrlhf] judge \"nope\" is not a [judges.NAME] table"
        );
        let cfg = Config::from_toml("[openrlhf]\nwait_ms = 50\n", "g.toml", &env).unwrap();
        assert_eq!(
            (cfg.openrlhf.wait_ms, cfg.openrlhf.rubric.as_str()),
            (50, "default")
        );
    }

    #[test]
    fn api_keys_come_from_the_file_and_the_environment() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("keys");
        std::fs::write(
            &file,
            "# operators\nkey-from-file-1\n\n  key-from-file-2  \n",
        )
        .unwrap();
        let toml = format!(
            "[server]\napi_keys_file = {:?}\n",
            file.display().to_string()
        );
        let env = |k: &str| (k == "GAVEL_API_KEYS").then(|| " key-env-1, ,key-env-2".to_string());
        let cfg = Config::from_toml(&toml, "g.toml", &env).unwrap();
        let keys: Vec<&str> = cfg.server.api_keys.iter().map(Secret::expose).collect();
        assert_eq!(
            keys,
            [
                "key-from-file-1",
                "key-from-file-2",
                "key-env-1",
                "key-env-2"
            ]
        );
        assert!(
            !format!("{cfg:?}").contains("key-"),
            "keys are redacted in Debug"
        );
        let from_env = Config::from_env(&env);
        assert_eq!(from_env.server.api_keys.len(), 2);
        // No keys: auth stays off.
        let cfg = Config::from_toml("", "g.toml", &|_| None).unwrap();
        assert!(cfg.server.api_keys.is_empty());
        assert_eq!(cfg.server.open_paths, ["/healthz", "/readyz", "/metrics"]);

        std::fs::write(&file, "# only a comment\n").unwrap();
        let e = Config::from_toml(&toml, "g.toml", &|_| None).unwrap_err();
        assert!(
            e.to_string().ends_with("api_keys_file holds no keys"),
            "{e}"
        );
        let missing = format!(
            "[server]\napi_keys_file = {:?}\n",
            dir.path().join("nope").display().to_string()
        );
        let e = Config::from_toml(&missing, "g.toml", &|_| None).unwrap_err();
        assert!(e.to_string().contains("nope: cannot read"), "{e}");
        let e = Config::from_toml("[server]\nopen_paths = [\"metrics\"]\n", "g.toml", &|_| {
            None
        })
        .unwrap_err();
        assert!(e.to_string().contains("\"metrics\" is not a path"), "{e}");
    }

    #[test]
    fn store_urls_are_checked_and_redacted() {
        let cfg = Config::from_toml(
            "[store]\nurl = \"postgres://gavel:hunter2@db/gavel\"\nclaim_ttl_s = 5\n",
            "g.toml",
            &env,
        )
        .unwrap();
        assert_eq!(cfg.store.describe(), "postgres://gavel:***@db/gavel");
        assert!(!format!("{cfg:?}").contains("hunter2"));
        let e = Config::from_toml("[store]\nurl = \"mysql://u:pw@db/x\"\n", "g.toml", &env)
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "g.toml: [store] url \"mysql://u:***@db/x\" is not a postgres:// or postgresql:// URL"
        );
        let e = Config::from_toml("[store]\nclaim_ttl_s = 0\n", "g.toml", &env).unwrap_err();
        assert!(e.to_string().contains("claim_ttl_s"), "{e}");
    }

    #[test]
    fn local_judges_need_a_model_path_and_openai_ones_a_model() {
        let e =
            Config::from_toml("[judges.a]\nbackend = \"openai\"\n", "g.toml", &env).unwrap_err();
        assert_eq!(
            e.to_string(),
            "g.toml: [judges.a]: backend \"openai\" needs model (the API's model name)"
        );
        let e = Config::from_toml("[judges.l]\nbackend = \"local\"\n", "g.toml", &env).unwrap_err();
        assert!(e.to_string().contains("needs model_path"), "{e}");
        let ok = "[judges.l]\nbackend = \"local\"\nmodel_path = \"m.gguf\"\ndevice = \"cuda:1\"\n";
        let cfg = Config::from_toml(ok, "g.toml", &env).unwrap();
        let l = &cfg.judges["l"];
        assert_eq!(
            (l.device.as_str(), l.max_queue, l.prefix_cache_entries),
            ("cuda:1", 64, 4)
        );
        let e = Config::from_toml(&format!("{ok}max_queue = 0\n"), "g.toml", &env).unwrap_err();
        assert!(e.to_string().contains("max_queue must be > 0"), "{e}");
    }

    #[test]
    fn the_kubernetes_configs_are_valid() {
        // The ConfigMaps' gavel.toml of the CPU base and the GPU overlay (local judge).
        let base = include_str!("../k8s/config/gavel.toml");
        let cfg = Config::from_toml(base, "k8s/config/gavel.toml", &|_| None).unwrap();
        assert!(!cfg.judges.is_empty());
        let gpu = include_str!("../k8s/overlays/gpu/gavel.toml");
        let cfg = Config::from_toml(gpu, "k8s/overlays/gpu/gavel.toml", &|_| None).unwrap();
        let local = &cfg.judges["local"];
        assert_eq!(local.backend, Backend::Local);
        assert_eq!(local.device, "cuda:0");
    }

    #[test]
    fn no_file_builds_a_default_judge_from_env() {
        let cfg = Config::from_env(&|k| match k {
            "OPENAI_BASE_URL" => Some("http://127.0.0.1:1234/v1".into()),
            "GAVEL_JUDGE_MODEL" => Some("qwen".into()),
            _ => None,
        });
        let d = &cfg.judges["default"];
        assert_eq!(d.base_url, "http://127.0.0.1:1234/v1");
        assert_eq!(d.model, "qwen");
        assert!(d.api_key.is_none());
        assert_eq!(cfg.default_judge_name(), Some("default"));
    }

    #[test]
    fn durations_must_be_finite_and_bounded() {
        // Each of these passed validation before and then panicked in `Duration::from_secs_f64`
        // (per request for request_timeout_s, at start for a judge's timeouts).
        let judge = "[judges.j]\nbackend = \"openai\"\nmodel = \"m\"\n";
        for (toml, key) in [
            (
                "[server]\nrequest_timeout_s = inf\n".to_string(),
                "request_timeout_s",
            ),
            (
                "[server]\nrequest_timeout_s = 1e300\n".to_string(),
                "request_timeout_s",
            ),
            (
                "[server]\nready_cache_s = inf\n".to_string(),
                "ready_cache_s",
            ),
            (format!("{judge}timeout_s = inf\n"), "timeout_s"),
            (format!("{judge}deadline_s = 1e20\n"), "deadline_s"),
            (format!("{judge}max_backoff_s = nan\n"), "max_backoff_s"),
            ("[store]\nclaim_ttl_s = 1e30\n".to_string(), "claim_ttl_s"),
        ] {
            let e = Config::from_toml(&toml, "g.toml", &|_| None).unwrap_err();
            assert!(e.to_string().contains(key), "{toml}: {e}");
        }
        let ok = format!("{judge}timeout_s = 60\n[server]\nrequest_timeout_s = 2592000\n");
        Config::from_toml(&ok, "g.toml", &|_| None).unwrap();
    }
}
