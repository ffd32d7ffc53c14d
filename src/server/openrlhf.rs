//! `POST /get_reward`: OpenRLHF's remote reward model protocol. Samples are assembled into
//! groups by prompt (across requests), each group is judged once through the scorer, and every
//! request is answered with its own samples' rewards, in order. A judge failure fails the
//! requests whose samples were in that group with the judge's typed error (502/503/504) —
//! OpenRLHF wants a number per sample, and a made-up number would be a wrong reward.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::error::ApiError;
use super::handlers::{admit, read_json, request_timeout};
use super::AppState;
use crate::config::OpenRlhfConfig;
use crate::openrlhf::assemble::{Assembler, GroupFuture};
use crate::openrlhf::{
    group_request, parse_request, response_body, split_response, LabelUse, Sample, SampleReward,
};
use crate::rubric::RubricError;
use crate::score::{ScoreError, Scorer};

/// A group's error, shared by every request that had a sample in it.
#[derive(Clone)]
pub struct GroupError(Arc<ApiError>);

/// The endpoint's configuration and its pending groups.
pub struct OpenRlhf {
    cfg: OpenRlhfConfig,
    assembler: Assembler<Sample, SampleReward, GroupError>,
}

impl OpenRlhf {
    /// Judges assembled groups through `scorer` as `cfg` says. Fails when the rubric is unknown.
    pub fn new(scorer: Arc<Scorer>, cfg: OpenRlhfConfig) -> Result<OpenRlhf, RubricError> {
        scorer.rubrics().get(&cfg.rubric)?;
        let judge_cfg = cfg.clone();
        let assembler = Assembler::new(
            cfg.group_size,
            Duration::from_millis(cfg.wait_ms),
            move |samples: Vec<Sample>| {
                let scorer = scorer.clone();
                let cfg = judge_cfg.clone();
                Box::pin(async move {
                    let shared = |e: ScoreError| GroupError(Arc::new(ApiError::from(e)));
                    let rubric = scorer
                        .rubrics()
                        .get(&cfg.rubric)
                        .map_err(|e| shared(e.into()))?;
                    let req = group_request(&cfg, &LabelUse::of(&cfg, rubric), &samples);
                    let resp = scorer.score_group(&req).await.map_err(shared)?;
                    Ok(split_response(resp))
                }) as GroupFuture<SampleReward, GroupError>
            },
        );
        Ok(OpenRlhf { cfg, assembler })
    }

    /// Groups still waiting for samples, and the samples in them.
    pub fn pending(&self) -> (usize, usize) {
        self.assembler.pending()
    }
}

/// The same error again (the shared original stays with the other requests of its group).
/// Exhaustive on purpose: a new kind of error must decide how it is shared.
fn duplicate(e: &ApiError) -> ApiError {
    match e {
        ApiError::InvalidRequest(m) => ApiError::InvalidRequest(m.clone()),
        ApiError::PayloadTooLarge(m) => ApiError::PayloadTooLarge(m.clone()),
        ApiError::NotFound(m) => ApiError::NotFound(m.clone()),
        ApiError::MethodNotAllowed(m) => ApiError::MethodNotAllowed(m.clone()),
        ApiError::Overloaded(m) => ApiError::Overloaded(m.clone()),
        ApiError::Judge(j) => ApiError::Judge(j.clone()),
        ApiError::Internal(m) => ApiError::Internal(m.clone()),
        ApiError::Unauthorized(m) => ApiError::Unauthorized(m.clone()),
        ApiError::NotReady(m) => ApiError::NotReady(m.clone()),
    }
}

pub async fn get_reward(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let _permit = admit(&state)?;
    let value = read_json(&state, body)?;
    let ep = &state.openrlhf;
    let samples = parse_request(&value, &ep.cfg.strip_suffixes)?;
    let rubric = state
        .scorer
        .rubrics()
        .get(&ep.cfg.rubric)
        .map_err(ScoreError::from)?;
    LabelUse::of(&ep.cfg, rubric).check(&samples, &ep.cfg.rubric)?;
    let keyed = samples.into_iter().map(|s| (s.group_key(), s)).collect();
    let answers = ep.assembler.submit(keyed);
    let limit = Duration::from_secs_f64(state.server.request_timeout_s);
    let results = tokio::time::timeout(limit, futures::future::join_all(answers))
        .await
        .map_err(|_| request_timeout(&state))?;
    let mut out = Vec::with_capacity(results.len());
    for r in results {
        match r {
            Ok(Ok(answer)) => out.push(answer),
            Ok(Err(GroupError(e))) => return Err(duplicate(&e)),
            Err(_) => {
                return Err(ApiError::Internal(
                    "group judging ended without an answer for this sample".into(),
                ))
            }
        }
    }
    Ok(Json(response_body(&out)).into_response())
}
