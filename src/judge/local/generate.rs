//! Generation on the owner thread: prefill from the best cached prefix, then decode under the
//! verdict grammar.
//!
//! With constraints on, every step either runs bytes the grammar forces (keys, ids, `}, {`) —
//! tokenized and run as one batch, with no sampling — or samples among the tokens the grammar
//! allows there ([`TokenMask`]), so the output parses whatever the weights are. The forced
//! opening of the verdict (`{"scores": [{"trajectory_id": "1", "explanation": "`) is run with
//! the prompt, in the same prefill.

use std::time::{Duration, Instant};

use super::constrain::{Cursor, TokenMask, VerdictGrammar};
use super::model::LoadedModel;
use super::prefix_cache::{self, PrefixCache};
use super::request::{EngineError, EngineSettings, Generated, Request};
use crate::domain::rng::Rng;
use crate::model::infer::KvState;
use crate::model::LocalError;

pub(crate) struct Worker {
    pub(super) model: LoadedModel,
    mask: TokenMask,
    pub(super) settings: EngineSettings,
    /// Prefilled sequences by the weights that wrote them (see [`LoadedModel::kv_flavour`]).
    pub(super) prefixes: PrefixCache<Option<usize>, KvState>,
    /// Single-token ids of `0`..`9` and `.`, when the vocabulary has them all (for expected
    /// scores).
    digits: Option<([u32; 10], u32)>,
}

/// One request being decoded: its grammar and where decoding stands, its own KV cache (the
/// model's cache is shared by every generation in flight), and the tokens its next forward
/// runs. Several generations step together in one batched forward ([`Worker::step`]).
pub(crate) struct Generation {
    grammar: Option<VerdictGrammar>,
    cursor: Option<Cursor>,
    /// Output bytes (constrained or free text) and token ids.
    bytes: Vec<u8>,
    ids: Vec<u32>,
    forced: u64,
    free_text: Option<usize>,
    adapter: Option<usize>,
    prompt_tokens: usize,
    cached_prompt_tokens: usize,
    kv: KvState,
    /// The logits after the last token run.
    logits: Vec<f32>,
    /// What the next forward runs ([`Worker::plan`]).
    pending: Vec<u32>,
    rng: Rng,
    forward_passes: u64,
    prefill: Duration,
    decode_started: Instant,
}

impl Generation {
    /// The attached adapter it runs: only generations with the same one share a forward.
    pub(crate) fn adapter(&self) -> Option<usize> {
        self.adapter
    }
}

impl Worker {
    pub fn new(model: LoadedModel, settings: EngineSettings) -> Worker {
        let mask = TokenMask::new(model.vocab_bytes().to_vec(), model.eos_ids().to_vec());
        let single = |s: &str| match model.encode(s).ok()?.as_slice() {
            [id] if model.vocab_bytes().get(*id as usize)?.as_slice() == s.as_bytes() => Some(*id),
            _ => None,
        };
        let digits = (0..10)
            .map(|d| single(&d.to_string()))
            .collect::<Option<Vec<u32>>>()
            .and_then(|v| Some((v.try_into().ok()?, single(".")?)));
        Worker {
            digits,
            prefixes: new_prefix_cache(&model, &settings),
            model,
            mask,
            settings,
        }
    }

    /// Publishes the prefix cache's size and lookups on `/metrics`, under the engine's labels.
    pub fn record_prefix_cache(&self, labels: &[metrics::Label]) {
        let (hits, misses) = self.prefixes.hits_and_misses();
        let l = || labels.to_vec();
        metrics::gauge!("gavel_local_prefix_cache_bytes", l()).set(self.prefixes.bytes() as f64);
        metrics::gauge!("gavel_local_prefix_cache_budget_bytes", l())
            .set(self.prefixes.budget() as f64);
        metrics::counter!("gavel_local_prefix_cache_hits_total", l()).absolute(hits);
        metrics::counter!("gavel_local_prefix_cache_misses_total", l()).absolute(misses);
    }

