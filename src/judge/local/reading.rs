//! Reading choice probabilities on the owner thread (pointwise and pairwise judging), a group's
//! prompts as one job. The prefix they share (system prompt, rubric, the group's context) is
//! prefilled once, or found in the prefix cache, and pinned there while they run; then their
//! suffixes go through packed forwards of at most `max_batch_tokens` tokens, each suffix seeing
//! its group's prefix and itself ([`crate::model::infer::Qwen::forward_batch`]): one pass over
//! the weights for many prompts. When the next queued jobs are reading jobs too, their groups join
//! the last forward while it has room ([`Worker::read_jobs`]). With `max_batch_tokens = 0`
//! each prompt runs alone, from the longest cached prefix.

use std::ops::Range;
use std::time::{Duration, Instant};

use super::generate::Worker;
use super::prefix_cache::common_prefix;
use super::request::{EngineError, ReadRequest, Reading};
use crate::model::infer::KvState;
use crate::model::LocalError;

/// Fewest tokens of its prompt a reading runs itself, however much of it is cached or shared.
///
/// The same arithmetic whatever the prefix cache supplies: a group's scores must not depend on
/// the order its prompts were asked in. candle multiplies Q6_K weights by a single row on
/// another kernel (compact GEMV) than by several (repacked tiles), and the f32 GEMM of the
/// dequantized Q5_0/Q8_0 path takes another for two rows; each rounds differently. From three
/// rows on, a position's logits were bit-identical however the prompt was split (measured on
/// both test models, suffixes of 3 to 64 tokens), and packed with other suffixes (attention
/// runs per suffix, on the shapes it has alone).
const MIN_OWN_RUN: usize = 3;

/// One prompt's logits and what reading them took.
struct Read {
    logits: Vec<f32>,
    cached: usize,
    passes: u64,
    prefill: Duration,
}

/// One group's prompts, tokenized, and how they will be read.
struct GroupPlan {
    prompts: Vec<Vec<u32>>,
    /// Each choice's first tokens.
    choices: Vec<Vec<u32>>,
    /// Tokens every prompt starts with ([`shared_prefix`]).
    shared: usize,
    /// Prompts run alone, and prompts packed after the shared prefix.
    alone: Vec<usize>,
    packed: Vec<usize>,
}

impl GroupPlan {
    fn prefix(&self) -> &[u32] {
        &self.prompts[0][..self.shared]
    }

    /// The own tokens of each packed prompt.
    fn packed_lens(&self) -> impl Iterator<Item = usize> + '_ {
        self.packed
            .iter()
            .map(|&i| self.prompts[i].len() - self.shared)
    }
}

impl Worker {
    /// Reads each prompt's choice probabilities as the answer's first token (no decoding), for
    /// the first of `reqs` and, after it, each next one (with the same adapter) while all
    /// its prompts fit the room the last packed forward leaves under `max_batch_tokens`: its
    /// suffixes join that forward, after their own group's prefix. Returns the answers of the
    /// requests read, in order: at least the first's. `cancelled` is polled between forwards.
    pub fn read_jobs(
        &mut self,
        reqs: &[&ReadRequest],
        cancelled: &dyn Fn() -> bool,
    ) -> Vec<Result<Vec<Reading>, EngineError>> {
        let Some(first) = reqs.first() else {
            return Vec::new();
        };
        self.model.select_adapter(first.adapter);
        let max = self.settings.max_batch_tokens;
        let mut plans: Vec<GroupPlan> = Vec::new();
        // Suffix tokens in the last packed forward so far.
        let mut last = 0;
        for (k, req) in reqs.iter().enumerate() {
            let plan = match self.plan_group(req) {
                Ok(plan) => plan,
                Err(e) if k == 0 => return vec![Err(e)],
                Err(_) => break,
            };
            let lens: Vec<usize> = plan.packed_lens().collect();
            let own: usize = lens.iter().sum();
            if k == 0 {
                last = pack(&lens, max)
                    .last()
                    .map_or(0, |run| lens[run.clone()].iter().sum());
            } else if req.adapter == first.adapter
                && plan.alone.is_empty()
                && !plan.packed.is_empty()
                && !plans[0].packed.is_empty()
                && last + own <= max
            {
                last += own;
            } else {
                break;
            }
            plans.push(plan);
        }
        // A verdict adapter changes the last position alone (the one whose next token is
        // read); everything before it is the base model's, shared with every other reading.
        self.model.set_dense_always(true);
        let reads = self.read_groups(&plans, cancelled);
        self.model.set_verdict_adapter(false);
        self.model.set_dense_always(false);
        let reads = match reads {
            Ok(reads) => reads,
            Err(e) => return plans.iter().map(|_| Err(e.clone())).collect(),
        };
        reads
            .into_iter()
            .zip(&plans)
            .zip(reqs)
            .map(|((reads, plan), req)| answers(reads, plan, req))
            .collect()
    }

