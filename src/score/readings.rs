//! Probability readings cached one prompt at a time. A probability-mode verdict is stored whole
//! under the group's key, and each of its prompts' readings under a key of its own (the judge's
//! identity, the answers read, the prompt's messages), so a prompt already asked in any group
//! is not asked again: the reversed order `gavel eval` judges (a pointwise prompt shows one
//! trajectory, always as "1"; pairwise asks every pair in both orders), a trajectory that comes
//! back in another group with the same shared material, a group re-asked with one trajectory
//! changed.
//!
//! A reading is stored as a [`StoredVerdict`] with one score per answer, that answer's
//! probability mass before renormalising (`id` the answer's first spelling, `score` its mass):
//! the shares and the coverage both follow from the masses.

use serde_json::{json, Map};

use super::judge_stage::JudgeStage;
use super::CACHE_SCHEMA;
use crate::domain::prompt::ChatMessage;
use crate::domain::trajectory::content_hash;
use crate::judge::{ChoiceProbabilities, Judge, JudgeError, JudgeFailure, ProbabilityJudge};
use crate::store::{StoredScore, StoredVerdict};

/// One prompt's reading, from the judge or the store.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Reading {
    /// The first answer's share of the answers' mass (P(yes), P("1")).
    pub first: f64,
    /// The answers' total probability.
    pub coverage: f64,
}

/// What asking the missing readings cost; nothing for those from the store.
#[derive(Debug, Default, PartialEq)]
pub(super) struct ReadCost {
    pub prompts_asked: u32,
    pub prompt_tokens: u64,
    pub cached_prompt_tokens: u64,
    pub forward_passes: u64,
}

/// The store key of `judge`'s reading of `messages` for `choices`; apart from verdicts' keys by
/// its `kind`.
fn reading_key(judge: &dyn Judge, choices: &[Vec<String>], messages: &[ChatMessage]) -> String {
    let mut m = Map::new();
    m.insert("schema".into(), json!(CACHE_SCHEMA));
    m.insert("kind".into(), json!("probability_reading"));
    m.insert("judge".into(), judge.identity());
    m.insert("choices".into(), json!(choices));
    m.insert("messages".into(), json!(messages));
    content_hash(&m)
}

/// The record a reading is stored as: each answer's mass.
fn to_stored(r: &ChoiceProbabilities, choices: &[Vec<String>], model: &str) -> StoredVerdict {
    StoredVerdict {
        scores: choices
            .iter()
            .zip(&r.shares)
            .map(|(c, share)| StoredScore {
                id: c.first().cloned().unwrap_or_default(),
                score: Some(share * r.coverage),
                explanation: String::new(),
                items: Vec::new(),
                confidence: None,
            })
            .collect(),
        prompt_tokens: r.prompt_tokens,
        completion_tokens: 0,
        cached_prompt_tokens: r.cached_prompt_tokens,
        forward_passes: r.forward_passes,
        calls: 1,
        counted_prompt_tokens: 0,
        counted_prompt_tokens_without_dedup: 0,
        model: model.to_string(),
        created_unix: crate::store::unix_now(),
        retries: Default::default(),
        clamped_scores: 0,
    }
}

/// The reading a stored record holds, if it is one for `choices` (anything else under the key
/// is a miss, asked again and overwritten).
fn from_stored(v: &StoredVerdict, choices: &[Vec<String>]) -> Option<Reading> {
    if v.scores.len() != choices.len() {
        return None;
    }
    let mut masses = Vec::with_capacity(choices.len());
    for (s, c) in v.scores.iter().zip(choices) {
        if Some(&s.id) != c.first() {
            return None;
        }
        masses.push(s.score.filter(|m| m.is_finite() && *m >= 0.0)?);
    }
    let coverage: f64 = masses.iter().sum();
    (coverage > 0.0).then(|| Reading {
        first: masses[0] / coverage,
        coverage,
    })
}