    /// Back to a clean state after a panic interrupted a request: the KV cache and the cached
    /// prefixes may be half-written, so both go (the weights are never written).
    pub fn reset(&mut self) {
        self.model.clear_kv_cache();
        self.prefixes.clear();
    }

    /// Prefills `req`'s prompt (from the best cached prefix, with the verdict's forced opening)
    /// and returns its generation, ready to [`Worker::plan`].
    pub(crate) fn start(&mut self, req: &Request) -> Result<Generation, EngineError> {
        let t0 = Instant::now();
        self.model.select_adapter(req.adapter);
        let passes = self.model.forward_passes();
        let prompt = self.model.prompt_tokens(&req.messages)?;
        let context = self.model.context_length();
        let free_text = req.free_text_bytes;
        let grammar = (self.settings.constrained && free_text.is_none()).then(|| {
            VerdictGrammar::new(
                req.ids.clone(),
                req.items.clone(),
                self.settings.max_explanation_bytes,
            )
        });
        let mut gen = Generation {
            cursor: grammar.as_ref().map(VerdictGrammar::start),
            grammar,
            bytes: Vec::new(),
            ids: Vec::new(),
            forced: 0,
            free_text,
            adapter: req.adapter,
            prompt_tokens: prompt.len(),
            cached_prompt_tokens: 0,
            kv: KvState::default(),
            logits: Vec::new(),
            pending: Vec::new(),
            rng: prompt_rng(self.settings.seed, &prompt),
            forward_passes: 0,
            prefill: Duration::ZERO,
            decode_started: t0,
        };
        let mut seq = prompt;
        if let Some(opening) = self.forced_tokens(&gen) {
            seq.extend_from_slice(&opening);
            self.accept_forced(&mut gen, &opening);
        }
        if seq.len() >= context {
            return Err(EngineError::TooLong {
                prompt: gen.prompt_tokens,
                context,
            });
        }
        let (reused, logits) = self.prefill(&seq, 1)?;
        gen.cached_prompt_tokens = reused.min(gen.prompt_tokens);
        gen.logits = logits;
        gen.kv = self.model.kv_state();
        gen.forward_passes = self.model.forward_passes() - passes;
        gen.prefill = t0.elapsed();
        gen.decode_started = Instant::now();
        Ok(gen)
    }

    /// Chooses `gen`'s next token (or the run of tokens the grammar forces) from its logits and
    /// sets them to run in its next forward: true, or false when the generation is complete.
    pub(crate) fn plan(&mut self, gen: &mut Generation) -> Result<bool, EngineError> {
        if let (Some(g), Some(c)) = (&gen.grammar, &gen.cursor) {
            if g.is_complete(c) {
                return Ok(false);
            }
            let forced = match self.forced_tokens(gen) {
                None if self.settings.expected_score && g.at_score(c) => {
                    self.room(gen, 4)?;
                    // The two look-ahead steps run on the model's own cache, from this generation's.
                    self.model.restore_kv(&gen.kv, gen.kv.len())?;
                    self.expected_score_tokens(g, c, &gen.logits)?
                }
                f => f,
            };
            if let Some(forced) = forced {
                self.room(gen, forced.len())?;
                self.accept_forced(gen, &forced);
                gen.pending = forced;
                return Ok(true);
            }
            self.mask.apply(g, c, &mut gen.logits);
        }
        let id = pick(&mut gen.rng, &gen.logits, self.settings.temperature);
        if gen.grammar.is_none() && self.model.eos_ids().contains(&id) {
            return Ok(false);
        }
        self.accept(gen, id);
        if gen.grammar.is_none() && gen.ids.len() >= self.settings.max_tokens {
            return Ok(false);
        }
        if let Some(cap) = gen.free_text {
            gen.bytes
                .extend_from_slice(&self.model.vocab_bytes()[id as usize]);
            if gen.bytes.len() >= cap {
                return Ok(false);
            }
        }
        if let (Some(g), Some(c)) = (&gen.grammar, &gen.cursor) {
            if g.is_complete(c) {
                // The verdict is whole: EOS is the only token left, no need to run this one.
                return Ok(false);
            }
        }
        self.room(gen, 1)?;
        gen.pending = vec![id];
        Ok(true)
    }