    /// `req`'s prompts and choices as tokens, and which prompts run alone.
    fn plan_group(&self, req: &ReadRequest) -> Result<GroupPlan, EngineError> {
        let prompts = req
            .prompts
            .iter()
            .map(|m| self.model.prompt_tokens(m))
            .collect::<Result<Vec<_>, _>>()?;
        let context = self.model.context_length();
        if let Some(p) = prompts.iter().find(|p| p.len() >= context) {
            return Err(EngineError::TooLong {
                prompt: p.len(),
                context,
            });
        }
        let choices = self.model.choice_tokens(&req.choices)?;
        // A prompt the prefix cache holds beyond the prefix the group shares runs alone from
        // its entry (a base judge and its tuned judges on one model ask the same prompts), and
        // so does one whose own tokens exceed `max_batch_tokens` (a prompt alone is prefilled
        // in chunks, which bounds its attention scores; a packed suffix is not); the others,
        // two or more, are packed after the shared prefix.
        let shared = shared_prefix(&prompts);
        let flavour = self.model.kv_flavour();
        let (alone, packed): (Vec<usize>, Vec<usize>) = (0..prompts.len()).partition(|&i| {
            self.settings.max_batch_tokens == 0
                || shared == 0
                || prompts[i].len() - shared > self.settings.max_batch_tokens
                || self.prefixes.covered(&flavour, &prompts[i]) > shared
        });
        let (alone, packed) = if packed.len() < 2 {
            ((0..prompts.len()).collect(), Vec::new())
        } else {
            (alone, packed)
        };
        Ok(GroupPlan {
            prompts,
            choices,
            shared,
            alone,
            packed,
        })
    }

    /// The logits after each prompt of each group: the groups' shared prefixes prefilled (or
    /// found) and pinned, their packed prompts in packed forwards, then the prompts run alone.
    fn read_groups(
        &mut self,
        plans: &[GroupPlan],
        cancelled: &dyn Fn() -> bool,
    ) -> Result<Vec<Vec<Read>>, EngineError> {
        let flavour = self.model.kv_flavour();
        let mut reads: Vec<Vec<Option<Read>>> = plans
            .iter()
            .map(|p| (0..p.prompts.len()).map(|_| None).collect())
            .collect();
        let mut pinned: Vec<usize> = Vec::new();
        let result = (|| -> Result<(), EngineError> {
            let mut prefixes: Vec<Option<KvState>> = vec![None; plans.len()];
            let mut costs = vec![(0, 0, Duration::ZERO); plans.len()];
            for (g, plan) in plans.iter().enumerate() {
                if plan.packed.is_empty() {
                    continue;
                }
                let (t0, passes) = (Instant::now(), self.model.forward_passes());
                let (reused, _) = self.prefill(plan.prefix(), MIN_OWN_RUN)?;
                costs[g] = (reused, self.model.forward_passes() - passes, t0.elapsed());
                prefixes[g] = Some(self.model.kv_state());
                if self.prefixes.pin(&flavour, plan.prefix()) {
                    pinned.push(g);
                }
            }
            self.read_packed(plans, &prefixes, &mut reads, cancelled)?;
            // What a shared prefix cost goes to its group's first packed prompt.
            for ((plan, group), (reused, passes, prefill)) in
                plans.iter().zip(&mut reads).zip(costs)
            {
                if let Some(r) = plan.packed.first().and_then(|&i| group[i].as_mut()) {
                    r.cached = reused;
                    r.passes += passes;
                    r.prefill += prefill;
                }
            }
            for (g, plan) in plans.iter().enumerate() {
                for &i in &plan.alone {
                    reads[g][i] = Some(self.read_alone(&plan.prompts[i], cancelled)?);
                    if !pinned.contains(&g)
                        && plan.shared > 0
                        && self.prefixes.pin(&flavour, plan.prefix())
                    {
                        pinned.push(g);
                    }
                }
            }
            Ok(())
        })();
        for &g in &pinned {
            self.prefixes.unpin(&flavour, plans[g].prefix());
        }
        result?;
        Ok(reads
            .into_iter()
            .map(|group| {
                group
                    .into_iter()
                    .map(|r| r.expect("every prompt read"))
                    .collect()
            })
            .collect())
    }

