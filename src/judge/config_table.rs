//! `[judges.NAME]` as the file writes it, and its reading into a [`JudgeConfig`]: one flat table
//! whose `backend` says which keys belong, so that a key given to the wrong backend is refused
//! by name rather than ignored. What the judges are once read lives in `config.rs`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;

use super::config::{
    default_base_url, default_deadline_s, default_max_reference_bytes, default_max_tokens,
    is_openai, Backend, CascadeConfig, CommonSettings, JudgeConfig, LocalConfig, RemoteConfig,
    StructuredOutput,
};
use crate::domain::device::DeviceSpec;
use crate::domain::prompt::JudgeMode;

/// `[judges.NAME]` as the file writes it: one flat table whose `backend` says which keys
/// belong. Every backend's own key is optional here, so that one given to the other backend
/// is seen and refused by name rather than ignored.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JudgeTable {
    backend: Backend,
    #[serde(default)]
    model: String,
    #[serde(default)]
    temperature: f32,
    #[serde(default = "default_max_tokens")]
    max_tokens: u32,
    #[serde(default = "default_deadline_s")]
    deadline_s: f64,
    #[serde(default)]
    structured_output: StructuredOutput,
    #[serde(default)]
    mode: Option<JudgeMode>,
    #[serde(default)]
    context_tokens: Option<usize>,
    #[serde(default = "default_max_reference_bytes")]
    max_reference_bytes: usize,
    // backend = "remote"
    base_url: Option<String>,
    api_key_env: Option<String>,
    timeout_s: Option<f64>,
    max_retries: Option<u32>,
    max_backoff_s: Option<f64>,
    requests_per_minute: Option<u32>,
    tokens_per_minute: Option<u32>,
    max_concurrency: Option<usize>,
    prompt_price_per_million: Option<f64>,
    completion_price_per_million: Option<f64>,
    top_logprobs: Option<u32>,
    // backend = "local"
    model_path: Option<PathBuf>,
    adapter: Option<PathBuf>,
    device: Option<DeviceSpec>,
    max_queue: Option<usize>,
    max_explanation_bytes: Option<usize>,
    prefix_cache_bytes: Option<u64>,
    max_batch_tokens: Option<usize>,
    max_decode_batch: Option<usize>,
    seed: Option<u64>,
    expected_score: Option<bool>,
    pairwise_opponents: Option<usize>,
    explain: Option<bool>,
    // backend = "cascade"
    stages: Option<Vec<String>>,
    thresholds: Option<Vec<f64>>,
}

