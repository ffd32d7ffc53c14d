//! The scoring pipeline: one group in, relative rewards out. Used alike by the daemon, the CLI,
//! re-scoring and training.
//!
//! request → [`ScoreRequest`] (validated) → dedup → prompt → cache lookup → judge (with one
//! structural re-ask) → verdict mapped back by id → rewards → advantages.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;
use serde_json::{json, Map, Value};

use crate::config::Config;
use crate::dedup::{DedupConfig, JudgeInput};
use crate::judge::parse::{parse_verdict, ParseOptions};
use crate::judge::{verdict_schema, Judge, JudgeError, JudgeInfo};
use crate::prompt::{count_tokens, PromptError, Prompts, RenderedPrompt, DEFAULT_PROMPT};
use crate::reward::{advantages, ScaleRewards};
use crate::rubric::{Rubric, RubricError, RubricSet, RubricSpec};
use crate::store::{StoreError, StoredScore, StoredVerdict, VerdictStore};
use crate::trajectory::{content_hash, parse_trajectories, InputError, Trajectory};

/// Bumped whenever what a cached verdict means changes, so old entries are never reused.
pub const CACHE_SCHEMA: u32 = 1;

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
}

/// A rubric named in the request or given inline.
#[derive(Debug, Clone, PartialEq)]
pub enum RubricRef {
    Named(String),
    Inline(RubricSpec),
}

/// What to do when the judge fails after its retries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnJudgeError {
    /// Fail the request with the judge's error (HTTP 502/503/504).
    #[default]
    Fail,
    /// Answer with `reward: null` for every trajectory ("no reward": advantage 0).
    Null,
}

/// A validated scoring request.
#[derive(Debug, Clone)]
pub struct ScoreRequest {
    pub trajectories: Vec<Trajectory>,
    pub rubric: RubricRef,
    pub judge: Option<String>,
    pub tools: Option<Value>,
    pub on_judge_error: OnJudgeError,
}

const REQUEST_FIELDS: &[&str] = &["trajectories", "rubric", "judge", "tools", "on_judge_error"];