    /// One prompt from the longest cached prefix (kept for the next, but for its last position
    /// when a verdict adapter ran there).
    fn read_alone(
        &mut self,
        prompt: &[u32],
        cancelled: &dyn Fn() -> bool,
    ) -> Result<Read, EngineError> {
        if cancelled() {
            return Err(EngineError::Cancelled);
        }
        let (t0, passes) = (Instant::now(), self.model.forward_passes());
        self.model.set_verdict_adapter(true);
        let prefilled = self.prefill(prompt, MIN_OWN_RUN);
        self.model.set_verdict_adapter(false);
        let (cached, logits) = prefilled?;
        Ok(Read {
            logits,
            cached,
            passes: self.model.forward_passes() - passes,
            prefill: t0.elapsed(),
        })
    }

    /// The packed prompts of every group, their suffixes after their groups' prefixes (KV in
    /// `prefixes`) in packed forwards, in order; each prompt's KV is kept in the prefix cache,
    /// as a prompt run alone leaves it.
    fn read_packed(
        &mut self,
        plans: &[GroupPlan],
        prefixes: &[Option<KvState>],
        reads: &mut [Vec<Option<Read>>],
        cancelled: &dyn Fn() -> bool,
    ) -> Result<(), EngineError> {
        let runs: Vec<(usize, usize)> = plans
            .iter()
            .enumerate()
            .flat_map(|(g, p)| p.packed.iter().map(move |&i| (g, i)))
            .collect();
        let lens: Vec<usize> = runs
            .iter()
            .map(|&(g, i)| plans[g].prompts[i].len() - plans[g].shared)
            .collect();
        for batch in pack(&lens, self.settings.max_batch_tokens) {
            if cancelled() {
                return Err(EngineError::Cancelled);
            }
            let t0 = Instant::now();
            let chosen = &runs[batch.clone()];
            let suffixes: Vec<&[u32]> = chosen
                .iter()
                .map(|&(g, i)| &plans[g].prompts[i][plans[g].shared..])
                .collect();
            let mut states: Vec<KvState> = chosen
                .iter()
                .map(|&(g, _)| {
                    prefixes[g]
                        .clone()
                        .expect("a packed group's prefix is prefilled")
                })
                .collect();
            self.model.set_verdict_adapter(true);
            // After a verdict adapter ran on the last positions, only those before them are
            // the base model's, to be reused.
            let cut = usize::from(self.model.verdict_adapter_on());
            let forward = self.model.forward_batch(&suffixes, &mut states);
            self.model.set_verdict_adapter(false);
            let logits = forward?;
            let n = suffixes.len();
            metrics::histogram!("gavel_local_batch_prompts").record(n as f64);
            metrics::histogram!("gavel_local_batch_tokens")
                .record(lens[batch].iter().sum::<usize>() as f64);
            let each = t0.elapsed() / n as u32;
            let flavour = self.model.kv_flavour();
            for (k, ((&(g, i), logits), state)) in chosen.iter().zip(logits).zip(states).enumerate()
            {
                let prompt = &plans[g].prompts[i];
                self.prefixes
                    .insert(flavour, prompt[..prompt.len() - cut].to_vec(), state);
                // The forward counts once for each group in it.
                let first_of_group = chosen[..k].iter().all(|&(h, _)| h != g);
                reads[g][i] = Some(Read {
                    logits,
                    cached: plans[g].shared,
                    passes: u64::from(first_of_group),
                    prefill: each,
                });
            }
        }
        Ok(())
    }
}

