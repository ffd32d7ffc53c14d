//! The judge's part of scoring a group. One group may be judged as several *samples*: each
//! judge of a panel × each of K candidate orders × each chunk of a group too large for the
//! judge's context. Every sample is its own cached verdict; concurrent requests that need the
//! same verdict make one judge call (single-flight).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{json, Map};

use super::response::{ItemOut, RenderResponse, Usage, VersionInfo};
use super::samples::{
    chunk_candidates, combine_judges, mean_std, merge_chunks, permutation_orders, Aggregate,
};
use super::{ScoreError, ScoreRequest, Scorer};
use crate::dedup::JudgeInput;
use crate::judge::parse::{parse_verdict, ParseOptions};
use crate::judge::{verdict_schema, Judge, JudgeError, JudgeInfo};
use crate::prompt::{count_tokens, quote_json, ChatMessage, RenderedPrompt, DEFAULT_PROMPT};
use crate::reward::checklist_score;
use crate::rubric::Rubric;
use crate::store::{StoredScore, StoredVerdict};
use crate::trajectory::content_hash;

/// Bumped whenever what a cached verdict means changes, so old entries are never reused.
pub const CACHE_SCHEMA: u32 = 1;
/// Anchor candidates shared by every chunk of a split group.
const CHUNK_ANCHORS: usize = 2;

/// Per-key locks: the first request that misses the cache for a key asks the judge while the
/// others wait, then find the verdict in the store.
#[derive(Debug, Default)]
pub(super) struct KeyLocks {
    map: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

struct KeyGuard<'a> {
    locks: &'a KeyLocks,
    key: String,
    guard: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl Drop for KeyGuard<'_> {
    fn drop(&mut self) {
        drop(self.guard.take());
        let mut map = self.locks.map.lock().expect("lock map poisoned");
        // Forget the lock once nobody holds or awaits it.
        if map
            .get(&self.key)
            .is_some_and(|l| Arc::strong_count(l) == 1)
        {
            map.remove(&self.key);
        }
    }
}

impl KeyLocks {
    async fn lock(&self, key: &str) -> KeyGuard<'_> {
        let lock = self
            .map
            .lock()
            .expect("lock map poisoned")
            .entry(key.to_string())
            .or_default()
            .clone();
        let guard = lock.lock_owned().await;
        KeyGuard {
            locks: self,
            key: key.to_string(),
            guard: Some(guard),
        }
    }
}

/// One prompt to one judge.
struct Sample<'a> {
    judge: usize,
    order_index: u32,
    /// Candidate indices in prompt order.
    order: Vec<usize>,
    rendered: Arc<RenderedPrompt>,
    judge_ref: &'a Arc<Judge>,
    key: String,
}

/// Everything computed before the cache lookups.
pub(super) struct Plan<'a> {
    pub rubric: &'a Rubric,
    pub judges: Vec<&'a Arc<Judge>>,
    pub input: JudgeInput,
    samples: Vec<Sample<'a>>,
    chunks: usize,
}

