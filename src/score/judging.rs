//! The judge's part of scoring a group: render, look up the cache, ask (with one structural
//! re-ask), store, and map the verdict back onto the request's trajectories.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{json, Map};

use super::response::{ItemOut, RenderResponse, Usage, VersionInfo};
use super::{ScoreError, ScoreRequest, Scorer};
use crate::dedup::JudgeInput;
use crate::judge::parse::{parse_verdict, ParseOptions};
use crate::judge::{verdict_schema, Judge, JudgeError, JudgeInfo};
use crate::prompt::{count_tokens, ChatMessage, RenderedPrompt, DEFAULT_PROMPT};
use crate::reward::checklist_score;
use crate::rubric::Rubric;
use crate::store::{StoredScore, StoredVerdict};
use crate::trajectory::content_hash;

/// Bumped whenever what a cached verdict means changes, so old entries are never reused.
pub const CACHE_SCHEMA: u32 = 1;

/// Everything computed before the cache lookup.
pub(super) struct Prepared<'a> {
    pub rubric: &'a Rubric,
    pub judge: &'a Arc<Judge>,
    pub input: JudgeInput,
    pub order: Vec<usize>,
    pub rendered: RenderedPrompt,
    pub key: String,
}

/// The judge component for one request trajectory.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct JudgeScore {
    pub value: Option<f64>,
    pub explanation: String,
    pub items: Vec<ItemOut>,
}

/// The judge's contribution to a group.
pub(super) struct JudgeOutcome {
    pub scores: Vec<JudgeScore>,
    pub usage: Usage,
}

impl Scorer {
    pub(super) fn prepare<'a>(
        &'a self,
        rubric: &'a Rubric,
        judge: &'a Arc<Judge>,
        req: &ScoreRequest,
    ) -> Result<Prepared<'a>, ScoreError> {
        let input = JudgeInput::build(&req.trajectories, &self.dedup);
        let order: Vec<usize> = (0..input.candidates.len()).collect();
        let rendered =
            self.prompts
                .render(DEFAULT_PROMPT, &input, &order, rubric, req.tools.as_ref())?;
        let key = cache_key(judge, &rendered, rubric, 0);
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
        let rubric = self.rubric(&req.rubric)?;
        let judge = self.judge(req.judge.as_deref())?;
        let p = self.prepare(&rubric, judge, req)?;
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
                name: rubric.name.clone(),
                version: rubric.version.clone(),
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
        let naive =
            self.prompts
                .render(DEFAULT_PROMPT, &naive, &order, p.rubric, req.tools.as_ref())?;
        Ok((
            count_tokens(&p.rendered.messages) as u64,
            count_tokens(&naive.messages) as u64,
        ))
    }

    /// The judge's scores for every request trajectory, from the cache or the judge. A store
    /// failure is a `ScoreError`; a judge failure is the inner `JudgeError`.
    pub(super) async fn judge_group(
        &self,
        p: &Prepared<'_>,
        req: &ScoreRequest,
    ) -> Result<Result<JudgeOutcome, JudgeError>, ScoreError> {
        let mut usage = Usage {
            distinct_trajectories: p.input.candidates.len() as u64,
            ..Usage::default()
        };
        let verdict = match self.store.get(&p.key).await? {
            Some(v) => {
                usage.cache_hits = 1;
                v
            }
            None => match self.ask_judge(p, req).await {
                Ok(v) => {
                    self.store.put(&p.key, &v).await?;
                    usage.judge_calls = u64::from(v.calls);
                    usage.prompt_tokens = v.prompt_tokens;
                    usage.completion_tokens = v.completion_tokens;
                    v
                }
                Err(e) => return Ok(Err(e)),
            },
        };
        usage.prompt_tokens_deduped = verdict.counted_prompt_tokens;
        usage.prompt_tokens_without_dedup = verdict.counted_prompt_tokens_without_dedup;
        usage.tokens_saved_by_dedup = verdict
            .counted_prompt_tokens_without_dedup
            .saturating_sub(verdict.counted_prompt_tokens);

        // Map back: prompt id → candidate → every request trajectory it stands for.
        let by_id: BTreeMap<&str, &StoredScore> =
            verdict.scores.iter().map(|s| (s.id.as_str(), s)).collect();
        let candidate_of = p.input.candidate_of();
        let position_of: BTreeMap<usize, usize> = p
            .order
            .iter()
            .enumerate()
            .map(|(pos, &c)| (c, pos))
            .collect();
        let scores = candidate_of
            .iter()
            .map(|c| {
                let s = by_id[p.rendered.ids[position_of[c]].as_str()];
                let value = if p.rubric.items.is_empty() {
                    s.score
                } else {
                    let met: BTreeMap<String, bool> = s.items.iter().cloned().collect();
                    Some(checklist_score(
                        &p.rubric.items,
                        &met,
                        p.rubric.required_cap,
                    ))
                };
                JudgeScore {
                    value,
                    explanation: s.explanation.clone(),
                    items: s
                        .items
                        .iter()
                        .map(|(id, met)| ItemOut {
                            id: id.clone(),
                            met: *met,
                        })
                        .collect(),
                }
            })
            .collect();
        Ok(Ok(JudgeOutcome { scores, usage }))
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
            expected_items: &item_ids,
        };
        let JudgeInfo { name, model } = p.judge.info();
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
                    messages.push(ChatMessage {
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
            model,
            created_unix: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
        })
    }
}

/// The cache key: a hash of everything that decides a verdict — cache schema, judge identity
/// and sampling settings, the rendered messages (which embed rubric and trajectories), the
/// template version, what of the rubric the judge reads, and the sample index. Policy and
/// verifiers are not in it: changing how rewards combine reuses the judge's verdicts.
pub fn cache_key(judge: &Judge, rendered: &RenderedPrompt, rubric: &Rubric, sample: u32) -> String {
    let mut m = Map::new();
    m.insert("schema".into(), json!(CACHE_SCHEMA));
    m.insert("judge".into(), judge.identity());
    m.insert("template".into(), json!(rendered.template_version));
    m.insert("rubric".into(), json!(rubric.judge_version));
    m.insert("messages".into(), json!(rendered.messages));
    m.insert("sample".into(), json!(sample));
    content_hash(&m)
}
