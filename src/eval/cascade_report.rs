//! A cascade evaluated (`backend = "cascade"`): which stage decided how many judgings, how
//! right each stage was on what it decided, and the share of judgings the last stage never had
//! to make. Read from each response's `scores[i].judge` (the deciding stage). Accuracy against
//! the last stage alone, with a paired interval, is an ordinary comparison: evaluate the
//! cascade beside its last stage (`--judge CASCADE --judge LAST`).

use serde::Serialize;

use super::judged::{Combo, GroupRun, LabelledGroup};
use super::stats::{labelled_pairs, pair_credit};
use crate::domain::stats::tidy;

/// One set × cascade's split of the work.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CascadeResult {
    pub set: String,
    pub judge: String,
    pub rubric: String,
    /// Judgings with a verdict (groups × orders).
    pub judgings: usize,
    /// Each stage, cheapest first.
    pub stages: Vec<StageShare>,
    /// The share of judgings decided before the last stage: the last stage's judgings saved.
    pub last_stage_saved: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StageShare {
    pub stage: String,
    /// Judgings this stage decided, and their share.
    pub decided: usize,
    pub share: f64,
    /// Pairwise accuracy over the labelled pairs of the judgings it decided (none decided:
    /// `None`).
    pub pairwise_accuracy: Option<f64>,
}

/// The cascade result of `combo` on `runs` (one set's, or all), when its judge is a cascade
/// with these `stages`.
pub fn cascade_result(
    set: &str,
    combo: &Combo,
    stages: &[String],
    groups: &[LabelledGroup],
    runs: &[&GroupRun],
) -> CascadeResult {
    let mut decided = vec![0usize; stages.len()];
    let mut credit = vec![(0.0f64, 0usize); stages.len()];
    for run in runs {
        let labels = &groups[run.group].labels;
        let pairs = labelled_pairs(labels);
        for j in &run.judgings {
            let Ok(resp) = &j.outcome else { continue };
            let Some(stage) = resp.scores.first().and_then(|s| s.judge.as_deref()) else {
                continue;
            };
            let Some(k) = stages.iter().position(|s| s == stage) else {
                continue;
            };
            decided[k] += 1;
            let mut by_file = vec![None; j.order.len()];
            for (p, &i) in j.order.iter().enumerate() {
                by_file[i] = resp.rewards.get(p).copied().flatten();
            }
            for &(better, worse) in &pairs {
                if let (Some(b), Some(w)) = (by_file[better], by_file[worse]) {
                    credit[k].0 += pair_credit(b, w);
                    credit[k].1 += 1;
                }
            }
        }
    }
    let judgings: usize = decided.iter().sum();
    let share = |n: usize| {
        if judgings == 0 {
            0.0
        } else {
            tidy(n as f64 / judgings as f64)
        }
    };
    let last = stages.len().saturating_sub(1);
    CascadeResult {
        set: set.to_string(),
        judge: combo.judge.clone(),
        rubric: combo.rubric.clone(),
        judgings,
        stages: stages
            .iter()
            .enumerate()
            .map(|(k, stage)| StageShare {
                stage: stage.clone(),
                decided: decided[k],
                share: share(decided[k]),
                pairwise_accuracy: (credit[k].1 > 0)
                    .then(|| tidy(credit[k].0 / credit[k].1 as f64)),
            })
            .collect(),
        last_stage_saved: share(judgings - decided.get(last).copied().unwrap_or(0)),
    }
}

/// The text lines of one result.
pub fn text_lines(r: &CascadeResult) -> Vec<String> {
    let mut lines = vec![format!(
        "cascade · {} · {} · {}: {} judgings, the last stage's saved on {:.3}",
        r.set, r.judge, r.rubric, r.judgings, r.last_stage_saved
    )];
    for s in &r.stages {
        let acc = s
            .pairwise_accuracy
            .map_or("—".to_string(), |a| format!("{a:.3}"));
        lines.push(format!(
            "  {:<24} decided {:>5} ({:.3}) · pairwise accuracy there {acc}",
            s.stage, s.decided, s.share
        ));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::choice::ModeAsked;
    use crate::eval::judged::Judging;
    use crate::score::{ScoreResponse, TrajectoryScore, Usage, VersionInfo};

    fn response(rewards: &[f64], stage: &str) -> ScoreResponse {
        ScoreResponse {
            rewards: rewards.iter().map(|r| Some(*r)).collect(),
            advantages: vec![0.0; rewards.len()],
            scores: rewards
                .iter()
                .enumerate()
                .map(|(i, r)| TrajectoryScore {
                    trajectory_id: (i + 1).to_string(),
                    score: Some(*r),
                    explanation: String::new(),
                    components: Default::default(),
                    reasons: Default::default(),
                    items: Vec::new(),
                    disagreement: None,
                    confidence: None,
                    judge: Some(stage.to_string()),
                    judges: Default::default(),
                })
                .collect(),
            usage: Usage::default(),
            rubric: VersionInfo {
                name: "r".into(),
                version: "v".into(),
            },
            template: None,
            judges: Vec::new(),
            judge_reference: None,
            error: None,
            reasoning_dropped: 0,
        }
    }

    #[test]
    fn each_stage_counts_what_it_decided_and_how_right_it_was() {
        let group = |labels: Vec<f64>| LabelledGroup {
            at: "f:1".into(),
            id: "g".into(),
            set: "s".into(),
            lengths: vec![1; labels.len()],
            answers: vec![String::new(); labels.len()],
            labels,
        };
        let groups = vec![group(vec![1.0, 0.0]), group(vec![0.0, 1.0])];
        let run = |g: usize, judgings: Vec<(Vec<usize>, ScoreResponse)>| GroupRun {
            group: g,
            combo: 0,
            attack: None,
            judgings: judgings
                .into_iter()
                .map(|(order, r)| Judging {
                    order,
                    outcome: Ok(r),
                    seconds: 0.0,
                })
                .collect(),
        };
        // Group 0: the fast stage, right in both orders. Group 1: escalated; the strong stage
        // right as given, wrong reversed (the reversed order shows trajectory 1 first).
        let runs = [
            run(
                0,
                vec![
                    (vec![0, 1], response(&[0.9, 0.1], "fast")),
                    (vec![1, 0], response(&[0.1, 0.9], "fast")),
                ],
            ),
            run(
                1,
                vec![
                    (vec![0, 1], response(&[0.2, 0.8], "strong")),
                    (vec![1, 0], response(&[0.2, 0.8], "strong")),
                ],
            ),
        ];
        let combo = Combo {
            judge: "c".into(),
            rubric: "r".into(),
            judge_mode: ModeAsked::AsConfigured,
        };
        let stages = vec!["fast".to_string(), "strong".to_string()];
        let refs: Vec<&GroupRun> = runs.iter().collect();
        let r = cascade_result("s", &combo, &stages, &groups, &refs);
        assert_eq!(r.judgings, 4);
        assert_eq!(r.stages[0].decided, 2);
        assert_eq!(r.stages[0].pairwise_accuracy, Some(1.0));
        assert_eq!(r.stages[1].decided, 2);
        assert_eq!(r.stages[1].pairwise_accuracy, Some(0.5));
        assert_eq!(r.last_stage_saved, 0.5);
        assert!(
            text_lines(&r)[0].contains("saved on 0.500"),
            "{:?}",
            text_lines(&r)
        );
    }
}
