//! The scoring pipeline: one group in, relative rewards out. Used alike by the daemon, the CLI,
//! re-scoring and training.
//!
//! request → [`ScoreRequest`] (validated) → verifiers → (if the policy needs it) dedup → prompt →
//! cache lookup → judge with one structural re-ask → verdict mapped back by id → components →
//! policy → rewards → advantages.

mod judging;
mod key_locks;
pub mod log;
mod memo;
mod probes;
pub mod request;
pub mod response;
pub mod samples;

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use futures::StreamExt;
use serde_json::Value;

use crate::config::Config;
use crate::dedup::DedupConfig;
use crate::judge::{Judge, JudgeError};
use crate::prompt::{PromptError, Prompts};
use crate::reward::{advantages, ResolvedPolicy, ScaleRewards, INDEPENDENT, JUDGE};
use crate::rubric::{Rubric, RubricError, RubricSet};
use crate::store::{StoreError, VerdictStore};
use crate::trajectory::InputError;
use crate::verify::Verifier;
use request::MAX_VERIFIERS;

pub use judging::cache_key;

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
    #[error(transparent)]
    Judge(#[from] JudgeError),
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A judge call's rendered prompt is over `[server] max_prompt_bytes`.
    #[error(
        "a judge prompt for this group would be {bytes} bytes, over [server] max_prompt_bytes \
         ({max}): send shorter trajectories or a smaller group"
    )]
    PromptTooLarge { bytes: usize, max: usize },
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

/// The scoring core with everything it needs, built once and shared.
#[derive(Debug)]
pub struct Scorer {
    judges: BTreeMap<String, Arc<Judge>>,
    default_judge: Option<String>,
    rubrics: RubricSet,
    prompts: Prompts,
    store: Arc<dyn VerdictStore>,
    dedup: DedupConfig,
    max_group_size: usize,
    /// `[server] max_prompt_bytes`: the largest rendered prompt of one judge call.
    max_prompt_bytes: usize,
    inflight: key_locks::KeyLocks,
    plans: memo::PlanMemo,
}

/// Verifiers and policy resolved for one request.
struct RewardPlan {
    verifiers: Vec<Verifier>,
    policy: ResolvedPolicy,
}

impl Scorer {
    pub fn new(cfg: &Config, store: Arc<dyn VerdictStore>) -> Result<Scorer, BuildError> {
        Ok(Scorer {
            judges: cfg
                .judges
                .iter()
                .map(|(name, j)| Ok((name.clone(), Arc::new(Judge::from_config(name, j)?))))
                .collect::<Result<_, JudgeError>>()?,
            default_judge: cfg.default_judge_name().map(str::to_string),
            rubrics: RubricSet::load(cfg.rubrics_dir.as_deref())?,
            prompts: Prompts::load(cfg.prompts_dir.as_deref())?,
            store,
            dedup: DedupConfig {
                min_shared_chars: cfg.dedup.min_shared_chars,
                enabled: true,
            },
            max_group_size: cfg.server.max_group_size,
            max_prompt_bytes: cfg.server.max_prompt_bytes,
            inflight: key_locks::KeyLocks::default(),
            plans: memo::PlanMemo::default(),
        })
    }

    pub fn max_group_size(&self) -> usize {
        self.max_group_size
    }
    pub fn rubrics(&self) -> &RubricSet {
        &self.rubrics
    }
    pub fn judges(&self) -> impl Iterator<Item = &Judge> {
        self.judges.values().map(Arc::as_ref)
    }
    pub fn store(&self) -> &Arc<dyn VerdictStore> {
        &self.store
    }

