//! The reward side of scoring a group: which verifiers run and how components combine. Pure: it
//! reads the rubric and the request, never a judge or the store.

use std::collections::{BTreeMap, HashMap};

use serde_json::Value;

use super::request::MAX_VERIFIERS;
use super::response::TrajectoryScore;
use super::ScoreRequest;
use crate::domain::reward::{ResolvedPolicy, INDEPENDENT, JUDGE};
use crate::domain::rubric::Rubric;
use crate::domain::trajectory::InputError;
use crate::domain::verify::Verifier;

/// Verifiers and policy resolved for one request.
pub(super) struct RewardPlan {
    verifiers: Vec<Verifier>,
    pub policy: ResolvedPolicy,
}

/// Merges the rubric's verifiers with the request's (by name; the request's fields win),
/// compiles them, and resolves the policy (the request's, else the rubric's, else weighted).
pub(super) fn plan_rewards(rubric: &Rubric, req: &ScoreRequest) -> Result<RewardPlan, InputError> {
    let name_of = |v: &Value| {
        v.get("name")
            .and_then(Value::as_str)
            .or_else(|| v.get("type").and_then(Value::as_str))
            .map(str::to_string)
    };
    // Bounded before any work: an inline rubric comes from the request too.
    let total = rubric.verifiers.len() + req.verifiers.len();
    if total > MAX_VERIFIERS {
        return Err(InputError::new(
            "verifiers",
            format!("at most {MAX_VERIFIERS} verifiers, counting the rubric's, got {total}"),
        ));
    }
    let mut specs: Vec<(String, Value)> = rubric
        .verifiers
        .iter()
        .enumerate()
        .map(|(j, v)| {
            (
                format!("rubric {:?} verifiers[{j}]", rubric.name),
                v.clone(),
            )
        })
        .collect();
    // Each name's spec, so the merge is one lookup per request verifier.
    let mut by_name: HashMap<String, usize> = HashMap::new();
    for (j, (_, v)) in specs.iter().enumerate() {
        if let Some(n) = name_of(v) {
            by_name.entry(n).or_insert(j);
        }
    }
    for (i, v) in req.verifiers.iter().enumerate() {
        let at = format!("verifiers[{i}]");
        match name_of(v).and_then(|n| by_name.get(&n).copied()) {
            Some(j) => {
                let (path, base) = &mut specs[j];
                if let (Some(base), Some(over)) = (base.as_object_mut(), v.as_object()) {
                    base.extend(over.iter().map(|(k, x)| (k.clone(), x.clone())));
                }
                *path = at;
            }
            None => {
                if let Some(n) = name_of(v) {
                    by_name.insert(n, specs.len());
                }
                specs.push((at, v.clone()));
            }
        }
    }
    let verifiers = specs
        .iter()
        .map(|(at, v)| Verifier::from_json(v, at))
        .collect::<Result<Vec<_>, _>>()?;
    let mut weights = BTreeMap::new();
    for (v, (at, _)) in verifiers.iter().zip(&specs) {
        if v.name() == JUDGE || v.name() == INDEPENDENT {
            return Err(InputError::new(
                format!("{at}.name"),
                format!("{:?} is reserved", v.name()),
            ));
        }
        if weights.insert(v.name().to_string(), v.weight()).is_some() {
            return Err(InputError::new(
                at.clone(),
                format!("a second verifier named {:?}", v.name()),
            ));
        }
    }
    let policy_at = if req.policy.is_some() {
        "policy"
    } else {
        "rubric policy"
    };
    let policy = req
        .policy
        .as_ref()
        .or(rubric.policy.as_ref())
        .cloned()
        .unwrap_or_default()
        .resolve(&weights)
        .map_err(|m| InputError::new(policy_at, m))?;
    // A reward made of the caller's reward alone needs it from every trajectory: without it the
    // reward would be null, which the API keeps for judge failures.
    if policy.cannot_do_without(INDEPENDENT) {
        if let Some(i) = req.trajectories.iter().position(|t| t.reward.is_none()) {
            return Err(InputError::new(
                format!("trajectories[{i}].reward"),
                format!(
                    "missing: the {policy_at} counts nothing but {INDEPENDENT}, so every \
                     trajectory must send its own `reward`"
                ),
            ));
        }
    }
    Ok(RewardPlan { verifiers, policy })
}

