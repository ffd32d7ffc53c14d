//! The judge's part of scoring a group. One group may be judged as several *samples*: each
//! judge of a panel × each of K candidate orders × each chunk of a group too large for the
//! judge's context. Every sample is its own cached verdict; concurrent requests that need the
//! same verdict make one judge call (single-flight).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{json, Map};

use super::probes::{plan_probes, probe_key, ProbePlan};
use super::response::{ItemOut, RenderResponse, Usage, VersionInfo};
use super::samples::{
    chunk_candidates, combine_judges, mean_std, merge_chunks, permutation_orders, Aggregate,
};
use super::{ScoreError, ScoreRequest, Scorer, CACHE_SCHEMA};
use crate::dedup::JudgeInput;
use crate::judge::{Judge, JudgeError, JudgeInfo};
use crate::prompt::{count_tokens, quote_json, ChatMessage, RenderedPrompt, DEFAULT_PROMPT};
use crate::rubric::checklist_score;
use crate::rubric::Rubric;
use crate::store::{StoredScore, StoredVerdict};
use crate::trajectory::content_hash;
use crate::verdict::verdict_schema;
use crate::verdict::{parse_verdict, ParseOptions};

mod aggregate;
mod ask;

use aggregate::aggregate_samples;

/// Anchor candidates shared by every chunk of a split group.
const CHUNK_ANCHORS: usize = 2;

/// One prompt to one judge, as far as the store is concerned: which candidates it shows in which
/// order, the ids the judge sees for them, and its cache key.
#[derive(Debug, Clone)]
pub(super) struct SampleSpec {
    judge: usize,
    order_index: u32,
    /// Candidate indices in prompt order.
    order: Vec<usize>,
    /// The ids the judge sees, in prompt order.
    ids: Vec<String>,
    key: String,
}

/// A plan without its rendered prompts: all a request needs when every verdict is cached.
#[derive(Debug)]
pub(super) struct Skeleton {
    samples: Vec<SampleSpec>,
    chunks: usize,
    distinct: usize,
    /// For each request trajectory, its candidate.
    candidate_of: Vec<usize>,
    /// The template (first judge's mode) and its version.
    pub template_name: &'static str,
    pub template_version: String,
}

impl Skeleton {
    #[cfg(test)]
    pub(super) fn empty_for_tests() -> Skeleton {
        Skeleton {
            samples: Vec::new(),
            chunks: 1,
            distinct: 0,
            candidate_of: Vec::new(),
            template_name: DEFAULT_PROMPT,
            template_version: String::new(),
        }
    }
}

/// Everything computed before the cache lookups.
pub(super) struct Plan<'a> {
    pub rubric: &'a Rubric,
    pub judges: Vec<&'a Arc<Judge>>,
    pub input: JudgeInput,
    pub skeleton: Arc<Skeleton>,
    /// The rendered prompt of each sample (parallel to `skeleton.samples`); for a
    /// probability-mode sample, the listwise prompt of the group (its token figures).
    rendered: Vec<Arc<RenderedPrompt>>,
    /// What each probability-mode sample asks (`None`: listwise).
    probes: Vec<Option<ProbePlan>>,
}

impl Plan<'_> {
    pub fn template_version(&self) -> String {
        self.skeleton.template_version.clone()
    }
}

/// The judge component for one request trajectory.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct JudgeScore {
    pub value: Option<f64>,
    pub explanation: String,
    pub items: Vec<ItemOut>,
    /// Std of the score across orders and judges; `None` with a single sample.
    pub disagreement: Option<f64>,
    /// Each panel judge's score (only with more than one judge).
    pub per_judge: BTreeMap<String, Option<f64>>,
}

pub(super) struct JudgeOutcome {
    pub scores: Vec<JudgeScore>,
    pub usage: Usage,
}

/// One (judge, order)'s chunks: each chunk's candidates and their scores.
type ChunkScores = Vec<(Vec<usize>, Vec<Option<f64>>)>;

/// What one sample's verdict says about its candidates.
struct SampleResult {
    /// Per candidate in the sample's order: (judge component, explanation, items).
    scores: Vec<(Option<f64>, String, Vec<ItemOut>)>,
    usage: Usage,
}