    fn rubric<'a>(&'a self, r: &RubricRef) -> Result<Cow<'a, Rubric>, ScoreError> {
        Ok(match r {
            RubricRef::Named(n) => Cow::Borrowed(self.rubrics.get(n)?),
            RubricRef::Inline(spec) => {
                Cow::Owned(Rubric::from_spec(spec.clone(), "inline", "rubric")?)
            }
        })
    }

    /// The judges a request names, or the default judge.
    fn judge_names(&self, req: &ScoreRequest) -> Result<Vec<String>, ScoreError> {
        if !req.judges.is_empty() {
            return Ok(req.judges.clone());
        }
        match &self.default_judge {
            Some(d) => Ok(vec![d.clone()]),
            None => Err(ScoreError::NoDefaultJudge(
                self.judges.keys().cloned().collect::<Vec<_>>().join(", "),
            )),
        }
    }

    fn judge(&self, name: Option<&str>) -> Result<&Arc<Judge>, ScoreError> {
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

    /// Merges the rubric's verifiers with the request's (by name; the request's fields win),
    /// compiles them, and resolves the policy (the request's, else the rubric's, else weighted).
    fn plan(&self, rubric: &Rubric, req: &ScoreRequest) -> Result<RewardPlan, InputError> {
        let name_of = |v: &Value| {
            v.get("name")
                .and_then(Value::as_str)
                .or_else(|| v.get("type").and_then(Value::as_str))
                .map(str::to_string)
        };
        // Bounded before any work: an inline rubric comes from the request too.
        let total = rubric.verifiers.len() + req.verifiers.len();
        if total > MAX_VERIFIERS {
            return Err(InputError::new(
                "verifiers",
                format!("at most {MAX_VERIFIERS} verifiers, counting the rubric's, got {total}"),
            ));
        }
        let mut specs: Vec<(String, Value)> = rubric
            .verifiers
            .iter()
            .enumerate()
            .map(|(j, v)| {
                (
                    format!("rubric {:?} verifiers[{j}]", rubric.name),
                    v.clone(),
                )
            })
            .collect();
        // Each name's spec, so the merge is one lookup per request verifier.
        let mut by_name: HashMap<String, usize> = HashMap::new();
        for (j, (_, v)) in specs.iter().enumerate() {
            if let Some(n) = name_of(v) {
                by_name.entry(n).or_insert(j);
            }
        }
        for (i, v) in req.verifiers.iter().enumerate() {
            let at = format!("verifiers[{i}]");
            match name_of(v).and_then(|n| by_name.get(&n).copied()) {
                Some(j) => {
                    let (path, base) = &mut specs[j];
                    if let (Some(base), Some(over)) = (base.as_object_mut(), v.as_object()) {
                        base.extend(over.iter().map(|(k, x)| (k.clone(), x.clone())));
                    }
                    *path = at;
                }
                None => {
                    if let Some(n) = name_of(v) {
                        by_name.insert(n, specs.len());
                    }
                    specs.push((at, v.clone()));
                }
            }
        }
        let verifiers = specs
            .iter()
            .map(|(at, v)| Verifier::from_json(v, at))
            .collect::<Result<Vec<_>, _>>()?;
        let mut weights = BTreeMap::new();
        for (v, (at, _)) in verifiers.iter().zip(&specs) {
            if v.name() == JUDGE || v.name() == INDEPENDENT {
                return Err(InputError::new(
                    format!("{at}.name"),
                    format!("{:?} is reserved", v.name()),
                ));
            }
            if weights.insert(v.name().to_string(), v.weight()).is_some() {
                return Err(InputError::new(
                    at.clone(),
                    format!("a second verifier named {:?}", v.name()),
                ));
            }
        }
        let policy_at = if req.policy.is_some() {
            "policy"
        } else {
            "rubric policy"
        };
        let policy = req
            .policy
            .as_ref()
            .or(rubric.policy.as_ref())
            .cloned()
            .unwrap_or_default()
            .resolve(&weights)
            .map_err(|m| InputError::new(policy_at, m))?;
        Ok(RewardPlan { verifiers, policy })
    }

    /// Scores one group (`score_group`, in log.rs, wraps this and writes the scoring log).
    async fn score_group_unlogged(&self, req: &ScoreRequest) -> Result<ScoreResponse, ScoreError> {
        let rubric = self.rubric(&req.rubric)?;
        let plan = self.plan(&rubric, req)?;
        let n = req.trajectories.len();
        let mut scores: Vec<TrajectoryScore> = req
            .trajectories
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let mut s = TrajectoryScore {
                    trajectory_id: (i + 1).to_string(),
                    score: None,
                    explanation: String::new(),
                    components: BTreeMap::new(),
                    reasons: BTreeMap::new(),
                    items: Vec::new(),
                    disagreement: None,
                    judges: BTreeMap::new(),
                };
                for v in &plan.verifiers {
                    let o = v.check(t);
                    s.components.insert(v.name().to_string(), o.value);
                    s.reasons.insert(v.name().to_string(), o.reason);
                }
                if let Some(r) = t.reward {
                    s.components.insert(INDEPENDENT.into(), Some(r));
                }
                s
            })
            .collect();
        let mut usage = Usage::default();
        let mut judges = Vec::new();
        let mut template = None;
        let mut error = None;
        if plan.policy.needs_judge() {
            let names = self.judge_names(req)?;
            let panel = names
                .iter()
                .map(|n| self.judge(Some(n)))
                .collect::<Result<Vec<_>, _>>()?;
            judges = panel.iter().map(|j| j.info()).collect();
            let permutations = req.permutations.or(rubric.permutations).unwrap_or(1);
            // A group seen before is answered from its remembered plan when every verdict is
            // stored; otherwise (or the first time) it is planned and rendered in full.
            let memo_key = memo::memo_key(&rubric, &names, permutations, req);
            let cached = match self.plans.get(&memo_key) {
                Some(sk) => self
                    .judge_cached(&sk, &rubric, &panel, req.aggregate)
                    .await?
                    .map(|o| (o, sk.template_name, sk.template_version.clone())),
                None => None,
            };
            let judged = match cached {
                Some((outcome, name, version)) => {
                    template = Some(VersionInfo {
                        name: name.into(),
                        version,
                    });
                    Ok(outcome)
                }
                None => {
                    let p = self.plan_judging(&rubric, panel, permutations, req)?;
                    template = Some(VersionInfo {
                        name: p.skeleton.template_name.into(),
                        version: p.template_version(),
                    });
                    let judged = self.judge_group(&p, req.aggregate).await?;
                    if judged.is_ok() {
                        self.plans.insert(memo_key, p.skeleton.clone());
                    }
                    judged
                }
            };
            match judged {
                Ok(outcome) => {
                    usage = outcome.usage;
                    for (s, j) in scores.iter_mut().zip(outcome.scores) {
                        s.components.insert(JUDGE.into(), j.value);
                        s.explanation = j.explanation;
                        s.items = j.items;
                        s.disagreement = j.disagreement;
                        s.judges = j.per_judge;
                    }
                }
                // A full queue is "retry later" (429), never a null reward.
                Err(e)
                    if req.on_judge_error == OnJudgeError::Null
                        && !matches!(e, JudgeError::Overloaded(_)) =>
                {
                    tracing::warn!(error = %e, "judge failed; answering reward null as the request asked");
                    for s in &mut scores {
                        s.components.insert(JUDGE.into(), None);
                    }
                    error = Some(ErrorBody {
                        kind: e.error_type().into(),
                        message: e.to_string(),
                    });
                }
                Err(e) => return Err(e.into()),
            }
        }
        // A judge failure never becomes a score: with it, every reward is null.
        for s in &mut scores {
            s.score = if error.is_some() {
                None
            } else {
                plan.policy.combine(&s.components)
            };
        }
        let rewards: Vec<Option<f64>> = scores.iter().map(|s| s.score).collect();
        let scale = match req.scale_rewards {
            ScaleRewards::None => ScaleRewards::None,
            // For one group, the batch is the group.
            ScaleRewards::Group | ScaleRewards::Batch => ScaleRewards::Group,
        };
        let advantages = advantages(std::slice::from_ref(&rewards), scale).remove(0);
        debug_assert_eq!(advantages.len(), n);
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
            error,
        })
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
            out.push(r.map_err(|e| match e {
                ScoreError::Judge(j) => ScoreError::Judge(j.context(&format!("groups[{i}]"))),
                other => other,
            })?);
        }
        let rewards: Vec<Vec<Option<f64>>> = out.iter().map(|r| r.rewards.clone()).collect();
        let mut usage = Usage::default();
        for (r, adv) in out
            .iter_mut()
            .zip(advantages(&rewards, batch.scale_rewards))
        {
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
