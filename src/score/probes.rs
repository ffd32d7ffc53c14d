//! Judging by token probabilities (local judges): pointwise — each distinct trajectory alone,
//! one yes/no question, score P(yes) / (P(yes) + P(no)) — and pairwise — two at a time, "which
//! is better, 1 or 2?", each pair in both orders, a trajectory's score its mean preference. One
//! group is one sample and one cached verdict, as a listwise verdict is; the prompts share the
//! group's system message and context, so a local judge prefills that prefix once and reuses it.

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{json, Map};

use super::{Scorer, CACHE_SCHEMA};
use crate::dedup::JudgeInput;
use crate::judge::{Judge, JudgeError};
use crate::prompt::{JudgeMode, PromptError, Prompts, RenderedPrompt};
use crate::rubric::Rubric;
use crate::store::{StoredScore, StoredVerdict};
use crate::trajectory::content_hash;

/// Groups up to this many distinct trajectories are judged on every ordered pair; larger ones on
/// a fixed schedule (see [`pair_schedule`]).
pub const ALL_PAIRS_UP_TO: usize = 8;

/// The answers read in pointwise mode: yes first.
fn yes_no() -> Vec<Vec<String>> {
    let words = |w: &[&str]| w.iter().map(|s| s.to_string()).collect();
    vec![
        words(&["yes", "Yes", "YES", " yes", " Yes"]),
        words(&["no", "No", "NO", " no", " No"]),
    ]
}

/// The answers read in pairwise mode: the first trajectory shown, then the second.
fn one_two() -> Vec<Vec<String>> {
    vec![
        vec!["1".to_string(), " 1".to_string()],
        vec!["2".to_string(), " 2".to_string()],
    ]
}

/// What a probability-mode sample asks.
#[derive(Debug)]
pub(super) struct ProbePlan {
    pub mode: JudgeMode,
    /// Pointwise: one prompt per candidate. Pairwise: one per entry of `pairs`.
    pub prompts: Vec<RenderedPrompt>,
    /// Pairwise: (shown first, shown second) candidate indices.
    pub pairs: Vec<(usize, usize)>,
    pub template_version: String,
}

/// The ordered pairs a group of `m` candidates is judged on: every ordered pair up to
/// [`ALL_PAIRS_UP_TO`]; above it, each candidate meets its `opponents` nearest neighbours on a
/// ring (half on each side, at least one) in both orders — a fixed schedule, so the same group
/// always asks the same pairs.
pub fn pair_schedule(m: usize, opponents: usize) -> Vec<(usize, usize)> {
    let mut pairs = Vec::new();
    if m <= ALL_PAIRS_UP_TO {
        for a in 0..m {
            for b in 0..m {
                if a != b {
                    pairs.push((a, b));
                }
            }
        }
        return pairs;
    }
    let reach = opponents.div_ceil(2).clamp(1, (m - 1) / 2);
    for a in 0..m {
        for d in 1..=reach {
            let b = (a + d) % m;
            pairs.push((a, b));
            pairs.push((b, a));
        }
    }
    pairs
}

/// Candidate scores from pairwise preferences: `prefs[k]` is the probability that the first of
/// `pairs[k]` is better. Each candidate's score is its mean preference over every comparison it
/// took part in (as first or second); a candidate never compared scores ½.
pub fn mean_preferences(m: usize, pairs: &[(usize, usize)], prefs: &[f64]) -> Vec<f64> {
    let mut won = vec![0.0; m];
    let mut met = vec![0usize; m];
    for (&(a, b), &p) in pairs.iter().zip(prefs) {
        won[a] += p;
        won[b] += 1.0 - p;
        met[a] += 1;
        met[b] += 1;
    }
    won.iter()
        .zip(&met)
        .map(|(w, &n)| if n == 0 { 0.5 } else { w / n as f64 })
        .collect()
}

/// Renders a sample's prompts for `mode`.
pub(super) fn plan_probes(
    prompts: &Prompts,
    mode: JudgeMode,
    input: &JudgeInput,
    rubric: &Rubric,
    tools: Option<&serde_json::Value>,
    reference: Option<&str>,
    opponents: usize,
) -> Result<ProbePlan, PromptError> {
    let name = mode.prompt();
    let m = input.candidates.len();
    let (pairs, orders): (Vec<(usize, usize)>, Vec<Vec<usize>>) = match mode {
        JudgeMode::Pairwise => {
            let pairs = pair_schedule(m, opponents);
            let orders = pairs.iter().map(|&(a, b)| vec![a, b]).collect();
            (pairs, orders)
        }
        _ => (Vec::new(), (0..m).map(|c| vec![c]).collect()),
    };
    let rendered = orders
        .iter()
        .map(|o| prompts.render(name, input, o, rubric, tools, reference))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(ProbePlan {
        mode,
        prompts: rendered,
        pairs,
        template_version: prompts.version(name)?.to_string(),
    })
}