    /// Runs each generation's planned tokens after its own cache: alone on the model's cache,
    /// or several (all with one adapter) in one batched forward.
    pub(crate) fn step(&mut self, gens: &mut [&mut Generation]) -> Result<(), EngineError> {
        let Some(first) = gens.first() else {
            return Ok(());
        };
        self.model.select_adapter(first.adapter);
        if let [gen] = gens {
            self.model.restore_kv(&gen.kv, gen.kv.len())?;
            let pos = self.model.cached_len();
            gen.logits = self.model.forward_logits(&gen.pending, pos)?;
            gen.kv = self.model.kv_state();
            gen.forward_passes += 1;
            return Ok(());
        }
        debug_assert!(gens.iter().all(|g| g.adapter == first.adapter));
        let seqs: Vec<&[u32]> = gens.iter().map(|g| &g.pending[..]).collect();
        let mut states: Vec<KvState> = gens.iter().map(|g| g.kv.clone()).collect();
        let logits = self.model.forward_batch(&seqs, &mut states)?;
        metrics::histogram!("gavel_local_batch_generations").record(gens.len() as f64);
        for ((gen, logits), kv) in gens.iter_mut().zip(logits).zip(states) {
            gen.logits = logits;
            gen.kv = kv;
            gen.forward_passes += 1;
        }
        Ok(())
    }

    /// The completed generation's text and what producing it took.
    pub(crate) fn finish(&self, gen: Generation) -> Result<Generated, EngineError> {
        let text = match gen.grammar {
            Some(_) => String::from_utf8_lossy(&gen.bytes).into_owned(),
            None => self
                .model
                .tokenizer()
                .decode(&gen.ids, true)
                .map_err(|e| LocalError::Tokenizer(e.to_string()))?,
        };
        Ok(Generated {
            text,
            prompt_tokens: gen.prompt_tokens as u64,
            cached_prompt_tokens: gen.cached_prompt_tokens as u64,
            completion_tokens: gen.ids.len() as u64,
            forced_tokens: gen.forced,
            forward_passes: gen.forward_passes,
            queued: Duration::ZERO,
            prefill: gen.prefill,
            decode: gen.decode_started.elapsed(),
        })
    }

    /// Prefills `seq` from the cached sequence sharing its longest prefix, running at least
    /// `min_run` tokens (at least one: its logits are the next token's); returns the positions
    /// reused and the logits after `seq`. The result is cached for the next requests.
    pub(super) fn prefill(
        &mut self,
        seq: &[u32],
        min_run: usize,
    ) -> Result<(usize, Vec<f32>), EngineError> {
        let min_run = min_run.clamp(1, seq.len());
        let flavour = self.model.kv_flavour();
        let reused = match self.prefixes.best(&flavour, seq) {
            Some((state, n)) => {
                let n = n.min(seq.len() - min_run);
                self.model.restore_kv(state, n)?;
                n
            }
            None => 0,
        };
        let logits = self.model.forward_logits(&seq[reused..], reused)?;
        // After a forward whose last position ran a verdict adapter, that position's keys and
        // values are not the base model's: later prompts reuse the positions before it only.
        let keep = if self.model.verdict_adapter_on() {
            seq.len() - 1
        } else {
            seq.len()
        };
        self.prefixes
            .insert(flavour, seq[..keep].to_vec(), self.model.kv_state());
        Ok((reused, logits))
    }

    /// Errors when `n` more positions would not fit `gen`'s context.
    fn room(&self, gen: &Generation, n: usize) -> Result<(), EngineError> {
        let context = self.model.context_length();
        if gen.kv.len() + n > context {
            return Err(EngineError::TooLong {
                prompt: gen.prompt_tokens,
                context,
            });
        }
        Ok(())
    }

