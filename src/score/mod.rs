//! The scoring pipeline: one group in, relative rewards out. Used alike by the daemon, the CLI,
//! re-scoring and training.
//!
//! request → [`ScoreRequest`] (validated) → verifiers → (if the policy needs it) dedup → prompt →
//! cache lookup → judge with one structural re-ask → verdict mapped back by id → components →
//! policy → rewards → advantages.

mod cascade_stage;
pub mod confidence;
mod judge_stage;
mod judging;
mod key_locks;
pub mod log;
mod memo;
mod questions;
mod readings;
mod reference;
pub mod request;
pub mod request_wire;
pub mod response;
mod reward_plan;
pub mod samples;

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use futures::StreamExt;

use crate::domain::dedup::DedupConfig;
use crate::domain::prompt::{PromptError, Prompts};
use crate::domain::reward::{advantages, AdvantageOverflow, ScaleRewards};
use crate::domain::rubric::{Rubric, RubricError, RubricSet};
use crate::domain::trajectory::{without_reasoning, InputError, ReasoningRule};
use crate::judge::config::JudgeConfig;
use crate::judge::{self, Judge, JudgeError, JudgeFailure, Panel, Spent};
use crate::store::{StoreError, VerdictStore};

use judge_stage::JudgeStage;

pub use judging::cache_key;
pub use questions::{bradley_terry, verdict_choices, Questions};

/// Bumped whenever what a cached verdict means changes, so old entries are never reused.
pub const CACHE_SCHEMA: u32 = 1;
pub use request::{BatchRequest, OnJudgeError, RubricRef, ScoreRequest};
pub use response::{
    BatchResponse, ErrorBody, ItemOut, RenderResponse, ScoreResponse, TrajectoryScore, Usage,
    VersionInfo,
};

/// Groups of one batch request scored at once.
const BATCH_CONCURRENCY: usize = 16;

