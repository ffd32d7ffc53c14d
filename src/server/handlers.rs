//! Route handlers: parse, call the scorer, answer. Nothing else happens here.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Extension;
use axum::Json;
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

use super::auth::Caller;
use super::error::ApiError;
use super::extract::{within_deadline, Admitted, Parsed};
use super::openapi::examples as doc;
use super::openapi::responses::{PlainErrors, RenderErrors, ScoringErrors};
use super::ready::{Check, NotReady, Ready};
use super::AppState;
use crate::score::request_wire as wire;
use crate::score::{BatchRequest, BatchResponse, RenderResponse, ScoreRequest, ScoreResponse};

#[utoipa::path(
    post,
    path = "/v1/score_group",
    operation_id = "scoreGroup",
    summary = "Score one group of trajectories relative to each other",
    request_body(content = wire::ScoreRequest, examples(
        ("verified" = (summary = "Judge plus an exact-answer verifier", value = json!(doc::verified()))),
        ("minimal" = (summary = "Just the trajectories", value = json!(doc::minimal()))),
    )),
    responses(
        (status = 200, description = "Rewards, advantages and per-trajectory scores", body = ScoreResponse),
        ScoringErrors,
    ),
)]
pub async fn score_group(
    State(state): State<AppState>,
    _slot: Admitted,
    Parsed { body: req, text }: Parsed<ScoreRequest>,
) -> Result<Response, ApiError> {
    let resp = within_deadline(&state, state.scorer.score_group(&req))
        .await?
        .map_err(|e| ApiError::from(e).as_written(&text))?;
    Ok(Json(resp).into_response())
}

/// `POST /score_group`: the same as `POST /v1/score_group` (the path OpenRLHF-style clients
/// and early callers use).
#[utoipa::path(
    post,
    path = "/score_group",
    operation_id = "scoreGroupAlias",
    summary = "The same as `POST /v1/score_group`",
    description = "",
    request_body(content = wire::ScoreRequest, examples(
        ("minimal" = (summary = "Just the trajectories", value = json!(doc::minimal()))),
    )),
    responses(
        (status = 200, description = "Rewards, advantages and per-trajectory scores", body = ScoreResponse),
        ScoringErrors,
    ),
)]
pub async fn score_group_alias(
    state: State<AppState>,
    slot: Admitted,
    req: Parsed<ScoreRequest>,
) -> Result<Response, ApiError> {
    score_group(state, slot, req).await
}

#[utoipa::path(
    post,
    path = "/v1/score_groups",
    operation_id = "scoreGroups",
    summary = "Score many groups (a training step) in one call",
    request_body(content = wire::BatchRequest, examples(
        ("batch" = (summary = "Two groups, advantages scaled over the batch", value = json!(doc::batch()))),
    )),
    responses(
        (status = 200, description = "One result per group, in order", body = BatchResponse),
        ScoringErrors,
    ),
)]
pub async fn score_groups(
    State(state): State<AppState>,
    _slot: Admitted,
    Parsed { body: batch, text }: Parsed<BatchRequest>,
) -> Result<Response, ApiError> {
    let resp = within_deadline(&state, state.scorer.score_groups(&batch))
        .await?
        .map_err(|e| ApiError::from(e).as_written(&text))?;
    Ok(Json(resp).into_response())
}

/// Rendering is CPU work on the request's data: it is admitted like scoring and runs on the
/// blocking pool under the same timeout, so it can neither starve the async workers nor
/// outlast `request_timeout_s` from the client's point of view.
#[utoipa::path(
    post,
    path = "/v1/render",
    operation_id = "render",
    summary = "The exact judge messages, token counts and cache key for a group; no judge call",
    description = "",
    request_body(content = wire::ScoreRequest, examples(
        ("verified" = (summary = "A group with tool calls", value = json!(doc::verified()))),
    )),
    responses(
        (status = 200, description = "The rendered judge prompt", body = RenderResponse),
        RenderErrors,
    ),
)]
pub async fn render(
    State(state): State<AppState>,
    _slot: Admitted,
    Parsed { body: req, .. }: Parsed<ScoreRequest>,
) -> Result<Response, ApiError> {
    let scorer = state.scorer.clone();
    let work = tokio::task::spawn_blocking(move || scorer.render(&req));
    let rendered = within_deadline(&state, work)
        .await?
        .map_err(|e| ApiError::Internal(format!("rendering failed: {e}")))??;
    Ok(Json(rendered).into_response())
}