    /// The tokens of the bytes the grammar forces next, when there are any and they tokenize
    /// back to exactly those bytes (else they are generated token by token, under the mask).
    fn forced_tokens(&self, gen: &Generation) -> Option<Vec<u32>> {
        let (g, c) = (gen.grammar.as_ref()?, gen.cursor.as_ref()?);
        let forced = g.forced(c);
        if forced.is_empty() {
            return None;
        }
        let text = std::str::from_utf8(&forced).ok()?;
        let ids = self.model.encode(text).ok()?;
        let vocab = self.model.vocab_bytes();
        let bytes: Vec<u8> = ids
            .iter()
            .flat_map(|&i| vocab.get(i as usize).cloned().unwrap_or_default())
            .collect();
        (bytes == forced && !ids.is_empty()).then_some(ids)
    }

    /// The tokens of the model's expected score at a score's start (`logits` are the next
    /// token's there): E = p(1) + p(0) · p(`.` after `0`) · E[first decimal], each probability
    /// renormalized over what the grammar allows. Two look-ahead steps run and are rolled back (the KV
    /// cache is cut back to where it was). None when the vocabulary lacks single-token digits.
    fn expected_score_tokens(
        &mut self,
        g: &VerdictGrammar,
        c: &Cursor,
        logits: &[f32],
    ) -> Result<Option<Vec<u32>>, EngineError> {
        let Some((digit, dot)) = self.digits else {
            return Ok(None);
        };
        let (p0, p1) = pair(logits[digit[0] as usize], logits[digit[1] as usize]);
        let pos = self.model.cached_len();
        let snapshot = self.model.kv_state();
        let after0 = g.advance(c, b"0").expect("a score may start with 0");
        let l2 = self.model.forward_logits(&[digit[0]], pos)?;
        let allowed = self.mask.allowed(g, &after0);
        let p_dot = softmax_share(&l2, &allowed, dot);
        let l3 = self.model.forward_logits(&[dot], pos + 1)?;
        let dl: Vec<f32> = digit.iter().map(|&i| l3[i as usize]).collect();
        let top = dl.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let w: Vec<f64> = dl.iter().map(|&l| f64::from(l - top).exp()).collect();
        let decimal = w.iter().enumerate().map(|(d, w)| d as f64 * w).sum::<f64>()
            / (10.0 * w.iter().sum::<f64>());
        self.model.restore_kv(&snapshot, pos)?;
        let score = p1 + p0 * p_dot * decimal;
        let text = format_score(score);
        let ids: Vec<u32> = text
            .bytes()
            .map(|b| match b {
                b'.' => dot,
                _ => digit[(b - b'0') as usize],
            })
            .collect();
        Ok(Some(ids))
    }

    fn accept_forced(&self, gen: &mut Generation, ids: &[u32]) {
        for &id in ids {
            self.accept(gen, id);
        }
        gen.forced += ids.len() as u64;
    }

    fn accept(&self, gen: &mut Generation, id: u32) {
        gen.ids.push(id);
        if let (Some(g), Some(c)) = (&gen.grammar, gen.cursor.as_mut()) {
            let bytes = &self.model.vocab_bytes()[id as usize];
            *c = g
                .advance(c, bytes)
                .expect("the mask only allows tokens the grammar accepts");
            gen.bytes.extend_from_slice(bytes);
        }
    }
}

/// An empty prefix cache of the configured budget, or the default one for `model`.
fn new_prefix_cache(
    model: &LoadedModel,
    settings: &EngineSettings,
) -> PrefixCache<Option<usize>, KvState> {
    let per_token = model.kv_bytes_per_token();
    let budget = settings.prefix_cache_bytes.unwrap_or_else(|| {
        prefix_cache::default_budget(per_token, prefix_cache::physical_memory())
    });
    PrefixCache::new(budget, per_token)
}

/// Probabilities of two logits against each other.
fn pair(a: f32, b: f32) -> (f64, f64) {
    let m = a.max(b);
    let (ea, eb) = (f64::from(a - m).exp(), f64::from(b - m).exp());
    (ea / (ea + eb), eb / (ea + eb))
}

