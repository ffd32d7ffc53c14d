//! A panel: a judge made of judges. The scorer always judges a group with a panel; a request
//! that names one judge (or none, for the default) gets a panel of one.
//!
//! A panel is not itself a [`Judge`]: its members are judged separately, so that each member's
//! verdict is cached under that member's own identity (a later panel sharing a member reuses its
//! verdicts) and each member's score can be reported. A composite `complete` would have to
//! merge free-text verdicts. What makes the members one judge is here: who they are, which
//! of them writes a reference answer, and how their scores combine.

use std::sync::Arc;

use crate::domain::stats::mean_std;

use super::{Judge, JudgeInfo};

/// How a panel's judges are combined.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Default,
    serde::Serialize,
    serde::Deserialize,
    utoipa::ToSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Aggregate {
    #[default]
    Mean,
    Median,
}

impl Aggregate {
    /// Combines the members' scores (each already averaged over orders) into one; `None` when
    /// no member scored.
    pub fn combine(self, values: &[f64]) -> Option<f64> {
        if values.is_empty() {
            return None;
        }
        match self {
            Aggregate::Mean => mean_std(values).map(|(m, _)| m),
            Aggregate::Median => {
                let mut v = values.to_vec();
                v.sort_by(f64::total_cmp);
                let mid = v.len() / 2;
                Some(if v.len().is_multiple_of(2) {
                    (v[mid - 1] + v[mid]) / 2.0
                } else {
                    v[mid]
                })
            }
        }
    }
}

/// A judge made of judges, in the order the request named them.
#[derive(Debug, Clone)]
pub struct Panel {
    members: Vec<Arc<dyn Judge>>,
    aggregate: Aggregate,
}

impl Panel {
    /// A panel of `members` (at least one; `None` when there are none) whose scores combine by
    /// `aggregate`.
    pub fn new(members: Vec<Arc<dyn Judge>>, aggregate: Aggregate) -> Option<Panel> {
        (!members.is_empty()).then_some(Panel { members, aggregate })
    }

    /// A panel of one judge.
    pub fn of_one(judge: Arc<dyn Judge>) -> Panel {
        Panel {
            members: vec![judge],
            aggregate: Aggregate::default(),
        }
    }

    /// The members, in the request's order.
    pub fn members(&self) -> &[Arc<dyn Judge>] {
        &self.members
    }

    /// The member that writes the reference answer a rubric with `reference = "judge"` grades
    /// against, and whose prompt `render` shows: the first one named.
    pub fn lead(&self) -> &Arc<dyn Judge> {
        &self.members[0]
    }

    /// The members' names and models, as responses report them.
    pub fn infos(&self) -> Vec<JudgeInfo> {
        self.members
            .iter()
            .map(|j| j.settings().info.clone())
            .collect()
    }

    /// The members' names, in order.
    pub fn names(&self) -> Vec<String> {
        self.members
            .iter()
            .map(|j| j.settings().info.name.clone())
            .collect()
    }

    /// Whether each member's score is reported beside the combined one (more than one member).
    pub fn reports_members(&self) -> bool {
        self.members.len() > 1
    }

    /// The panel's score from its members' scores (see [`Aggregate::combine`]).
    pub fn combine(&self, member_scores: &[f64]) -> Option<f64> {
        self.aggregate.combine(member_scores)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::judge::UnconfiguredJudge;

    #[test]
    fn median_and_mean() {
        assert_eq!(Aggregate::Median.combine(&[0.1, 0.9, 0.4]), Some(0.4));
        assert_eq!(
            Aggregate::Median.combine(&[0.2, 0.4]),
            Some(0.30000000000000004)
        );
        assert!((Aggregate::Mean.combine(&[0.1, 0.9, 0.5]).unwrap() - 0.5).abs() < 1e-12);
        assert_eq!(Aggregate::Mean.combine(&[]), None);
    }

    #[test]
    fn a_panel_has_members_in_order_and_a_lead() {
        assert!(Panel::new(Vec::new(), Aggregate::Mean).is_none());
        let judge = |name: &str| -> Arc<dyn Judge> {
            let info = crate::judge::JudgeInfo {
                name: name.into(),
                model: "m".into(),
            };
            Arc::new(UnconfiguredJudge::new(
                info,
                "not configured".into(),
                crate::judge::StructuredOutput::Off,
            ))
        };
        let one = Panel::of_one(judge("a"));
        assert!(!one.reports_members());
        assert_eq!(one.combine(&[0.3]), Some(0.3));
        let panel = Panel::new(vec![judge("b"), judge("a")], Aggregate::Median).unwrap();
        assert_eq!(panel.names(), ["b", "a"]);
        assert_eq!(panel.lead().settings().info.name, "b");
        assert!(panel.reports_members());
        assert_eq!(panel.combine(&[0.2, 0.8, 0.6]), Some(0.6));
    }
}
