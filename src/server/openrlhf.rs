//! `POST /get_reward`: OpenRLHF's remote reward model protocol. Samples are assembled into
//! groups by prompt (across requests), each group is judged once through the scorer, and every
//! request is answered with its own samples' rewards, in order. A judge failure fails the
//! requests whose samples were in that group with the judge's typed error (502/503/504) —
//! OpenRLHF wants a number per sample, and a made-up number would be a wrong reward.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Extension;
use axum::Json;

use super::auth::Caller;
use super::error::ApiError;
use super::extract::{read_json, within_deadline, Admitted};
use super::openapi::examples as doc;
use super::openapi::responses::GetRewardErrors;
use super::AppState;
use crate::domain::rubric::RubricError;
use crate::judge::JudgeError;
use crate::openrlhf::assemble::{Assembler, GroupFuture};
use crate::openrlhf::wire;
use crate::openrlhf::OpenRlhfConfig;
use crate::openrlhf::{
    group_request, parse_request, response_body, split_response, LabelUse, Sample, SampleReward,
};
use crate::score::{ScoreError, Scorer};

/// A group's error, shared by every request that had a sample in it.
#[derive(Clone)]
pub struct PendingGroupError(Arc<ApiError>);

/// The endpoint's configuration and its pending groups.
pub struct OpenRlhf {
    cfg: OpenRlhfConfig,
    assembler: Assembler<Sample, SampleReward, PendingGroupError>,
}

impl OpenRlhf {
    /// Judges assembled groups through `scorer` as `cfg` says. Fails when the rubric is unknown.
    pub fn new(
        scorer: Arc<Scorer>,
        cfg: OpenRlhfConfig,
        deadline: Duration,
    ) -> Result<OpenRlhf, RubricError> {
        scorer.rubrics().get(&cfg.rubric)?;
        let judge_cfg = cfg.clone();
        let assembler = Assembler::new(
            cfg.group_size,
            cfg.max_pending_groups,
            Duration::from_millis(cfg.wait_ms),
            move |samples: Vec<Sample>| {
                let scorer = scorer.clone();
                let cfg = judge_cfg.clone();
                Box::pin(async move {
                    let shared = |e: ScoreError| PendingGroupError(Arc::new(ApiError::from(e)));
                    let rubric = scorer
                        .rubrics()
                        .get(&cfg.rubric)
                        .map_err(|e| shared(e.into()))?;
                    let req = group_request(&cfg, &LabelUse::of(&cfg, rubric), &samples);
                    // The judging outlives the requests that wait for it (the group's other
                    // samples may come later); it gets the same deadline as a request.
                    let resp = tokio::time::timeout(deadline, scorer.score_group(&req))
                        .await
                        .map_err(|_| {
                            shared(ScoreError::from(JudgeError::Timeout(format!(
                                "judging the group took longer than request_timeout_s ({}s)",
                                deadline.as_secs_f64()
                            ))))
                        })?
                        .map_err(shared)?;
                    Ok(split_response(resp))
                }) as GroupFuture<SampleReward, PendingGroupError>
            },
        );
        Ok(OpenRlhf { cfg, assembler })
    }

    /// Groups still waiting for samples, and the samples in them.
    pub fn pending(&self) -> (usize, usize) {
        self.assembler.pending()
    }

    /// Groups being judged now.
    pub fn judging(&self) -> usize {
        self.assembler.judging()
    }
}

/// The same error again (the shared original stays with the other requests of its group).
/// Exhaustive on purpose: a new kind of error must decide how it is shared.
fn duplicate(e: &ApiError) -> ApiError {
    match e {
        ApiError::InvalidRequest(m) => ApiError::InvalidRequest(m.clone()),
        ApiError::Input(e) => ApiError::Input(e.clone()),
        ApiError::PayloadTooLarge(m) => ApiError::PayloadTooLarge(m.clone()),
        ApiError::RequestTimeout(m) => ApiError::RequestTimeout(m.clone()),
        ApiError::NotFound(m) => ApiError::NotFound(m.clone()),
        ApiError::MethodNotAllowed(m) => ApiError::MethodNotAllowed(m.clone()),
        ApiError::Overloaded(m) => ApiError::Overloaded(m.clone()),
        ApiError::Judge(j) => ApiError::Judge(j.clone()),
        ApiError::Internal(m) => ApiError::Internal(m.clone()),
        ApiError::Unauthorized(m) => ApiError::Unauthorized(m.clone()),
        ApiError::NotReady(m) => ApiError::NotReady(m.clone()),
    }
}

/// The header that scopes groups to one training run of a caller (optional).
pub const RUN_HEADER: &str = "x-gavel-run";

/// Longest accepted `X-Gavel-Run` value. The OpenAPI attribute of `get_reward` needs a literal;
/// a test holds the two equal.
const MAX_RUN_BYTES: usize = 128;