/// `GET /v1/rubrics`.
#[derive(Debug, Serialize, ToSchema)]
pub struct RubricList {
    #[schema(inline)]
    pub rubrics: Vec<RubricSummary>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct RubricSummary {
    pub name: String,
    /// The content version, `sha256:...`.
    pub version: String,
    pub description: String,
    /// Checklist items.
    pub items: usize,
}

#[utoipa::path(
    get,
    path = "/v1/rubrics",
    operation_id = "rubrics",
    summary = "The rubrics this daemon knows",
    responses(
        (status = 200, description = "Rubric names and versions", body = RubricList),
        PlainErrors,
    ),
)]
pub async fn rubrics(State(state): State<AppState>) -> Json<RubricList> {
    let rubrics = state
        .scorer
        .rubrics()
        .iter()
        .map(|r| RubricSummary {
            name: r.name.clone(),
            version: r.version.clone(),
            description: r.description.clone(),
            items: r.items.len(),
        })
        .collect();
    Json(RubricList { rubrics })
}

/// `GET /healthz`.
#[derive(Debug, Serialize, ToSchema)]
pub struct Health {
    #[schema(inline)]
    pub status: Alive,
    /// Whether any judge can run.
    pub judge_configured: bool,
    #[schema(inline)]
    pub judges: Vec<JudgeHealth>,
    /// Seconds since the daemon started.
    pub uptime_s: u64,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Alive {
    Ok,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct JudgeHealth {
    pub name: String,
    pub model: String,
    /// Whether it has what it needs to run (a key, a model); it is not called.
    pub configured: bool,
    /// Why it cannot run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
    /// How its verdicts are held to their JSON schema now: `json_schema`, `json_object`,
    /// `json_mode` or `off` (a remote judge set to `auto` steps down the first time its server
    /// refuses one; a local judge's constrained decoding is `json_schema`).
    pub structured_output: &'static str,
    /// The LoRA adapter a local judge runs over its model, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(inline)]
    pub adapter: Option<AdapterHealth>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct AdapterHealth {
    /// The adapter's folder, as configured.
    pub path: String,
    /// SHA-256 of its files: part of the judge's identity, so of every verdict's cache key.
    pub sha256: String,
    /// The positions it changes: `verdict` (the verdict token's alone) or `all`.
    pub reach: String,
}

/// Liveness, plus what an operator needs to see at a glance: which judges can run.
#[utoipa::path(
    get,
    path = "/healthz",
    operation_id = "healthz",
    summary = "Liveness, and which judges are configured (never calls a judge)",
    description = "",
    security((), ("bearerAuth" = [])),
    responses(
        (status = 200, description = "The process is up", body = Health),
        PlainErrors,
    ),
)]
pub async fn healthz(State(state): State<AppState>) -> Json<Health> {
    let judges: Vec<JudgeHealth> = state
        .scorer
        .judges()
        .map(|j| {
            let settings = j.settings();
            let problem = settings.unconfigured.clone();
            JudgeHealth {
                name: settings.info.name.clone(),
                model: settings.info.model.clone(),
                configured: problem.is_none(),
                problem,
                structured_output: j.structured_output().name(),
                adapter: settings.adapter.as_ref().map(|a| AdapterHealth {
                    path: a.path.clone(),
                    sha256: a.sha256.clone(),
                    reach: a.reach.to_string(),
                }),
            }
        })
        .collect();
    Json(Health {
        status: Alive::Ok,
        judge_configured: judges.iter().any(|j| j.configured),
        judges,
        uptime_s: state.started.elapsed().as_secs(),
    })
}

pub async fn not_found() -> ApiError {
    ApiError::NotFound("no such route; see docs/api.md for the API".into())
}

pub async fn method_not_allowed() -> impl IntoResponse {
    ApiError::MethodNotAllowed("method not allowed on this route".into())
}

/// Readiness: 200 when the store answers and every configured judge is reachable, else 503
/// `not_ready`. A caller with a valid API key gets each check's problem (which may name a judge
/// URL or quote an error chain); anyone else, kubelet included, gets only which checks pass.
#[utoipa::path(
    get,
    path = "/readyz",
    operation_id = "readyz",
    summary = "Readiness: the store answers and every configured judge is reachable",
    description = "Judge probes (`GET {base_url}/models`, no tokens spent) are cached for `[server] ready_cache_s`. Without a valid API key (kubelet) the answer says only which checks pass: no `problem`, and the 503 message counts what is down. With a key, each check carries its `problem`.",
    security((), ("bearerAuth" = [])),
    responses(
        (status = 200, description = "Ready", body = Ready),
        PlainErrors,
        (status = 503, description = "`not_ready`: the message names what is down", body = NotReady),
    ),
)]
pub async fn readyz(State(state): State<AppState>, caller: Option<Extension<Caller>>) -> Response {
    let report = state.ready.check(&state.scorer).await;
    let detailed = caller.is_some_and(|Extension(c)| c.is_authenticated());
    let (store, judges) = if detailed {
        (report.store.clone(), report.judges.clone())
    } else {
        // Which checks pass, without their problems.
        let bare = |c: &Check| Check {
            problem: None,
            ..c.clone()
        };
        (
            bare(&report.store),
            report.judges.iter().map(bare).collect(),
        )
    };
    if report.ready() {
        return Json(Ready::new(store, judges)).into_response();
    }
    tracing::warn!(problems = %report.problems(), "readiness check failed");
    let message = if detailed {
        format!("not ready: {}", report.problems())
    } else {
        format!(
            "not ready: store {}; {} (details for callers with an API key, and in the log)",
            if report.store.ok { "ok" } else { "down" },
            report.judge_counts()
        )
    };
    let e = ApiError::NotReady(message);
    let body = NotReady {
        error: e.response_body(),
        store,
        judges,
    };
    e.respond_with(serde_json::to_value(body).expect("a readiness body serialises"))
}

