//! A remote judge: any OpenAI-compatible `/v1/chat/completions`, through async-openai.
//!
//! async-openai's default transport retries by itself (fixed policy, Retry-After lost to the
//! caller). gavel owns the retry policy instead, so the client is given a bare transport
//! ([`transport::StatusTransport`]) that turns every non-2xx reply into an error carrying the status and
//! `Retry-After`, and [`RemoteJudge::complete`] decides what to retry and how long to wait.
//!
//! Structured output is negotiated, not assumed: with `structured_output = "auto"` the judge
//! asks in `json_schema` until its server refuses the `response_format` (in words that name it:
//! [`crate::judge::structured_output::refuses_format`]), then resends the same request in the
//! next dialect down and keeps that one for every later call. This costs no request where the
//! first dialect is taken (OpenAI, vLLM) and works for a server that is down when gavel starts.

mod probabilities;
mod transport;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use async_openai::config::{Config as _, OpenAIConfig};
use async_openai::error::OpenAIError;
use async_openai::types::chat::{
    ChatCompletionRequestAssistantMessageArgs, ChatCompletionRequestMessage,
    ChatCompletionRequestSystemMessageArgs, ChatCompletionRequestUserMessageArgs,
    CreateChatCompletionRequestArgs,
};
use async_openai::Client;
use async_trait::async_trait;
use serde_json::{json, Value};

use transport::{
    backoff, classify, format_refusal, logprobs_refusal, Failure, Reply, ReplyToken,
    StatusTransport,
};

use super::config::{is_openai, RemoteConfig, DEFAULT_TOP_LOGPROBS};
use super::limits::JudgeLimits;
use super::{
    cut_text, Completion, Judge, JudgeError, JudgeFailure, JudgeInfo, JudgeSettings, Prices,
    ProbabilityJudge, Spent, StructuredOutput,
};
use crate::domain::error_chain::with_causes;
use crate::domain::error_type::RetryCause;
use crate::domain::prompt::JudgeMode;
use crate::domain::prompt::{count_tokens, ChatMessage};
use crate::domain::secret::Secret;

/// The longest a `/readyz` reachability probe waits for the judge's server.
const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// What a call asks the server for.
#[derive(Debug, Clone, Copy)]
enum Ask<'a> {
    /// A verdict held to this JSON schema (where the judge's dialect holds one).
    Verdict(&'a Value),
    /// Free text: the judge's own answer to a task.
    Answer,
    /// One token at temperature 0 with its `top_logprobs` (pointwise and pairwise modes).
    Probabilities,
}

#[derive(Debug)]
pub struct RemoteJudge {
    pub name: String,
    pub model: String,
    base_url: String,
    client: Client<OpenAIConfig>,
    /// The transport under `client`, for the reachability probe.
    http: reqwest::Client,
    /// Kept only to scrub it from error text a judge server echoes back.
    key: Option<Secret>,
    temperature: f32,
    /// What the scorer plans with (`max_tokens`, `deadline`, `mode`, ...), read here too.
    settings: JudgeSettings,
    /// As configured (`auto` or one dialect).
    structured_output: StructuredOutput,
    /// The dialect asked in now: an index into [`StructuredOutput::ALL`], stepped down by
    /// `auto` when the server refuses it.
    dialect: AtomicUsize,
    /// Probability modes: how many alternatives the server lists for the verdict token.
    top_logprobs: u32,
    /// Why the judge cannot read probabilities, once its server has shown it cannot (it
    /// answered without `logprobs`, or refused them); never set while that is unknown.
    no_probabilities: std::sync::OnceLock<String>,
    /// OpenAI's API takes `max_completion_tokens` and refuses it beside `max_tokens`; other
    /// servers (llama-cpp-python among them) read only `max_tokens`.
    completion_limit_key: &'static str,
    timeout: Duration,
    max_retries: u32,
    max_backoff: Duration,
    limits: JudgeLimits,
}

