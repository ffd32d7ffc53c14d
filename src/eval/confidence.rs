//! Accuracy by confidence, for combinations whose verdicts carry one (probability modes): is
//! the judge right more often where it is surer? What a cascade of judges needs before it lets
//! a judge decide what it is sure of. A labelled pair's confidence is the mean of its two
//! trajectories' (`scores[i].confidence`); pairs whose trajectories have none are left out.
//! [`judged_groups`] reads the same judgings whole, a group at a time, for `--calibrate`
//! ([`super::calibration_report`]).

use serde::Serialize;

use super::choice::ModeAsked;
use super::judged::{Combo, GroupRun, Judging, LabelledGroup};
use super::stats::labelled_pairs;
use crate::domain::stats::{cmp_eps, tidy};

/// How many equal-count bins the pairs are split into, from the least to the most confident.
const BINS: usize = 10;

/// One set × combination's accuracy by confidence.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ConfidenceResult {
    pub set: String,
    pub judge: String,
    pub rubric: String,
    pub judge_mode: ModeAsked,
    /// Labelled pairs with a confidence, over every order judged.
    pub pairs: usize,
    /// The pairs in ten equal-count bins by confidence, least confident first.
    pub deciles: Vec<ConfidenceBin>,
    /// Accuracy of the most confident 10 %, 20 %, ..., 100 % of the pairs.
    pub coverage: Vec<CoveragePoint>,
    /// The area under that accuracy–coverage curve: the mean, over k, of the accuracy of the k
    /// most confident pairs (1 − the area is the risk–coverage curve's). Equal to the accuracy
    /// when confidence says nothing; higher when the surest pairs are the right ones.
    pub area: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ConfidenceBin {
    /// The bin's lowest and highest confidence.
    pub from: f64,
    pub to: f64,
    pub pairs: usize,
    pub accuracy: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CoveragePoint {
    /// The share of pairs kept, most confident first.
    pub coverage: f64,
    pub pairs: usize,
    pub accuracy: f64,
}

impl ConfidenceResult {
    pub fn label(&self) -> String {
        super::judged::set_label(&self.set, &self.judge, &self.rubric, self.judge_mode)
    }

    /// Each decile's accuracy, least confident first: "0.50 0.62 …".
    pub fn decile_accuracies(&self) -> String {
        let d: Vec<String> = self
            .deciles
            .iter()
            .map(|b| format!("{:.2}", b.accuracy))
            .collect();
        d.join(" ")
    }
}

/// Each trajectory's reward and confidence in one judging, by file index; `None` for a judging
/// without a verdict.
type ByTrajectory = (Vec<Option<f64>>, Vec<Option<f64>>);

fn by_trajectory(j: &Judging) -> Option<ByTrajectory> {
    let resp = j.outcome.as_ref().ok()?;
    let n = j.order.len();
    let (mut reward, mut conf) = (vec![None; n], vec![None; n]);
    for (p, &i) in j.order.iter().enumerate() {
        reward[i] = resp.rewards.get(p).copied().flatten();
        conf[i] = resp.scores.get(p).and_then(|s| s.confidence);
    }
    Some((reward, conf))
}

/// (confidence, credit) for every labelled pair of every order of `runs` where both sides have
/// a confidence: credit 1 when the better-labelled trajectory scores higher, ½ on a tie.
fn scored_pairs(groups: &[LabelledGroup], runs: &[&GroupRun]) -> Vec<(f64, f64)> {
    let mut out = Vec::new();
    for run in runs {
        let labels = &groups[run.group].labels;
        for j in &run.judgings {
            let Some((reward, conf)) = by_trajectory(j) else {
                continue;
            };
            for (b, w) in labelled_pairs(labels) {
                let (Some(rb), Some(rw), Some(cb), Some(cw)) =
                    (reward[b], reward[w], conf[b], conf[w])
                else {
                    continue;
                };
                let credit = match cmp_eps(rb, rw) {
                    std::cmp::Ordering::Greater => 1.0,
                    std::cmp::Ordering::Equal => 0.5,
                    std::cmp::Ordering::Less => 0.0,
                };
                out.push(((cb + cw) / 2.0, credit));
            }
        }
    }
    out
}

/// One group judged, as a cascade stage sees it: the group's confidence, its least sure
/// trajectory's (a stage keeps or escalates a group whole), and for each labelled pair whether
/// the judge ranked it right (strictly: a tie in the rewards is not right).
#[derive(Debug, Clone, PartialEq)]
pub struct JudgedGroup {
    pub confidence: f64,
    pub right: Vec<bool>,
}

/// Each group of `runs` in its first order judged (as given: what a cascade sees), from the
/// same readings as [`scored_pairs`]. Its other orders are left out: a probability verdict
/// reads the same whatever the order, so they would count each pair again as if it were new
/// evidence. A group without a reward and a confidence for every trajectory is left out too: a
/// stage escalates it at any threshold, and it has no verdict to be right or wrong with.
pub fn judged_groups(groups: &[LabelledGroup], runs: &[&GroupRun]) -> Vec<JudgedGroup> {
    runs.iter()
        .filter_map(|run| {
            let (reward, conf) = by_trajectory(run.judgings.first()?)?;
            judged_group(&groups[run.group].labels, &reward, &conf)
        })
        .collect()
}

/// One judging's [`JudgedGroup`] from its rewards and confidences by file index.
fn judged_group(
    labels: &[f64],
    reward: &[Option<f64>],
    conf: &[Option<f64>],
) -> Option<JudgedGroup> {
    let reward: Vec<f64> = reward.iter().copied().collect::<Option<_>>()?;
    let confidence = conf
        .iter()
        .copied()
        .collect::<Option<Vec<f64>>>()?
        .into_iter()
        .reduce(f64::min)?;
    let right = labelled_pairs(labels)
        .into_iter()
        .map(|(b, w)| cmp_eps(reward[b], reward[w]).is_gt())
        .collect();
    Some(JudgedGroup { confidence, right })
}

/// The figures of `pairs` ((confidence, credit)); `None` without any.
pub fn by_confidence(
    mut pairs: Vec<(f64, f64)>,
) -> Option<(Vec<ConfidenceBin>, Vec<CoveragePoint>, f64)> {
    let n = pairs.len();
    if n == 0 {
        return None;
    }
    pairs.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mean = |v: &[(f64, f64)]| v.iter().map(|p| p.1).sum::<f64>() / v.len() as f64;
    let deciles = (0..BINS)
        .filter_map(|k| {
            let bin = &pairs[k * n / BINS..(k + 1) * n / BINS];
            (!bin.is_empty()).then(|| ConfidenceBin {
                from: tidy(bin[0].0),
                to: tidy(bin[bin.len() - 1].0),
                pairs: bin.len(),
                accuracy: tidy(mean(bin)),
            })
        })
        .collect();
    pairs.reverse();
    let coverage = (1..=BINS)
        .map(|k| {
            let kept = (k * n).div_ceil(BINS);
            CoveragePoint {
                coverage: tidy(k as f64 / BINS as f64),
                pairs: kept,
                accuracy: tidy(mean(&pairs[..kept])),
            }
        })
        .collect();
    let mut right = 0.0;
    let mut area = 0.0;
    for (k, p) in pairs.iter().enumerate() {
        right += p.1;
        area += right / (k + 1) as f64;
    }
    Some((deciles, coverage, tidy(area / n as f64)))
}

/// One set × combination's figures, `None` when its verdicts carry no confidence (listwise).
pub fn confidence_result(
    set: &str,
    combo: &Combo,
    groups: &[LabelledGroup],
    runs: &[&GroupRun],
) -> Option<ConfidenceResult> {
    let pairs = scored_pairs(groups, runs);
    let n = pairs.len();
    let (deciles, coverage, area) = by_confidence(pairs)?;
    Some(ConfidenceResult {
        set: set.to_string(),
        judge: combo.judge.clone(),
        rubric: combo.rubric.clone(),
        judge_mode: combo.judge_mode,
        pairs: n,
        deciles,
        coverage,
        area,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_judge_right_where_sure_has_a_larger_area_than_its_accuracy() {
        // 10 pairs: the 5 surest right, the 5 least sure wrong.
        let pairs: Vec<(f64, f64)> = (0..10)
            .map(|i| (i as f64 / 10.0, if i >= 5 { 1.0 } else { 0.0 }))
            .collect();
        let (deciles, coverage, area) = by_confidence(pairs).unwrap();
        assert_eq!(deciles.len(), 10);
        assert_eq!((deciles[0].accuracy, deciles[9].accuracy), (0.0, 1.0));
        assert_eq!((deciles[0].from, deciles[9].to), (0.0, 0.9));
        assert_eq!(
            coverage[4],
            CoveragePoint {
                coverage: 0.5,
                pairs: 5,
                accuracy: 1.0
            }
        );
        assert_eq!(coverage[9].accuracy, 0.5, "everything: the accuracy");
        // Mean over k of the top-k accuracy: 1 five times, then 5/6, 5/7, 5/8, 5/9, 5/10.
        let want = (5.0 + 5.0 / 6.0 + 5.0 / 7.0 + 5.0 / 8.0 + 5.0 / 9.0 + 0.5) / 10.0;
        assert!((area - want).abs() < 1e-9, "{area} {want}");
        // The same pairs with confidence upside down: the area falls below the accuracy.
        let flipped: Vec<(f64, f64)> = (0..10)
            .map(|i| (i as f64 / 10.0, if i < 5 { 1.0 } else { 0.0 }))
            .collect();
        assert!(by_confidence(flipped).unwrap().2 < 0.5);
        assert!(by_confidence(Vec::new()).is_none());
    }

    #[test]
    fn a_judged_group_is_as_sure_as_its_least_sure_trajectory() {
        // Labels 2 > 1 > 0; rewards rank 0 and 1 right, tie 1 and 2 (not right).
        let labels = [2.0, 1.0, 0.0];
        let reward = [Some(0.9), Some(0.4), Some(0.4)];
        let g = judged_group(&labels, &reward, &[Some(0.8), Some(0.3), Some(0.6)]).unwrap();
        assert_eq!(g.confidence, 0.3, "the minimum, not the mean");
        // labelled_pairs' order: (0, 1), (0, 2), (1, 2).
        assert_eq!(g.right, [true, true, false]);
        // A trajectory without a confidence or a reward: no group to keep.
        assert!(judged_group(&labels, &reward, &[Some(0.8), None, Some(0.6)]).is_none());
        let no_reward = [Some(0.9), None, Some(0.4)];
        assert!(judged_group(&labels, &no_reward, &[Some(0.8); 3]).is_none());
    }
}
