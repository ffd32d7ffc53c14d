//! `gavel eval --calibrate`: per set × combination whose verdicts carry a confidence, the
//! threshold a cascade stage would use ([`super::calibrate`]): the lowest such that, with
//! probability at least 1 − δ, the stage's kept decisions are at least 1 − α accurate.
//!
//! The unit is the whole group. A cascade escalates a group when any of its trajectories is
//! unsure (so every reward of a group comes from one judge's scale, as a GRPO advantage needs),
//! so a group's confidence is its least sure trajectory's, and each labelled (better, worse)
//! pair of the group is one item with that confidence, right when the judge scored the better
//! one strictly higher. Each group counts once, in its first order (as given): a cascade judges
//! a group once, and a probability verdict reads the same in any order, so `--orders` would
//! only repeat the same items. (The accuracy-by-confidence figures, [`super::confidence`], keep
//! their own unit: every pair of every order, at the mean of the pair's two confidences.)
//!
//! The bound treats the items as independent draws. The pairs of one group are not: with many
//! trajectories per group the items are fewer independent draws than they look, and the bound
//! is looser than it reads (two-trajectory groups give one pair each, and no such doubt).
//! Calibrate on a dev set of its own, and check the threshold on held-out rows.

use serde::Serialize;

use super::calibrate::calibrate;
use super::choice::ModeAsked;
use super::confidence::judged_groups;
use super::judged::{Combo, GroupRun, LabelledGroup};
use crate::domain::stats::tidy;

/// `--calibrate`'s risk levels, each in (0, 1).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CalibrateOptions {
    /// The accuracy asked of a stage's kept decisions is 1 − α.
    pub alpha: f64,
    /// The chance that the accuracy is below that anyway.
    pub delta: f64,
}

/// Why a result has no threshold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NoThreshold {
    /// No judging carried a confidence for every trajectory (listwise verdicts carry none).
    NoConfidence,
    /// Fewer labelled pairs than a candidate must keep ([`super::calibrate::min_kept`]).
    TooFewPairs,
    /// The most confident candidate already fails: at this α and δ the judge, as a stage, can
    /// decide nothing.
    BoundTooLow,
}

/// The candidate the scan stopped at: the first whose bound fell below 1 − α.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StoppedAt {
    pub threshold: f64,
    pub pairs: usize,
    pub accuracy: f64,
    pub lower_bound: f64,
}

/// One set × combination's calibration.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CalibrationResult {
    pub set: String,
    pub judge: String,
    pub rubric: String,
    pub judge_mode: ModeAsked,
    pub alpha: f64,
    pub delta: f64,
    /// The threshold, as a cascade's `thresholds` takes it with this judge as a stage; empty
    /// when there is none (never an invented one).
    pub thresholds: Vec<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub no_threshold: Option<NoThreshold>,
    /// Groups with a reward and a confidence for every trajectory in their first order, and
    /// their labelled pairs (the items calibrated on).
    pub groups: usize,
    pub pairs: usize,
    /// What the threshold keeps (0 without one).
    pub kept_groups: usize,
    pub kept_pairs: usize,
    /// `kept_pairs / pairs`, the share the bound is about.
    pub coverage: f64,
    /// `kept_groups / groups`: the share of groups the stage decides, sparing the next.
    pub group_coverage: f64,
    /// The kept pairs' accuracy and its Clopper–Pearson lower bound (level δ).
    pub accuracy: Option<f64>,
    pub lower_bound: Option<f64>,
    /// Pairs a candidate must keep to be tested (at this α and δ: the first test survives one
    /// wrong pair).
    pub min_pairs: usize,
    /// Candidates tested, most confident first, the failing one included.
    pub tested: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stopped_at: Option<StoppedAt>,
}

impl CalibrationResult {
    pub fn label(&self) -> String {
        super::judged::set_label(&self.set, &self.judge, &self.rubric, self.judge_mode)
    }

    /// A line to paste into a cascade's table: `thresholds = [0.62]   # judge "x", pointwise,
    /// set "dev": α 0.1, δ 0.1, coverage 0.71 of groups, bound 0.903`, or, without a threshold,
    /// a comment saying so.
    pub fn toml(&self) -> String {
        let whose = format!(
            "judge {:?}, {}, set {:?}",
            self.judge, self.judge_mode, self.set
        );
        let levels = format!("α {}, δ {}", self.alpha, self.delta);
        match (self.thresholds.first(), self.lower_bound) {
            (Some(t), Some(bound)) => format!(
                "thresholds = [{t}]   # {whose}: {levels}, coverage {:.2} of groups, bound {bound:.3}",
                self.group_coverage
            ),
            _ if self.no_threshold == Some(NoThreshold::NoConfidence) => {
                format!("# {whose}: no confidence, cannot be calibrated")
            }
            _ => format!("# {whose}: no threshold at {levels}: the stage can decide nothing"),
        }
    }
}

/// One set × combination's calibration; `runs` are its clean runs.
pub fn calibration_result(
    set: &str,
    combo: &Combo,
    groups: &[LabelledGroup],
    runs: &[&GroupRun],
    opts: CalibrateOptions,
) -> CalibrationResult {
    let judged = judged_groups(groups, runs);
    let items: Vec<(f64, bool)> = judged
        .iter()
        .flat_map(|g| g.right.iter().map(|&r| (g.confidence, r)))
        .collect();
    let c = calibrate(&items, opts.alpha, opts.delta);
    let kept_groups = c
        .threshold
        .map_or(0, |t| judged.iter().filter(|g| g.confidence >= t).count());
    let no_threshold = if c.threshold.is_some() {
        None
    } else if judged.is_empty() {
        Some(NoThreshold::NoConfidence)
    } else if c.items < c.min_kept {
        Some(NoThreshold::TooFewPairs)
    } else {
        Some(NoThreshold::BoundTooLow)
    };
    let share = |a: usize, b: usize| {
        if b == 0 {
            0.0
        } else {
            tidy(a as f64 / b as f64)
        }
    };
    CalibrationResult {
        set: set.to_string(),
        judge: combo.judge.clone(),
        rubric: combo.rubric.clone(),
        judge_mode: combo.judge_mode,
        alpha: opts.alpha,
        delta: opts.delta,
        // The threshold exactly as the confidences read (no rounding, which could keep an
        // item the bound did not cover).
        thresholds: c.threshold.into_iter().collect(),
        no_threshold,
        groups: judged.len(),
        pairs: c.items,
        kept_groups,
        kept_pairs: c.kept,
        coverage: tidy(c.coverage),
        group_coverage: share(kept_groups, judged.len()),
        accuracy: c.accuracy.map(tidy),
        lower_bound: c.lower_bound.map(tidy),
        min_pairs: c.min_kept,
        tested: c.tested,
        stopped_at: c.stopped_at.map(|s| StoppedAt {
            threshold: s.threshold,
            pairs: s.kept,
            accuracy: share(s.correct, s.kept),
            lower_bound: tidy(s.lower_bound),
        }),
    }
}
