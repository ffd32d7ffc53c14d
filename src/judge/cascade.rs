//! A cascade: judges tried in turn, cheapest first (`backend = "cascade"`). A stage's verdict on
//! a group stands when it is sure of every trajectory (each score's confidence reaches the
//! stage's threshold); otherwise the group goes to the next stage, and the last stage decides
//! whatever reaches it. Thresholds come from `gavel eval --calibrate`, which chooses each so
//! that, with probability 1 − δ, the accuracy of what the stage keeps is at least 1 − α.
//!
//! The unit is the whole group, never one trajectory: a GRPO advantage compares a group's
//! rewards with each other, so they must all come from one judge's scale. A group is escalated
//! when its least sure trajectory is under the threshold, and then judged whole by the next
//! stage.
//!
//! Like a panel, a cascade is not itself a [`Judge`]: each stage judges as it always does, its
//! verdicts cached under its own identity, so a cascade reuses what its stages already judged
//! and a change of thresholds costs no judge call for what is cached.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::{Judge, JudgeError, Judges};

/// `[judges.NAME]` with `backend = "cascade"`.
#[derive(Debug, Clone, PartialEq)]
pub struct CascadeConfig {
    /// Judges of the same file, cheapest first; at least two.
    pub stages: Vec<String>,
    /// One per stage but the last, each in [0, 1]: the confidence a stage's least sure score
    /// must reach for its verdict on the group to stand.
    pub thresholds: Vec<f64>,
}

impl CascadeConfig {
    /// Checks the table alone; that the stages exist and can give a confidence is checked with
    /// the other judges ([`check_stages`]).
    pub fn validate(&self) -> Result<(), String> {
        if self.stages.len() < 2 {
            return Err(
                "backend \"cascade\" needs stages: two or more judges of this file, cheapest first"
                    .into(),
            );
        }
        if self.thresholds.len() + 1 != self.stages.len() {
            return Err(format!(
                "thresholds needs one value per stage but the last: {} for {} stages, got {} \
                 (gavel eval --calibrate chooses them)",
                self.stages.len() - 1,
                self.stages.len(),
                self.thresholds.len()
            ));
        }
        if let Some(t) = self
            .thresholds
            .iter()
            .find(|t| !(t.is_finite() && (0.0..=1.0).contains(*t)))
        {
            return Err(format!("thresholds: {t} is not a confidence in [0, 1]"));
        }
        for (i, s) in self.stages.iter().enumerate() {
            if self.stages[..i].contains(s) {
                return Err(format!("stages names {s:?} twice"));
            }
        }
        Ok(())
    }
}

/// What a stage of a cascade must be, given what each judge of the file is: a judge (not
/// another cascade), and, for every stage but the last, one whose verdicts carry a confidence
/// (`reads_confidence`: asked in a probability mode). The error completes "[judges.NAME]: ".
pub fn check_stages(
    cascade: &CascadeConfig,
    kind_of: impl Fn(&str) -> Option<StageKind>,
) -> Result<(), String> {
    let last = cascade.stages.len() - 1;
    for (i, stage) in cascade.stages.iter().enumerate() {
        match kind_of(stage) {
            None => return Err(format!("stage {stage:?} is not a [judges.NAME] table")),
            Some(StageKind::Cascade) => {
                return Err(format!(
                    "stage {stage:?} is a cascade: list its stages here instead"
                ))
            }
            Some(StageKind::Judge { confidence: false }) if i < last => {
                return Err(format!(
                    "stage {stage:?} judges listwise, whose verdicts carry no confidence: only \
                     the last stage may; set its mode to \"pointwise\" or \"pairwise\""
                ))
            }
            Some(StageKind::Judge { .. }) => {}
        }
    }
    Ok(())
}

/// What [`check_stages`] needs to know of a judge.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum StageKind {
    Cascade,
    Judge { confidence: bool },
}

/// A cascade built on its stages' judges.
#[derive(Debug, Clone)]
pub struct Cascade {
    pub name: String,
    /// Each stage's name and judge, cheapest first.
    pub stages: Vec<(String, Arc<dyn Judge>)>,
    pub thresholds: Vec<f64>,
}

