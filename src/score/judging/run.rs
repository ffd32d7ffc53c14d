//! Running: every sample of a plan through the cache, in-process and cross-replica
//! single-flight (claims), and the judge when no verdict is stored; a stored verdict counts
//! only when it covers every id (and checklist item) of its sample.

use std::collections::BTreeMap;

use serde_json::{json, Map};

use super::aggregate::aggregate_samples;
use super::{JudgeOutcome, Plan, SampleResult, SampleScore, Skeleton};
use crate::domain::prompt::RenderedPrompt;
use crate::domain::rubric::{checklist_score, Rubric};
use crate::domain::trajectory::content_hash;
use crate::judge::{Judge, JudgeFailure, Panel, Spent};
use crate::score::judge_stage::JudgeStage;
use crate::score::response::{ItemOut, Usage};
use crate::score::{ScoreError, CACHE_SCHEMA};
use crate::store::{StoredScore, StoredVerdict};

impl JudgeStage {
    /// Runs every sample (cache, single-flight, judge) and aggregates. A judge failure is
    /// [`ScoreError::Judge`] with the first sample's failure, carrying every call the group
    /// spent: the failed samples' and those of the samples judged beside them, whose verdicts
    /// are stored but not used by this reply.
    pub(in crate::score) async fn judge_group(
        &self,
        plan: &Plan<'_>,
    ) -> Result<JudgeOutcome, ScoreError> {
        let results = futures::future::join_all(
            (0..plan.skeleton.samples.len()).map(|i| self.run_sample(plan, i)),
        )
        .await;
        let mut per_sample = Vec::with_capacity(results.len());
        let mut failure: Option<JudgeFailure> = None;
        let mut spent = Spent::default();
        for r in results {
            match r {
                Ok(s) => {
                    spent.add(s.usage.spent());
                    per_sample.push(s)
                }
                Err(e) => {
                    let f = e.judge_failure()?;
                    match &mut failure {
                        Some(first) => first.spent.add(f.spent),
                        None => failure = Some(f),
                    }
                }
            }
        }
        if let Some(f) = failure {
            return Err(f.after(spent).into());
        }
        Ok(aggregate_samples(
            &plan.skeleton,
            plan.rubric,
            &plan.panel,
            per_sample,
        ))
    }

    /// The fast path of a group seen before: every sample's verdict from the store, nothing
    /// rendered. `None` when any verdict is missing (the caller then takes the full path).
    pub(in crate::score) async fn judge_cached(
        &self,
        skeleton: &Skeleton,
        rubric: &Rubric,
        panel: &Panel,
    ) -> Result<Option<JudgeOutcome>, ScoreError> {
        let mut per_sample = Vec::with_capacity(skeleton.samples.len());
        for s in &skeleton.samples {
            let stored = self.store.get(&s.key).await?;
            let Some(verdict) = stored.filter(|v| covers(rubric, &s.ids, v)) else {
                return Ok(None);
            };
            let mut usage = Usage {
                cache_hits: 1,
                ..Usage::default()
            };
            add_counted_tokens(&mut usage, &verdict);
            metrics::counter!("gavel_verdicts_total", "source" => "cache").increment(1);
            per_sample.push(sample_result(rubric, &s.ids, &verdict, usage));
        }
        Ok(Some(aggregate_samples(skeleton, rubric, panel, per_sample)))
    }

    /// One sample's verdict: from the store, or from the judge under the key's lock.
    async fn run_sample(&self, plan: &Plan<'_>, i: usize) -> Result<SampleResult, ScoreError> {
        let s = &plan.skeleton.samples[i];
        let judge = &plan.panel.members()[s.judge];
        let mut usage = Usage::default();
        // A stored verdict that does not cover this sample (a corrupted or foreign entry) is a
        // miss: judged again and overwritten, never indexed blindly.
        let usable = |v: Option<StoredVerdict>| v.filter(|v| covers(plan.rubric, &s.ids, v));
        let verdict = match usable(self.store.get(&s.key).await?) {
            Some(v) => {
                usage.cache_hits = 1;
                v
            }
            None => {
                let _guard = self.inflight.lock(&s.key).await;
                // Other replicas on a shared store: wait for theirs, or claim the judge call.
                let _claim = self.store.claim(&s.key).await?;
                match usable(self.store.get(&s.key).await?) {
                    Some(v) => {
                        usage.cache_hits = 1;
                        v
                    }
                    None => match self.ask_judge(plan, i).await {
                        Ok(v) => {
                            if v.clamped_scores > 0 {
                                metrics::counter!("gavel_judge_scores_clamped_total",
                                    "judge" => judge.settings().info.name.clone())
                                .increment(u64::from(v.clamped_scores));
                            }
                            self.store.put(&s.key, &v).await?;
                            usage.judge_calls = u64::from(v.calls);
                            usage.prompt_tokens = v.prompt_tokens;
                            usage.completion_tokens = v.completion_tokens;
                            usage.cached_prompt_tokens = v.cached_prompt_tokens;
                            usage.forward_passes = v.forward_passes;
                            usage.retries = v.retries.clone();
                            usage.cost = judge
                                .settings()
                                .prices
                                .cost(v.prompt_tokens, v.completion_tokens);
                            v
                        }
                        Err(f) => {
                            let name = judge.settings().info.name.clone();
                            metrics::counter!("gavel_judge_errors_total",
                                "judge" => name.clone(), "type" => f.error_type().as_str())
                            .increment(1);
                            count_failed(&name, f.spent);
                            return Err(f.into());
                        }
                    },
                }
            }
        };
        metrics::counter!("gavel_verdicts_total", "source" => if usage.cache_hits > 0 { "cache" } else { "judge" })
            .increment(1);
        add_counted_tokens(&mut usage, &verdict);
        Ok(sample_result(plan.rubric, &s.ids, &verdict, usage))
    }
}

