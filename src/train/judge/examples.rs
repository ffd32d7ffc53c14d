//! Training examples for the judge: each a question exactly as the local judge is asked it
//! (rendered by the scorer's own [`Scorer::questions`]: dedup, rubric, templates, then the
//! model's chat template) and the probability its first answer (yes; 1) should get.
//!
//! - **Labels** (`gavel eval`'s files): pointwise, a trajectory's label scaled over its group
//!   (best 1, worst 0); pairwise, 1 when the first shown is labelled higher, 0 when lower, ½ on
//!   a tie. Every ordered pair is asked (both orders: swap augmentation against position bias).
//! - **A teacher** (another judge's scores, soft targets): pointwise its score; pairwise
//!   ½ + (first − second)/2.

use crate::domain::prompt::{ChatMessage, JudgeMode};
use crate::score::{ScoreRequest, Scorer};

use crate::train::TrainError;

/// One question and what its first answer's probability should be.
#[derive(Debug, Clone)]
pub struct Example {
    pub messages: Vec<ChatMessage>,
    pub mode: JudgeMode,
    /// Target probability of the first answer (yes; the first trajectory shown).
    pub target: f64,
    /// The group it came from (index in its split) and the candidates it shows.
    pub group: usize,
    pub shows: Vec<usize>,
    /// Whether the target favours the longer side: +1 when the answer it asks for goes with
    /// the longer trajectory (pairwise: the preferred one is the longer; pointwise: a better
    /// than middling trajectory longer than its group's middle, or a worse one shorter), −1
    /// when with the shorter, 0 on a tie of either. See [`length_weights`].
    pub length_sign: i8,
}

/// A group's truth per candidate (distinct trajectory): what its examples are made from and
/// what ranking accuracy is measured against.
#[derive(Debug, Clone)]
pub struct GroupTruth {
    /// Per candidate: its label or the teacher's score.
    pub scores: Vec<f64>,
    /// Whether `scores` are a teacher's (soft) rather than labels.
    pub soft: bool,
    /// The file the group came from (its name): dev figures are also given per file.
    pub file: String,
}

/// A group to learn from: its request and each trajectory's label or teacher score.
pub struct ExampleSource {
    pub at: String,
    /// The name of the file the group came from.
    pub file: String,
    pub request: ScoreRequest,
    pub per_trajectory: Vec<f64>,
    pub soft: bool,
}

/// The examples of `sources` in `modes`, with each group's truth by candidate.
pub fn build(
    scorer: &Scorer,
    sources: &[ExampleSource],
    modes: &[JudgeMode],
    opponents: usize,
) -> Result<(Vec<Example>, Vec<GroupTruth>), TrainError> {
    let mut examples = Vec::new();
    let mut truths = Vec::with_capacity(sources.len());
    let mut problems = Vec::new();
    for (g, src) in sources.iter().enumerate() {
        let mut truth: Option<GroupTruth> = None;
        for &mode in modes {
            let questions = match scorer.questions(&src.request, mode, opponents) {
                Ok(p) => p,
                Err(e) => {
                    problems.push(format!("{}: {e}", src.at));
                    break;
                }
            };
            let scores = candidate_scores(&questions.candidate_of, &src.per_trajectory);
            let lengths = candidate_lengths(&questions.candidate_of, &src.request);
            for (messages, shows) in questions.prompts.into_iter().zip(questions.shows) {
                let target = target(mode, &scores, &shows, src.soft);
                let length_sign = length_sign(mode, target, &lengths, &shows);
                examples.push(Example {
                    messages,
                    mode,
                    target,
                    group: g,
                    shows,
                    length_sign,
                });
            }
            truth.get_or_insert(GroupTruth {
                scores,
                soft: src.soft,
                file: src.file.clone(),
            });
        }
        truths.push(truth.unwrap_or(GroupTruth {
            scores: Vec::new(),
            soft: src.soft,
            file: src.file.clone(),
        }));
    }
    if !problems.is_empty() {
        return Err(TrainError::Input(problems.join("\n")));
    }
    Ok((examples, truths))
}

/// Each candidate's score: the mean over the trajectories it stands for.
fn candidate_scores(candidate_of: &[usize], per_trajectory: &[f64]) -> Vec<f64> {
    let m = candidate_of.iter().max().map_or(0, |c| c + 1);
    let mut sum = vec![0.0; m];
    let mut n = vec![0usize; m];
    for (&c, &s) in candidate_of.iter().zip(per_trajectory) {
        sum[c] += s;
        n[c] += 1;
    }
    sum.iter()
        .zip(&n)
        .map(|(s, &k)| s / k.max(1) as f64)
        .collect()
}

/// Each candidate's length: its first trajectory's messages as JSON, in bytes. Only the order
/// of lengths within a group is used, and the part the trajectories share counts the same in all.
fn candidate_lengths(candidate_of: &[usize], request: &ScoreRequest) -> Vec<usize> {
    let m = candidate_of.iter().max().map_or(0, |c| c + 1);
    let mut len = vec![None; m];
    for (&c, t) in candidate_of.iter().zip(&request.trajectories) {
        len[c].get_or_insert_with(|| serde_json::to_string(&t.messages).map_or(0, |j| j.len()));
    }
    len.into_iter().map(Option::unwrap_or_default).collect()
}