impl RewardPlan {
    /// One score per trajectory with every verifier's component and reason, and the
    /// trajectory's own `reward` as the independent component; the judge's part comes later.
    pub(super) fn verifier_scores(&self, req: &ScoreRequest) -> Vec<TrajectoryScore> {
        req.trajectories
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let mut s = TrajectoryScore {
                    trajectory_id: (i + 1).to_string(),
                    score: None,
                    explanation: String::new(),
                    components: BTreeMap::new(),
                    reasons: BTreeMap::new(),
                    items: Vec::new(),
                    disagreement: None,
                    confidence: None,
                    judge: None,
                    judges: BTreeMap::new(),
                };
                for v in &self.verifiers {
                    let o = v.check_in_group(t, req.reference.as_deref());
                    s.components.insert(v.name().to_string(), o.value);
                    s.reasons.insert(v.name().to_string(), o.reason);
                }
                if let Some(r) = t.reward {
                    s.components.insert(INDEPENDENT.into(), Some(r));
                }
                s
            })
            .collect()
    }

    /// Each trajectory's reward from its components. A judge failure never becomes a score:
    /// after one (`judge_failed`), every reward is null.
    pub(super) fn combine(&self, scores: &mut [TrajectoryScore], judge_failed: bool) {
        for s in scores {
            s.score = if judge_failed {
                None
            } else {
                self.policy.combine(&s.components)
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn rubric(toml: &str) -> Rubric {
        Rubric::parse_toml(toml, "r", "rubrics/r.toml").unwrap()
    }

    fn request(extra: Value) -> ScoreRequest {
        let mut body = json!({"trajectories": [
            [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "ANSWER: 4"}],
            [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "ANSWER: 5"}],
        ]});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        ScoreRequest::from_json(&body, 16).unwrap()
    }

    const WITH_ANSWER: &str = "text = \"be right\"\n\
        [[verifiers]]\ntype = \"answer_line\"\nexpected = \"4\"\nweight = 2.0\n";

    #[test]
    fn the_request_overrides_a_rubric_verifier_of_the_same_name() {
        let r = rubric(WITH_ANSWER);
        let req = request(json!({"verifiers": [{"type": "answer_line", "expected": "5"}]}));
        let plan = plan_rewards(&r, &req).unwrap();
        assert_eq!(plan.verifiers.len(), 1, "merged, not added");
        let scores = plan.verifier_scores(&req);
        // The request's expected answer wins; the rubric's weight stays.
        assert_eq!(scores[0].components["answer_line"], Some(0.0));
        assert_eq!(scores[1].components["answer_line"], Some(1.0));
        assert_eq!(plan.verifiers[0].weight(), 2.0);
    }

    #[test]
    fn a_request_verifier_with_a_new_name_is_added() {
        let r = rubric(WITH_ANSWER);
        let req = request(json!({"verifiers": [
            {"type": "contains", "text": "5", "name": "says_five"}]}));
        let plan = plan_rewards(&r, &req).unwrap();
        let scores = plan.verifier_scores(&req);
        assert_eq!(scores[1].components["says_five"], Some(1.0));
        assert_eq!(scores[1].components["answer_line"], Some(0.0));
        assert_eq!(scores[0].trajectory_id, "1");
    }

    #[test]
    fn a_reserved_name_is_refused_where_it_is() {
        let r = rubric("text = \"x\"");
        let req = request(json!({"verifiers": [
            {"type": "contains", "text": "4", "name": "judge"}]}));
        let e = plan_rewards(&r, &req).err().unwrap();
        assert!(e.to_string().contains("verifiers[0].name"), "{e}");
        assert!(e.to_string().contains("reserved"), "{e}");
    }

    #[test]
    fn the_verifier_count_is_bounded_with_the_rubrics_included() {
        let mut toml = String::from("text = \"x\"\n");
        for i in 0..MAX_VERIFIERS {
            toml += &format!("[[verifiers]]\ntype = \"contains\"\ntext = \"a\"\nname = \"v{i}\"\n");
        }
        let r = rubric(&toml);
        let req =
            request(json!({"verifiers": [{"type": "contains", "text": "b", "name": "extra"}]}));
        let e = plan_rewards(&r, &req).err().unwrap();
        assert!(
            e.to_string().contains(&format!("at most {MAX_VERIFIERS}")),
            "{e}"
        );
    }

    #[test]
    fn a_judge_failure_nulls_every_reward_and_a_success_combines_components() {
        let r = rubric(WITH_ANSWER);
        let req = request(json!({"policy": {"type": "weighted", "weights": {"answer_line": 1.0}}}));
        let plan = plan_rewards(&r, &req).unwrap();
        assert!(!plan.policy.needs_judge());
        let mut scores = plan.verifier_scores(&req);
        plan.combine(&mut scores, false);
        assert_eq!(
            scores.iter().map(|s| s.score).collect::<Vec<_>>(),
            [Some(1.0), Some(0.0)]
        );
        plan.combine(&mut scores, true);
        assert!(scores.iter().all(|s| s.score.is_none()));
    }

    #[test]
    fn a_policy_of_the_callers_reward_alone_needs_it_from_every_trajectory() {
        let r = rubric("text = \"x\"");
        let policy =
            json!({"policy": {"type": "weighted", "weights": {"independent_reward": 1.0}}});
        let e = plan_rewards(&r, &request(policy.clone())).err().unwrap();
        assert_eq!(e.path, "trajectories[0].reward");
        assert!(
            e.problem.contains("counts nothing but independent_reward"),
            "{e}"
        );
        // Sent by every trajectory: fine.
        let mut req = request(policy);
        for (t, r) in req.trajectories.iter_mut().zip([1.0, 0.0]) {
            t.reward = Some(r);
        }
        let plan = plan_rewards(&r, &req).unwrap();
        let mut scores = plan.verifier_scores(&req);
        plan.combine(&mut scores, false);
        assert_eq!(scores[0].score, Some(1.0));
        // Sent by one: the other is named.
        req.trajectories[1].reward = None;
        let e = plan_rewards(&r, &req).err().unwrap();
        assert_eq!(e.path, "trajectories[1].reward");
    }
}
