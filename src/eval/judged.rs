//! What was judged: the labelled groups, the combinations they were judged under, and each
//! group's judgings in every order (clean or attacked). Both reports read it: the judge's
//! figures ([`super::report`]) and the attacks' ([`super::attack_report`]).

use serde::Serialize;

use super::choice::ModeAsked;
use crate::toolkit::outcome::GroupOutcome;

/// Seed of every bootstrap, so the same judgings always give the same intervals.
pub const BOOTSTRAP_SEED: u64 = 0x6761_7665_6c45_7661;

/// One judge × rubric combination (`None` = as the file's requests say).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Combo {
    pub judge: String,
    pub rubric: String,
    pub judge_mode: ModeAsked,
}

/// One labelled group as read.
#[derive(Debug, Clone)]
pub struct LabelledGroup {
    /// `FILE:LINE` (or `FILE`).
    pub at: String,
    pub id: String,
    pub set: String,
    pub labels: Vec<f64>,
    /// Characters each trajectory's agent wrote (assistant text and tool-call arguments).
    pub lengths: Vec<usize>,
    /// Each trajectory's final answer (for the misranked table).
    pub answers: Vec<String>,
}

/// One group judged in one order.
#[derive(Debug, Clone)]
pub struct Judging {
    /// `order[p]`: the file index of the trajectory shown at position p.
    pub order: Vec<usize>,
    pub outcome: GroupOutcome,
    pub seconds: f64,
}

/// One group judged in every order under one combination.
#[derive(Debug, Clone)]
pub struct GroupRun {
    /// Index into the groups read.
    pub group: usize,
    pub combo: usize,
    /// Index into the run's attacks; `None` for the group as labelled.
    pub attack: Option<usize>,
    pub judgings: Vec<Judging>,
}

/// `set · judge · rubric`, and the mode when one was asked for: how every per-set result of a
/// report names itself.
pub fn set_label(set: &str, judge: &str, rubric: &str, judge_mode: ModeAsked) -> String {
    let combo = Combo {
        judge: judge.to_string(),
        rubric: rubric.to_string(),
        judge_mode,
    };
    format!("{set} · {}", combo.label())
}

impl Combo {
    /// `judge · rubric`, and the mode when one was asked for.
    pub fn label(&self) -> String {
        match self.judge_mode {
            ModeAsked::AsConfigured => format!("{} · {}", self.judge, self.rubric),
            m => format!("{} · {} · {m}", self.judge, self.rubric),
        }
    }
}

/// A valid group's scores per order (by file index), or `None` when any order has no verdict.
pub fn scores_of(run: &GroupRun) -> Option<Vec<Vec<f64>>> {
    run.judgings
        .iter()
        .map(|j| {
            let resp = j.outcome.as_ref().ok()?;
            let mut s = vec![0.0; j.order.len()];
            for (p, &i) in j.order.iter().enumerate() {
                s[i] = (*resp.rewards.get(p)?)?;
            }
            Some(s)
        })
        .collect()
}
