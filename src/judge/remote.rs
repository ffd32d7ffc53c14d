//! A remote judge: any OpenAI-compatible `/v1/chat/completions`, through async-openai.
//!
//! async-openai's default transport retries by itself (fixed policy, Retry-After lost to the
//! caller). gavel owns the retry policy instead, so the client is given a bare transport
//! ([`StatusTransport`]) that turns every non-2xx reply into an error carrying the status and
//! `Retry-After`, and [`RemoteJudge::complete`] decides what to retry and how long to wait.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use async_openai::config::{Config as _, OpenAIConfig};
use async_openai::error::OpenAIError;
use async_openai::middleware::{HttpRequestFactory, ReqwestService};
use async_openai::types::chat::{
    ChatCompletionRequestAssistantMessageArgs, ChatCompletionRequestMessage,
    ChatCompletionRequestSystemMessageArgs, ChatCompletionRequestUserMessageArgs,
    CreateChatCompletionRequestArgs, ResponseFormat, ResponseFormatJsonSchema,
};
use async_openai::Client;
use serde_json::{json, Value};

use super::config::JudgeConfig;
use super::limits::JudgeLimits;
use super::{Completion, JudgeError};
use crate::domain::error_type::RetryCause;
use crate::domain::prompt::{count_tokens, ChatMessage};
use crate::domain::secret::Secret;

/// The longest a `/readyz` reachability probe waits for the judge's server.
const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// The longest `Retry-After` read from a reply, seconds (a day); the wait is capped at
/// `max_backoff_s` and the deadline later in any case.
const MAX_RETRY_AFTER_S: f64 = 86_400.0;

/// What gavel reads of a chat completion: the first choice's message and the token usage.
/// async-openai's own response type also requires `id`, `object`, `created` and `model`, which
/// OpenAI-compatible servers do not all send (a reply without `created` was retried as a bad
/// reply and never accepted); none of them bears on a verdict, so they are not read.
#[derive(Debug, serde::Deserialize)]
struct Reply {
    choices: Vec<ReplyChoice>,
    #[serde(default)]
    usage: Option<ReplyUsage>,
}

#[derive(Debug, serde::Deserialize)]
struct ReplyChoice {
    message: ReplyMessage,
}

#[derive(Debug, serde::Deserialize)]
struct ReplyMessage {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    refusal: Option<String>,
}

#[derive(Debug, serde::Deserialize)]
struct ReplyUsage {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens: Option<u64>,
}

/// A non-2xx reply from the judge's server.
#[derive(Debug)]
struct HttpStatusError {
    status: u16,
    retry_after: Option<Duration>,
    body: String,
}

impl std::fmt::Display for HttpStatusError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let body: String = self.body.chars().take(300).collect();
        write!(f, "HTTP {}: {}", self.status, body.trim())
    }
}

impl std::error::Error for HttpStatusError {}

/// Plain reqwest transport that reports non-2xx replies as [`HttpStatusError`].
#[derive(Clone)]
struct StatusTransport {
    inner: ReqwestService,
}

impl tower::Service<HttpRequestFactory> for StatusTransport {
    type Response = reqwest::Response;
    type Error = OpenAIError;
    type Future = Pin<Box<dyn Future<Output = Result<reqwest::Response, OpenAIError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), OpenAIError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: HttpRequestFactory) -> Self::Future {
        let fut = self.inner.call(req);
        Box::pin(async move {
            let resp = fut.await?;
            if resp.status().is_success() {
                return Ok(resp);
            }
            let status = resp.status().as_u16();
            let retry_after = resp
                .headers()
                .get(reqwest::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<f64>().ok())
                .filter(|s| s.is_finite() && *s >= 0.0)
                // A proxy may send any number (`1e20` would overflow a Duration and panic);
                // the caller caps the wait at its deadline anyway.
                .map(|s| Duration::from_secs_f64(s.min(MAX_RETRY_AFTER_S)));
            let body = resp.text().await.unwrap_or_default();
            Err(OpenAIError::Boxed(Box::new(HttpStatusError {
                status,
                retry_after,
                body,
            })))
        })
    }
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
    pub(crate) max_tokens: u32,
    pub(crate) context_tokens: Option<usize>,
    pub(crate) prompt_price: Option<f64>,
    pub(crate) completion_price: Option<f64>,
    pub(crate) structured_output: bool,
    timeout: Duration,
    pub(crate) deadline: Duration,
    max_retries: u32,
    max_backoff: Duration,
    limits: JudgeLimits,
}

/// What one failed attempt means for the next.
enum Failure {
    Retry {
        message: String,
        retry_after: Option<Duration>,
        /// Why, for accounting.
        cause: RetryCause,
    },
    Fatal(String),
}

