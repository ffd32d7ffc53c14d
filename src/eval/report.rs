//! The evaluation report: per set and overall, for each judge × rubric combination, the figures
//! of [`super::stats`] over the groups judged, and paired comparisons between combinations.

use std::collections::BTreeMap;

use serde::Serialize;

use super::attack_report::{attack_result, summarise, AttackResult, AttackSummary};
use super::calibration_report::{calibration_result, CalibrateOptions, CalibrationResult};
use super::choice::{ModeAsked, ScoreTarget};
use super::confidence::{confidence_result, ConfidenceResult};
use super::judged::{scores_of, Combo, GroupRun, LabelledGroup, BOOTSTRAP_SEED};
use super::stats::{
    accuracy_ci, group_figures, histogram, paired_difference_ci, positions, GroupFigures, Tally,
};
use crate::domain::attack::Attack;
use crate::domain::stats::{cmp_eps, mean, tidy};
use crate::score::Usage;
use crate::toolkit::html::clip;

/// Misranked groups kept per result (worst first).
const MAX_MISRANKED: usize = 50;
/// Characters kept of an explanation or answer in the misranked table.
const MAX_TEXT: usize = 400;
/// The name of the pooled set when there is more than one.
pub const ALL_SETS: &str = "all";

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Position {
    /// Share of pairs whose decision changes with the order (needs two or more orders).
    pub flip_rate: Option<f64>,
    pub accuracy_better_first: Option<f64>,
    pub accuracy_better_later: Option<f64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Length {
    /// Accuracy on pairs whose better trajectory is the longer / the shorter.
    pub accuracy_better_longer: Option<f64>,
    pub accuracy_better_shorter: Option<f64>,
    /// Accuracy of the trivial rules "prefer the longer" / "prefer the shorter" on the same
    /// pairs (pairs of equal length are left out of all four).
    pub prefer_longer: Option<f64>,
    pub prefer_shorter: Option<f64>,
    pub pairs_better_longer: usize,
    pub pairs_better_shorter: usize,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Calibration {
    /// Mean score of the best- and the worst-labelled trajectories.
    pub mean_best: Option<f64>,
    pub mean_worst: Option<f64>,
    /// Every score, in 10 bins over [0, 1].
    pub histogram: Vec<usize>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct EvalUsage {
    pub judge_calls: u64,
    pub cache_hits: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// Of `prompt_tokens`, those a local judge reused from a cached prefix (the rest it
    /// prefilled).
    pub cached_prompt_tokens: u64,
    /// Forward passes a local judge's model ran.
    pub forward_passes: u64,
    /// Calls that gave no verdict used (a judge that failed), and their tokens: apart from the
    /// figures above.
    pub failed_calls: u64,
    pub failed_prompt_tokens: u64,
    pub failed_completion_tokens: u64,
}

impl EvalUsage {
    fn add(&mut self, u: &Usage) {
        self.judge_calls += u.judge_calls;
        self.cache_hits += u.cache_hits;
        self.prompt_tokens += u.prompt_tokens;
        self.completion_tokens += u.completion_tokens;
        self.cached_prompt_tokens += u.cached_prompt_tokens;
        self.forward_passes += u.forward_passes;
        self.failed_calls += u.failed_calls;
        self.failed_prompt_tokens += u.failed_prompt_tokens;
        self.failed_completion_tokens += u.failed_completion_tokens;
    }
}

/// Pairwise accuracy of one reward component (`judge`, a verifier) on its own.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ComponentAccuracy {
    pub decisions: usize,
    pub pairwise_accuracy: Option<f64>,
}

/// A group with a wrongly ordered pair in its first order.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Misranked {
    pub id: String,
    pub at: String,
    pub accuracy: f64,
    pub trajectories: Vec<MisrankedTrajectory>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MisrankedTrajectory {
    pub label: f64,
    /// Its score in each order.
    pub scores: Vec<f64>,
    pub answer: String,
    pub explanation: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SetResult {
    pub set: String,
    pub judge: String,
    pub rubric: String,
    pub judge_mode: ModeAsked,
    pub groups: usize,
    /// Groups whose every order was judged with a reward for every trajectory.
    pub valid_groups: usize,
    /// Labelled (better, worse) pairs in the valid groups.
    pub pairs: usize,
    pub pairwise_accuracy: Option<f64>,
    pub ci95: Option<[f64; 2]>,
    pub top1_accuracy: Option<f64>,
    pub kendall_tau: Option<f64>,
    pub position: Position,
    pub length: Length,
    pub calibration: Calibration,
    /// Judgings (group × order) without a verdict: judge errors and null rewards. Never scores.
    pub invalid: usize,
    /// Invalid judgings by error type.
    pub errors: BTreeMap<String, usize>,
    /// The first message of each error type, whole: often the fix ("set OPENAI_API_KEY ...").
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub error_messages: BTreeMap<String, String>,
    /// Each reward component's own accuracy, when the rewards have more than one.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub components: BTreeMap<String, ComponentAccuracy>,
    pub usage: EvalUsage,
    /// Mean seconds to judge one group in all its orders.
    pub seconds_per_group: Option<f64>,
    pub misranked: Vec<Misranked>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ComparisonResult {
    pub set: String,
    pub a: Combo,
    pub b: Combo,
    /// Groups valid under both.
    pub groups: usize,
    pub accuracy_a: Option<f64>,
    pub accuracy_b: Option<f64>,
    /// accuracy(B) − accuracy(A), with its paired bootstrap interval.
    pub difference: Option<f64>,
    pub ci95: Option<[f64; 2]>,
    /// `b_better` / `a_better` only when the interval excludes 0, else `no_difference`.
    pub verdict: &'static str,
}

impl SetResult {
    /// `set · judge · rubric`, and the mode when one was asked for.
    pub fn label(&self) -> String {
        super::judged::set_label(&self.set, &self.judge, &self.rubric, self.judge_mode)
    }
}

impl ComparisonResult {
    /// The verdict in words.
    pub fn verdict_text(&self) -> &'static str {
        match self.verdict {
            "b_better" => "B is better",
            "a_better" => "A is better",
            _ => "no significant difference",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EvalReport {
    pub files: Vec<String>,
    /// What was ranked: `reward`, or a component's name.
    pub score: ScoreTarget,
    pub orders: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub permutations: Option<u32>,
    pub results: Vec<SetResult>,
    pub comparisons: Vec<ComparisonResult>,
    /// With `--attacks`: every attack's figures per set × combination, and the worst of each.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub attacks: Vec<AttackResult>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub attack_summary: Vec<AttackSummary>,
    /// Per set × combination whose verdicts carry a confidence (probability modes): accuracy
    /// by confidence and the accuracy–coverage curve.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub confidence: Vec<ConfidenceResult>,
    /// With `--calibrate`: per set × combination, the threshold a cascade stage would use (or
    /// why there is none).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub calibration: Vec<CalibrationResult>,
    /// Per set × cascade evaluated: which stage decided how much, and how right it was there.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cascades: Vec<super::cascade_report::CascadeResult>,
}

/// The component values per order (by file index), for components present everywhere.
fn component_tallies(run: &GroupRun, labels: &[f64], into: &mut BTreeMap<String, Tally>) {
    let pairs = super::stats::labelled_pairs(labels);
    for j in &run.judgings {
        let Ok(resp) = &j.outcome else { continue };
        let mut by_name: BTreeMap<&str, Vec<Option<f64>>> = BTreeMap::new();
        for (p, &i) in j.order.iter().enumerate() {
            for (name, v) in resp
                .scores
                .get(p)
                .map(|s| &s.components)
                .into_iter()
                .flatten()
            {
                by_name
                    .entry(name)
                    .or_insert_with(|| vec![None; labels.len()])[i] = *v;
            }
        }
        for (name, values) in by_name {
            let t = into.entry(name.to_string()).or_default();
            for &(b, w) in &pairs {
                if let (Some(x), Some(y)) = (values[b], values[w]) {
                    t.add(super::stats::pair_credit(x, y));
                }
            }
        }
    }
}

fn rate(t: Tally) -> Option<f64> {
    t.rate().map(tidy)
}

/// One result from the runs of one combination over some groups.
pub fn set_result(
    set: &str,
    combo: &Combo,
    groups: &[LabelledGroup],
    runs: &[&GroupRun],
) -> SetResult {
    let mut figures: Vec<(&GroupRun, GroupFigures)> = Vec::new();
    let mut invalid = 0;
    let mut errors: BTreeMap<String, usize> = BTreeMap::new();
    let mut error_messages: BTreeMap<String, String> = BTreeMap::new();
    let mut usage = EvalUsage::default();
    let mut components: BTreeMap<String, Tally> = BTreeMap::new();
    let mut seconds = Vec::new();
    let mut misranked = Vec::new();
    for run in runs {
        let g = &groups[run.group];
        seconds.push(run.judgings.iter().map(|j| j.seconds).sum::<f64>());
        for j in &run.judgings {
            match &j.outcome {
                Ok(resp) => {
                    usage.add(&resp.usage);
                    if resp.rewards.iter().any(Option::is_none) {
                        invalid += 1;
                        *errors.entry("null_reward".into()).or_default() += 1;
                    }
                }
                Err(failed) => {
                    usage.add(&failed.usage);
                    invalid += 1;
                    *errors.entry(failed.kind.clone()).or_default() += 1;
                    error_messages
                        .entry(failed.kind.clone())
                        .or_insert_with(|| failed.message.clone());
                }
            }
        }
        let Some(scores) = scores_of(run) else {
            continue;
        };
        let shown: Vec<Vec<usize>> = run.judgings.iter().map(|j| positions(&j.order)).collect();
        let f = group_figures(&g.labels, &g.lengths, &scores, &shown);
        component_tallies(run, &g.labels, &mut components);
        let first = group_figures(&g.labels, &g.lengths, &scores[..1], &shown[..1]);
        if let Some(acc) = first.accuracy.rate().filter(|a| *a < 1.0) {
            misranked.push(misranked_group(g, run, &scores, acc));
        }
        figures.push((run, f));
    }
    misranked.sort_by(|a, b| a.accuracy.total_cmp(&b.accuracy));
    misranked.truncate(MAX_MISRANKED);

    let mut total = GroupFigures::default();
    let mut taus = Vec::new();
    let mut tallies = Vec::new();
    for (_, f) in &figures {
        total.pairs += f.pairs;
        total.accuracy.merge(&f.accuracy);
        total.top1.merge(&f.top1);
        total.flipped_pairs += f.flipped_pairs;
        total.better_first.merge(&f.better_first);
        total.better_later.merge(&f.better_later);
        total.better_longer.merge(&f.better_longer);
        total.better_shorter.merge(&f.better_shorter);
        total.pairs_better_longer += f.pairs_better_longer;
        total.pairs_better_shorter += f.pairs_better_shorter;
        total.best_scores.extend(&f.best_scores);
        total.worst_scores.extend(&f.worst_scores);
        taus.extend(f.kendall_tau);
        tallies.push(f.accuracy);
    }
    let multi_order = figures.iter().any(|(r, _)| r.judgings.len() > 1);
    let unequal = total.pairs_better_longer + total.pairs_better_shorter;
    let share = |n: usize| (unequal > 0).then(|| tidy(n as f64 / unequal as f64));
    let all_scores = figures.iter().flat_map(|(r, _)| {
        r.judgings
            .iter()
            .filter_map(|j| j.outcome.as_ref().ok())
            .flat_map(|resp| resp.rewards.iter().flatten().copied())
    });
    SetResult {
        set: set.to_string(),
        judge: combo.judge.clone(),
        rubric: combo.rubric.clone(),
        judge_mode: combo.judge_mode,
        groups: runs.len(),
        valid_groups: figures.len(),
        pairs: total.pairs,
        pairwise_accuracy: rate(total.accuracy),
        ci95: accuracy_ci(&tallies, BOOTSTRAP_SEED).map(|[a, b]| [tidy(a), tidy(b)]),
        top1_accuracy: rate(total.top1),
        kendall_tau: mean(taus).map(tidy),
        position: Position {
            flip_rate: (multi_order && total.pairs > 0)
                .then(|| tidy(total.flipped_pairs as f64 / total.pairs as f64)),
            accuracy_better_first: rate(total.better_first),
            accuracy_better_later: rate(total.better_later),
        },
        length: Length {
            accuracy_better_longer: rate(total.better_longer),
            accuracy_better_shorter: rate(total.better_shorter),
            prefer_longer: share(total.pairs_better_longer),
            prefer_shorter: share(total.pairs_better_shorter),
            pairs_better_longer: total.pairs_better_longer,
            pairs_better_shorter: total.pairs_better_shorter,
        },
        calibration: Calibration {
            mean_best: mean(total.best_scores.iter().copied()).map(tidy),
            mean_worst: mean(total.worst_scores.iter().copied()).map(tidy),
            histogram: histogram(all_scores),
        },
        invalid,
        errors,
        error_messages,
        components: if components.len() > 1 {
            components
                .into_iter()
                .map(|(k, t)| {
                    let c = ComponentAccuracy {
                        decisions: t.count as usize,
                        pairwise_accuracy: rate(t),
                    };
                    (k, c)
                })
                .collect()
        } else {
            BTreeMap::new()
        },
        usage,
        seconds_per_group: mean(seconds).map(|s| (s * 1e4).round() / 1e4),
        misranked,
    }
}

fn misranked_group(g: &LabelledGroup, run: &GroupRun, scores: &[Vec<f64>], acc: f64) -> Misranked {
    let mut explanations = vec![String::new(); g.labels.len()];
    if let Some(Ok(resp)) = run.judgings.first().map(|j| &j.outcome) {
        for (p, &i) in run.judgings[0].order.iter().enumerate() {
            if let Some(s) = resp.scores.get(p) {
                explanations[i] = clip(&s.explanation, MAX_TEXT);
            }
        }
    }
    Misranked {
        id: g.id.clone(),
        at: g.at.clone(),
        accuracy: tidy(acc),
        trajectories: (0..g.labels.len())
            .map(|i| MisrankedTrajectory {
                label: g.labels[i],
                scores: scores.iter().map(|s| tidy(s[i])).collect(),
                answer: clip(&g.answers[i], MAX_TEXT),
                explanation: explanations[i].clone(),
            })
            .collect(),
    }
}

/// Every result and comparison: per set (and pooled as [`ALL_SETS`] when there are several),
/// per combination; then each pair of combinations on each set; then, per set and combination,
/// each attack's figures. Results, comparisons and calibrations (with `calibrate`) are of the
/// clean runs only.
#[allow(clippy::too_many_arguments)]
pub fn build(
    files: Vec<String>,
    score: &ScoreTarget,
    orders: usize,
    permutations: Option<u32>,
    combos: &[Combo],
    groups: &[LabelledGroup],
    all_runs: &[GroupRun],
    attacks: &[Attack],
    calibrate: Option<CalibrateOptions>,
) -> EvalReport {
    let clean: Vec<GroupRun> = all_runs
        .iter()
        .filter(|r| r.attack.is_none())
        .cloned()
        .collect();
    let runs = &clean[..];
    let mut sets: Vec<&str> = Vec::new();
    for g in groups {
        if !sets.contains(&g.set.as_str()) {
            sets.push(&g.set);
        }
    }
    let mut scopes: Vec<(String, Option<&str>)> =
        sets.iter().map(|s| (s.to_string(), Some(*s))).collect();
    if sets.len() > 1 {
        scopes.push((ALL_SETS.to_string(), None));
    }
    let in_scope =
        |run: &GroupRun, scope: Option<&str>| scope.is_none_or(|s| groups[run.group].set == s);
    let mut results = Vec::new();
    let mut comparisons = Vec::new();
    let mut confidence = Vec::new();
    let mut calibration = Vec::new();
    for (name, scope) in &scopes {
        for (c, combo) in combos.iter().enumerate() {
            let mine: Vec<&GroupRun> = runs
                .iter()
                .filter(|r| r.combo == c && in_scope(r, *scope))
                .collect();
            results.push(set_result(name, combo, groups, &mine));
            confidence.extend(confidence_result(name, combo, groups, &mine));
            if let Some(opts) = calibrate {
                calibration.push(calibration_result(name, combo, groups, &mine, opts));
            }
        }
        for a in 0..combos.len() {
            for b in a + 1..combos.len() {
                comparisons.push(compare(name, *scope, combos, a, b, groups, runs));
            }
        }
    }
    let mut attack_results = Vec::new();
    for (name, scope) in &scopes {
        for (c, combo) in combos.iter().enumerate() {
            let mine: Vec<&GroupRun> = all_runs
                .iter()
                .filter(|r| r.combo == c && in_scope(r, *scope))
                .collect();
            for (ai, a) in attacks.iter().enumerate() {
                attack_results.push(attack_result(name, combo, (ai, a), groups, &mine));
            }
        }
    }
    EvalReport {
        files,
        score: score.clone(),
        orders,
        permutations,
        results,
        comparisons,
        attack_summary: summarise(&attack_results),
        attacks: attack_results,
        confidence,
        calibration,
        cascades: Vec::new(),
    }
}

fn compare(
    set: &str,
    scope: Option<&str>,
    combos: &[Combo],
    a: usize,
    b: usize,
    groups: &[LabelledGroup],
    runs: &[GroupRun],
) -> ComparisonResult {
    let tally = |run: &GroupRun| -> Option<Tally> {
        let scores = scores_of(run)?;
        let g = &groups[run.group];
        let shown: Vec<Vec<usize>> = run.judgings.iter().map(|j| positions(&j.order)).collect();
        Some(group_figures(&g.labels, &g.lengths, &scores, &shown).accuracy)
    };
    let (mut ta, mut tb) = (Vec::new(), Vec::new());
    for ra in runs.iter().filter(|r| r.combo == a) {
        if scope.is_some_and(|s| groups[ra.group].set != s) {
            continue;
        }
        let Some(rb) = runs.iter().find(|r| r.combo == b && r.group == ra.group) else {
            continue;
        };
        if let (Some(x), Some(y)) = (tally(ra), tally(rb)) {
            ta.push(x);
            tb.push(y);
        }
    }
    let (acc_a, acc_b) = (Tally::pooled(&ta), Tally::pooled(&tb));
    let ci = paired_difference_ci(&ta, &tb, BOOTSTRAP_SEED);
    let verdict = match ci {
        Some([lo, _]) if cmp_eps(lo, 0.0).is_gt() => "b_better",
        Some([_, hi]) if cmp_eps(hi, 0.0).is_lt() => "a_better",
        _ => "no_difference",
    };
    ComparisonResult {
        set: set.to_string(),
        a: combos[a].clone(),
        b: combos[b].clone(),
        groups: ta.len(),
        accuracy_a: acc_a.map(tidy),
        accuracy_b: acc_b.map(tidy),
        difference: acc_a.zip(acc_b).map(|(x, y)| tidy(y - x)),
        ci95: ci.map(|[x, y]| [tidy(x), tidy(y)]),
        verdict,
    }
}
