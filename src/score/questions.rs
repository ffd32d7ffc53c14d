//! Judging by token probabilities (local and remote judges): pointwise — each distinct
//! trajectory alone, one yes/no question, score P(yes) / (P(yes) + P(no)) — and pairwise — two
//! at a time, "which is better, 1 or 2?", each pair in both orders, scores by Bradley–Terry. One
//! group is one sample and one cached verdict, as a listwise verdict is, and each prompt's
//! reading is cached too ([`super::readings`]); the prompts share the group's system message
//! and context, so a judge with a prefix cache prefills that prefix once and reuses it.

use serde_json::{json, Map};

use super::{Scorer, CACHE_SCHEMA};
use crate::domain::dedup::JudgeInput;
use crate::domain::prompt::{GroupExtras, JudgeMode, PromptError, Prompts, RenderedPrompt};
use crate::domain::rubric::Rubric;
use crate::domain::trajectory::content_hash;
use crate::judge::Judge;

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

/// The answers whose probabilities a probability mode reads, first the one that favours the
/// (first) trajectory shown: yes/no in pointwise mode, 1/2 in pairwise mode.
pub fn verdict_choices(mode: JudgeMode) -> Vec<Vec<String>> {
    match mode {
        JudgeMode::Pairwise => one_two(),
        _ => yes_no(),
    }
}

/// A group's questions as a local judge is asked them (see [`Scorer::questions`]).
#[derive(Debug, Clone)]
pub struct Questions {
    /// Each prompt's messages.
    pub prompts: Vec<Vec<crate::domain::prompt::ChatMessage>>,
    /// The candidates each prompt shows: pointwise one, pairwise (first, second).
    pub shows: Vec<Vec<usize>>,
    /// For each trajectory of the request, its candidate (identical trajectories share one).
    pub candidate_of: Vec<usize>,
}