/// Counts on `/metrics` what a failed verdict spent, apart from the calls that gave verdicts.
fn count_failed(judge: &str, spent: Spent) {
    metrics::counter!("gavel_judge_failed_calls_total", "judge" => judge.to_string())
        .increment(spent.calls);
    metrics::counter!("gavel_judge_failed_tokens_total", "judge" => judge.to_string(), "kind" => "prompt")
        .increment(spent.prompt_tokens);
    metrics::counter!("gavel_judge_failed_tokens_total", "judge" => judge.to_string(), "kind" => "completion")
        .increment(spent.completion_tokens);
}

/// Whether `verdict` has a score entry for every id of the sample and, under a checklist
/// rubric, a verdict on every item of each.
fn covers(rubric: &Rubric, ids: &[String], verdict: &StoredVerdict) -> bool {
    let by_id: BTreeMap<&str, &StoredScore> =
        verdict.scores.iter().map(|x| (x.id.as_str(), x)).collect();
    ids.iter().all(|id| {
        by_id.get(id.as_str()).is_some_and(|x| {
            rubric
                .items
                .iter()
                .all(|item| x.items.iter().any(|(i, _)| *i == item.id))
        })
    })
}

/// Usage figures a stored verdict carries whether or not this request paid for it.
fn add_counted_tokens(usage: &mut Usage, verdict: &StoredVerdict) {
    usage.clamped_scores = u64::from(verdict.clamped_scores);
    usage.prompt_tokens_deduped = verdict.counted_prompt_tokens;
    usage.prompt_tokens_without_dedup = verdict.counted_prompt_tokens_without_dedup;
    usage.tokens_saved_by_dedup = verdict
        .counted_prompt_tokens_without_dedup
        .saturating_sub(verdict.counted_prompt_tokens);
}

/// A verdict's scores for the sample's candidates, in prompt order, mapped by id.
fn sample_result(
    rubric: &Rubric,
    ids: &[String],
    verdict: &StoredVerdict,
    usage: Usage,
) -> SampleResult {
    let by_id: BTreeMap<&str, &StoredScore> =
        verdict.scores.iter().map(|x| (x.id.as_str(), x)).collect();
    let scores = ids
        .iter()
        .map(|id| {
            // `covers` checked every id before this verdict was used.
            let x = by_id[id.as_str()];
            let value = if rubric.items.is_empty() {
                x.score
            } else {
                let met: BTreeMap<String, bool> = x.items.iter().cloned().collect();
                Some(checklist_score(&rubric.items, &met, rubric.required_cap))
            };
            let items = x
                .items
                .iter()
                .map(|(id, met)| ItemOut {
                    id: id.clone(),
                    met: *met,
                })
                .collect();
            SampleScore {
                value,
                explanation: x.explanation.clone(),
                items,
                confidence: x.confidence,
            }
        })
        .collect();
    SampleResult { scores, usage }
}

/// The cache key: a hash of everything that decides a verdict — cache schema, judge identity
/// and sampling settings, the rendered messages (which embed rubric, trajectories and their
/// order), the template version, what of the rubric the judge reads, and the sample index.
/// Policy and verifiers are not in it: changing how rewards combine reuses the judge's verdicts.
pub fn cache_key(
    judge: &dyn Judge,
    rendered: &RenderedPrompt,
    rubric: &Rubric,
    sample: u32,
) -> String {
    let mut m = Map::new();
    m.insert("schema".into(), json!(CACHE_SCHEMA));
    m.insert("judge".into(), judge.identity());
    m.insert("template".into(), json!(rendered.template_version));
    m.insert("rubric".into(), json!(rubric.judge_version));
    m.insert("messages".into(), json!(rendered.messages));
    m.insert("sample".into(), json!(sample));
    content_hash(&m)
}