impl JudgeTable {
    /// The first key given that belongs to another backend than this table's, and that
    /// backend's name.
    fn foreign_key(&self) -> Option<(&'static str, &'static str)> {
        let remote = [
            ("base_url", self.base_url.is_some()),
            ("api_key_env", self.api_key_env.is_some()),
            ("timeout_s", self.timeout_s.is_some()),
            ("max_retries", self.max_retries.is_some()),
            ("max_backoff_s", self.max_backoff_s.is_some()),
            ("requests_per_minute", self.requests_per_minute.is_some()),
            ("tokens_per_minute", self.tokens_per_minute.is_some()),
            ("max_concurrency", self.max_concurrency.is_some()),
            (
                "prompt_price_per_million",
                self.prompt_price_per_million.is_some(),
            ),
            (
                "completion_price_per_million",
                self.completion_price_per_million.is_some(),
            ),
            ("top_logprobs", self.top_logprobs.is_some()),
        ];
        let local = [
            ("model_path", self.model_path.is_some()),
            ("adapter", self.adapter.is_some()),
            ("device", self.device.is_some()),
            ("max_queue", self.max_queue.is_some()),
            (
                "max_explanation_bytes",
                self.max_explanation_bytes.is_some(),
            ),
            ("prefix_cache_bytes", self.prefix_cache_bytes.is_some()),
            ("max_batch_tokens", self.max_batch_tokens.is_some()),
            ("max_decode_batch", self.max_decode_batch.is_some()),
            ("seed", self.seed.is_some()),
            ("expected_score", self.expected_score.is_some()),
            ("pairwise_opponents", self.pairwise_opponents.is_some()),
            ("explain", self.explain.is_some()),
        ];
        let cascade = [
            ("stages", self.stages.is_some()),
            ("thresholds", self.thresholds.is_some()),
            // A cascade's stages are judges with their own model and mode.
            ("model", !self.model.is_empty()),
            ("mode", self.mode.is_some()),
        ];
        let others: Vec<(&[(&'static str, bool)], &'static str)> = match self.backend {
            Backend::Remote => vec![(&local, "local"), (&cascade[..2], "cascade")],
            Backend::Local => vec![(&remote, "remote"), (&cascade[..2], "cascade")],
            Backend::Cascade => vec![
                (&remote, "remote"),
                (&local, "local"),
                (&cascade[2..], "remote\" or \"local"),
            ],
        };
        others.into_iter().find_map(|(keys, owner)| {
            keys.iter()
                .find(|(_, given)| *given)
                .map(|(key, _)| (*key, owner))
        })
    }
}

/// `[judges]`: each table read by its backend. A refusal names the judge (and, through the TOML
/// error's span, the line of the `[judges]` tables).
pub fn deserialize_judges<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<BTreeMap<String, JudgeConfig>, D::Error> {
    BTreeMap::<String, JudgeTable>::deserialize(d)?
        .into_iter()
        .map(|(name, t)| {
            JudgeConfig::try_from(t)
                .map(|j| (name.clone(), j))
                .map_err(|e| serde::de::Error::custom(format!("[judges.{name}]: {e}")))
        })
        .collect()
}

impl TryFrom<JudgeTable> for JudgeConfig {
    type Error = String;

    fn try_from(t: JudgeTable) -> Result<JudgeConfig, String> {
        if let Some((key, owner)) = t.foreign_key() {
            return Err(format!(
                "{key} is a key of backend \"{owner}\"; this judge's backend is \"{}\"",
                t.backend.name()
            ));
        }
        if t.backend == Backend::Cascade {
            return Ok(JudgeConfig::Cascade(CascadeConfig {
                stages: t.stages.unwrap_or_default(),
                thresholds: t.thresholds.unwrap_or_default(),
            }));
        }
        let common = CommonSettings {
            model: t.model,
            temperature: t.temperature,
            max_tokens: t.max_tokens,
            deadline_s: t.deadline_s,
            structured_output: t.structured_output,
            mode: t.mode,
            context_tokens: t.context_tokens,
            max_reference_bytes: t.max_reference_bytes,
        };
        Ok(match t.backend {
            Backend::Remote => {
                let d = RemoteConfig::new(t.base_url.unwrap_or_else(default_base_url), None);
                JudgeConfig::Remote(RemoteConfig {
                    common,
                    key_required: t.api_key_env.is_some() || is_openai(&d.base_url),
                    api_key_env: t.api_key_env.unwrap_or(d.api_key_env),
                    timeout_s: t.timeout_s.unwrap_or(d.timeout_s),
                    max_retries: t.max_retries.unwrap_or(d.max_retries),
                    max_backoff_s: t.max_backoff_s.unwrap_or(d.max_backoff_s),
                    requests_per_minute: t.requests_per_minute,
                    tokens_per_minute: t.tokens_per_minute,
                    max_concurrency: t.max_concurrency,
                    prompt_price_per_million: t.prompt_price_per_million,
                    completion_price_per_million: t.completion_price_per_million,
                    top_logprobs: t.top_logprobs.unwrap_or(d.top_logprobs),
                    ..d
                })
            }
            Backend::Cascade => unreachable!("a cascade was returned above"),
            Backend::Local => {
                let Some(model_path) = t.model_path else {
                    return Err(
                        "backend \"local\" needs model_path (a GGUF file, a Hugging Face \
                                model folder or a Hugging Face model id)"
                            .into(),
                    );
                };
                let d = LocalConfig::new(model_path);
                JudgeConfig::Local(LocalConfig {
                    common,
                    adapter: t.adapter,
                    device: t.device.unwrap_or(d.device),
                    max_queue: t.max_queue.unwrap_or(d.max_queue),
                    max_explanation_bytes: t
                        .max_explanation_bytes
                        .unwrap_or(d.max_explanation_bytes),
                    prefix_cache_bytes: t.prefix_cache_bytes,
                    max_batch_tokens: t.max_batch_tokens.unwrap_or(d.max_batch_tokens),
                    max_decode_batch: t.max_decode_batch.unwrap_or(d.max_decode_batch),
                    seed: t.seed.unwrap_or(d.seed),
                    expected_score: t.expected_score.unwrap_or(d.expected_score),
                    pairwise_opponents: t.pairwise_opponents.unwrap_or(d.pairwise_opponents),
                    explain: t.explain.unwrap_or(d.explain),
                    ..d
                })
            }
        })
    }
}