impl RemoteJudge {
    pub fn new(name: &str, cfg: &JudgeConfig) -> RemoteJudge {
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
        let client = Client::with_config(config).with_http_service(StatusTransport {
            inner: ReqwestService::new(http.clone()),
        });
        RemoteJudge {
            name: name.to_string(),
            model: cfg.model.clone(),
            base_url: cfg.base_url.clone(),
            client,
            http,
            key: cfg.api_key.clone().filter(|k| !k.expose().is_empty()),
            temperature: cfg.temperature,
            max_tokens: cfg.max_tokens,
            context_tokens: cfg.context_tokens,
            prompt_price: cfg.prompt_price_per_million,
            completion_price: cfg.completion_price_per_million,
            structured_output: cfg.structured_output,
            timeout: Duration::from_secs_f64(cfg.timeout_s),
            deadline: Duration::from_secs_f64(cfg.deadline_s),
            max_retries: cfg.max_retries,
            max_backoff: Duration::from_secs_f64(cfg.max_backoff_s),
            limits: JudgeLimits::new(
                cfg.requests_per_minute,
                cfg.tokens_per_minute,
                cfg.max_concurrency,
            ),
        }
    }

    pub fn identity(&self) -> Value {
        json!({
            "backend": "openai",
            "base_url": self.base_url,
            "model": self.model,
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
            "structured_output": self.structured_output,
        })
    }

    /// `text` with the judge's API key replaced: some servers quote the key they refused.
    fn scrub(&self, text: String) -> String {
        match &self.key {
            Some(k) if text.contains(k.expose()) => text.replace(k.expose(), "[redacted]"),
            _ => text,
        }
    }