/// The probability of `id` among `allowed` (0 when it is not allowed).
fn softmax_share(logits: &[f32], allowed: &[u32], id: u32) -> f64 {
    let top = allowed
        .iter()
        .map(|&i| logits[i as usize])
        .fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = allowed
        .iter()
        .map(|&i| f64::from(logits[i as usize] - top).exp())
        .sum();
    if allowed.contains(&id) {
        f64::from(logits[id as usize] - top).exp() / sum
    } else {
        0.0
    }
}

/// A score in the grammar's form: `0`, `1`, or `0.` and up to three digits.
fn format_score(s: f64) -> String {
    let milli = (s.clamp(0.0, 1.0) * 1000.0).round() as u32;
    match milli {
        0 => "0".into(),
        1000 => "1".into(),
        m => format!("0.{m:03}").trim_end_matches('0').to_string(),
    }
}

/// The sampling generator of one prompt: the shared seeded generator, seeded by the settings'
/// seed and the prompt's tokens, so sampling is reproducible per prompt, whatever ran before it.
fn prompt_rng(seed: u64, prompt: &[u32]) -> Rng {
    let mut h = seed ^ 0x9E37_79B9_7F4A_7C15;
    for &t in prompt {
        h = (h ^ u64::from(t)).wrapping_mul(0x0100_0000_01B3);
    }
    Rng::new(h)
}

/// The argmax at temperature 0, else a draw from softmax(logits / temperature). Masked (-inf)
/// entries are never picked.
fn pick(rng: &mut Rng, logits: &[f32], temperature: f64) -> u32 {
    let best = logits
        .iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1))
        .map_or(0, |(i, _)| i);
    if temperature <= 0.0 {
        return best as u32;
    }
    let top = f64::from(logits[best]);
    let weights: Vec<f64> = logits
        .iter()
        .map(|&l| ((f64::from(l) - top) / temperature).exp())
        .collect();
    let mut r = rng.uniform() * weights.iter().sum::<f64>();
    for (i, w) in weights.iter().enumerate() {
        if *w > 0.0 && r < *w {
            return i as u32;
        }
        r -= w;
    }
    best as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scores_are_written_as_the_grammar_wants() {
        for (s, want) in [
            (0.0, "0"),
            (1.0, "1"),
            (0.25, "0.25"),
            (0.1234, "0.123"),
            (0.9996, "1"),
            (0.0004, "0"),
            (0.5, "0.5"),
            (1.7, "1"),
            (-0.2, "0"),
        ] {
            assert_eq!(format_score(s), want);
        }
        let (a, b) = pair(0.0, 0.0);
        assert!((a - 0.5).abs() < 1e-12 && (b - 0.5).abs() < 1e-12);
        let l = [1.0, 1.0, 50.0];
        assert!((softmax_share(&l, &[0, 1], 0) - 0.5).abs() < 1e-9);
        assert_eq!(softmax_share(&l, &[0, 1], 2), 0.0);
    }

    #[test]
    fn picking_is_greedy_at_zero_and_never_takes_masked_tokens() {
        let ninf = f32::NEG_INFINITY;
        let mut rng = prompt_rng(1, &[1, 2]);
        assert_eq!(pick(&mut rng, &[0.1, 3.0, ninf, 2.9], 0.0), 1);
        let logits = [1.0, ninf, 1.0, ninf, 0.5];
        let mut seen = [0usize; 5];
        for _ in 0..2000 {
            seen[pick(&mut rng, &logits, 1.0) as usize] += 1;
        }
        assert_eq!((seen[1], seen[3]), (0, 0));
        assert!(seen[0] > 500 && seen[2] > 500 && seen[4] > 200, "{seen:?}");
        // The same prompt and seed draw the same tokens.
        let draw = |seed| {
            let mut r = prompt_rng(seed, &[5, 6]);
            (0..20)
                .map(|_| pick(&mut r, &logits, 1.0))
                .collect::<Vec<_>>()
        };
        assert_eq!(draw(3), draw(3));
        assert_ne!(draw(3), draw(4));
    }
}
