//! Route handlers: parse, call the scorer, answer. Nothing else happens here.

use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Extension;
use axum::Json;
use serde_json::{json, Value};

use super::auth::Caller;
use super::error::ApiError;
use super::AppState;
use crate::score::{BatchRequest, ScoreRequest};

/// Reads a JSON body, at most `max_body_bytes` of it within `body_read_timeout_s`; every
/// failure is a typed error. Handlers call it after admission, so a refused request costs no
/// body read and a slow body holds at most one admitted slot for a bounded time.
pub(super) async fn read_json(state: &AppState, body: Body) -> Result<Value, ApiError> {
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
    serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::InvalidRequest(format!("body is not valid JSON: {e}")))
}

/// Reads and validates a one-group scoring request.
async fn parse_body(state: &AppState, body: Body) -> Result<ScoreRequest, ApiError> {
    let value = read_json(state, body).await?;
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

pub async fn score_group(State(state): State<AppState>, body: Body) -> Result<Response, ApiError> {
    let _permit = admit(&state)?;
    let req = parse_body(&state, body).await?;
    let limit = Duration::from_secs_f64(state.server.request_timeout_s);
    let resp = tokio::time::timeout(limit, state.scorer.score_group(&req))
        .await
        .map_err(|_| request_timeout(&state))??;
    Ok(Json(resp).into_response())
}

pub async fn score_groups(State(state): State<AppState>, body: Body) -> Result<Response, ApiError> {
    let _permit = admit(&state)?;
    let value = read_json(&state, body).await?;
    let batch = BatchRequest::from_json(&value, state.scorer.max_group_size())?;
    let limit = Duration::from_secs_f64(state.server.request_timeout_s);
    let resp = tokio::time::timeout(limit, state.scorer.score_groups(&batch))
        .await
        .map_err(|_| request_timeout(&state))??;
    Ok(Json(resp).into_response())
}

/// Rendering is CPU work on the request's data: it is admitted like scoring and runs on the
/// blocking pool under the same timeout, so it can neither starve the async workers nor
/// outlast `request_timeout_s` from the client's point of view.
pub async fn render(State(state): State<AppState>, body: Body) -> Result<Response, ApiError> {
    let _permit = admit(&state)?;
    let req = parse_body(&state, body).await?;
    let scorer = state.scorer.clone();
    let work = tokio::task::spawn_blocking(move || scorer.render(&req));
    let limit = Duration::from_secs_f64(state.server.request_timeout_s);
    let rendered = tokio::time::timeout(limit, work)
        .await
        .map_err(|_| request_timeout(&state))?
        .map_err(|e| ApiError::Internal(format!("rendering failed: {e}")))??;
    Ok(Json(rendered).into_response())
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
/// `not_ready`. A caller with a valid API key gets each check's problem (which may name a judge
/// URL or quote an error chain); anyone else, kubelet included, gets only which checks pass.
pub async fn readyz(State(state): State<AppState>, caller: Option<Extension<Caller>>) -> Response {
    let report = state.ready.check(&state.scorer).await;
    let detailed = caller.is_some_and(|Extension(c)| c.is_authenticated());
    let (store, judges) = if detailed {
        (json!(report.store), json!(report.judges))
    } else {
        let judges: Vec<Value> = report
            .judges
            .iter()
            .map(|j| json!({"name": j.name, "ok": j.ok}))
            .collect();
        (
            json!({"name": "store", "ok": report.store.ok}),
            json!(judges),
        )
    };
    if report.ready() {
        return Json(json!({"status": "ready", "store": store, "judges": judges})).into_response();
    }
    tracing::warn!(problems = %report.problems(), "readiness check failed");
    let message = if detailed {
        format!("not ready: {}", report.problems())
    } else {
        let down = report.judges.iter().filter(|j| !j.ok).count();
        format!(
            "not ready: store {}, {down} of {} judges unreachable (details for callers with an \
             API key, and in the log)",
            if report.store.ok { "ok" } else { "down" },
            report.judges.len()
        )
    };
    let e = ApiError::NotReady(message);
    let mut body = e.body();
    body["store"] = store;
    body["judges"] = judges;
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