    /// Reachability for `/readyz`: `GET {base_url}/models` with the judge's key. Any answer
    /// below 500 means the server is up (some OpenAI-compatible servers have no `/models` and
    /// answer 404) except 401 and 403: the key is refused, so no verdict could be had either.
    pub async fn probe(&self) -> Result<(), String> {
        let config = self.client.config();
        let resp = self
            .http
            .get(config.url("/models"))
            .headers(config.headers())
            .timeout(PROBE_TIMEOUT.min(self.timeout))
            .send()
            .await
            .map_err(|e| {
                self.scrub(format!(
                    "judge {:?} at {} is unreachable: {}",
                    self.name,
                    self.base_url,
                    error_chain(&e)
                ))
            })?;
        match resp.status().as_u16() {
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

    fn request(
        &self,
        messages: &[ChatMessage],
        schema: &Value,
    ) -> Result<async_openai::types::chat::CreateChatCompletionRequest, OpenAIError> {
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
        args.model(self.model.clone())
            .messages(msgs)
            .temperature(self.temperature)
            .max_completion_tokens(self.max_tokens);
        if self.structured_output {
            args.response_format(ResponseFormat::JsonSchema {
                json_schema: ResponseFormatJsonSchema {
                    description: Some("Scores for each trajectory".into()),
                    name: "verdict".into(),
                    schema: schema.clone(),
                    strict: Some(true),
                },
            });
        }
        args.build()
    }

    /// One completion, retried per the judge's policy, bounded by the verdict deadline. Every
    /// attempt passes the judge's rate and concurrency limits first.
    pub async fn complete(
        &self,
        messages: &[ChatMessage],
        schema: &Value,
    ) -> Result<Completion, JudgeError> {
        let request = self.request(messages, schema).map_err(|e| {
            JudgeError::Unavailable(format!("judge {:?}: cannot build request: {e}", self.name))
        })?;
        // The token estimate only matters with a tokens-per-minute limit; counting is skipped
        // otherwise.
        let estimate = if self.limits.has_token_limit() {
            (count_tokens(messages) as u64 + u64::from(self.max_tokens)).min(u64::from(u32::MAX))
                as u32
        } else {
            0
        };
        let started = Instant::now();
        let mut retries: BTreeMap<String, u64> = BTreeMap::new();
        let mut timeouts = 0u32;
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            let queued = GaugeGuard::raise(
                metrics::gauge!("gavel_judge_queue_depth", "judge" => self.name.clone()),
            );
            let admission = tokio::time::timeout(
                self.deadline.saturating_sub(started.elapsed()),
                self.limits.admit(estimate),
            )
            .await
            .map_err(|_| {
                JudgeError::Timeout(format!(
                    "judge {:?}: verdict deadline of {:.1}s passed waiting for the judge's rate limits",
                    self.name,
                    self.deadline.as_secs_f64()
                ))
            })?;
            drop(queued);
            let left = self.deadline.saturating_sub(started.elapsed());
            let limit = self.timeout.min(left);
            let sent = Instant::now();
            let calling = GaugeGuard::raise(
                metrics::gauge!("gavel_judge_calls_in_flight", "judge" => self.name.clone()),
            );
            let chat = self.client.chat();
            let call = chat.create_byot::<_, Reply>(request.clone());
            let result = tokio::time::timeout(limit, call).await;
            drop(calling);
            metrics::histogram!("gavel_judge_call_seconds", "judge" => self.name.clone())
                .record(sent.elapsed().as_secs_f64());
            let outcome = match result {
                Ok(Ok(resp)) => {
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
                    return Ok(Completion {
                        text,
                        prompt_tokens,
                        completion_tokens,
                        cached_prompt_tokens: 0,
                        forward_passes: 0,
                        attempts: attempt,
                        retries,
                    });
                }
                Ok(Err(e)) => classify(e),
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
                    return Err(JudgeError::Unavailable(format!(
                        "judge {:?}: {message}",
                        self.name
                    )));
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
            let out_of_time = started.elapsed() + wait >= self.deadline;
            if attempt > self.max_retries || out_of_time {
                let why = if out_of_time && attempt <= self.max_retries {
                    format!("deadline of {:.1}s reached", self.deadline.as_secs_f64())
                } else {
                    format!("{attempt} attempts")
                };
                let message = format!(
                    "judge {:?} failed after {why}; last error: {message}",
                    self.name
                );
                return Err(if timeouts == attempt || (timed_out && out_of_time) {
                    JudgeError::Timeout(message)
                } else {
                    JudgeError::Unavailable(message)
                });
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

/// Exponential backoff with full jitter: a random wait in [base/2, base], base = 0.5 s · 2^(n-1),
/// capped. Jitter spreads the retries of many concurrent groups so they do not hit the judge in
/// lockstep.
fn backoff(attempt: u32, cap: Duration) -> Duration {
    let base = Duration::from_millis(500)
        .saturating_mul(1u32 << attempt.saturating_sub(1).min(16))
        .min(cap);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let frac = 0.5 + f64::from(nanos % 1000) / 2000.0;
    base.mul_f64(frac)
}

/// 408, 409, 429 and 5xx are worth retrying; other 4xx mean the request itself is wrong and
/// will fail the same way again.
fn retryable_status(status: u16) -> bool {
    matches!(status, 408 | 409 | 429) || status >= 500
}

fn classify(e: OpenAIError) -> Failure {
    match e {
        OpenAIError::Boxed(b) => match b.downcast::<HttpStatusError>() {
            Ok(h) if retryable_status(h.status) => Failure::Retry {
                message: h.to_string(),
                retry_after: h.retry_after,
                cause: RetryCause::of_status(h.status),
            },
            Ok(h) => Failure::Fatal(h.to_string()),
            Err(other) => Failure::Retry {
                message: other.to_string(),
                retry_after: None,
                cause: RetryCause::Connection,
            },
        },
        OpenAIError::Reqwest(r) => Failure::Retry {
            message: format!("connection error: {}", error_chain(&r)),
            retry_after: None,
            cause: if r.is_timeout() {
                RetryCause::Timeout
            } else {
                RetryCause::Connection
            },
        },
        OpenAIError::JSONDeserialize(err, body) => {
            let body: String = body.chars().take(200).collect();
            Failure::Retry {
                message: format!("reply is not a chat completion ({err}): {body}"),
                retry_after: None,
                cause: RetryCause::BadReply,
            }
        }
        other => Failure::Fatal(other.to_string()),
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_policy_by_status() {
        for s in [408, 409, 429, 500, 502, 503] {
            assert!(retryable_status(s), "{s}");
        }
        for s in [400, 401, 403, 404, 422] {
            assert!(!retryable_status(s), "{s}");
        }
    }

    #[test]
    fn backoff_grows_and_is_capped() {
        let cap = Duration::from_secs(3);
        let b1 = backoff(1, cap);
        assert!(b1 >= Duration::from_millis(250) && b1 <= Duration::from_millis(500));
        let b3 = backoff(3, cap);
        assert!(b3 >= Duration::from_millis(1000) && b3 <= Duration::from_millis(2000));
        assert!(backoff(20, cap) <= cap);
    }

    #[test]
    fn a_reply_is_read_without_the_fields_no_verdict_needs() {
        // What some OpenAI-compatible servers send: no id, object, created or model.
        let r: Reply = serde_json::from_str(
            r#"{"choices": [{"message": {"role": "assistant", "content": "{}"}}],
                "usage": {"prompt_tokens": 12, "completion_tokens": null}}"#,
        )
        .unwrap();
        assert_eq!(r.choices[0].message.content.as_deref(), Some("{}"));
        let u = r.usage.unwrap();
        assert_eq!((u.prompt_tokens, u.completion_tokens), (Some(12), None));
        // Not a chat completion at all is still refused.
        assert!(serde_json::from_str::<Reply>(r#"{"error": "overloaded"}"#).is_err());
    }
}