impl ScoreRequest {
    /// Validates a request body. A bare array is taken as the trajectories.
    pub fn from_json(v: &Value, max_group_size: usize) -> Result<ScoreRequest, InputError> {
        let obj = match v {
            Value::Array(_) => {
                return Ok(ScoreRequest {
                    trajectories: parse_trajectories(v, max_group_size)?,
                    rubric: RubricRef::Named("default".into()),
                    judge: None,
                    tools: None,
                    on_judge_error: OnJudgeError::Fail,
                })
            }
            Value::Object(o) => o,
            _ => {
                return Err(InputError::new(
                    "body",
                    "expected a JSON object with \"trajectories\"",
                ))
            }
        };
        if let Some(k) = obj.keys().find(|k| !REQUEST_FIELDS.contains(&k.as_str())) {
            return Err(InputError::new(
                k.clone(),
                format!("unknown field (known: {})", REQUEST_FIELDS.join(", ")),
            ));
        }
        let trajectories = parse_trajectories(
            obj.get("trajectories")
                .ok_or_else(|| InputError::new("trajectories", "missing"))?,
            max_group_size,
        )?;
        let rubric = match obj.get("rubric") {
            None | Some(Value::Null) => RubricRef::Named("default".into()),
            Some(Value::String(s)) => RubricRef::Named(s.clone()),
            Some(o @ Value::Object(_)) => RubricRef::Inline(
                serde_json::from_value(o.clone())
                    .map_err(|e| InputError::new("rubric", e.to_string()))?,
            ),
            Some(_) => {
                return Err(InputError::new(
                    "rubric",
                    "expected a rubric name or an object with \"text\"",
                ))
            }
        };
        let judge = match obj.get("judge") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(Value::Array(a)) if a.len() == 1 && a[0].is_string() => {
                a[0].as_str().map(str::to_string)
            }
            Some(Value::Array(_)) => {
                return Err(InputError::new(
                    "judge",
                    "judge panels (more than one judge) are not supported yet",
                ))
            }
            Some(_) => return Err(InputError::new("judge", "expected a judge name")),
        };
        let tools = match obj.get("tools") {
            None | Some(Value::Null) => None,
            Some(t @ Value::Array(_)) => Some(t.clone()),
            Some(_) => {
                return Err(InputError::new(
                    "tools",
                    "expected an array of tool definitions",
                ))
            }
        };
        let on_judge_error = match obj.get("on_judge_error").map(|v| v.as_str()) {
            None | Some(Some("fail")) => OnJudgeError::Fail,
            Some(Some("null")) => OnJudgeError::Null,
            Some(_) => {
                return Err(InputError::new(
                    "on_judge_error",
                    "expected \"fail\" or \"null\"",
                ))
            }
        };
        Ok(ScoreRequest {
            trajectories,
            rubric,
            judge,
            tools,
            on_judge_error,
        })
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VersionInfo {
    pub name: String,
    pub version: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ErrorBody {
    #[serde(rename = "type")]
    pub kind: String,
    pub message: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TrajectoryScore {
    /// 1-based index of the trajectory in the request.
    pub trajectory_id: String,
    pub score: Option<f64>,
    pub explanation: String,
    pub components: BTreeMap<String, Option<f64>>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Usage {
    pub judge_calls: u64,
    pub cache_hits: u64,
    /// Tokens the judge reported for the calls made for this request (0 on a cache hit).
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// Our count of the judge prompt as sent, and of the same group sent without dedup.
    pub prompt_tokens_deduped: u64,
    pub prompt_tokens_without_dedup: u64,
    pub tokens_saved_by_dedup: u64,
    /// Distinct trajectories the judge read (identical ones are judged once).
    pub distinct_trajectories: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScoreResponse {
    pub rewards: Vec<Option<f64>>,
    pub advantages: Vec<f64>,
    pub scores: Vec<TrajectoryScore>,
    pub usage: Usage,
    pub rubric: VersionInfo,
    pub template: VersionInfo,
    pub judges: Vec<JudgeInfo>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorBody>,
}

/// What `render` returns: the exact judge messages and what dedup saved.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RenderResponse {
    pub messages: Vec<crate::prompt::ChatMessage>,
    pub trajectory_ids: Vec<String>,
    pub prompt_tokens: u64,
    pub prompt_tokens_without_dedup: u64,
    pub tokens_saved_by_dedup: u64,
    pub shared_prefix_messages: usize,
    pub shared_blocks: usize,
    pub distinct_trajectories: usize,
    pub rubric: VersionInfo,
    pub template: VersionInfo,
    pub cache_key: String,
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
}

#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error(transparent)]
    Rubric(#[from] RubricError),
    #[error(transparent)]
    Prompt(#[from] PromptError),
}

impl Scorer {
    pub fn new(cfg: &Config, store: Arc<dyn VerdictStore>) -> Result<Scorer, BuildError> {
        Ok(Scorer {
            judges: cfg
                .judges
                .iter()
                .map(|(name, j)| (name.clone(), Arc::new(Judge::from_config(name, j))))
                .collect(),
            default_judge: cfg.default_judge_name().map(str::to_string),
            rubrics: RubricSet::load(cfg.rubrics_dir.as_deref())?,
            prompts: Prompts::load(cfg.prompts_dir.as_deref())?,
            store,
            dedup: DedupConfig {
                min_shared_chars: cfg.dedup.min_shared_chars,
                enabled: true,
            },
            max_group_size: cfg.server.max_group_size,
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

    fn prepare<'a>(&'a self, req: &ScoreRequest) -> Result<Prepared<'a>, ScoreError> {
        let rubric = self.rubric(&req.rubric)?;
        let judge = self.judge(req.judge.as_deref())?;
        let input = JudgeInput::build(&req.trajectories, &self.dedup);
        let order: Vec<usize> = (0..input.candidates.len()).collect();
        let rendered =
            self.prompts
                .render(DEFAULT_PROMPT, &input, &order, &rubric, req.tools.as_ref())?;
        let key = cache_key(judge, &rendered, &rubric, 0);
        Ok(Prepared {
            rubric,
            judge,
            input,
            order,
            rendered,
            key,
        })
    }

    /// Renders the judge prompt for a request without calling a judge.
    pub fn render(&self, req: &ScoreRequest) -> Result<RenderResponse, ScoreError> {
        let p = self.prepare(req)?;
        let (deduped, without) = self.count_prompt_tokens(&p, req)?;
        Ok(RenderResponse {
            messages: p.rendered.messages.clone(),
            trajectory_ids: p.rendered.ids.clone(),
            prompt_tokens: deduped,
            prompt_tokens_without_dedup: without,
            tokens_saved_by_dedup: without.saturating_sub(deduped),
            shared_prefix_messages: p.input.prefix.len(),
            shared_blocks: p.input.shared.len(),
            distinct_trajectories: p.input.candidates.len(),
            rubric: VersionInfo {
                name: p.rubric.name.clone(),
                version: p.rubric.version.clone(),
            },
            template: VersionInfo {
                name: DEFAULT_PROMPT.into(),
                version: p.rendered.template_version.clone(),
            },
            cache_key: p.key.clone(),
        })
    }

    /// Token counts of the prompt as sent and as it would be without dedup.
    fn count_prompt_tokens(
        &self,
        p: &Prepared<'_>,
        req: &ScoreRequest,
    ) -> Result<(u64, u64), ScoreError> {
        let naive = JudgeInput::without_dedup(&req.trajectories);
        let order: Vec<usize> = (0..naive.candidates.len()).collect();
        let naive = self.prompts.render(
            DEFAULT_PROMPT,
            &naive,
            &order,
            &p.rubric,
            req.tools.as_ref(),
        )?;
        Ok((
            count_tokens(&p.rendered.messages) as u64,
            count_tokens(&naive.messages) as u64,
        ))
    }

    /// Scores one group.
    pub async fn score_group(&self, req: &ScoreRequest) -> Result<ScoreResponse, ScoreError> {
        let p = self.prepare(req)?;
        let mut usage = Usage {
            distinct_trajectories: p.input.candidates.len() as u64,
            ..Usage::default()
        };
        let verdict = match self.store.get(&p.key).await? {
            Some(v) => {
                usage.cache_hits = 1;
                Ok(v)
            }
            None => match self.ask_judge(&p, req).await {
                Ok(v) => {
                    self.store.put(&p.key, &v).await?;
                    usage.judge_calls = u64::from(v.calls);
                    usage.prompt_tokens = v.prompt_tokens;
                    usage.completion_tokens = v.completion_tokens;
                    Ok(v)
                }
                Err(e) => Err(e),
            },
        };
        let rubric = VersionInfo {
            name: p.rubric.name.clone(),
            version: p.rubric.version.clone(),
        };
        let template = VersionInfo {
            name: DEFAULT_PROMPT.into(),
            version: p.rendered.template_version.clone(),
        };
        let judges = vec![p.judge.info()];
        let n = req.trajectories.len();
        let verdict = match (verdict, req.on_judge_error) {
            (Ok(v), _) => v,
            (Err(e), OnJudgeError::Fail) => return Err(e.into()),
            (Err(e), OnJudgeError::Null) => {
                tracing::warn!(error = %e, "judge failed; answering reward null as the request asked");
                return Ok(ScoreResponse {
                    rewards: vec![None; n],
                    advantages: vec![0.0; n],
                    scores: (0..n)
                        .map(|i| TrajectoryScore {
                            trajectory_id: (i + 1).to_string(),
                            score: None,
                            explanation: String::new(),
                            components: BTreeMap::from([("judge".to_string(), None)]),
                        })
                        .collect(),
                    usage,
                    rubric,
                    template,
                    judges,
                    error: Some(ErrorBody {
                        kind: e.error_type().into(),
                        message: e.to_string(),
                    }),
                });
            }
        };
        usage.prompt_tokens_deduped = verdict.counted_prompt_tokens;
        usage.prompt_tokens_without_dedup = verdict.counted_prompt_tokens_without_dedup;
        usage.tokens_saved_by_dedup = verdict
            .counted_prompt_tokens_without_dedup
            .saturating_sub(verdict.counted_prompt_tokens);

        // Map the verdict back: prompt id → candidate → every request trajectory it stands for.
        let by_id: BTreeMap<&str, &StoredScore> =
            verdict.scores.iter().map(|s| (s.id.as_str(), s)).collect();
        let candidate_of = p.input.candidate_of();
        let position_of: BTreeMap<usize, usize> = p
            .order
            .iter()
            .enumerate()
            .map(|(pos, &c)| (c, pos))
            .collect();
        let mut scores = Vec::with_capacity(n);
        for (i, traj) in req.trajectories.iter().enumerate() {
            let id = &p.rendered.ids[position_of[&candidate_of[i]]];
            let s = by_id[id.as_str()];
            let mut components = BTreeMap::from([("judge".to_string(), s.score)]);
            if let Some(r) = traj.reward {
                components.insert("independent_reward".into(), Some(r));
            }
            scores.push(TrajectoryScore {
                trajectory_id: (i + 1).to_string(),
                score: s.score,
                explanation: s.explanation.clone(),
                components,
            });
        }
        let rewards: Vec<Option<f64>> = scores.iter().map(|s| s.score).collect();
        let advantages = advantages(std::slice::from_ref(&rewards), ScaleRewards::Group).remove(0);
        Ok(ScoreResponse {
            rewards,
            advantages,
            scores,
            usage,
            rubric,
            template,
            judges,
            error: None,
        })
    }

    /// Asks the judge for a verdict: one call, and one structural re-ask stating the exact
    /// problem if the first answer cannot be used. Bounded by the judge's verdict deadline.
    async fn ask_judge(
        &self,
        p: &Prepared<'_>,
        req: &ScoreRequest,
    ) -> Result<StoredVerdict, JudgeError> {
        let item_ids: Vec<String> = p.rubric.items.iter().map(|i| i.id.clone()).collect();
        let schema = verdict_schema(&p.rendered.ids, &item_ids);
        let opts = ParseOptions {
            expected_ids: &p.rendered.ids,
            allow_missing_score: !item_ids.is_empty(),
        };
        let name = &p.judge.info().name;
        let deadline = p.judge.deadline();
        let conversation = async {
            let mut messages = p.rendered.messages.clone();
            let first = p.judge.complete(&messages, &schema).await?;
            let (mut prompt_tokens, mut completion_tokens, mut calls) =
                (first.prompt_tokens, first.completion_tokens, 1u32);
            let parsed = match parse_verdict(&first.text, &opts) {
                Ok(scores) => scores,
                Err(problem) => {
                    tracing::info!(judge = %name, %problem, "verdict unusable; re-asking once");
                    let reask = self
                        .prompts
                        .render_reask(&problem.to_string(), &p.rendered.ids)
                        .map_err(|e| JudgeError::InvalidOutput(e.to_string()))?;
                    messages.push(crate::prompt::ChatMessage {
                        role: "assistant".into(),
                        content: first.text,
                    });
                    messages.push(reask);
                    let second = p.judge.complete(&messages, &schema).await?;
                    prompt_tokens += second.prompt_tokens;
                    completion_tokens += second.completion_tokens;
                    calls += 1;
                    parse_verdict(&second.text, &opts).map_err(|again| {
                        JudgeError::InvalidOutput(format!(
                            "judge {name:?} gave an unusable verdict twice; first: {problem}; after the re-ask: {again}"
                        ))
                    })?
                }
            };
            Ok::<_, JudgeError>((parsed, prompt_tokens, completion_tokens, calls))
        };
        let (parsed, prompt_tokens, completion_tokens, calls) =
            tokio::time::timeout(deadline, conversation)
                .await
                .map_err(|_| {
                    JudgeError::Timeout(format!(
                        "judge {name:?}: verdict deadline of {:.1}s passed",
                        deadline.as_secs_f64()
                    ))
                })??;
        let (counted, without) = self
            .count_prompt_tokens(p, req)
            .map_err(|e| JudgeError::InvalidOutput(e.to_string()))?;
        Ok(StoredVerdict {
            scores: parsed
                .into_iter()
                .map(|s| StoredScore {
                    id: s.trajectory_id,
                    score: s.score,
                    explanation: s.explanation,
                    items: s.items.into_iter().map(|i| (i.id, i.met)).collect(),
                })
                .collect(),
            prompt_tokens,
            completion_tokens,
            calls,
            counted_prompt_tokens: counted,
            counted_prompt_tokens_without_dedup: without,
            model: p.judge.info().model,
            created_unix: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
        })
    }
}

/// Everything computed before the cache lookup.
struct Prepared<'a> {
    rubric: Cow<'a, Rubric>,
    judge: &'a Arc<Judge>,
    input: JudgeInput,
    order: Vec<usize>,
    rendered: RenderedPrompt,
    key: String,
}

/// The cache key: a hash of everything that decides a verdict — cache schema, judge identity
/// and sampling settings, the rendered messages (which embed rubric and trajectories), the
/// template and rubric versions, and the sample index.
pub fn cache_key(judge: &Judge, rendered: &RenderedPrompt, rubric: &Rubric, sample: u32) -> String {
    let mut m = Map::new();
    m.insert("schema".into(), json!(CACHE_SCHEMA));
    m.insert("judge".into(), judge.identity());
    m.insert("template".into(), json!(rendered.template_version));
    m.insert("rubric".into(), json!(rubric.version));
    m.insert(
        "items".into(),
        json!(rubric.items.iter().map(|i| &i.id).collect::<Vec<_>>()),
    );
    m.insert("messages".into(), json!(rendered.messages));
    m.insert("sample".into(), json!(sample));
    content_hash(&m)
}