impl Scorer {
    /// Plans the samples for `judges` × `permutations` orders × chunks.
    pub(super) fn plan_judging<'a>(
        &'a self,
        rubric: &'a Rubric,
        judges: Vec<&'a Arc<Judge>>,
        permutations: u32,
        req: &ScoreRequest,
    ) -> Result<Plan<'a>, ScoreError> {
        let input = JudgeInput::build(&req.trajectories, &self.dedup);
        let m = input.candidates.len();
        let all: Vec<usize> = (0..m).collect();
        let identity = self.prompts.render(
            DEFAULT_PROMPT,
            &input,
            &all,
            rubric,
            req.tools.as_ref(),
            req.reference.as_deref(),
        )?;
        // Orders are seeded by the group's content; hashing the prompt is only worth it when
        // there is more than one order to draw.
        let seed = if permutations > 1 {
            content_hash(&identity.messages)
        } else {
            String::new()
        };
        let mut renders: HashMap<Vec<usize>, Arc<RenderedPrompt>> = HashMap::new();
        renders.insert(all.clone(), Arc::new(identity));
        let mut samples = Vec::new();
        let mut prompts = Vec::new();
        let mut probes = Vec::new();
        let mut template: Option<(&'static str, String)> = None;
        let mut max_chunks = 1;
        for (j, judge) in judges.iter().enumerate() {
            let mode = req.judge_mode.unwrap_or(judge.mode());
            if mode.reads_probabilities() {
                let bad = |problem: String| {
                    ScoreError::Input(crate::trajectory::InputError::new("judge_mode", problem))
                };
                if !judge.reads_probabilities() {
                    return Err(bad(format!(
                        "\"{}\" reads token probabilities, which judge {:?} cannot give: use a \
                         local judge or \"listwise\"",
                        mode.name(),
                        judge.info().name
                    )));
                }
                if !rubric.items.is_empty() {
                    return Err(bad(format!(
                        "rubric {:?} is a checklist, which is judged listwise only",
                        rubric.name
                    )));
                }
                let probe = plan_probes(
                    &self.prompts,
                    mode,
                    &input,
                    rubric,
                    req.tools.as_ref(),
                    req.reference.as_deref(),
                    judge.pairwise_opponents(),
                )?;
                for p in &probe.prompts {
                    self.check_prompt_size(p)?;
                }
                template.get_or_insert((mode.prompt(), probe.template_version.clone()));
                samples.push(SampleSpec {
                    judge: j,
                    order_index: 0,
                    order: all.clone(),
                    ids: renders[&all].ids.clone(),
                    key: probe_key(judge, &probe, rubric),
                });
                prompts.push(renders[&all].clone());
                probes.push(Some(probe));
                continue;
            }
            template.get_or_insert((DEFAULT_PROMPT, renders[&all].template_version.clone()));
            let chunks = self.chunks_for(judge, &input, &renders[&all])?;
            max_chunks = max_chunks.max(chunks.len());
            for (c, members) in chunks.iter().enumerate() {
                for (k, perm) in
                    permutation_orders(members.len(), permutations, &format!("{seed}/{c}"))
                        .into_iter()
                        .enumerate()
                {
                    let order: Vec<usize> = perm.iter().map(|&i| members[i]).collect();
                    let rendered = match renders.get(&order) {
                        Some(r) => r.clone(),
                        None => {
                            let r = Arc::new(self.prompts.render(
                                DEFAULT_PROMPT,
                                &input,
                                &order,
                                rubric,
                                req.tools.as_ref(),
                                req.reference.as_deref(),
                            )?);
                            renders.insert(order.clone(), r.clone());
                            r
                        }
                    };
                    self.check_prompt_size(&rendered)?;
                    let key = cache_key(judge, &rendered, rubric, k as u32);
                    samples.push(SampleSpec {
                        judge: j,
                        order_index: k as u32,
                        order,
                        ids: rendered.ids.clone(),
                        key,
                    });
                    prompts.push(rendered);
                    probes.push(None);
                }
            }
        }
        let skeleton = Arc::new(Skeleton {
            samples,
            chunks: max_chunks,
            distinct: input.candidates.len(),
            candidate_of: input.candidate_of(),
            template_name: template.as_ref().map_or(DEFAULT_PROMPT, |t| t.0),
            template_version: template.map_or_else(String::new, |t| t.1),
        });
        Ok(Plan {
            rubric,
            judges,
            input,
            skeleton,
            rendered: prompts,
            probes,
        })
    }

    /// Refuses a judge call whose prompt is over `max_prompt_bytes` (checked per call: the
    /// orders of a group are the same size, and a chunk is smaller than the whole).
    fn check_prompt_size(&self, r: &RenderedPrompt) -> Result<(), ScoreError> {
        let bytes: usize = r.messages.iter().map(|m| m.content.len()).sum();
        if bytes > self.max_prompt_bytes {
            return Err(ScoreError::PromptTooLarge {
                bytes,
                max: self.max_prompt_bytes,
            });
        }
        Ok(())
    }

    /// The chunks a judge reads the group in: one unless the prompt would overflow the judge's
    /// `context_tokens`.
    fn chunks_for(
        &self,
        judge: &Judge,
        input: &JudgeInput,
        full: &RenderedPrompt,
    ) -> Result<Vec<Vec<usize>>, ScoreError> {
        let m = input.candidates.len();
        let all = vec![(0..m).collect::<Vec<_>>()];
        let Some(context) = judge.context_tokens() else {
            return Ok(all);
        };
        let budget = context.saturating_sub(judge.max_tokens() as usize);
        // A token is at least one byte: a prompt of fewer bytes than the budget fits for sure.
        let bytes: usize = full.messages.iter().map(|m| m.content.len()).sum();
        if bytes <= budget || count_tokens(&full.messages) <= budget {
            return Ok(all);
        }
        let bpe = tiktoken_rs::o200k_base_singleton();
        let cost: Vec<usize> = input
            .candidates
            .iter()
            .map(|c| {
                c.messages
                    .iter()
                    .map(|msg| bpe.encode_ordinary(&quote_json(msg)).len() + 1)
                    .sum::<usize>()
                    + 8
            })
            .collect();
        let base = count_tokens(&full.messages).saturating_sub(cost.iter().sum());
        chunk_candidates(&cost, base, budget, CHUNK_ANCHORS).ok_or_else(|| {
            ScoreError::Input(crate::trajectory::InputError::new(
                "trajectories",
                format!(
                    "the group cannot be split to fit judge {:?}'s context_tokens ({context}): \
                     a chunk of {CHUNK_ANCHORS} anchors and one more trajectory is already too long",
                    judge.info().name
                ),
            ))
        })
    }

    /// Renders the judge prompt for a request without calling a judge.
    pub fn render(&self, req: &ScoreRequest) -> Result<RenderResponse, ScoreError> {
        let rubric = self.rubric(&req.rubric)?;
        let names = self.judge_names(req)?;
        let judge = self.judge(Some(&names[0]))?;
        let plan = self.plan_judging(&rubric, vec![judge], 1, req)?;
        let s = &plan.skeleton.samples[0];
        // A probability mode asks several prompts: show the first (the first trajectory alone,
        // or the first pair) under its own template, and say how many there are.
        let (rendered, template, prompts_asked) = match &plan.probes[0] {
            Some(probe) => (
                probe.prompts.first().unwrap_or(&plan.rendered[0]),
                VersionInfo {
                    name: probe.mode.prompt().into(),
                    version: probe.template_version.clone(),
                },
                Some(probe.prompts.len()),
            ),
            None => (
                &*plan.rendered[0],
                VersionInfo {
                    name: DEFAULT_PROMPT.into(),
                    version: plan.rendered[0].template_version.clone(),
                },
                None,
            ),
        };
        let deduped = count_tokens(&rendered.messages) as u64;
        let without = self.count_without_dedup(&plan, &s.order, req)?;
        Ok(RenderResponse {
            messages: rendered.messages.clone(),
            trajectory_ids: rendered.ids.clone(),
            prompt_tokens: deduped,
            prompt_tokens_without_dedup: without,
            tokens_saved_by_dedup: without.saturating_sub(deduped),
            shared_prefix_messages: plan.input.prefix.len(),
            shared_blocks: plan.input.shared.len(),
            distinct_trajectories: plan.input.candidates.len(),
            rubric: VersionInfo {
                name: rubric.name.clone(),
                version: rubric.version.clone(),
            },
            template,
            prompts_asked,
            cache_key: s.key.clone(),
        })
    }

    /// Tokens of the same candidates' trajectories sent whole, with no dedup (exact, for
    /// `render`; scoring estimates it instead, see `ask::estimate_tokens`).
    fn count_without_dedup(
        &self,
        plan: &Plan<'_>,
        order: &[usize],
        req: &ScoreRequest,
    ) -> Result<u64, ScoreError> {
        let members: Vec<_> = order
            .iter()
            .flat_map(|&c| {
                plan.input.candidates[c]
                    .members
                    .iter()
                    .map(|&i| req.trajectories[i].clone())
            })
            .collect();
        let naive = JudgeInput::without_dedup(&members);
        let all: Vec<usize> = (0..naive.candidates.len()).collect();
        let naive = self.prompts.render(
            DEFAULT_PROMPT,
            &naive,
            &all,
            plan.rubric,
            req.tools.as_ref(),
            req.reference.as_deref(),
        )?;
        Ok(count_tokens(&naive.messages) as u64)
    }

    /// Runs every sample (cache, single-flight, judge) and aggregates. A store failure is a
    /// `ScoreError`; a judge failure is the inner `JudgeError`.
    pub(super) async fn judge_group(
        &self,
        plan: &Plan<'_>,
        aggregate: Aggregate,
    ) -> Result<Result<JudgeOutcome, JudgeError>, ScoreError> {
        let results = futures::future::join_all(
            (0..plan.skeleton.samples.len()).map(|i| self.run_sample(plan, i)),
        )
        .await;
        let mut per_sample = Vec::with_capacity(results.len());
        for r in results {
            match r? {
                Ok(s) => per_sample.push(s),
                Err(e) => return Ok(Err(e)),
            }
        }
        Ok(Ok(aggregate_samples(
            &plan.skeleton,
            plan.rubric,
            &plan.judges,
            per_sample,
            aggregate,
        )))
    }

    /// The fast path of a group seen before: every sample's verdict from the store, nothing
    /// rendered. `None` when any verdict is missing (the caller then takes the full path).
    pub(super) async fn judge_cached(
        &self,
        skeleton: &Skeleton,
        rubric: &Rubric,
        judges: &[&Arc<Judge>],
        aggregate: Aggregate,
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
        Ok(Some(aggregate_samples(
            skeleton, rubric, judges, per_sample, aggregate,
        )))
    }

    /// One sample's verdict: from the store, or from the judge under the key's lock.
    async fn run_sample(
        &self,
        plan: &Plan<'_>,
        i: usize,
    ) -> Result<Result<SampleResult, JudgeError>, ScoreError> {
        let s = &plan.skeleton.samples[i];
        let judge = plan.judges[s.judge];
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
                                    "judge" => judge.info().name)
                                .increment(u64::from(v.clamped_scores));
                            }
                            self.store.put(&s.key, &v).await?;
                            usage.judge_calls = u64::from(v.calls);
                            usage.prompt_tokens = v.prompt_tokens;
                            usage.completion_tokens = v.completion_tokens;
                            usage.cached_prompt_tokens = v.cached_prompt_tokens;
                            usage.forward_passes = v.forward_passes;
                            usage.retries = v.retries.clone();
                            usage.cost = judge.cost(v.prompt_tokens, v.completion_tokens);
                            v
                        }
                        Err(e) => {
                            metrics::counter!("gavel_judge_errors_total",
                                "judge" => judge.info().name, "type" => e.error_type())
                            .increment(1);
                            return Ok(Err(e));
                        }
                    },
                }
            }
        };
        metrics::counter!("gavel_verdicts_total", "source" => if usage.cache_hits > 0 { "cache" } else { "judge" })
            .increment(1);
        add_counted_tokens(&mut usage, &verdict);
        Ok(Ok(sample_result(plan.rubric, &s.ids, &verdict, usage)))
    }
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
            (value, x.explanation.clone(), items)
        })
        .collect();
    SampleResult { scores, usage }
}

/// The cache key: a hash of everything that decides a verdict — cache schema, judge identity
/// and sampling settings, the rendered messages (which embed rubric, trajectories and their
/// order), the template version, what of the rubric the judge reads, and the sample index.
/// Policy and verifiers are not in it: changing how rewards combine reuses the judge's verdicts.
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