/// What `GET /openapi.json` answers (only its two required fields are described).
#[derive(ToSchema)]
#[allow(dead_code)]
struct OpenApiDocument {
    /// `3.1.0`.
    openapi: String,
    paths: serde_json::Map<String, Value>,
}

/// The OpenAPI document of this API, generated from the types (see `server::openapi`).
#[utoipa::path(
    get,
    path = "/openapi.json",
    operation_id = "openapi",
    summary = "This document",
    description = "",
    responses(
        (status = 200, description = "The OpenAPI document", body = inline(OpenApiDocument)),
        PlainErrors,
    ),
)]
pub async fn openapi() -> impl IntoResponse {
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        super::openapi(),
    )
}

/// Prometheus text format.
#[utoipa::path(
    get,
    path = "/metrics",
    operation_id = "metrics",
    summary = "Prometheus metrics (text format); every name starts with `gavel_`",
    description = "",
    security((), ("bearerAuth" = [])),
    responses(
        (status = 200, description = "Prometheus text exposition format", body = String, content_type = "text/plain"),
        PlainErrors,
    ),
)]
pub async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    let busy = state.server.max_in_flight - state.in_flight.available_permits();
    metrics::gauge!("gavel_score_requests_in_flight").set(busy as f64);
    let (filling, samples) = state.openrlhf.pending();
    metrics::gauge!("gavel_openrlhf_pending_groups", "state" => "filling").set(filling as f64);
    metrics::gauge!("gavel_openrlhf_pending_groups", "state" => "judging")
        .set(state.openrlhf.judging() as f64);
    metrics::gauge!("gavel_openrlhf_pending_samples").set(samples as f64);
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4",
        )],
        state.metrics.render(),
    )
}