impl Cascade {
    /// Whether a stage's verdict on a group stands: `stage` is the last, or the group's least
    /// sure score (`confidences`, one per trajectory) reaches its threshold. A score without a
    /// confidence is not sure.
    pub fn stands(&self, stage: usize, confidences: &[Option<f64>]) -> bool {
        let Some(&threshold) = self.thresholds.get(stage) else {
            return true;
        };
        confidences
            .iter()
            .all(|c| c.is_some_and(|c| c >= threshold))
    }
}

/// The cascades of a configuration, on the judges built for it.
pub fn build_cascades(
    configs: &BTreeMap<String, super::JudgeConfig>,
    judges: &Judges,
) -> Result<BTreeMap<String, Arc<Cascade>>, JudgeError> {
    configs
        .iter()
        .filter_map(|(name, cfg)| Some((name, cfg.as_cascade()?)))
        .map(|(name, c)| {
            let stages = c
                .stages
                .iter()
                .map(|s| {
                    let judge = judges.get(s).ok_or_else(|| {
                        JudgeError::NotConfigured(format!(
                            "[judges.{name}]: stage {s:?} is not a judge of this configuration"
                        ))
                    })?;
                    Ok((s.clone(), judge.clone()))
                })
                .collect::<Result<Vec<_>, JudgeError>>()?;
            Ok((
                name.clone(),
                Arc::new(Cascade {
                    name: name.clone(),
                    stages,
                    thresholds: c.thresholds.clone(),
                }),
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(stages: &[&str], thresholds: &[f64]) -> CascadeConfig {
        CascadeConfig {
            stages: stages.iter().map(|s| s.to_string()).collect(),
            thresholds: thresholds.to_vec(),
        }
    }

    #[test]
    fn a_cascade_table_is_checked() {
        assert!(cfg(&["a", "b"], &[0.6]).validate().is_ok());
        let e = cfg(&["a"], &[]).validate().unwrap_err();
        assert!(e.contains("two or more"), "{e}");
        let e = cfg(&["a", "b"], &[]).validate().unwrap_err();
        assert!(e.contains("1 for 2 stages, got 0"), "{e}");
        let e = cfg(&["a", "b"], &[1.5]).validate().unwrap_err();
        assert!(e.contains("1.5 is not a confidence"), "{e}");
        let e = cfg(&["a", "a"], &[0.5]).validate().unwrap_err();
        assert!(e.contains("\"a\" twice"), "{e}");
    }

    #[test]
    fn stages_must_exist_and_all_but_the_last_give_a_confidence() {
        let kinds = |s: &str| match s {
            "sure" => Some(StageKind::Judge { confidence: true }),
            "text" => Some(StageKind::Judge { confidence: false }),
            "c" => Some(StageKind::Cascade),
            _ => None,
        };
        assert!(check_stages(&cfg(&["sure", "text"], &[0.5]), kinds).is_ok());
        let e = check_stages(&cfg(&["text", "sure"], &[0.5]), kinds).unwrap_err();
        assert!(e.contains("\"text\" judges listwise"), "{e}");
        let e = check_stages(&cfg(&["sure", "nope"], &[0.5]), kinds).unwrap_err();
        assert!(e.contains("\"nope\" is not a [judges.NAME] table"), "{e}");
        let e = check_stages(&cfg(&["c", "sure"], &[0.5]), kinds).unwrap_err();
        assert!(e.contains("is a cascade"), "{e}");
    }

    #[test]
    fn a_verdict_stands_when_its_least_sure_score_reaches_the_threshold() {
        let c = Cascade {
            name: "c".into(),
            stages: Vec::new(),
            thresholds: vec![0.6],
        };
        assert!(c.stands(0, &[Some(0.9), Some(0.6)]));
        assert!(!c.stands(0, &[Some(0.9), Some(0.59)]));
        assert!(
            !c.stands(0, &[Some(0.9), None]),
            "no confidence is not sure"
        );
        assert!(c.stands(1, &[None, Some(0.0)]), "the last stage decides");
    }
}