/// What a probability-mode sample asks.
#[derive(Debug)]
pub(super) struct QuestionPlan {
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

/// Candidate scores from pairwise preferences by Bradley–Terry: `prefs[k]` is the probability
/// that the first of `pairs[k]` is better, counted as that fraction of a win. The strengths `p`
/// maximize the likelihood of those outcomes under P(a beats b) = p_a / (p_a + p_b), fitted by
/// Hunter's MM iteration; a candidate's score is its fitted chance of beating a member of the
/// group, averaged over the others, so it lies in (0, 1) and is ½ for a group of equals.
///
/// When every pair is asked equally often (groups up to [`ALL_PAIRS_UP_TO`]) this equals the
/// candidate's mean preference; on the ring schedule of larger groups it also weighs whom a
/// candidate met (a win over a strong candidate counts more). A candidate never compared
/// scores ½.
pub fn bradley_terry(m: usize, pairs: &[(usize, usize)], prefs: &[f64]) -> Vec<f64> {
    // Wins strictly inside (0, 1): the likelihood has no finite maximum for a candidate that
    // never wins (or never loses) a fraction, and a probability read from a softmax can round
    // to exactly 0 or 1.
    const EDGE: f64 = 1e-6;
    let mut wins = vec![0.0; m];
    let mut met = vec![vec![0.0; m]; m];
    for (&(a, b), &p) in pairs.iter().zip(prefs) {
        let p = p.clamp(EDGE, 1.0 - EDGE);
        wins[a] += p;
        wins[b] += 1.0 - p;
        met[a][b] += 1.0;
        met[b][a] += 1.0;
    }
    // Each candidate's opponents and how often it met them: an iteration costs the number of
    // comparisons, not m², in large groups on the ring schedule.
    let opponents: Vec<Vec<(usize, f64)>> = met
        .iter()
        .map(|row| {
            row.iter()
                .enumerate()
                .filter(|(_, &n)| n > 0.0)
                .map(|(j, &n)| (j, n))
                .collect()
        })
        .collect();
    let mut strength = vec![1.0; m];
    for _ in 0..10_000 {
        let next: Vec<f64> = (0..m)
            .map(|i| {
                let denom: f64 = opponents[i]
                    .iter()
                    .map(|&(j, n)| n / (strength[i] + strength[j]))
                    .sum();
                if denom > 0.0 {
                    wins[i] / denom
                } else {
                    strength[i]
                }
            })
            .collect();
        // Strengths are defined up to a factor: keep their geometric mean at 1.
        let log_mean = next.iter().map(|p| p.ln()).sum::<f64>() / m as f64;
        let next: Vec<f64> = next.iter().map(|p| p / log_mean.exp()).collect();
        let moved = next
            .iter()
            .zip(&strength)
            .map(|(a, b)| (a.ln() - b.ln()).abs())
            .fold(0.0, f64::max);
        strength = next;
        if moved < 1e-12 {
            break;
        }
    }
    (0..m)
        .map(|i| {
            if opponents[i].is_empty() {
                return 0.5;
            }
            let others = (0..m).filter(|&j| j != i);
            others
                .clone()
                .map(|j| strength[i] / (strength[i] + strength[j]))
                .sum::<f64>()
                / others.count() as f64
        })
        .collect()
}

/// Renders a sample's prompts for `mode`.
pub(super) fn plan_questions(
    prompts: &Prompts,
    mode: JudgeMode,
    input: &JudgeInput,
    rubric: &Rubric,
    extras: GroupExtras<'_>,
    opponents: usize,
) -> Result<QuestionPlan, PromptError> {
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
        .map(|o| prompts.render(name, input, o, rubric, extras))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(QuestionPlan {
        mode,
        prompts: rendered,
        pairs,
        template_version: prompts.version(name)?.to_string(),
    })
}

/// The cache key of a probability-mode verdict: judge identity, mode, template and what of the
/// rubric the judge reads, and every prompt asked (which embed the trajectories and the pairs).
pub(super) fn question_key(judge: &dyn Judge, question: &QuestionPlan, rubric: &Rubric) -> String {
    let mut m = Map::new();
    m.insert("schema".into(), json!(CACHE_SCHEMA));
    m.insert("judge".into(), judge.identity());
    m.insert("mode".into(), json!(question.mode.name()));
    if question.mode == JudgeMode::Pairwise {
        m.insert("scores".into(), json!("bradley_terry"));
    }
    if judge.settings().explains {
        m.insert("explain".into(), json!(true));
    }
    m.insert("template".into(), json!(question.template_version));
    m.insert("rubric".into(), json!(rubric.judge_version));
    let messages: Vec<_> = question.prompts.iter().map(|p| &p.messages).collect();
    m.insert("messages".into(), json!(messages));
    content_hash(&m)
}

impl Scorer {
    /// The prompts a local judge is asked for `req` in `mode` (pointwise or pairwise), rendered
    /// exactly as scoring renders them (dedup, rubric, templates), without asking anyone: what
    /// the judge trainer trains on, so training and serving see byte-identical prompts.
    pub fn questions(
        &self,
        req: &super::ScoreRequest,
        mode: JudgeMode,
        opponents: usize,
    ) -> Result<Questions, super::ScoreError> {
        let rubric = self.rubric(&req.rubric)?;
        let input = JudgeInput::build(&req.trajectories, &self.stage.dedup);
        let extras = GroupExtras {
            tools: req.tools.as_ref(),
            reference: req.reference.as_deref(),
            reply_schema: false,
        };
        let plan = plan_questions(
            &self.stage.prompts,
            mode,
            &input,
            &rubric,
            extras,
            opponents,
        )?;
        let shows = match mode {
            JudgeMode::Pairwise => plan.pairs.iter().map(|&(a, b)| vec![a, b]).collect(),
            _ => (0..plan.prompts.len()).map(|c| vec![c]).collect(),
        };
        let mut candidate_of = vec![0; req.trajectories.len()];
        for (c, cand) in input.candidates.iter().enumerate() {
            for &i in &cand.members {
                candidate_of[i] = c;
            }
        }
        Ok(Questions {
            prompts: plan.prompts.into_iter().map(|p| p.messages).collect(),
            shows,
            candidate_of,
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
    fn bradley_terry_by_hand() {
        let close = |got: &[f64], want: &[f64]| {
            got.len() == want.len() && got.iter().zip(want).all(|(g, w)| (g - w).abs() < 1e-9)
        };
        // Three candidates, all six ordered pairs. P(first better):
        // (0,1) .9 (0,2) .8 (1,0) .3 (1,2) .6 (2,0) .1 (2,1) .5
        // Every pair met twice, so the fitted win rate is the share of wins (the likelihood
        // equations say Σ_j 2·p_i/(p_i+p_j) = W_i):
        // 0: .9 + .8 + (1-.3) + (1-.1) = 3.3 over 4 → .825
        // 1: (1-.9) + .3 + .6 + (1-.5) = 1.5 / 4 → .375
        // 2: (1-.8) + (1-.6) + .1 + .5 = 1.2 / 4 → .3
        let pairs = pair_schedule(3, 4);
        let s = bradley_terry(3, &pairs, &[0.9, 0.8, 0.3, 0.6, 0.1, 0.5]);
        assert!(close(&s, &[0.825, 0.375, 0.3]), "{s:?}");
        // A chain: 0 meets 1 and 1 meets 2 (both orders), never 0 and 2. 0 beats 1 and 1 beats
        // 2 two times in three: p0 = 2·p1 = 4·p2, so strengths 4, 2, 1 and win rates
        // 0: (4/6 + 4/5)/2 = 11/15, 1: (2/6 + 2/3)/2 = 1/2, 2: (1/5 + 1/3)/2 = 4/15.
        // The mean preference would give 2/3, 1/2, 1/3: it ignores that 0 > 1 > 2.
        let chain = [(0, 1), (1, 0), (1, 2), (2, 1)];
        let s = bradley_terry(3, &chain, &[2.0 / 3.0, 1.0 / 3.0, 2.0 / 3.0, 1.0 / 3.0]);
        assert!(close(&s, &[11.0 / 15.0, 0.5, 4.0 / 15.0]), "{s:?}");
        // A judge that always prefers the first shown: both orders cancel, every score ½.
        let s = bradley_terry(3, &pairs, &[1.0; 6]);
        assert!(s.iter().all(|x| (x - 0.5).abs() < 1e-9), "{s:?}");
        // Nobody compared: ½ each.
        assert_eq!(bradley_terry(2, &[], &[]), vec![0.5, 0.5]);
        // One candidate always wins outright: finite scores, ordered, inside (0, 1).
        let s = bradley_terry(3, &pairs, &[1.0, 1.0, 0.0, 0.5, 0.0, 0.5]);
        assert!(
            s.iter().all(|x| *x > 0.0 && *x < 1.0) && s[0] > 0.99,
            "{s:?}"
        );
    }
}
