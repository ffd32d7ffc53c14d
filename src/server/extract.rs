//! What every scoring handler does before and around its own work, as extractors: admit the
//! request under `max_in_flight` (429 at once, before any body is read), then read its body
//! within `max_body_bytes` and `body_read_timeout_s` and parse it; and [`within_deadline`] for
//! `request_timeout_s`. A handler names them in its arguments and keeps only its own step.

use std::future::Future;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use serde_json::Value;
use tokio::sync::OwnedSemaphorePermit;

use super::error::ApiError;
use super::AppState;
use crate::score::{BatchRequest, ScoreRequest};

/// A slot of `max_in_flight`, held while the handler runs (dropped with it). Extracted before
/// the body, so a refused request costs no body read.
pub struct Admitted(pub OwnedSemaphorePermit);

impl FromRequestParts<AppState> for Admitted {
    type Rejection = ApiError;

    async fn from_request_parts(_: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        admit(state).map(Admitted)
    }
}

/// A request body the daemon parses from JSON, refusing it with the typed error its own
/// validation names.
pub trait ParseBody: Sized {
    /// The body straight from its text, through the types it deserializes into (no JSON tree
    /// built): `None` when it is refused, and [`ParseBody::parse`] then says why.
    fn parse_text(text: &[u8], state: &AppState) -> Option<Self>;
    fn parse(value: &Value, state: &AppState) -> Result<Self, ApiError>;
}

impl ParseBody for ScoreRequest {
    fn parse_text(text: &[u8], state: &AppState) -> Option<Self> {
        ScoreRequest::from_text(text, state.scorer.max_group_size())
    }

    fn parse(value: &Value, state: &AppState) -> Result<Self, ApiError> {
        Ok(ScoreRequest::from_json(
            value,
            state.scorer.max_group_size(),
        )?)
    }
}

impl ParseBody for BatchRequest {
    fn parse_text(text: &[u8], state: &AppState) -> Option<Self> {
        BatchRequest::from_text(text, state.scorer.max_group_size())
    }

    fn parse(value: &Value, state: &AppState) -> Result<Self, ApiError> {
        Ok(BatchRequest::from_json(
            value,
            state.scorer.max_group_size(),
        )?)
    }
}

/// The body, read within the daemon's limits and parsed as `T`, and its text when a later
/// refusal may have to quote a number as written ([`ApiError::as_written`]); otherwise the
/// text is empty, so the body's memory is given back before the request is scored.
pub struct Parsed<T> {
    pub body: T,
    pub text: Bytes,
}

impl<T: ParseBody> FromRequest<AppState> for Parsed<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        let bytes = read_body(state, req.into_body()).await?;
        let body = match T::parse_text(&bytes, state) {
            Some(body) => body,
            // Refused: the JSON value says why in the same words wherever the problem is (and
            // a body that is not JSON is refused as such first).
            None => {
                let value = json(&bytes)?;
                T::parse(&value, state).map_err(|e| e.as_written(&bytes))?
            }
        };
        Ok(Parsed {
            body,
            text: kept(bytes),
        })
    }
}

/// The body's text, kept while its request is scored only when it holds a number that a
/// refusal could have to quote as written: every other body's memory is given back at once.
fn kept(bytes: Bytes) -> Bytes {
    if crate::domain::input::has_long_digit_run(&bytes) {
        bytes
    } else {
        Bytes::new()
    }
}

/// `work`, or the typed timeout once `request_timeout_s` has passed.
pub async fn within_deadline<F: Future>(state: &AppState, work: F) -> Result<F::Output, ApiError> {
    let limit = Duration::from_secs_f64(state.server.request_timeout_s);
    tokio::time::timeout(limit, work)
        .await
        .map_err(|_| request_timeout(state))
}

/// Reads a JSON body, at most `max_body_bytes` of it within `body_read_timeout_s`; every
/// failure is a typed error. Handlers call it after admission, so a refused request costs no
/// body read and a slow body holds at most one admitted slot for a bounded time. Returns the
/// text too, for refusals that quote a number as written ([`ApiError::as_written`]).
pub async fn read_json(state: &AppState, body: Body) -> Result<(Value, Bytes), ApiError> {
    let bytes = read_body(state, body).await?;
    Ok((json(&bytes)?, bytes))
}

/// The body as JSON, or the refusal of a body that is not.
fn json(bytes: &[u8]) -> Result<Value, ApiError> {
    serde_json::from_slice(bytes)
        .map_err(|e| ApiError::InvalidRequest(format!("body is not valid JSON: {e}")))
}

/// The body's bytes, at most `max_body_bytes` of them within `body_read_timeout_s`.
async fn read_body(state: &AppState, body: Body) -> Result<Bytes, ApiError> {
    let max = state.server.max_body_bytes;
    let limit = Duration::from_secs_f64(state.server.body_read_timeout_s);
    let read = http_body_util::BodyExt::collect(http_body_util::Limited::new(body, max));
    let bytes = match tokio::time::timeout(limit, read).await {
        Err(_) => {
            return Err(ApiError::RequestTimeout(format!(
                "the request body did not arrive within body_read_timeout_s ({}s)",
                state.server.body_read_timeout_s
            )))
        }
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => {
            return Err(ApiError::PayloadTooLarge(format!(
                "request body is larger than max_body_bytes ({max} bytes)"
            )))
        }
        Ok(Err(e)) => {
            return Err(ApiError::InvalidRequest(format!(
                "cannot read request body: {e}"
            )))
        }
        Ok(Ok(collected)) => collected.to_bytes(),
    };
    Ok(bytes)
}

/// Admits one scoring request or refuses it at once: queueing without bound would only turn
/// overload into timeouts.
pub fn admit(state: &AppState) -> Result<tokio::sync::OwnedSemaphorePermit, ApiError> {
    state.in_flight.clone().try_acquire_owned().map_err(|_| {
        metrics::counter!("gavel_overloaded_total").increment(1);
        ApiError::Overloaded(format!(
            "{} scoring requests already in flight (max_in_flight); retry shortly",
            state.server.max_in_flight
        ))
    })
}

pub fn request_timeout(state: &AppState) -> ApiError {
    ApiError::Judge(crate::judge::JudgeError::Timeout(format!(
        "request took longer than request_timeout_s ({}s)",
        state.server.request_timeout_s
    )))
}