/// [`Example::length_sign`] of a question showing `shows` with target `target`.
fn length_sign(mode: JudgeMode, target: f64, lengths: &[usize], shows: &[usize]) -> i8 {
    let favours = |x: f64| {
        if x > 0.0 {
            1
        } else if x < 0.0 {
            -1
        } else {
            0
        }
    };
    let towards_first = favours(target - 0.5);
    let longer = match mode {
        JudgeMode::Pairwise => favours(lengths[shows[0]] as f64 - lengths[shows[1]] as f64),
        _ => {
            let mut sorted = lengths.to_vec();
            sorted.sort_unstable();
            let n = sorted.len();
            let middle = if n == 0 {
                0.0
            } else {
                (sorted[(n - 1) / 2] + sorted[n / 2]) as f64 / 2.0
            };
            favours(lengths[shows[0]] as f64 - middle)
        }
    };
    towards_first * longer
}

/// How many examples favour the longer and the shorter side, per training file and mode (in
/// the order first seen): `(file, mode, longer, shorter)`.
pub fn length_sides(
    examples: &[Example],
    truths: &[GroupTruth],
) -> Vec<(String, JudgeMode, usize, usize)> {
    let mut sides: Vec<(String, JudgeMode, usize, usize)> = Vec::new();
    for e in examples {
        let file = truths.get(e.group).map_or("", |t| t.file.as_str());
        let i = match sides.iter().position(|s| s.0 == file && s.1 == e.mode) {
            Some(i) => i,
            None => {
                sides.push((file.to_string(), e.mode, 0, 0));
                sides.len() - 1
            }
        };
        match e.length_sign {
            1 => sides[i].2 += 1,
            -1 => sides[i].3 += 1,
            _ => {}
        }
    }
    sides
}

/// Per-example loss weights that take length out of the labels, per training file and mode:
/// the examples whose target favours the longer side (`length_sign` +1) and those that favour
/// the shorter (−1) weigh the same in all, each side scaled to half their joint count; the
/// others weigh 1. Per file, because a mixed run (QA balanced, summaries 30 : 70) pooled
/// would leave the summaries' lean, which an adapter can tell apart and learn. Where one side
/// is absent there is nothing to balance, and its weights are 1. A set whose hallucinated
/// answers are mostly the longer otherwise teaches "prefer the shorter".
pub fn length_weights(examples: &[Example], truths: &[GroupTruth]) -> Vec<f64> {
    let sides = length_sides(examples, truths);
    examples
        .iter()
        .map(|e| {
            let file = truths.get(e.group).map_or("", |t| t.file.as_str());
            let Some(&(_, _, longer, shorter)) =
                sides.iter().find(|s| s.0 == file && s.1 == e.mode)
            else {
                return 1.0;
            };
            let half = (longer + shorter) as f64 / 2.0;
            match e.length_sign {
                _ if longer == 0 || shorter == 0 => 1.0,
                1 => half / longer as f64,
                -1 => half / shorter as f64,
                _ => 1.0,
            }
        })
        .collect()
}

/// The target of a question showing `shows` (see the module docs).
fn target(mode: JudgeMode, scores: &[f64], shows: &[usize], soft: bool) -> f64 {
    match (mode, soft) {
        (JudgeMode::Pairwise, false) => {
            let (a, b) = (scores[shows[0]], scores[shows[1]]);
            if a > b {
                1.0
            } else if a < b {
                0.0
            } else {
                0.5
            }
        }
        (JudgeMode::Pairwise, true) => {
            (0.5 + (scores[shows[0]] - scores[shows[1]]) / 2.0).clamp(0.0, 1.0)
        }
        (_, true) => scores[shows[0]].clamp(0.0, 1.0),
        (_, false) => {
            let lo = scores.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            if hi > lo {
                (scores[shows[0]] - lo) / (hi - lo)
            } else {
                0.5
            }
        }
    }
}

