//! Reading choice probabilities on the owner thread (pointwise and pairwise judging), a group's
//! prompts as one job. The prefix they share (system prompt, rubric, the group's context) is
//! prefilled once, or found in the prefix cache, and pinned there while they run; then their
//! suffixes go through packed forwards of at most `max_batch_tokens` tokens, each suffix seeing
//! the prefix and itself ([`crate::model::infer::Qwen::forward_packed`]): one pass over the
//! weights for many prompts. With `max_batch_tokens = 0` each prompt runs alone, from the
//! longest cached prefix.

use std::ops::Range;
use std::time::{Duration, Instant};

use super::generate::Worker;
use super::prefix_cache::common_prefix;
use super::request::{EngineError, ProbeRequest, Probed};
use crate::model::LocalError;

/// Fewest tokens of its prompt a probe runs itself, however much of it is cached or shared.
///
/// The same arithmetic whatever the prefix cache supplies: a group's scores must not depend on
/// the order its prompts were asked in. candle multiplies Q6_K weights by a single row on
/// another kernel (compact GEMV) than by several (repacked tiles), and the f32 GEMM of the
/// dequantized Q5_0/Q8_0 path takes another for two rows; each rounds differently. From three
/// rows on, a position's logits were bit-identical however the prompt was split (measured on
/// both test models, suffixes of 3 to 64 tokens), and packed with other suffixes (attention
/// runs per suffix, on the shapes it has alone).
const PROBE_MIN_RUN: usize = 3;

/// One prompt's logits and what reading them took.
struct Read {
    logits: Vec<f32>,
    cached: usize,
    passes: u64,
    prefill: Duration,
}

impl Worker {
    /// Reads each prompt's choice probabilities as the answer's first token: no decoding.
    /// `cancelled` is polled between forwards.
    pub fn probe(
        &mut self,
        req: &ProbeRequest,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<Vec<Probed>, EngineError> {
        self.model.select_adapter(req.adapter);
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
        let tokens = self.model.choice_tokens(&req.choices)?;
        // A verdict adapter changes the last position alone (the one whose next token is
        // read); everything before it is the base model's, shared with every other probe.
        self.model.set_dense_always(true);
        let reads = self.read_group(&prompts, cancelled);
        self.model.set_verdict_adapter(false);
        self.model.set_dense_always(false);
        reads?
            .into_iter()
            .zip(&prompts)
            .map(|(r, prompt)| {
                let mass = crate::model::tokenizer::answer_masses(&r.logits, &tokens);
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
                Ok(Probed {
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

    /// The logits after each prompt. A prompt the prefix cache holds beyond the prefix the
    /// group shares runs alone from its entry (a base judge and its tuned judges on one model
    /// ask the same prompts), and so does one whose own tokens exceed `max_batch_tokens` (a
    /// prompt alone is prefilled in chunks, which bounds its attention scores; a packed suffix
    /// is not); the others, two or more, are packed after the shared prefix, prefilled once and
    /// pinned meanwhile.
    fn read_group(
        &mut self,
        prompts: &[Vec<u32>],
        cancelled: &dyn Fn() -> bool,
    ) -> Result<Vec<Read>, EngineError> {
        let shared = shared_prefix(prompts);
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
        let mut reads: Vec<Option<Read>> = (0..prompts.len()).map(|_| None).collect();
        let prefix = &prompts[0][..shared];
        let mut pinned = false;
        let result = (|| -> Result<(), EngineError> {
            if !packed.is_empty() {
                let (t0, passes) = (Instant::now(), self.model.forward_passes());
                let (reused, _) = self.prefill(prefix, PROBE_MIN_RUN)?;
                let (prefill, passes) = (t0.elapsed(), self.model.forward_passes() - passes);
                pinned = self.prefixes.pin(&flavour, prefix);
                let chosen: Vec<&[u32]> = packed.iter().map(|&i| &prompts[i][..]).collect();
                let mut got = self.read_packed(&chosen, shared, cancelled)?;
                // What the shared prefix cost goes to the first packed prompt.
                got[0].cached = reused;
                got[0].passes += passes;
                got[0].prefill += prefill;
                for (&i, r) in packed.iter().zip(got) {
                    reads[i] = Some(r);
                }
            }
            for &i in &alone {
                reads[i] = Some(self.read_alone(&prompts[i], cancelled)?);
                if !pinned && shared > 0 {
                    pinned = self.prefixes.pin(&flavour, prefix);
                }
            }
            Ok(())
        })();
        if pinned {
            self.prefixes.unpin(&flavour, prefix);
        }
        result?;
        Ok(reads
            .into_iter()
            .map(|r| r.expect("every prompt read"))
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
        let prefilled = self.prefill(prompt, PROBE_MIN_RUN);
        self.model.set_verdict_adapter(false);
        let (cached, logits) = prefilled?;
        Ok(Read {
            logits,
            cached,
            passes: self.model.forward_passes() - passes,
            prefill: t0.elapsed(),
        })
    }

    /// `prompts`' suffixes after the `shared` prefix the model's cache holds, in packed
    /// forwards; each prompt's KV is kept in the prefix cache, as a prompt run alone leaves it.
    fn read_packed(
        &mut self,
        prompts: &[&[u32]],
        shared: usize,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<Vec<Read>, EngineError> {
        let lens: Vec<usize> = prompts.iter().map(|p| p.len() - shared).collect();
        let mut reads = Vec::with_capacity(prompts.len());
        for batch in pack(&lens, self.settings.max_batch_tokens) {
            if cancelled() {
                return Err(EngineError::Cancelled);
            }
            debug_assert_eq!(self.model.cached_len(), shared);
            let t0 = Instant::now();
            let chosen = &prompts[batch.clone()];
            let suffixes: Vec<&[u32]> = chosen.iter().map(|p| &p[shared..]).collect();
            self.model.set_verdict_adapter(true);
            // After a verdict adapter ran on the last positions, only those before them are
            // the base model's, to be reused.
            let cut = usize::from(self.model.verdict_adapter_on());
            let forward = self.model.forward_packed(&suffixes);
            self.model.set_verdict_adapter(false);
            let (logits, states) = forward?;
            let n = suffixes.len();
            metrics::histogram!("gavel_local_batch_prompts").record(n as f64);
            metrics::histogram!("gavel_local_batch_tokens")
                .record(lens[batch].iter().sum::<usize>() as f64);
            let each = t0.elapsed() / n as u32;
            let flavour = self.model.kv_flavour();
            for (i, ((logits, state), prompt)) in
                logits.into_iter().zip(states).zip(chosen).enumerate()
            {
                self.prefixes
                    .insert(flavour, prompt[..prompt.len() - cut].to_vec(), state);
                reads.push(Read {
                    logits,
                    cached: shared,
                    passes: u64::from(i == 0),
                    prefill: each,
                });
            }
        }
        Ok(reads)
    }
}

/// Tokens every prompt starts with, leaving each at least [`PROBE_MIN_RUN`] of its own; 0 when
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
    common.min(shortest.saturating_sub(PROBE_MIN_RUN))
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