impl JudgeStage {
    /// Each prompt's reading, in order: from the store where it is there, the rest asked of
    /// `reader` together (a local judge runs them on their shared prefix) and stored. A store
    /// that fails to read or write costs a judge call, never a verdict: it is logged, and the
    /// group's own verdict is still stored (or its failure reported) by the caller.
    pub(super) async fn read_prompts(
        &self,
        judge: &dyn Judge,
        reader: &dyn ProbabilityJudge,
        prompts: &[Vec<ChatMessage>],
        choices: &[Vec<String>],
    ) -> Result<(Vec<Reading>, ReadCost), JudgeFailure> {
        let keys: Vec<String> = prompts
            .iter()
            .map(|p| reading_key(judge, choices, p))
            .collect();
        // Read at once: a shared store answers each over the network, and a pairwise group of
        // 8 has 56 prompts; one after another, they would add 56 round trips to every group.
        let stored = futures::future::join_all(keys.iter().map(|k| self.store.get(k))).await;
        let mut readings: Vec<Option<Reading>> = stored
            .into_iter()
            .map(|got| match got {
                Ok(v) => v.as_ref().and_then(|v| from_stored(v, choices)),
                Err(e) => {
                    tracing::warn!(error = %e, "probability reading: store read failed; asking the judge");
                    None
                }
            })
            .collect();
        let missing: Vec<usize> = (0..prompts.len())
            .filter(|&i| readings[i].is_none())
            .collect();
        let mut cost = ReadCost::default();
        if !missing.is_empty() {
            let asked = missing.iter().map(|&i| prompts[i].clone()).collect();
            let answers = reader.choice_probabilities(asked, choices).await?;
            let model = judge.settings().info.model.clone();
            let records: Vec<(usize, StoredVerdict)> = missing
                .iter()
                .zip(&answers)
                .map(|(&i, r)| (i, to_stored(r, choices, &model)))
                .collect();
            let written = futures::future::join_all(
                records.iter().map(|(i, v)| self.store.put(&keys[*i], v)),
            )
            .await;
            if let Some(Err(e)) = written.into_iter().find(Result::is_err) {
                tracing::warn!(error = %e, "probability reading: store write failed");
            }
            for (&i, r) in missing.iter().zip(&answers) {
                cost.prompts_asked += 1;
                cost.prompt_tokens += r.prompt_tokens;
                cost.cached_prompt_tokens += r.cached_prompt_tokens;
                cost.forward_passes += r.forward_passes;
                readings[i] = Some(Reading {
                    first: r.shares[0],
                    coverage: r.coverage,
                });
            }
        }
        let readings = readings
            .into_iter()
            .map(|r| {
                r.ok_or_else(|| {
                    JudgeError::InvalidOutput(format!(
                        "judge {:?} answered fewer readings than prompts asked",
                        judge.settings().info.name
                    ))
                })
            })
            .collect::<Result<_, _>>()?;
        Ok((readings, cost))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn choices() -> Vec<Vec<String>> {
        vec![
            vec!["yes".into(), "Yes".into()],
            vec!["no".into(), "No".into()],
        ]
    }

    /// P(first) 0.8 of a coverage of 0.5.
    fn reading() -> ChoiceProbabilities {
        ChoiceProbabilities {
            shares: vec![0.8, 0.2],
            coverage: 0.5,
            prompt_tokens: 10,
            cached_prompt_tokens: 4,
            forward_passes: 1,
        }
    }

    #[test]
    fn a_reading_survives_the_store() {
        let r = reading();
        let stored = to_stored(&r, &choices(), "m");
        assert_eq!(stored.scores[0].id, "yes");
        assert!((stored.scores[0].score.unwrap() - 0.4).abs() < 1e-12);
        let back = from_stored(&stored, &choices()).unwrap();
        assert!((back.first - 0.8).abs() < 1e-12 && (back.coverage - 0.5).abs() < 1e-12);
    }

    #[test]
    fn anything_else_under_the_key_is_a_miss() {
        let mut stored = to_stored(&reading(), &choices(), "m");
        let pairwise = vec![vec!["1".to_string()], vec!["2".to_string()]];
        assert_eq!(from_stored(&stored, &pairwise), None, "other answers");
        stored.scores[1].score = None;
        assert_eq!(from_stored(&stored, &choices()), None, "a mass missing");
        stored.scores[1].score = Some(0.0);
        stored.scores[0].score = Some(0.0);
        assert_eq!(from_stored(&stored, &choices()), None, "no mass at all");
        stored.scores.pop();
        assert_eq!(from_stored(&stored, &choices()), None, "too few answers");
    }
}