/// Weights that balance the classes: the examples' targets, per mode, count as much towards
/// the first answer as towards the second (`(w_first, w_second)` per mode, in `modes` order).
pub fn class_weights(examples: &[Example], modes: &[JudgeMode]) -> Vec<(f64, f64)> {
    modes
        .iter()
        .map(|&m| {
            let t: Vec<f64> = examples
                .iter()
                .filter(|e| e.mode == m)
                .map(|e| e.target)
                .collect();
            let mean = t.iter().sum::<f64>() / t.len().max(1) as f64;
            if mean <= 0.0 || mean >= 1.0 {
                (1.0, 1.0)
            } else {
                (0.5 / mean, 0.5 / (1.0 - mean))
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_follow_labels_and_teachers() {
        let s = [1.0, 0.0, 0.5];
        assert_eq!(target(JudgeMode::Pointwise, &s, &[0], false), 1.0);
        assert_eq!(target(JudgeMode::Pointwise, &s, &[2], false), 0.5);
        assert_eq!(target(JudgeMode::Pairwise, &s, &[1, 0], false), 0.0);
        assert_eq!(target(JudgeMode::Pairwise, &s, &[0, 1], false), 1.0);
        assert_eq!(
            target(JudgeMode::Pairwise, &[0.3, 0.3], &[0, 1], false),
            0.5
        );
        let t = [0.9, 0.2];
        assert_eq!(target(JudgeMode::Pointwise, &t, &[1], true), 0.2);
        assert!((target(JudgeMode::Pairwise, &t, &[0, 1], true) - 0.85).abs() < 1e-12);
        assert!((target(JudgeMode::Pairwise, &t, &[1, 0], true) - 0.15).abs() < 1e-12);
    }

    #[test]
    fn identical_trajectories_share_a_candidate_score() {
        assert_eq!(
            candidate_scores(&[0, 1, 0], &[1.0, 0.0, 0.0]),
            vec![0.5, 0.0]
        );
    }

    #[test]
    fn classes_are_balanced_per_mode() {
        let ex = |mode, target| Example {
            messages: Vec::new(),
            mode,
            target,
            group: 0,
            shows: vec![0],
            length_sign: 0,
        };
        let examples = vec![
            ex(JudgeMode::Pointwise, 1.0),
            ex(JudgeMode::Pointwise, 0.0),
            ex(JudgeMode::Pointwise, 0.0),
            ex(JudgeMode::Pointwise, 0.0),
        ];
        let w = class_weights(&examples, &[JudgeMode::Pointwise, JudgeMode::Pairwise]);
        // One yes, three no: the yes counts 2, each no 2/3, so both sides weigh 2.
        assert!((w[0].0 - 2.0).abs() < 1e-12 && (w[0].1 - 2.0 / 3.0).abs() < 1e-12);
        assert_eq!(w[1], (1.0, 1.0));
    }

    /// Pairwise, the sign follows whether the preferred trajectory is the longer; pointwise,
    /// whether a good one is longer (or a bad one shorter) than its group's middle.
    #[test]
    fn length_sign_says_which_side_the_target_favours() {
        let len = [300, 100];
        assert_eq!(length_sign(JudgeMode::Pairwise, 1.0, &len, &[0, 1]), 1);
        assert_eq!(length_sign(JudgeMode::Pairwise, 0.0, &len, &[0, 1]), -1);
        assert_eq!(length_sign(JudgeMode::Pairwise, 1.0, &len, &[1, 0]), -1);
        assert_eq!(length_sign(JudgeMode::Pairwise, 0.5, &len, &[0, 1]), 0);
        assert_eq!(length_sign(JudgeMode::Pairwise, 1.0, &[5, 5], &[0, 1]), 0);
        assert_eq!(length_sign(JudgeMode::Pointwise, 1.0, &len, &[0]), 1);
        assert_eq!(length_sign(JudgeMode::Pointwise, 0.0, &len, &[0]), -1);
        assert_eq!(length_sign(JudgeMode::Pointwise, 0.0, &len, &[1]), 1);
        // The middle of three: neither longer nor shorter.
        assert_eq!(length_sign(JudgeMode::Pointwise, 1.0, &[1, 2, 3], &[1]), 0);
    }

    /// In file a: three examples favour the longer and one the shorter, so each side weighs 2
    /// in all and the total is kept; file b (same mode) is balanced on its own; a mode with
    /// one side only is left as it is.
    #[test]
    fn length_weights_balance_the_longer_and_the_shorter_per_file() {
        let ex = |mode, group, length_sign| Example {
            messages: Vec::new(),
            mode,
            target: 1.0,
            group,
            shows: vec![0, 1],
            length_sign,
        };
        let truth = |file: &str| GroupTruth {
            scores: vec![1.0, 0.0],
            soft: false,
            file: file.into(),
        };
        let truths = [truth("a"), truth("b")];
        let p = JudgeMode::Pairwise;
        let q = JudgeMode::Pointwise;
        let examples = [
            ex(p, 0, 1),
            ex(p, 0, 1),
            ex(p, 0, 1),
            ex(p, 0, -1),
            ex(p, 0, 0),
            ex(p, 1, -1),
            ex(p, 1, -1),
            ex(p, 1, 1),
            ex(q, 0, 1),
            ex(q, 0, 0),
        ];
        let w = length_weights(&examples, &truths);
        let expect = [
            2.0 / 3.0,
            2.0 / 3.0,
            2.0 / 3.0,
            2.0,
            1.0,
            0.75,
            0.75,
            1.5,
            1.0,
            1.0,
        ];
        assert!(
            w.iter().zip(expect).all(|(a, b)| (a - b).abs() < 1e-12),
            "{w:?}"
        );
        assert_eq!(
            length_sides(&examples, &truths),
            [
                ("a".to_string(), p, 3, 1),
                ("b".to_string(), p, 1, 2),
                ("a".to_string(), q, 1, 0)
            ]
        );
    }
}