impl Plan<'_> {
    pub fn template_version(&self) -> String {
        self.samples[0].rendered.template_version.clone()
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
        let identity =
            self.prompts
                .render(DEFAULT_PROMPT, &input, &all, rubric, req.tools.as_ref())?;
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
        let mut max_chunks = 1;
        for (j, judge) in judges.iter().enumerate() {
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
                            )?);
                            renders.insert(order.clone(), r.clone());
                            r
                        }
                    };
                    let key = cache_key(judge, &rendered, rubric, k as u32);
                    samples.push(Sample {
                        judge: j,
                        order_index: k as u32,
                        order,
                        rendered,
                        judge_ref: judge,
                        key,
                    });
                }
            }
        }
        Ok(Plan {
            rubric,
            judges,
            input,
            samples,
            chunks: max_chunks,
        })
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
        let s = &plan.samples[0];
        let deduped = count_tokens(&s.rendered.messages) as u64;
        let without = self.count_without_dedup(&plan, &s.order, req)?;
        Ok(RenderResponse {
            messages: s.rendered.messages.clone(),
            trajectory_ids: s.rendered.ids.clone(),
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
            template: VersionInfo {
                name: DEFAULT_PROMPT.into(),
                version: s.rendered.template_version.clone(),
            },
            cache_key: s.key.clone(),
        })
    }

    /// Tokens of the same candidates' trajectories sent whole, with no dedup.
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
        )?;
        Ok(count_tokens(&naive.messages) as u64)
    }

    /// Runs every sample (cache, single-flight, judge) and aggregates. A store failure is a
    /// `ScoreError`; a judge failure is the inner `JudgeError`.
    pub(super) async fn judge_group(
        &self,
        plan: &Plan<'_>,
        req: &ScoreRequest,
        aggregate: Aggregate,
    ) -> Result<Result<JudgeOutcome, JudgeError>, ScoreError> {
        let results =
            futures::future::join_all(plan.samples.iter().map(|s| self.run_sample(plan, s, req)))
                .await;
        let mut per_sample = Vec::with_capacity(results.len());
        for r in results {
            match r? {
                Ok(s) => per_sample.push(s),
                Err(e) => return Ok(Err(e)),
            }
        }
        let mut usage = Usage {
            distinct_trajectories: plan.input.candidates.len() as u64,
            ..Usage::default()
        };
        for s in &per_sample {
            usage.add(&s.usage);
        }
        usage.chunks = plan.chunks as u64;
        let m = plan.input.candidates.len();
        let shift = plan.rubric.items.is_empty();
        // (judge, order) → per-candidate scores, merging chunks.
        let mut by_judge_order: BTreeMap<(usize, u32), ChunkScores> = BTreeMap::new();
        let mut first_seen: Vec<Option<(String, Vec<ItemOut>)>> = vec![None; m];
        for (s, r) in plan.samples.iter().zip(&per_sample) {
            by_judge_order
                .entry((s.judge, s.order_index))
                .or_default()
                .push((s.order.clone(), r.scores.iter().map(|x| x.0).collect()));
            for (&c, (_, expl, items)) in s.order.iter().zip(&r.scores) {
                if first_seen[c].is_none() {
                    first_seen[c] = Some((expl.clone(), items.clone()));
                }
            }
        }
        let mut per_judge: Vec<Vec<Vec<f64>>> = vec![vec![Vec::new(); m]; plan.judges.len()];
        for ((j, _), chunks) in &by_judge_order {
            // Chunks list anchors first, in their own prompt order; merge expects anchors first.
            let normalized: ChunkScores = chunks
                .iter()
                .map(|(order, scores)| {
                    let mut pairs: Vec<(usize, Option<f64>)> =
                        order.iter().copied().zip(scores.iter().copied()).collect();
                    pairs.sort_by_key(|(c, _)| (*c >= CHUNK_ANCHORS, *c));
                    pairs.into_iter().unzip()
                })
                .collect();
            let anchors = if normalized.len() > 1 {
                CHUNK_ANCHORS.min(m)
            } else {
                0
            };
            for (c, v) in merge_chunks(m, &normalized, anchors, shift)
                .into_iter()
                .enumerate()
            {
                if let Some(v) = v {
                    per_judge[*j][c].push(v);
                }
            }
        }
        let candidate_scores: Vec<JudgeScore> = (0..m)
            .map(|c| {
                let judge_means: Vec<f64> = per_judge
                    .iter()
                    .filter_map(|pj| mean_std(&pj[c]).map(|(mean, _)| mean))
                    .collect();
                let all: Vec<f64> = per_judge
                    .iter()
                    .flat_map(|pj| pj[c].iter().copied())
                    .collect();
                let (explanation, items) = first_seen[c].clone().unwrap_or_default();
                JudgeScore {
                    value: combine_judges(&judge_means, aggregate),
                    explanation,
                    items,
                    disagreement: if all.len() > 1 {
                        mean_std(&all).map(|(_, sd)| sd)
                    } else {
                        None
                    },
                    per_judge: if plan.judges.len() > 1 {
                        plan.judges
                            .iter()
                            .zip(&per_judge)
                            .map(|(jd, pj)| {
                                (jd.info().name, mean_std(&pj[c]).map(|(mean, _)| mean))
                            })
                            .collect()
                    } else {
                        BTreeMap::new()
                    },
                }
            })
            .collect();
        let scores = plan
            .input
            .candidate_of()
            .iter()
            .map(|&c| candidate_scores[c].clone())
            .collect();
        Ok(Ok(JudgeOutcome { scores, usage }))
    }

    /// One sample's verdict: from the store, or from the judge under the key's lock.
    async fn run_sample(
        &self,
        plan: &Plan<'_>,
        s: &Sample<'_>,
        req: &ScoreRequest,
    ) -> Result<Result<SampleResult, JudgeError>, ScoreError> {
        let mut usage = Usage::default();
        let verdict = match self.store.get(&s.key).await? {
            Some(v) => {
                usage.cache_hits = 1;
                v
            }
            None => {
                let _guard = self.inflight.lock(&s.key).await;
                match self.store.get(&s.key).await? {
                    Some(v) => {
                        usage.cache_hits = 1;
                        v
                    }
                    None => match self.ask_judge(plan, s, req).await {
                        Ok(v) => {
                            self.store.put(&s.key, &v).await?;
                            usage.judge_calls = u64::from(v.calls);
                            usage.prompt_tokens = v.prompt_tokens;
                            usage.completion_tokens = v.completion_tokens;
                            usage.cached_prompt_tokens = v.cached_prompt_tokens;
                            usage.retries = v.retries.clone();
                            usage.cost = s.judge_ref.cost(v.prompt_tokens, v.completion_tokens);
                            v
                        }
                        Err(e) => return Ok(Err(e)),
                    },
                }
            }
        };
        metrics::counter!("gavel_verdicts_total", "source" => if usage.cache_hits > 0 { "cache" } else { "judge" })
            .increment(1);
        usage.prompt_tokens_deduped = verdict.counted_prompt_tokens;
        usage.prompt_tokens_without_dedup = verdict.counted_prompt_tokens_without_dedup;
        usage.tokens_saved_by_dedup = verdict
            .counted_prompt_tokens_without_dedup
            .saturating_sub(verdict.counted_prompt_tokens);
        let by_id: BTreeMap<&str, &StoredScore> =
            verdict.scores.iter().map(|x| (x.id.as_str(), x)).collect();
        let scores = s
            .rendered
            .ids
            .iter()
            .map(|id| {
                let x = by_id[id.as_str()];
                let value = if plan.rubric.items.is_empty() {
                    x.score
                } else {
                    let met: BTreeMap<String, bool> = x.items.iter().cloned().collect();
                    Some(checklist_score(
                        &plan.rubric.items,
                        &met,
                        plan.rubric.required_cap,
                    ))
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
        Ok(Ok(SampleResult { scores, usage }))
    }

    /// Asks the judge for a verdict: one call, and one structural re-ask stating the exact
    /// problem if the first answer cannot be used. Bounded by the judge's verdict deadline.
    async fn ask_judge(
        &self,
        plan: &Plan<'_>,
        s: &Sample<'_>,
        req: &ScoreRequest,
    ) -> Result<StoredVerdict, JudgeError> {
        let item_ids: Vec<String> = plan.rubric.items.iter().map(|i| i.id.clone()).collect();
        let schema = verdict_schema(&s.rendered.ids, &item_ids);
        let opts = ParseOptions {
            expected_ids: &s.rendered.ids,
            allow_missing_score: !item_ids.is_empty(),
            expected_items: &item_ids,
        };
        let JudgeInfo { name, model } = s.judge_ref.info();
        let deadline = s.judge_ref.deadline();
        let conversation = async {
            let mut messages = s.rendered.messages.clone();
            let first = s.judge_ref.complete(&messages, &schema).await?;
            let (mut prompt_tokens, mut completion_tokens, mut calls) =
                (first.prompt_tokens, first.completion_tokens, 1u32);
            let mut cached = first.cached_prompt_tokens;
            let mut retries = first.retries;
            let parsed = match parse_verdict(&first.text, &opts) {
                Ok(scores) => scores,
                Err(problem) => {
                    tracing::info!(judge = %name, %problem, "verdict unusable; re-asking once");
                    metrics::counter!("gavel_judge_reasks_total", "judge" => name.clone())
                        .increment(1);
                    let reask = self
                        .prompts
                        .render_reask(&problem.to_string(), &s.rendered.ids)
                        .map_err(|e| JudgeError::InvalidOutput(e.to_string()))?;
                    messages.push(ChatMessage {
                        role: "assistant".into(),
                        content: first.text,
                    });
                    messages.push(reask);
                    let second = s.judge_ref.complete(&messages, &schema).await?;
                    prompt_tokens += second.prompt_tokens;
                    completion_tokens += second.completion_tokens;
                    cached += second.cached_prompt_tokens;
                    calls += 1;
                    for (cause, n) in second.retries {
                        *retries.entry(cause).or_default() += n;
                    }
                    *retries.entry("reask".into()).or_default() += 1;
                    parse_verdict(&second.text, &opts).map_err(|again| {
                        JudgeError::InvalidOutput(format!(
                            "judge {name:?} gave an unusable verdict twice; first: {problem}; after the re-ask: {again}"
                        ))
                    })?
                }
            };
            let tokens = (prompt_tokens, completion_tokens, cached);
            Ok::<_, JudgeError>((parsed, tokens, calls, retries))
        };
        let (parsed, (prompt_tokens, completion_tokens, cached_prompt_tokens), calls, retries) =
            tokio::time::timeout(deadline, conversation)
                .await
                .map_err(|_| {
                    JudgeError::Timeout(format!(
                        "judge {name:?}: verdict deadline of {:.1}s passed",
                        deadline.as_secs_f64()
                    ))
                })??;
        let counted = count_tokens(&s.rendered.messages) as u64;
        let without = self
            .count_without_dedup(plan, &s.order, req)
            .map_err(|e| JudgeError::InvalidOutput(e.to_string()))?;
        Ok(StoredVerdict {
            scores: parsed
                .into_iter()
                .map(|x| StoredScore {
                    id: x.trajectory_id,
                    score: x.score,
                    explanation: x.explanation,
                    items: x.items.into_iter().map(|i| (i.id, i.met)).collect(),
                })
                .collect(),
            prompt_tokens,
            completion_tokens,
            cached_prompt_tokens,
            calls,
            counted_prompt_tokens: counted,
            counted_prompt_tokens_without_dedup: without,
            model,
            created_unix: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            retries,
        })
    }
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
