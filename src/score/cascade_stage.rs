//! The judge stage through a cascade (`judge::cascade`): each stage judges the whole group as
//! the judge it is (its own mode, cache keys and remembered plan), cheapest first, until one is
//! sure of every trajectory or the last decides. What the earlier stages spent is part of the
//! group's usage; the scores, template and judge reported are the deciding stage's.

use super::judge_stage::JudgedGroup;
use super::{ScoreError, ScoreRequest, Scorer};
use crate::domain::rubric::Rubric;
use crate::judge::cascade::Cascade;

/// Why a group left a stage for the next (the `cause` of `gavel_cascade_escalations_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Escalation {
    /// A score's confidence was under the stage's threshold.
    Unsure,
    /// The stage failed (unavailable, timed out, invalid verdict, overloaded).
    Failed,
}

impl Escalation {
    fn as_str(self) -> &'static str {
        match self {
            Escalation::Unsure => "unsure",
            Escalation::Failed => "failed",
        }
    }
}

impl Scorer {
    /// The judge stage of a group whose judge is `cascade`.
    pub(super) async fn judge_cascade(
        &self,
        cascade: &Cascade,
        rubric: &Rubric,
        req: &ScoreRequest,
    ) -> Result<JudgedGroup, ScoreError> {
        let mut spent = super::Usage::default();
        let last = cascade.stages.len() - 1;
        for (i, (stage, _)) in cascade.stages.iter().enumerate() {
            // The stage judges as if the request had named it alone.
            let as_stage = ScoreRequest {
                judges: vec![stage.clone()],
                ..req.clone()
            };
            let mut judged = self.judge_panel(rubric, &as_stage).await?;
            let escalation = match &judged.outcome {
                Ok(o) => {
                    let confidences: Vec<Option<f64>> =
                        o.scores.iter().map(|s| s.confidence).collect();
                    (!cascade.stands(i, &confidences)).then_some(Escalation::Unsure)
                }
                Err(_) if i < last => Some(Escalation::Failed),
                Err(_) => None,
            };
            match escalation {
                Some(cause) => {
                    match &judged.outcome {
                        Ok(o) => spent.add_spent(&o.usage),
                        Err(e) => {
                            tracing::warn!(cascade = %cascade.name, %stage, error = %e,
                                "cascade stage failed; the group goes to the next stage");
                            spent.add_failed(e.spent);
                        }
                    }
                    metrics::counter!("gavel_cascade_escalations_total",
                        "cascade" => cascade.name.clone(), "stage" => stage.clone(),
                        "cause" => cause.as_str())
                    .increment(1);
                }
                None => {
                    tracing::debug!(cascade = %cascade.name, %stage, escalated = i,
                        "cascade stage decided the group");
                    metrics::counter!("gavel_cascade_decisions_total",
                        "cascade" => cascade.name.clone(), "stage" => stage.clone())
                    .increment(1);
                    match &mut judged.outcome {
                        Ok(o) => {
                            o.usage.add_spent(&spent);
                            for s in &mut o.scores {
                                s.stage = Some(stage.clone());
                            }
                        }
                        // The last stage failed: what the earlier ones spent is part of it.
                        Err(f) => f.spent.add(spent.spent()),
                    }
                    return Ok(judged);
                }
            }
        }
        unreachable!("the last stage always decides")
    }
}
