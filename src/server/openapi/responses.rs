//! The error responses each route documents: one set per kind of route, each status with the
//! `error.type` it carries and when the daemon answers it (see `server::error`). A response that
//! reads the same on several routes is one component, referenced where it applies.

// Never built: the derives read the types.
#![allow(dead_code)]

use utoipa::{IntoResponses, ToResponse};

use crate::server::error::ErrorResponse;

/// `unauthorized`: API keys are configured and the request has no valid bearer token
#[derive(ToResponse)]
#[response(headers(("WWW-Authenticate" = String, description = "Always `Bearer`")))]
pub struct Unauthorized(ErrorResponse);

#[derive(ToResponse)]
#[response(
    description = "`invalid_request`: bad JSON, bad shape, unknown field, unknown rubric or judge name (the message names the field)"
)]
pub struct InvalidRequest(ErrorResponse);

#[derive(ToResponse)]
#[response(
    description = "`request_timeout`: the body did not arrive within `[server] body_read_timeout_s` (the request was admitted first)"
)]
pub struct RequestTimeout(ErrorResponse);

#[derive(ToResponse)]
#[response(
    description = "`payload_too_large`: body over `[server] max_body_bytes`, or a judge call's rendered prompt over `[server] max_prompt_bytes`"
)]
pub struct PayloadTooLarge(ErrorResponse);

#[derive(ToResponse)]
#[response(
    description = "`internal`: the verdict store or the judge prompt failed (logged); the daemon serves on"
)]
pub struct Internal(ErrorResponse);

#[derive(ToResponse)]
#[response(
    description = "`judge_unavailable` (the judge answered errors through every retry) or `judge_invalid_output` (the verdict was unusable after one structural re-ask)"
)]
pub struct JudgeUnavailable(ErrorResponse);

#[derive(ToResponse)]
#[response(
    description = "`no_judge_configured`: the judge has no API key or model; `judge_unsupported_mode`: the judge's server returns no token probabilities, which `pointwise` and `pairwise` read"
)]
pub struct NoJudgeConfigured(ErrorResponse);

#[derive(ToResponse)]
#[response(
    description = "`judge_timeout`: every attempt timed out, the judge's `deadline_s` passed, or `request_timeout_s`"
)]
pub struct JudgeTimeout(ErrorResponse);

/// A route that reads nothing: only auth can refuse it.
#[derive(IntoResponses)]
pub enum PlainErrors {
    #[response(status = 401)]
    Unauthorized(#[ref_response] Unauthorized),
}

/// `POST /v1/score_group`, `/score_group` and `/v1/score_groups`.
#[derive(IntoResponses)]
pub enum ScoringErrors {
    #[response(status = 400)]
    InvalidRequest(#[ref_response] InvalidRequest),
    #[response(status = 401)]
    Unauthorized(#[ref_response] Unauthorized),
    #[response(status = 408)]
    RequestTimeout(#[ref_response] RequestTimeout),
    #[response(status = 413)]
    PayloadTooLarge(#[ref_response] PayloadTooLarge),
    #[response(
        status = 429,
        description = "`overloaded`: more than `[server] max_in_flight` scoring requests at once, or a local judge's queue is full",
        headers(("Retry-After" = u64, description = "Seconds to wait"))
    )]
    Overloaded(ErrorResponse),
    #[response(status = 500)]
    Internal(#[ref_response] Internal),
    #[response(status = 502)]
    JudgeUnavailable(#[ref_response] JudgeUnavailable),
    #[response(status = 503)]
    NoJudgeConfigured(#[ref_response] NoJudgeConfigured),
    #[response(status = 504)]
    JudgeTimeout(#[ref_response] JudgeTimeout),
}

/// `POST /v1/render`: no judge is called.
#[derive(IntoResponses)]
pub enum RenderErrors {
    #[response(status = 400)]
    InvalidRequest(#[ref_response] InvalidRequest),
    #[response(status = 401)]
    Unauthorized(#[ref_response] Unauthorized),
    #[response(status = 408)]
    RequestTimeout(#[ref_response] RequestTimeout),
    #[response(status = 413)]
    PayloadTooLarge(#[ref_response] PayloadTooLarge),
    #[response(
        status = 429,
        description = "`overloaded`: more than `[server] max_in_flight` scoring requests at once",
        headers(("Retry-After" = u64, description = "Seconds to wait"))
    )]
    Overloaded(ErrorResponse),
    #[response(
        status = 500,
        description = "`internal`: rendering failed (logged); the daemon serves on"
    )]
    Internal(ErrorResponse),
    #[response(
        status = 504,
        description = "`judge_timeout`: rendering took longer than `[server] request_timeout_s`"
    )]
    JudgeTimeout(ErrorResponse),
}

/// `POST /get_reward`: a group's judge failure fails every request with a sample in it.
#[derive(IntoResponses)]
pub enum GetRewardErrors {
    #[response(
        status = 400,
        description = "`invalid_request`: bad JSON, unknown field, `query`/`prompts`/`labels` of different lengths, a missing label the rubric needs, a bad `X-Gavel-Run`"
    )]
    InvalidRequest(ErrorResponse),
    #[response(status = 401)]
    Unauthorized(#[ref_response] Unauthorized),
    #[response(status = 408)]
    RequestTimeout(#[ref_response] RequestTimeout),
    #[response(
        status = 413,
        description = "`payload_too_large`: body over `[server] max_body_bytes`, or more samples than `[openrlhf] max_samples`"
    )]
    PayloadTooLarge(ErrorResponse),
    #[response(
        status = 429,
        description = "`overloaded`: more than `[server] max_in_flight` scoring requests at once, or these samples would open more groups than `[openrlhf] max_pending_groups`",
        headers(("Retry-After" = u64, description = "Seconds to wait"))
    )]
    Overloaded(ErrorResponse),
    #[response(status = 500)]
    Internal(#[ref_response] Internal),
    #[response(status = 502)]
    JudgeUnavailable(#[ref_response] JudgeUnavailable),
    #[response(status = 503)]
    NoJudgeConfigured(#[ref_response] NoJudgeConfigured),
    #[response(status = 504)]
    JudgeTimeout(#[ref_response] JudgeTimeout),
}