impl RemoteJudge {
    pub fn new(name: &str, cfg: &RemoteConfig) -> RemoteJudge {
        let key = cfg
            .api_key
            .as_ref()
            .map(|k| k.expose().to_string())
            .unwrap_or_default();
        let config = OpenAIConfig::new()
            .with_api_base(cfg.base_url.trim_end_matches('/'))
            .with_api_key(key);
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs_f64(cfg.timeout_s.min(10.0)))
            .build()
            .expect("a reqwest client with default TLS builds");
        let key = cfg.api_key.clone().filter(|k| !k.expose().is_empty());
        let client = Client::with_config(config).with_http_service(StatusTransport {
            http: http.clone(),
            keyless: key.is_none(),
        });
        let first = cfg.common.structured_output.first();
        RemoteJudge {
            name: name.to_string(),
            model: cfg.common.model.clone(),
            base_url: cfg.base_url.clone(),
            client,
            http,
            key,
            temperature: cfg.common.temperature,
            settings: JudgeSettings {
                prices: Prices {
                    prompt: cfg.prompt_price_per_million,
                    completion: cfg.completion_price_per_million,
                },
                ..JudgeSettings::from_common(
                    JudgeInfo {
                        name: name.to_string(),
                        model: cfg.common.model.clone(),
                    },
                    &cfg.common,
                    cfg.common.mode.unwrap_or(JudgeMode::Listwise),
                )
            },
            structured_output: cfg.common.structured_output,
            dialect: AtomicUsize::new(index_of(first)),
            top_logprobs: cfg.top_logprobs,
            no_probabilities: std::sync::OnceLock::new(),
            completion_limit_key: if is_openai(&cfg.base_url) {
                "max_completion_tokens"
            } else {
                "max_tokens"
            },
            timeout: Duration::from_secs_f64(cfg.timeout_s),
            max_retries: cfg.max_retries,
            max_backoff: Duration::from_secs_f64(cfg.max_backoff_s),
            limits: JudgeLimits::new(
                cfg.requests_per_minute,
                cfg.tokens_per_minute,
                cfg.max_concurrency,
            ),
        }
    }

    /// `text` with the judge's API key replaced: some servers quote the key they refused.
    fn scrub(&self, text: String) -> String {
        match &self.key {
            Some(k) => k.scrub(text),
            None => text,
        }
    }

    /// The dialect asked in now.
    fn dialect(&self) -> StructuredOutput {
        StructuredOutput::ALL[self.dialect.load(Ordering::Relaxed)]
    }

    /// After `refused` was refused: the next dialect down, unless a concurrent call stepped
    /// down already (then the one it chose). `None` when the judge is not `auto` or nothing is
    /// left to try.
    fn step_down(&self, refused: StructuredOutput) -> Option<StructuredOutput> {
        if self.structured_output != StructuredOutput::Auto {
            return None;
        }
        let next = refused.next()?;
        match self.dialect.compare_exchange(
            index_of(refused),
            index_of(next),
            Ordering::Relaxed,
            Ordering::Relaxed,
        ) {
            Ok(_) => Some(next),
            Err(now) => Some(StructuredOutput::ALL[now]),
        }
    }

    /// The chat request for `messages` as JSON: a verdict held to its schema by the
    /// `response_format` of `dialect`, free text, or one token with its probabilities.
    fn request(
        &self,
        messages: &[ChatMessage],
        ask: Ask<'_>,
        dialect: StructuredOutput,
    ) -> Result<Value, OpenAIError> {
        let msgs = messages
            .iter()
            .map(|m| -> Result<ChatCompletionRequestMessage, OpenAIError> {
                Ok(match m.role.as_str() {
                    "system" => ChatCompletionRequestSystemMessageArgs::default()
                        .content(m.content.clone())
                        .build()?
                        .into(),
                    "assistant" => ChatCompletionRequestAssistantMessageArgs::default()
                        .content(m.content.clone())
                        .build()?
                        .into(),
                    _ => ChatCompletionRequestUserMessageArgs::default()
                        .content(m.content.clone())
                        .build()?
                        .into(),
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut args = CreateChatCompletionRequestArgs::default();
        args.model(self.model.clone()).messages(msgs);
        let mut request = serde_json::to_value(args.build()?)
            .map_err(|e| OpenAIError::InvalidArgument(e.to_string()))?;
        let (temperature, limit) = match ask {
            // The verdict is the first token's distribution: nothing after it is read.
            Ask::Probabilities => (0.0, 1),
            _ => (self.temperature, self.settings.max_tokens),
        };
        request["temperature"] = json!(temperature);
        request[self.completion_limit_key] = json!(limit);
        match ask {
            Ask::Verdict(schema) => {
                if let Some(format) = dialect.response_format(schema) {
                    request["response_format"] = format;
                }
            }
            Ask::Answer => {}
            Ask::Probabilities => {
                request["logprobs"] = json!(true);
                request["top_logprobs"] = json!(self.top_logprobs);
            }
        }
        Ok(request)
    }
}

#[async_trait]
impl Judge for RemoteJudge {
    fn identity(&self) -> Value {
        let mut id = json!({
            "backend": "openai",
            "base_url": self.base_url,
            "model": self.model,
            "temperature": self.temperature,
            "max_tokens": self.settings.max_tokens,
            "structured_output": self.dialect().identity(),
        });
        // `top_logprobs` bounds what a probability verdict can see (an answer outside the
        // top-K counts for nothing). Written only when not the default, so the keys of
        // verdicts cached before it existed stay valid.
        if self.top_logprobs != DEFAULT_TOP_LOGPROBS {
            id["top_logprobs"] = json!(self.top_logprobs);
        }
        id
    }

    fn settings(&self) -> &JudgeSettings {
        &self.settings
    }

    fn structured_output(&self) -> StructuredOutput {
        self.dialect()
    }

    /// Reachability for `/readyz`: `GET {base_url}/models` with the judge's key. Any answer
    /// below 500 means the server is up (some OpenAI-compatible servers have no `/models` and
    /// answer 404) except 401 and 403: the key is refused, so no verdict could be had either.
    async fn probe(&self) -> Result<(), String> {
        if let Some(line) = self
            .probability_problem()
            .filter(|_| self.settings.mode.reads_probabilities())
        {
            return Err(line.to_string());
        }
        let config = self.client.config();
        let resp = self
            .http
            .get(config.url("/models"))
            .headers(self.headers())
            .timeout(PROBE_TIMEOUT.min(self.timeout))
            .send()
            .await
            .map_err(|e| {
                self.scrub(format!(
                    "judge {:?} at {} is unreachable: {}",
                    self.name,
                    self.base_url,
                    with_causes(&e)
                ))
            })?;
        match resp.status().as_u16() {
            s @ (401 | 403) if self.key.is_none() => Err(format!(
                "judge {:?} at {} asks for an API key (HTTP {s}): name the variable that holds \
                 it in the judge's api_key_env",
                self.name, self.base_url
            )),
            s @ (401 | 403) => Err(format!(
                "judge {:?} at {} refuses its API key (HTTP {s})",
                self.name, self.base_url
            )),
            s if s >= 500 => Err(format!(
                "judge {:?} at {} answers HTTP {s}",
                self.name, self.base_url
            )),
            _ => Ok(()),
        }
    }

    /// A verdict's completion, held to `schema` where the judge follows one.
    async fn complete(
        &self,
        messages: &[ChatMessage],
        schema: &Value,
    ) -> Result<Completion, JudgeFailure> {
        Ok(self.call(messages, Ask::Verdict(schema)).await?.0)
    }

    /// The model's answer to the task, without the verdict's schema, cut to
    /// `max_reference_bytes`.
    async fn answer(&self, messages: &[ChatMessage]) -> Result<Completion, JudgeFailure> {
        let mut completion = self.call(messages, Ask::Answer).await?.0;
        completion.text = cut_text(&completion.text, self.settings.max_reference_bytes);
        Ok(completion)
    }

    /// Offered whatever the judge's mode: whether its server gives probabilities is learnt
    /// from the server (at start, or at the first read), not assumed.
    fn probabilities(&self) -> Option<&dyn ProbabilityJudge> {
        Some(self)
    }

    async fn check_capabilities(&self) -> Result<(), String> {
        self.check_probabilities().await
    }
}

/// `s`'s index in [`StructuredOutput::ALL`].
fn index_of(s: StructuredOutput) -> usize {
    StructuredOutput::ALL
        .iter()
        .position(|&x| x == s)
        .expect("every value is in ALL")
}

impl RemoteJudge {
    /// The request's headers: the key's, none without a key.
    fn headers(&self) -> reqwest::header::HeaderMap {
        let mut h = self.client.config().headers();
        if self.key.is_none() {
            h.remove(reqwest::header::AUTHORIZATION);
        }
        h
    }

    fn build(
        &self,
        messages: &[ChatMessage],
        ask: Ask<'_>,
        dialect: StructuredOutput,
    ) -> Result<Value, JudgeError> {
        let request = self.request(messages, ask, dialect).map_err(|e| {
            JudgeError::Unavailable(format!("judge {:?}: cannot build request: {e}", self.name))
        })?;
        if tracing::enabled!(tracing::Level::DEBUG) {
            tracing::debug!(judge = %self.name, request = %self.scrub(request.to_string()), "judge request");
        }
        Ok(request)
    }

    /// A reply read as a chat completion, logged whole at debug level first.
    fn read_reply(&self, raw: Value) -> Result<Reply, OpenAIError> {
        if tracing::enabled!(tracing::Level::DEBUG) {
            tracing::debug!(judge = %self.name, reply = %self.scrub(raw.to_string()), "judge reply");
        }
        // Read in place: a verdict can be long, and only a failure needs the text.
        <Reply as serde::Deserialize>::deserialize(&raw)
            .map_err(|e| OpenAIError::JSONDeserialize(e, raw.to_string()))
    }

    /// The error when the server refuses the one dialect it may be asked in.
    fn format_refused(&self, dialect: StructuredOutput, refusal: &str) -> JudgeError {
        let what = if self.structured_output == StructuredOutput::Auto {
            "no response_format gavel knows (json_schema, json_object, json_mode, none)".to_string()
        } else {
            format!("structured_output = \"{}\"", dialect.name())
        };
        metrics::counter!("gavel_judge_calls_total", "judge" => self.name.clone(), "outcome" => "fatal")
            .increment(1);
        JudgeError::Unavailable(format!(
            "judge {:?} at {}: the server refuses {what}: {refusal}; set structured_output = \"auto\" \
             (GAVEL_JUDGE_STRUCTURED_OUTPUT without a config file) to find the dialect it takes, \
             or \"off\"",
            self.name, self.base_url
        ))
    }

    /// One completion, retried per the judge's policy, bounded by the verdict deadline. Every
    /// attempt passes the judge's rate and concurrency limits first. With it, the first
    /// generated token's log-probabilities where the server gave them. A failure carries the
    /// calls sent before it (servers report no tokens with an error).
    async fn call(
        &self,
        messages: &[ChatMessage],
        ask: Ask<'_>,
    ) -> Result<(Completion, Option<ReplyToken>), JudgeFailure> {
        let schema = match ask {
            Ask::Verdict(schema) => Some(schema),
            _ => None,
        };
        let mut dialect = self.dialect();
        let mut request = self.build(messages, ask, dialect)?;
        // The token estimate only matters with a tokens-per-minute limit; counting is skipped
        // otherwise.
        let estimate = if self.limits.has_token_limit() {
            // A probability read is one token: reserving `max_tokens` for it would hold back
            // the tokens-per-minute budget thousands of tokens per prompt until settled.
            let completion = match ask {
                Ask::Probabilities => 1,
                _ => u64::from(self.settings.max_tokens),
            };
            (count_tokens(messages) as u64 + completion).min(u64::from(u32::MAX)) as u32
        } else {
            0
        };
        let started = Instant::now();
        let mut retries: BTreeMap<String, u64> = BTreeMap::new();
        let mut timeouts = 0u32;
        let mut attempt = 0u32;
        let mut calls_sent = 0u64;
        let failed = |error: JudgeError, calls: u64| {
            JudgeFailure::new(
                error,
                Spent {
                    calls,
                    ..Spent::default()
                },
            )
        };
        loop {
            attempt += 1;
            let queued = GaugeGuard::raise(
                metrics::gauge!("gavel_judge_queue_depth", "judge" => self.name.clone()),
            );
            let admission = tokio::time::timeout(
                self.settings.deadline.saturating_sub(started.elapsed()),
                self.limits.admit(estimate),
            )
            .await
            .map_err(|_| {
                failed(
                    JudgeError::Timeout(format!(
                        "judge {:?}: verdict deadline of {:.1}s passed waiting for the judge's rate limits",
                        self.name,
                        self.settings.deadline.as_secs_f64()
                    )),
                    calls_sent,
                )
            })?;
            drop(queued);
            let left = self.settings.deadline.saturating_sub(started.elapsed());
            let limit = self.timeout.min(left);
            let sent = Instant::now();
            let calling = GaugeGuard::raise(
                metrics::gauge!("gavel_judge_calls_in_flight", "judge" => self.name.clone()),
            );
            let chat = self.client.chat();
            let call = chat.create_byot::<_, Value>(request.clone());
            calls_sent += 1;
            let result = tokio::time::timeout(limit, call).await;
            let result = result.map(|r| r.and_then(|raw| self.read_reply(raw)));
            drop(calling);
            metrics::histogram!("gavel_judge_call_seconds", "judge" => self.name.clone())
                .record(sent.elapsed().as_secs_f64());
            let outcome = match result {
                Ok(Ok(resp)) => {
                    let first = resp
                        .choices
                        .first()
                        .and_then(|c| c.logprobs.as_ref())
                        .and_then(|l| l.content.as_ref())
                        .and_then(|c| c.first().cloned());
                    let text = resp
                        .choices
                        .first()
                        .and_then(|c| {
                            c.message
                                .content
                                .clone()
                                .or_else(|| c.message.refusal.clone())
                        })
                        .unwrap_or_default();
                    let usage = resp.usage.as_ref();
                    let prompt_tokens = usage.and_then(|u| u.prompt_tokens).unwrap_or(0);
                    let completion_tokens = usage.and_then(|u| u.completion_tokens).unwrap_or(0);
                    self.limits
                        .settle(&admission, prompt_tokens + completion_tokens)
                        .await;
                    let judge = self.name.clone();
                    metrics::counter!("gavel_judge_calls_total", "judge" => judge.clone(), "outcome" => "ok").increment(1);
                    metrics::counter!("gavel_judge_tokens_total", "judge" => judge.clone(), "kind" => "prompt")
                        .increment(prompt_tokens);
                    metrics::counter!("gavel_judge_tokens_total", "judge" => judge, "kind" => "completion")
                        .increment(completion_tokens);
                    let completion = Completion {
                        text,
                        prompt_tokens,
                        completion_tokens,
                        cached_prompt_tokens: 0,
                        forward_passes: 0,
                        attempts: attempt,
                        retries,
                    };
                    return Ok((completion, first));
                }
                Ok(Err(e)) => {
                    if let Some(refusal) = schema
                        .filter(|_| dialect != StructuredOutput::Off)
                        .and(format_refusal(&e))
                    {
                        let refusal = self.scrub(refusal);
                        drop(admission);
                        let Some(next) = self.step_down(dialect) else {
                            return Err(failed(self.format_refused(dialect, &refusal), calls_sent));
                        };
                        tracing::warn!(judge = %self.name, base_url = %self.base_url, refused = dialect.name(),
                            now = next.name(), error = %refusal, "judge's server refuses this structured output; asking in the next");
                        dialect = next;
                        request = self
                            .build(messages, ask, dialect)
                            .map_err(|e| failed(e, calls_sent))?;
                        // Not a failed attempt: the same request, in words the server takes.
                        attempt -= 1;
                        continue;
                    }
                    if let Some(refusal) = matches!(ask, Ask::Probabilities)
                        .then(|| logprobs_refusal(&e))
                        .flatten()
                    {
                        return Err(failed(
                            self.cannot_read_probabilities(&format!(
                                "refuses logprobs: {}",
                                self.scrub(refusal)
                            )),
                            calls_sent,
                        ));
                    }
                    classify(e)
                }
                Err(_) => Failure::Retry {
                    message: format!("no reply within {:.1}s", limit.as_secs_f64()),
                    retry_after: None,
                    cause: RetryCause::Timeout,
                },
            };
            drop(admission);
            let (message, retry_after, cause) = match outcome {
                Failure::Fatal(message) => {
                    let message = self.scrub(message);
                    metrics::counter!("gavel_judge_calls_total", "judge" => self.name.clone(), "outcome" => "fatal")
                        .increment(1);
                    return Err(failed(
                        JudgeError::Unavailable(format!("judge {:?}: {message}", self.name)),
                        calls_sent,
                    ));
                }
                Failure::Retry {
                    message,
                    retry_after,
                    cause,
                } => (self.scrub(message), retry_after, cause),
            };
            metrics::counter!("gavel_judge_calls_total", "judge" => self.name.clone(), "outcome" => cause.as_str()).increment(1);
            let timed_out = cause == RetryCause::Timeout;
            timeouts += u32::from(timed_out);
            tracing::warn!(judge = %self.name, attempt, cause = cause.as_str(), error = %message, "judge attempt failed");
            let wait = retry_after
                .unwrap_or_else(|| backoff(attempt, self.max_backoff))
                .min(self.max_backoff);
            let out_of_time = started.elapsed() + wait >= self.settings.deadline;
            if attempt > self.max_retries || out_of_time {
                let why = if out_of_time && attempt <= self.max_retries {
                    format!(
                        "deadline of {:.1}s reached",
                        self.settings.deadline.as_secs_f64()
                    )
                } else {
                    format!("{attempt} attempts")
                };
                let message = format!(
                    "judge {:?} failed after {why}; last error: {message}",
                    self.name
                );
                let error = if timeouts == attempt || (timed_out && out_of_time) {
                    JudgeError::Timeout(message)
                } else {
                    JudgeError::Unavailable(message)
                };
                return Err(failed(error, calls_sent));
            }
            *retries.entry(cause.as_str().to_string()).or_default() += 1;
            metrics::counter!("gavel_judge_retries_total", "judge" => self.name.clone(), "cause" => cause.as_str()).increment(1);
            tokio::time::sleep(wait).await;
        }
    }
}

/// Raises a gauge while it lives, and lowers it again however the holder ends (a future
/// dropped by a timeout included).
struct GaugeGuard(metrics::Gauge);

impl GaugeGuard {
    fn raise(gauge: metrics::Gauge) -> GaugeGuard {
        gauge.increment(1.0);
        GaugeGuard(gauge)
    }
}

impl Drop for GaugeGuard {
    fn drop(&mut self) {
        self.0.decrement(1.0);
    }
}