/// The cache key of a probability-mode verdict: judge identity, mode, template and what of the
/// rubric the judge reads, and every prompt asked (which embed the trajectories and the pairs).
pub(super) fn probe_key(judge: &Judge, probe: &ProbePlan, rubric: &Rubric) -> String {
    let mut m = Map::new();
    m.insert("schema".into(), json!(CACHE_SCHEMA));
    m.insert("judge".into(), judge.identity());
    m.insert("mode".into(), json!(probe.mode.name()));
    m.insert("template".into(), json!(probe.template_version));
    m.insert("rubric".into(), json!(rubric.judge_version));
    let messages: Vec<_> = probe.prompts.iter().map(|p| &p.messages).collect();
    m.insert("messages".into(), json!(messages));
    content_hash(&m)
}

impl Scorer {
    /// Asks a probability-mode sample: every prompt in turn (the engine runs one sequence at a
    /// time anyway, and in turn each reuses the prefix the last one left), bounded by the
    /// judge's verdict deadline.
    /// `m` is the group's number of distinct trajectories (candidates).
    pub(super) async fn ask_probes(
        &self,
        judge: &Judge,
        m: usize,
        probe: &ProbePlan,
    ) -> Result<StoredVerdict, JudgeError> {
        let name = judge.info().name;
        let deadline = judge.deadline();
        let choices = match probe.mode {
            JudgeMode::Pairwise => one_two(),
            _ => yes_no(),
        };
        let asking = async {
            let (mut prompt_tokens, mut cached) = (0u64, 0u64);
            let mut firsts = Vec::with_capacity(probe.prompts.len());
            for p in &probe.prompts {
                let r = judge.choice_probabilities(&p.messages, &choices).await?;
                prompt_tokens += r.prompt_tokens;
                cached += r.cached_prompt_tokens;
                firsts.push(r.shares[0]);
            }
            Ok::<_, JudgeError>((firsts, prompt_tokens, cached))
        };
        let (firsts, prompt_tokens, cached_prompt_tokens) =
            tokio::time::timeout(deadline, asking).await.map_err(|_| {
                JudgeError::Timeout(format!(
                    "judge {name:?}: verdict deadline of {:.1}s passed",
                    deadline.as_secs_f64()
                ))
            })??;
        let scores = match probe.mode {
            JudgeMode::Pairwise => mean_preferences(m, &probe.pairs, &firsts),
            _ => firsts,
        };
        Ok(StoredVerdict {
            scores: scores
                .into_iter()
                .enumerate()
                .map(|(c, s)| StoredScore {
                    id: (c + 1).to_string(),
                    score: Some(s),
                    explanation: String::new(),
                    items: Vec::new(),
                })
                .collect(),
            prompt_tokens,
            completion_tokens: 0,
            cached_prompt_tokens,
            calls: probe.prompts.len() as u32,
            counted_prompt_tokens: prompt_tokens,
            counted_prompt_tokens_without_dedup: prompt_tokens,
            model: judge.info().model,
            created_unix: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            retries: Default::default(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_groups_meet_every_pair_in_both_orders() {
        let p = pair_schedule(3, 4);
        assert_eq!(p, vec![(0, 1), (0, 2), (1, 0), (1, 2), (2, 0), (2, 1)]);
        assert_eq!(pair_schedule(8, 4).len(), 56);
        assert!(pair_schedule(1, 4).is_empty());
    }

    #[test]
    fn large_groups_meet_their_opponents_in_both_orders() {
        for (m, opp) in [(9, 4), (16, 4), (12, 2), (10, 1), (9, 100)] {
            let p = pair_schedule(m, opp);
            for a in 0..m {
                let met: std::collections::BTreeSet<usize> =
                    p.iter().filter(|(x, _)| *x == a).map(|(_, y)| *y).collect();
                assert!(
                    met.len() >= opp.min(m - 1).min(2 * ((m - 1) / 2)),
                    "{m} {opp}"
                );
                for &b in &met {
                    assert!(p.contains(&(b, a)), "{a} vs {b} asked in one order only");
                    assert_ne!(a, b);
                }
            }
            // No pair asked twice.
            let set: std::collections::BTreeSet<_> = p.iter().collect();
            assert_eq!(set.len(), p.len(), "{m} {opp}");
        }
    }

    #[test]
    fn mean_preference_by_hand() {
        // Three candidates, all six ordered pairs. P(first better):
        // (0,1) .9 (0,2) .8 (1,0) .3 (1,2) .6 (2,0) .1 (2,1) .5
        // 0: .9 + .8 + (1-.3) + (1-.1) = 3.3 over 4 → .825
        // 1: (1-.9) + .3 + .6 + (1-.5) = 1.5 / 4 → .375
        // 2: (1-.8) + (1-.6) + .1 + .5 = 1.2 / 4 → .3
        let pairs = pair_schedule(3, 4);
        let s = mean_preferences(3, &pairs, &[0.9, 0.8, 0.3, 0.6, 0.1, 0.5]);
        for (got, want) in s.iter().zip([0.825, 0.375, 0.3]) {
            assert!((got - want).abs() < 1e-12, "{s:?}");
        }
        // A judge that always prefers the first shown: both orders cancel, every score ½.
        let s = mean_preferences(3, &pairs, &[1.0; 6]);
        assert!(s.iter().all(|x| (x - 0.5).abs() < 1e-12), "{s:?}");
        assert_eq!(mean_preferences(2, &[], &[]), vec![0.5, 0.5]);
    }
}
