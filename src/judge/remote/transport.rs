//! What a remote judge's calls go through below async-openai: a transport that reports every
//! non-2xx reply with its status and `Retry-After`, the lenient reading of a chat completion,
//! and the retry policy (which failures are worth another attempt, and how long to wait).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use async_openai::error::OpenAIError;
use async_openai::middleware::HttpRequestFactory;

use crate::domain::error_chain::with_causes;
use crate::domain::error_type::RetryCause;
use crate::judge::cut_text;
use crate::judge::structured_output::refuses_format;

/// The longest `Retry-After` read from a reply, seconds (a day); the wait is capped at
/// `max_backoff_s` and the deadline later in any case.
const MAX_RETRY_AFTER_S: f64 = 86_400.0;

/// The most of a server's reply an error message quotes, bytes: enough for a whole validation
/// error (which says what to change), not a whole verdict.
pub(super) const MAX_QUOTED_BYTES: usize = 4000;

/// `body` trimmed and, past [`MAX_QUOTED_BYTES`], cut with a note of how much was left out.
pub(super) fn quote(body: &str) -> String {
    let body = body.trim();
    let cut = cut_text(body, MAX_QUOTED_BYTES);
    if cut.len() < body.len() {
        format!("{cut} … ({} more bytes)", body.len() - cut.len())
    } else {
        cut
    }
}

/// What gavel reads of a chat completion: the first choice's message and the token usage.
/// async-openai's own response type also requires `id`, `object`, `created` and `model`, which
/// OpenAI-compatible servers do not all send (a reply without `created` was retried as a bad
/// reply and never accepted); none of them bears on a verdict, so they are not read.
#[derive(Debug, serde::Deserialize)]
pub(super) struct Reply {
    pub(super) choices: Vec<ReplyChoice>,
    #[serde(default)]
    pub(super) usage: Option<ReplyUsage>,
}

#[derive(Debug, serde::Deserialize)]
pub(super) struct ReplyChoice {
    pub(super) message: ReplyMessage,
    /// Present when the request asked for `logprobs` and the server gives them.
    #[serde(default)]
    pub(super) logprobs: Option<ReplyLogprobs>,
}

#[derive(Debug, serde::Deserialize)]
pub(super) struct ReplyLogprobs {
    #[serde(default)]
    pub(super) content: Option<Vec<ReplyToken>>,
}

/// One generated token, its log-probability and the alternatives the server lists.
#[derive(Debug, Clone, serde::Deserialize)]
pub(super) struct ReplyToken {
    pub(super) token: String,
    pub(super) logprob: f64,
    #[serde(default)]
    pub(super) top_logprobs: Vec<ReplyAlternative>,
}

#[derive(Debug, Clone, serde::Deserialize)]
pub(super) struct ReplyAlternative {
    pub(super) token: String,
    pub(super) logprob: f64,
}

#[derive(Debug, serde::Deserialize)]
pub(super) struct ReplyMessage {
    #[serde(default)]
    pub(super) content: Option<String>,
    #[serde(default)]
    pub(super) refusal: Option<String>,
}

#[derive(Debug, serde::Deserialize)]
pub(super) struct ReplyUsage {
    #[serde(default)]
    pub(super) prompt_tokens: Option<u64>,
    #[serde(default)]
    pub(super) completion_tokens: Option<u64>,
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
        write!(f, "HTTP {}: {}", self.status, quote(&self.body))
    }
}

impl std::error::Error for HttpStatusError {}

/// Plain reqwest transport that reports non-2xx replies as [`HttpStatusError`]. A judge without
/// a key sends no Authorization header (async-openai always writes one, empty or not).
#[derive(Clone)]
pub(super) struct StatusTransport {
    pub(super) http: reqwest::Client,
    pub(super) keyless: bool,
}

impl tower::Service<HttpRequestFactory> for StatusTransport {
    type Response = reqwest::Response;
    type Error = OpenAIError;
    type Future = Pin<Box<dyn Future<Output = Result<reqwest::Response, OpenAIError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), OpenAIError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, factory: HttpRequestFactory) -> Self::Future {
        let (http, keyless) = (self.http.clone(), self.keyless);
        Box::pin(async move {
            let mut req = factory.build().await?;
            if keyless {
                req.headers_mut().remove(reqwest::header::AUTHORIZATION);
            }
            let resp = http.execute(req).await.map_err(OpenAIError::Reqwest)?;
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

/// What one failed attempt means for the next.
pub(super) enum Failure {
    Retry {
        message: String,
        retry_after: Option<Duration>,
        /// Why, for accounting.
        cause: RetryCause,
    },
    Fatal(String),
}

/// Exponential backoff with full jitter: a random wait in [base/2, base], base = 0.5 s · 2^(n-1),
/// capped. Jitter spreads the retries of many concurrent groups so they do not hit the judge in
/// lockstep.
pub(super) fn backoff(attempt: u32, cap: Duration) -> Duration {
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

/// The quoted refusal (`HTTP 500: …`) when `e` is the server refusing the request's
/// `response_format` ([`refuses_format`]).
pub(super) fn format_refusal(e: &OpenAIError) -> Option<String> {
    refusal(e, refuses_format)
}

/// The quoted refusal when `e` is the server refusing to give token probabilities: a 4xx
/// that names them (OpenAI's reasoning models: 400 "logprobs is not supported with this
/// model"; some gateways 403).
pub(super) fn logprobs_refusal(e: &OpenAIError) -> Option<String> {
    refusal(e, |status, body| {
        (400..500).contains(&status)
            && !matches!(status, 401 | 408 | 409 | 429)
            && body.to_ascii_lowercase().contains("logprobs")
    })
}

fn refusal(e: &OpenAIError, is: impl Fn(u16, &str) -> bool) -> Option<String> {
    match e {
        OpenAIError::Boxed(b) => b
            .downcast_ref::<HttpStatusError>()
            .filter(|h| is(h.status, &h.body))
            .map(ToString::to_string),
        _ => None,
    }
}

pub(super) fn classify(e: OpenAIError) -> Failure {
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
            message: format!("connection error: {}", with_causes(&r)),
            retry_after: None,
            cause: if r.is_timeout() {
                RetryCause::Timeout
            } else {
                RetryCause::Connection
            },
        },
        OpenAIError::JSONDeserialize(err, body) => {
            let body = quote(&body);
            Failure::Retry {
                message: format!("reply is not a chat completion ({err}): {body}"),
                retry_after: None,
                cause: RetryCause::BadReply,
            }
        }
        other => Failure::Fatal(other.to_string()),
    }
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

    #[test]
    fn a_refusal_is_quoted_whole_up_to_a_bound() {
        let e = HttpStatusError {
            status: 500,
            retry_after: None,
            body: format!(
                "{} Input should be 'text' or 'json_object'",
                "x".repeat(400)
            ),
        };
        assert!(e
            .to_string()
            .ends_with("Input should be 'text' or 'json_object'"));
        let long = "é".repeat(MAX_QUOTED_BYTES);
        let q = quote(&long);
        assert!(q.len() < MAX_QUOTED_BYTES + 40, "{}", q.len());
        assert!(
            q.ends_with(&format!("… ({} more bytes)", long.len() - MAX_QUOTED_BYTES)),
            "{q}"
        );
        assert_eq!(quote("  short  "), "short");
    }
}
