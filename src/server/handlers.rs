//! Route handlers: parse, call the scorer, answer. Nothing else happens here.

use std::time::Duration;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use super::error::ApiError;
use super::AppState;
use crate::score::{BatchRequest, ScoreRequest};

/// Reads a JSON body; every failure is a typed error.
pub(super) fn read_json(
    state: &AppState,
    body: Result<Bytes, BytesRejection>,
) -> Result<Value, ApiError> {
    let body = body.map_err(|e| {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::PayloadTooLarge(format!(
                "request body is larger than max_body_bytes ({} bytes)",
                state.server.max_body_bytes
            ))
        } else {
            ApiError::InvalidRequest(format!("cannot read request body: {e}"))
        }
    })?;
    serde_json::from_slice(&body)
        .map_err(|e| ApiError::InvalidRequest(format!("body is not valid JSON: {e}")))
}

/// Reads and validates a one-group scoring request.
fn parse_body(
    state: &AppState,
    body: Result<Bytes, BytesRejection>,
) -> Result<ScoreRequest, ApiError> {
    let value = read_json(state, body)?;
    Ok(ScoreRequest::from_json(
        &value,
        state.scorer.max_group_size(),
    )?)
}

/// Admits one scoring request or refuses it at once: queueing without bound would only turn
/// overload into timeouts.
pub(super) fn admit(state: &AppState) -> Result<tokio::sync::OwnedSemaphorePermit, ApiError> {
    state.in_flight.clone().try_acquire_owned().map_err(|_| {
        metrics::counter!("gavel_overloaded_total").increment(1);
        ApiError::Overloaded(format!(
            "{} scoring requests already in flight (max_in_flight); retry shortly",
            state.server.max_in_flight
        ))
    })
}

pub(super) fn request_timeout(state: &AppState) -> ApiError {
    ApiError::Judge(crate::judge::JudgeError::Timeout(format!(
        "request took longer than request_timeout_s ({}s)",
        state.server.request_timeout_s
    )))
}

pub async fn score_group(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let _permit = admit(&state)?;
    let req = parse_body(&state, body)?;
    let limit = Duration::from_secs_f64(state.server.request_timeout_s);
    let resp = tokio::time::timeout(limit, state.scorer.score_group(&req))
        .await
        .map_err(|_| request_timeout(&state))??;
    Ok(Json(resp).into_response())
}

pub async fn score_groups(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let _permit = admit(&state)?;
    let value = read_json(&state, body)?;
    let batch = BatchRequest::from_json(&value, state.scorer.max_group_size())?;
    let limit = Duration::from_secs_f64(state.server.request_timeout_s);
    let resp = tokio::time::timeout(limit, state.scorer.score_groups(&batch))
        .await
        .map_err(|_| request_timeout(&state))??;
    Ok(Json(resp).into_response())
}

pub async fn render(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let req = parse_body(&state, body)?;
    Ok(Json(state.scorer.render(&req)?).into_response())
}

pub async fn rubrics(State(state): State<AppState>) -> Json<Value> {
    let list: Vec<Value> = state
        .scorer
        .rubrics()
        .iter()
        .map(|r| {
            json!({"name": r.name, "version": r.version, "description": r.description,
                   "items": r.items.len()})
        })
        .collect();
    Json(json!({"rubrics": list}))
}

/// Liveness, plus what an operator needs to see at a glance: which judges can run.
pub async fn healthz(State(state): State<AppState>) -> Json<Value> {
    let judges: Vec<Value> = state
        .scorer
        .judges()
        .map(|j| {
            let info = j.info();
            match j.unconfigured_reason() {
                None => json!({"name": info.name, "model": info.model, "configured": true}),
                Some(why) => json!({"name": info.name, "model": info.model, "configured": false, "problem": why}),
            }
        })
        .collect();
    let any = judges.iter().any(|j| j["configured"] == true);
    Json(json!({
        "status": "ok",
        "judge_configured": any,
        "judges": judges,
        "uptime_s": state.started.elapsed().as_secs(),
    }))
}

pub async fn not_found() -> ApiError {
    ApiError::NotFound("no such route; see the README for the API".into())
}

pub async fn method_not_allowed() -> impl IntoResponse {
    ApiError::MethodNotAllowed("method not allowed on this route".into())
}

/// Readiness: 200 when the store answers and every configured judge is reachable, else 503
/// `not_ready` naming what is down. Both carry the checks.
pub async fn readyz(State(state): State<AppState>) -> Response {
    let report = state.ready.check(&state.scorer).await;
    if report.ready() {
        let body = json!({"status": "ready", "store": report.store, "judges": report.judges});
        return Json(body).into_response();
    }
    let e = ApiError::NotReady(format!("not ready: {}", report.problems()));
    tracing::warn!(error = %e, "readiness check failed");
    let mut body = e.body();
    body["store"] = json!(report.store);
    body["judges"] = json!(report.judges);
    e.respond_with(body)
}

/// The OpenAPI document of this API (the checked-in `openapi.json`).
pub async fn openapi() -> impl IntoResponse {
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        super::OPENAPI,
    )
}

/// Prometheus text format.
pub async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    let busy = state.server.max_in_flight - state.in_flight.available_permits();
    metrics::gauge!("gavel_score_requests_in_flight").set(busy as f64);
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4",
        )],
        state.metrics.render(),
    )
}
