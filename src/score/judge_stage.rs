//! The judge stage of the pipeline, as a value: [`JudgeStage`] owns what judging a group needs
//! beyond the judges a request names (the prompts, the verdict store, dedup, the prompt-size
//! limit, the per-key locks that let concurrent requests share one judge call, and the plans
//! remembered for groups seen before). It gives the judge's component for every trajectory of a
//! group: from a remembered plan when every verdict is stored, else through judging's four
//! stages (`judging/`). [`merge_judge_scores`] puts that component into the trajectories' scores.

use std::sync::Arc;

use super::judging::JudgeOutcome;
use super::key_locks::KeyLocks;
use super::memo::{self, PlanMemo};
use super::request::OnJudgeError;
use super::response::{ErrorBody, TrajectoryScore, Usage, VersionInfo};
use super::{ScoreError, ScoreRequest, Scorer};
use crate::domain::dedup::DedupConfig;
use crate::domain::prompt::Prompts;
use crate::domain::reward::JUDGE;
use crate::domain::rubric::Rubric;
use crate::judge::{JudgeError, JudgeFailure, JudgeInfo, Panel};
use crate::store::VerdictStore;

/// What the judge stage gives the pipeline: the outcome (a failure kept, for the request's
/// `on_judge_error` to decide) and which template and judges made it.
pub(super) struct JudgedGroup {
    pub outcome: Result<JudgeOutcome, JudgeFailure>,
    pub template: VersionInfo,
    pub judges: Vec<JudgeInfo>,
}

/// Judging a group with a resolved panel: plans, store access, single-flight and the judge
/// calls. Built once with the scorer; the scorer resolves which panel judges a request.
#[derive(Debug)]
pub(super) struct JudgeStage {
    pub(super) prompts: Prompts,
    pub(super) store: Arc<dyn VerdictStore>,
    pub(super) dedup: DedupConfig,
    /// `[server] max_prompt_bytes`: the largest rendered prompt of one judge call.
    pub(super) max_prompt_bytes: usize,
    /// One judge call per cache key in flight in this process (claims do it across replicas).
    pub(super) inflight: KeyLocks,
    plans: PlanMemo,
}

impl JudgeStage {
    pub(super) fn new(
        prompts: Prompts,
        store: Arc<dyn VerdictStore>,
        dedup: DedupConfig,
        max_prompt_bytes: usize,
    ) -> JudgeStage {
        JudgeStage {
            prompts,
            store,
            dedup,
            max_prompt_bytes,
            inflight: KeyLocks::default(),
            plans: PlanMemo::default(),
        }
    }

    /// The judge's component for every trajectory of the group, judged by `panel` in
    /// `permutations` orders. A group seen before is answered from its remembered plan when
    /// every verdict is stored; otherwise (or the first time) it is planned and rendered in
    /// full. Errors here are the request's (prompt too large, store down); the judge's own
    /// failure is in the outcome.
    pub(super) async fn judge(
        &self,
        rubric: &Rubric,
        panel: Panel,
        permutations: u32,
        req: &ScoreRequest,
    ) -> Result<JudgedGroup, ScoreError> {
        let judges = panel.infos();
        let memo_key = memo::memo_key(rubric, &panel.names(), permutations, req);
        if let Some(sk) = self.plans.get(&memo_key) {
            if let Some(outcome) = self.judge_cached(&sk, rubric, &panel).await? {
                return Ok(JudgedGroup {
                    outcome: Ok(outcome),
                    template: VersionInfo {
                        name: sk.template_name.into(),
                        version: sk.template_version.clone(),
                    },
                    judges,
                });
            }
        }
        let plan = self.plan(rubric, panel, permutations, req)?;
        let template = VersionInfo {
            name: plan.skeleton.template_name.into(),
            version: plan.template_version(),
        };
        let outcome = match self.judge_group(&plan).await {
            Ok(o) => {
                self.plans.insert(memo_key, plan.skeleton.clone());
                Ok(o)
            }
            Err(e) => Err(e.judge_failure()?),
        };
        Ok(JudgedGroup {
            outcome,
            template,
            judges,
        })
    }
}

impl Scorer {
    /// The judge's component for every trajectory of the group, by the cascade or the panel the
    /// request names (or the default judge). Errors here are the request's (unknown judge,
    /// prompt too large, store down); a judge's own failure is in the outcome.
    pub(super) async fn judge_request(
        &self,
        rubric: &Rubric,
        req: &ScoreRequest,
    ) -> Result<JudgedGroup, ScoreError> {
        match self.cascade_of(req)? {
            Some(cascade) => self.judge_cascade(&cascade, rubric, req).await,
            None => self.judge_panel(rubric, req).await,
        }
    }

    /// The judge stage of a panel (a single judge is a panel of one).
    pub(super) async fn judge_panel(
        &self,
        rubric: &Rubric,
        req: &ScoreRequest,
    ) -> Result<JudgedGroup, ScoreError> {
        let permutations = req.permutations.or(rubric.permutations).unwrap_or(1);
        self.stage
            .judge(rubric, self.panel(req)?, permutations, req)
            .await
    }
}

/// Puts the judge's component into each score. A failure fails the request, unless the request
/// asked for `on_judge_error: null`: then the judge component is null and the failure is
/// returned for the response to report. A full queue always fails the request ("retry later",
/// 429), never a null reward.
pub(super) fn merge_judge_scores(
    scores: &mut [TrajectoryScore],
    outcome: Result<JudgeOutcome, JudgeFailure>,
    on_error: OnJudgeError,
) -> Result<(Usage, Option<ErrorBody>), ScoreError> {
    match outcome {
        Ok(outcome) => {
            for (s, j) in scores.iter_mut().zip(outcome.scores) {
                s.components.insert(JUDGE.into(), j.value);
                s.explanation = j.explanation;
                s.items = j.items;
                s.disagreement = j.disagreement;
                s.confidence = j.confidence;
                s.judges = j.per_judge;
                s.judge = j.stage;
            }
            Ok((outcome.usage, None))
        }
        Err(e)
            if on_error == OnJudgeError::Null && !matches!(e.error, JudgeError::Overloaded(_)) =>
        {
            tracing::warn!(error = %e, failed_calls = e.spent.calls,
                "judge failed; answering reward null as the request asked");
            for s in scores.iter_mut() {
                s.components.insert(JUDGE.into(), None);
            }
            let body = ErrorBody {
                kind: e.error_type(),
                message: e.to_string(),
            };
            Ok((Usage::failed(e.spent), Some(body)))
        }
        Err(e) => Err(e.into()),
    }
}