/// The group scope of a request: the caller (its API key's digest) and its run header.
fn scope(caller: &Caller, headers: &HeaderMap) -> Result<String, ApiError> {
    let run = match headers.get(RUN_HEADER) {
        None => "",
        Some(v) => v
            .to_str()
            .ok()
            .filter(|r| r.len() <= MAX_RUN_BYTES)
            .ok_or_else(|| {
                ApiError::InvalidRequest(format!(
                    "{RUN_HEADER} must be visible ASCII of at most {MAX_RUN_BYTES} bytes"
                ))
            })?,
    };
    Ok(serde_json::json!([caller.id(), run]).to_string())
}

#[utoipa::path(
    post,
    path = "/get_reward",
    operation_id = "get_reward",
    summary = "OpenRLHF remote reward model: samples are grouped by prompt (across requests) and each group is judged once",
    description = "Samples of the same prompt (and label) are collected until `[openrlhf] group_size` of them have arrived or `wait_ms` has passed since the first, then judged as one group; each request is answered with its own samples' rewards, in order. A judge failure fails every request with a sample in that group (502/503/504): no reward is ever invented. Groups are scoped by caller: samples are grouped only with samples sent under the same API key and the same `X-Gavel-Run` header, so two runs or two key holders never share a relative group.",
    params(
        ("X-Gavel-Run" = Option<String>, Header,
         description = "Scopes groups to one training run of a caller (at most 128 bytes of visible ASCII); samples of different runs are never judged together",
         max_length = 128),
    ),
    request_body(content = wire::GetRewardRequest, examples(
        ("one_group" = (summary = "Eight samples of one prompt (a full group)", value = json!(doc::one_group()))),
    )),
    responses(
        (status = 200, description = "One reward per query, in order", body = wire::GetRewardResponse),
        GetRewardErrors,
    ),
)]
pub async fn get_reward(
    State(state): State<AppState>,
    slot: Admitted,
    caller: Option<Extension<Caller>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let caller = caller.map_or(Caller::Anonymous, |Extension(c)| c);
    let scope = scope(&caller, &headers)?;
    let (value, bytes) = read_json(&state, body).await?;
    drop(bytes);
    let ep = &state.openrlhf;
    // Counted before anything is parsed or built per sample.
    let count = value
        .get("query")
        .and_then(|q| q.as_array())
        .map_or(0, Vec::len);
    if count > ep.cfg.max_samples {
        return Err(ApiError::PayloadTooLarge(format!(
            "{count} samples in one request; [openrlhf] max_samples is {}",
            ep.cfg.max_samples
        )));
    }
    let samples = parse_request(&value, &ep.cfg.strip_suffixes)?;
    let rubric = state
        .scorer
        .rubrics()
        .get(&ep.cfg.rubric)
        .map_err(ScoreError::from)?;
    LabelUse::of(&ep.cfg, rubric).check(&samples, &ep.cfg.rubric)?;
    let keyed = samples
        .into_iter()
        .map(|s| (s.group_key(&scope), s))
        .collect();
    let answers = ep.assembler.submit(keyed).map_err(|e| {
        metrics::counter!("gavel_overloaded_total").increment(1);
        ApiError::Overloaded(format!(
            "{e} ([openrlhf] max_pending_groups); retry shortly"
        ))
    })?;
    // The samples are placed: from here on the request only waits for its groups. It gives its
    // `max_in_flight` slot back now, because a waiting request that kept it would lock out the
    // very siblings its group is waiting for (with enough partial groups in flight, every slot
    // is held by a waiter, the siblings get 429, and the groups are judged partial after
    // `wait_ms`). Admitting a sibling ahead of the limit instead would mean reading bodies
    // before admission, to tell siblings from new load. The wait is bounded without the slot:
    // every waiting request has a sample in a group that is filling up or being judged, there
    // are at most `max_pending_groups` of those (new groups past it get 429 above) and a group
    // holds at most `group_size` samples; the judging runs in the assembler's own task under
    // `request_timeout_s` and never held a slot. The body and the parsed samples are dropped
    // too, so a waiting request holds only its answers' channels.
    drop(slot);
    drop(value);
    let results = within_deadline(&state, futures::future::join_all(answers)).await?;
    let mut out = Vec::with_capacity(results.len());
    for r in results {
        match r {
            Ok(Ok(answer)) => out.push(answer),
            Ok(Err(PendingGroupError(e))) => return Err(duplicate(&e)),
            Err(_) => {
                return Err(ApiError::Internal(
                    "group judging ended without an answer for this sample".into(),
                ))
            }
        }
    }
    Ok(Json(response_body(&out)).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_documented_run_header_limit_is_the_enforced_one() {
        let doc: serde_json::Value = serde_json::from_str(crate::server::openapi()).unwrap();
        let params = doc["paths"]["/get_reward"]["post"]["parameters"]
            .as_array()
            .unwrap();
        let run = params
            .iter()
            .find(|p| p["name"] == "X-Gavel-Run")
            .expect("the run header is documented");
        assert_eq!(run["schema"]["maxLength"], MAX_RUN_BYTES);
        let text = run["description"].as_str().unwrap();
        assert!(
            text.contains(&format!("at most {MAX_RUN_BYTES} bytes")),
            "{text}"
        );
    }
}