#[derive(Debug, thiserror::Error)]
pub enum ScoreError {
    #[error(transparent)]
    Input(#[from] InputError),
    #[error(transparent)]
    Rubric(#[from] RubricError),
    #[error("unknown judge {name:?} (configured: {known})")]
    UnknownJudge { name: String, known: String },
    #[error("the request names no judge and no default_judge is configured (configured: {0})")]
    NoDefaultJudge(String),
    #[error(transparent)]
    Prompt(#[from] PromptError),
    /// The judge failed, having spent what the failure carries.
    #[error(transparent)]
    Judge(#[from] JudgeFailure),
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A judge call's rendered prompt is over `[server] max_prompt_bytes`.
    #[error(
        "a judge prompt for this group would be {bytes} bytes, over [server] max_prompt_bytes \
         ({max}): send shorter trajectories or a smaller group"
    )]
    PromptTooLarge { bytes: usize, max: usize },
}

impl From<JudgeError> for ScoreError {
    /// A judge failure that cost no call.
    fn from(e: JudgeError) -> Self {
        ScoreError::Judge(e.into())
    }
}

impl ScoreError {
    /// What the judge spent on a request that failed (nothing for any failure but the judge's).
    pub fn spent(&self) -> Spent {
        match self {
            ScoreError::Judge(f) => f.spent,
            _ => Spent::default(),
        }
    }

    /// The judge's own failure, which the request's `on_judge_error` (or a cascade's next
    /// stage) decides about; any other error as it is, for the caller to pass on with `?`.
    pub(crate) fn judge_failure(self) -> Result<JudgeFailure, ScoreError> {
        match self {
            ScoreError::Judge(f) => Ok(f),
            other => Err(other),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error(transparent)]
    Judge(#[from] JudgeError),
    #[error(transparent)]
    Rubric(#[from] RubricError),
    #[error(transparent)]
    Prompt(#[from] PromptError),
}

/// What a scorer is built from: the parts of the configuration it reads (`Config::scorer_parts`
/// gathers them, so the pipeline never depends on the whole configuration).
#[derive(Debug, Clone, Copy)]
pub struct ScorerParts<'a> {
    pub judges: &'a BTreeMap<String, JudgeConfig>,
    /// The judge of a request that names none.
    pub default_judge: Option<&'a str>,
    pub rubrics_dir: Option<&'a Path>,
    pub prompts_dir: Option<&'a Path>,
    /// `[dedup] min_shared_chars`.
    pub min_shared_chars: usize,
    /// `[server] max_group_size`.
    pub max_group_size: usize,
    /// `[server] max_prompt_bytes`.
    pub max_prompt_bytes: usize,
}

/// The scoring core with everything it needs, built once and shared: what a request names
/// (judges, cascades, rubrics) is resolved here; judging itself is the [`JudgeStage`]'s.
#[derive(Debug)]
pub struct Scorer {
    judges: judge::Judges,
    /// Cascades by name, on the judges above (`backend = "cascade"`).
    cascades: BTreeMap<String, Arc<judge::cascade::Cascade>>,
    default_judge: Option<String>,
    rubrics: RubricSet,
    max_group_size: usize,
    stage: JudgeStage,
}

impl Scorer {
    /// The scorer of a configuration (`Config::scorer_parts`), over `store`. Every judge is
    /// built now, so a bad judge section stops start-up.
    pub fn new(parts: ScorerParts<'_>, store: Arc<dyn VerdictStore>) -> Result<Scorer, BuildError> {
        let judges = judge::build_all(parts.judges)?;
        Ok(Scorer {
            cascades: judge::cascade::build_cascades(parts.judges, &judges)?,
            judges,
            default_judge: parts.default_judge.map(str::to_string),
            rubrics: RubricSet::load(parts.rubrics_dir)?,
            max_group_size: parts.max_group_size,
            stage: JudgeStage::new(
                Prompts::load(parts.prompts_dir)?,
                store,
                DedupConfig {
                    min_shared_chars: parts.min_shared_chars,
                    enabled: true,
                },
                parts.max_prompt_bytes,
            ),
        })
    }

    pub fn max_group_size(&self) -> usize {
        self.max_group_size
    }
    pub fn rubrics(&self) -> &RubricSet {
        &self.rubrics
    }
    pub fn judges(&self) -> impl Iterator<Item = &dyn Judge> {
        self.judges.values().map(Arc::as_ref)
    }

    /// Asks every judge, at once, whether it can do what it is configured for
    /// ([`Judge::check_capabilities`]), and logs each that cannot. Scoring starts either way:
    /// a judge that cannot refuses the requests that need it.
    pub async fn check_judges(&self) {
        let checks = self
            .judges()
            .map(|j| async move { (j.settings().info.name.clone(), j.check_capabilities().await) });
        for (judge, result) in futures::future::join_all(checks).await {
            if let Err(problem) = result {
                tracing::warn!(%judge, "{problem}");
            }
        }
    }
    pub fn store(&self) -> &Arc<dyn VerdictStore> {
        &self.stage.store
    }

    /// The request's rubric. An unknown name or an invalid inline rubric is a refusal of the
    /// request's `rubric` field.
    /// The rubric a request names or carries.
    pub fn rubric<'a>(&'a self, r: &RubricRef) -> Result<Cow<'a, Rubric>, ScoreError> {
        let field = |e: RubricError| -> ScoreError {
            match e {
                RubricError::Unknown { .. } => InputError::new("rubric", e.to_string()).into(),
                RubricError::Invalid { message, .. } => InputError::new("rubric", message).into(),
                other => ScoreError::Rubric(other),
            }
        };
        Ok(match r {
            RubricRef::Named(n) => Cow::Borrowed(self.rubrics.get(n).map_err(field)?),
            RubricRef::Inline(spec) => {
                Cow::Owned(Rubric::from_spec((**spec).clone(), "inline", "rubric").map_err(field)?)
            }
        })
    }

    /// The judges a request names, or the default judge. A name no judge has is a refusal of
    /// the request's `judge` field (`judge[i]` in a panel; a panel of one reads as `judge`).
    fn judge_names(&self, req: &ScoreRequest) -> Result<Vec<String>, ScoreError> {
        if !req.judges.is_empty() {
            if let Some(i) = req.judges.iter().position(|n| !self.is_judge_name(n)) {
                let field = match req.judges.len() {
                    1 => "judge".to_string(),
                    _ => format!("judge[{i}]"),
                };
                let known = self.known_names();
                let problem = ScoreError::UnknownJudge {
                    name: req.judges[i].clone(),
                    known,
                };
                return Err(InputError::new(field, problem.to_string()).into());
            }
            return Ok(req.judges.clone());
        }
        match &self.default_judge {
            Some(d) => Ok(vec![d.clone()]),
            None => Err(ScoreError::NoDefaultJudge(
                self.judges.keys().cloned().collect::<Vec<_>>().join(", "),
            )),
        }
    }

    /// Every judge and cascade name, for errors.
    fn known_names(&self) -> String {
        let mut names: Vec<&str> = self.judges.keys().map(String::as_str).collect();
        names.extend(self.cascades.keys().map(String::as_str));
        names.sort_unstable();
        names.join(", ")
    }

    fn is_judge_name(&self, name: &str) -> bool {
        self.judges.contains_key(name) || self.cascades.contains_key(name)
    }

    /// The cascade that judges a request, if it names one (or names none and the default is
    /// one). A cascade judges alone, each stage in its own mode: in a panel, or with a
    /// `judge_mode`, it is a refusal of that field.
    fn cascade_of(
        &self,
        req: &ScoreRequest,
    ) -> Result<Option<Arc<judge::cascade::Cascade>>, ScoreError> {
        let names = self.judge_names(req)?;
        let Some(i) = names.iter().position(|n| self.cascades.contains_key(n)) else {
            return Ok(None);
        };
        if names.len() > 1 {
            return Err(InputError::new(
                format!("judge[{i}]"),
                format!(
                    "{:?} is a cascade, which judges alone: name it as the only judge",
                    names[i]
                ),
            )
            .into());
        }
        if req.judge_mode.is_some() {
            return Err(InputError::new(
                "judge_mode",
                format!(
                    "judge {:?} is a cascade: each stage judges in its own mode (its table's \
                     `mode`); leave judge_mode out",
                    names[i]
                ),
            )
            .into());
        }
        Ok(self.cascades.get(&names[i]).cloned())
    }

    /// The panel that judges a request: the judges it names (or the default judge), combined
    /// as it asks; for a cascade, its first stage (which writes a `reference = "judge"`
    /// answer, and whose prompt `render` shows). Errors as [`Scorer::judge_names`].
    fn panel(&self, req: &ScoreRequest) -> Result<Panel, ScoreError> {
        if let Some(c) = self.cascade_of(req)? {
            return Ok(Panel::of_one(c.stages[0].1.clone()));
        }
        let members = self
            .judge_names(req)?
            .iter()
            .map(|n| self.judge(Some(n)).cloned())
            .collect::<Result<Vec<_>, _>>()?;
        // `judge_names` gives at least one name, or the error above.
        Panel::new(members, req.aggregate).ok_or_else(|| {
            ScoreError::NoDefaultJudge(self.judges.keys().cloned().collect::<Vec<_>>().join(", "))
        })
    }

    fn judge(&self, name: Option<&str>) -> Result<&Arc<dyn Judge>, ScoreError> {
        let known = || self.judges.keys().cloned().collect::<Vec<_>>().join(", ");
        let name = match name.or(self.default_judge.as_deref()) {
            Some(n) => n,
            None => return Err(ScoreError::NoDefaultJudge(known())),
        };
        self.judges
            .get(name)
            .ok_or_else(|| ScoreError::UnknownJudge {
                name: name.to_string(),
                known: known(),
            })
    }

    /// Checks everything about a request that needs neither a judge call nor the store: its
    /// rubric, its verifiers and reward policy and, when the policy reads the judge, every judge
    /// it names and the judging mode each is asked in. A name that is not configured is an input
    /// error on its field (`rubric`, `judge`). What passes can still fail at the judge, or on a
    /// prompt over `max_prompt_bytes`, but not on anything the request says.
    pub fn check(&self, req: &ScoreRequest) -> Result<(), ScoreError> {
        // `rubric` and `judge_names` already refuse unknown names on their fields; what is left
        // is a request that names no judge where none is the default.
        let on_judge = |e: ScoreError| match e {
            ScoreError::NoDefaultJudge(_) | ScoreError::UnknownJudge { .. } => {
                ScoreError::Input(InputError::new("judge", e.to_string()))
            }
            other => other,
        };
        let rubric = self.rubric(&req.rubric)?;
        let plan = reward_plan::plan_rewards(&rubric, req)?;
        if plan.policy.needs_judge() {
            let members: Vec<Arc<dyn Judge>> = match self.cascade_of(req).map_err(on_judge)? {
                Some(c) => c.stages.iter().map(|(_, j)| j.clone()).collect(),
                None => self.panel(req).map_err(on_judge)?.members().to_vec(),
            };
            for judge in &members {
                judging::check_mode(
                    judge.as_ref(),
                    &rubric,
                    req.judge_mode.unwrap_or(judge.settings().mode),
                )?;
            }
        }
        Ok(())
    }

    /// Whether a judge (or cascade) of this name is configured (an unknown name is the error).
    pub fn check_judge_name(&self, name: &str) -> Result<(), ScoreError> {
        if self.cascades.contains_key(name) {
            return Ok(());
        }
        self.judge(Some(name)).map(|_| ())
    }

    /// The same scorer over another store: the CLI builds its scorer, checks the input with it,
    /// and only then opens the real store (a bad file never creates one).
    pub fn with_store(mut self, store: Arc<dyn VerdictStore>) -> Scorer {
        self.stage.store = store;
        self
    }

    /// Scores one group (`score_group`, in log.rs, wraps this and writes the scoring log), stage
    /// by stage.
    async fn score_group_unlogged(&self, req: &ScoreRequest) -> Result<ScoreResponse, ScoreError> {
        let rubric = self.rubric(&req.rubric)?;
        let (reasoning_dropped, shown) = reasoning_shown(&rubric, req);
        let req = shown.as_ref().unwrap_or(req);
        let plan = reward_plan::plan_rewards(&rubric, req)?;
        // Under `reference = "judge"`, the judge's own answer first: verifiers that read the
        // group's reference and the judge's prompts (cache keys, remembered plans) then see it
        // as one the request brought.
        // (A copy of the request carries it: one clone of the trajectories per such group,
        // small beside the judge calls it comes with.)
        let made = match self.group_reference(&rubric, req).await {
            Ok(r) => Ok(r),
            Err(e) => Err(e.judge_failure()?),
        };
        let with_reference;
        let (req, judge_reference, reference_usage, reference_failure) = match made {
            Ok(None) => (req, None, None, None),
            Ok(Some(r)) => {
                with_reference = ScoreRequest {
                    reference: Some(r.text.clone()),
                    ..req.clone()
                };
                (&with_reference, Some(r.text), Some(r.usage), None)
            }
            Err(e) => (req, None, None, Some(e)),
        };
        let mut scores = plan.verifier_scores(req);
        let (mut usage, mut template, mut judges, mut error) = Default::default();
        if let Some(e) = reference_failure {
            // The judge could not answer the task: a judge failure like any other.
            judges = self.panel(req)?.infos();
            (usage, error) =
                judge_stage::merge_judge_scores(&mut scores, Err(e), req.on_judge_error)?;
        } else if plan.policy.needs_judge() {
            let judged = self.judge_request(&rubric, req).await?;
            (usage, error) =
                judge_stage::merge_judge_scores(&mut scores, judged.outcome, req.on_judge_error)?;
            template = Some(judged.template);
            judges = judged.judges;
        }
        if let Some(u) = &reference_usage {
            usage.add(u);
        }
        plan.combine(&mut scores, error.is_some());
        let rewards: Vec<Option<f64>> = scores.iter().map(|s| s.score).collect();
        let scale = match req.scale_rewards {
            ScaleRewards::None => ScaleRewards::None,
            // For one group, the batch is the group.
            ScaleRewards::Group | ScaleRewards::Batch => ScaleRewards::Group,
        };
        let advantages = advantages(std::slice::from_ref(&rewards), scale)
            .map_err(|o| overflow_error(o, ""))?
            .remove(0);
        Ok(ScoreResponse {
            rewards,
            advantages,
            scores,
            usage,
            rubric: VersionInfo {
                name: rubric.name.clone(),
                version: rubric.version.clone(),
            },
            template,
            judges,
            judge_reference,
            error,
            reasoning_dropped: reasoning_dropped as u64,
        })
    }

    /// Scores one group, then appends it to the store's scoring log (when the store keeps one;
    /// the entry is [`log::entry`]) before answering: a group is only reported scored once its
    /// log row is written.
    pub async fn score_group(&self, req: &ScoreRequest) -> Result<ScoreResponse, ScoreError> {
        let started = std::time::Instant::now();
        let resp = self.score_group_unlogged(req).await?;
        if self.stage.store.keeps_scoring_log() {
            self.stage
                .store
                .log_scored(&log::entry(req, &resp, started.elapsed()))
                .await?;
        }
        Ok(resp)
    }

    /// Scores many groups (a training step), concurrently, and computes advantages with the
    /// batch's `scale_rewards`. A judge failure in a group that asked to fail fails the whole
    /// batch, naming the group.
    pub async fn score_groups(&self, batch: &BatchRequest) -> Result<BatchResponse, ScoreError> {
        let futures: Vec<_> = batch
            .groups
            .iter()
            .map(|g| Box::pin(self.score_group(g)))
            .collect();
        let results: Vec<Result<ScoreResponse, ScoreError>> = futures::stream::iter(futures)
            .buffered(BATCH_CONCURRENCY)
            .collect()
            .await;
        let mut out = Vec::with_capacity(results.len());
        for (i, r) in results.into_iter().enumerate() {
            let at = format!("groups[{i}]");
            out.push(r.map_err(|e| match e {
                ScoreError::Judge(j) => ScoreError::Judge(j.context(&at)),
                ScoreError::Input(e) => ScoreError::Input(request::prefixed(&at, e)),
                other => other,
            })?);
        }
        let rewards: Vec<Vec<Option<f64>>> = out.iter().map(|r| r.rewards.clone()).collect();
        let advantages = advantages(&rewards, batch.scale_rewards)
            .map_err(|o| overflow_error(o, &format!("groups[{}].", o.group)))?;
        let mut usage = Usage::default();
        for (r, adv) in out.iter_mut().zip(advantages) {
            r.advantages = adv;
            usage.add(&r.usage);
        }
        Ok(BatchResponse {
            results: out,
            scale_rewards: batch.scale_rewards,
            usage,
        })
    }
}

/// The request as the judge sees it under its reasoning rule (the request's, else the
/// rubric's, else `drop`), and how many messages' reasoning was dropped: `None` when the
/// request is seen as it is (reasoning shown, or none to drop).
pub(crate) fn reasoning_shown(
    rubric: &Rubric,
    req: &ScoreRequest,
) -> (usize, Option<ScoreRequest>) {
    let rule = req.reasoning.or(rubric.reasoning).unwrap_or_default();
    if rule == ReasoningRule::Show {
        return (0, None);
    }
    match without_reasoning(&req.trajectories) {
        None => (0, None),
        Some((trajectories, dropped)) => {
            tracing::debug!(
                dropped,
                "reasoning left out of the judge's prompt (reasoning = drop)"
            );
            let req = ScoreRequest {
                trajectories,
                ..req.clone()
            };
            (dropped, Some(req))
        }
    }
}

/// The request error of an advantage past f64's range (`prefix` locates the group in a batch).
fn overflow_error(o: AdvantageOverflow, prefix: &str) -> ScoreError {
    ScoreError::Input(InputError::new(
        format!("{prefix}trajectories[{}].reward", o.trajectory),
        "with scale_rewards \"none\", this reward minus its group's mean is past the largest \
         number f64 holds (about 1.8e308): send smaller rewards, or scale_rewards \"group\"",
    ))
}