/// A group's answers from its prompts' logits: each choice's share of the mass on the choices.
fn answers(
    reads: Vec<Read>,
    plan: &GroupPlan,
    req: &ReadRequest,
) -> Result<Vec<Reading>, EngineError> {
    reads
        .into_iter()
        .zip(&plan.prompts)
        .map(|(r, prompt)| {
            let mass = crate::model::tokenizer::answer_masses(&r.logits, &plan.choices);
            // A judge failure is never a score: with no mass on any answer there is no
            // verdict.
            let coverage: f64 = mass.iter().sum();
            if !(coverage > 0.0 && coverage.is_finite()) {
                return Err(LocalError::Forward(format!(
                    "the model gave the answers {:?} no probability",
                    req.choices
                ))
                .into());
            }
            Ok(Reading {
                shares: mass.iter().map(|m| m / coverage).collect(),
                coverage,
                prompt_tokens: prompt.len() as u64,
                cached_prompt_tokens: r.cached.min(prompt.len()) as u64,
                forward_passes: r.passes,
                queued: Duration::ZERO,
                prefill: r.prefill,
            })
        })
        .collect()
}

/// Tokens every prompt starts with, leaving each at least [`MIN_OWN_RUN`] of its own; 0 when
/// there are fewer than two prompts.
fn shared_prefix(prompts: &[Vec<u32>]) -> usize {
    let [first, rest @ ..] = prompts else {
        return 0;
    };
    if rest.is_empty() {
        return 0;
    }
    let common = rest
        .iter()
        .map(|p| common_prefix(first, p))
        .min()
        .unwrap_or(0);
    let shortest = prompts.iter().map(Vec::len).min().unwrap_or(0);
    common.min(shortest.saturating_sub(MIN_OWN_RUN))
}

/// Consecutive runs of suffixes of `lens` tokens, each run at most `max_tokens` (a longer
/// suffix runs alone).
fn pack(lens: &[usize], max_tokens: usize) -> Vec<Range<usize>> {
    let mut runs = Vec::new();
    let (mut start, mut tokens) = (0, 0);
    for (i, &n) in lens.iter().enumerate() {
        if i > start && tokens + n > max_tokens {
            runs.push(start..i);
            (start, tokens) = (i, 0);
        }
        tokens += n;
    }
    if start < lens.len() {
        runs.push(start..lens.len());
    }
    runs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suffixes_are_packed_in_order_up_to_the_token_limit() {
        assert_eq!(pack(&[3, 3, 3, 3], 6), vec![0..2, 2..4]);
        assert_eq!(pack(&[3, 3, 3, 3], 7), vec![0..2, 2..4]);
        assert_eq!(pack(&[3, 3, 3, 3], 100), vec![0..4]);
        assert_eq!(pack(&[10, 2, 2, 10], 5), vec![0..1, 1..3, 3..4]);
        assert_eq!(pack(&[], 5), Vec::<Range<usize>>::new());
    }

    #[test]
    fn the_shared_prefix_leaves_every_prompt_its_own_tokens() {
        let p = |v: &[u32]| v.to_vec();
        assert_eq!(shared_prefix(&[p(&[1, 2, 3, 4, 5, 6, 7])]), 0, "one prompt");
        let two = [p(&[1, 2, 3, 4, 5, 6, 7]), p(&[1, 2, 3, 4, 9, 9, 9])];
        assert_eq!(shared_prefix(&two), 4);
        let short = [p(&[1, 2, 3, 4, 5, 6, 7]), p(&[1, 2, 3, 4, 5])];
        assert_eq!(shared_prefix(&short), 2, "the shorter keeps 3 of its own");
        assert_eq!(shared_prefix(&[p(&[1, 2]), p(&[5, 6, 7, 8])]), 0);
    }
}
