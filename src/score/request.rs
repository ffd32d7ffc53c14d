//! Scoring requests: validated from JSON, with every refusal naming its field.

use serde_json::Value;

use crate::domain::input::{deserialize, not_an_integer, unknown_field};
use crate::domain::prompt::JudgeMode;
use crate::domain::reward::{Policy, ScaleRewards};
use crate::domain::rubric::RubricSpec;
use crate::domain::trajectory::{
    parse_trajectories, type_name, InputError, ReasoningRule, Trajectory,
};
use crate::judge::Aggregate;

/// A rubric named in the request or given inline.
#[derive(Debug, Clone, PartialEq)]
pub enum RubricRef {
    Named(String),
    /// Boxed: a spec is ten times the size of a name.
    Inline(Box<RubricSpec>),
}

/// What to do when the judge fails after its retries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, utoipa::ToSchema)]
#[schema(rename_all = "lowercase")]
pub enum OnJudgeError {
    /// Fail the request with the judge's error (HTTP 502/503/504).
    #[default]
    Fail,
    /// Answer with `reward: null` for every trajectory ("no reward": advantage 0).
    Null,
}

/// A validated request to score one group.
#[derive(Debug, Clone)]
pub struct ScoreRequest {
    pub trajectories: Vec<Trajectory>,
    pub rubric: RubricRef,
    /// One judge, or a panel; empty = the default judge.
    pub judges: Vec<String>,
    /// Orders to judge the group in (position-bias control); `None` = the rubric's, else 1.
    pub permutations: Option<u32>,
    /// How a panel's judges combine.
    pub aggregate: Aggregate,
    pub tools: Option<Value>,
    /// A reference answer the judge is shown as correct (graders' "gold" answer).
    pub reference: Option<String>,
    /// How the judges are asked; `None` = each judge's configured mode.
    pub judge_mode: Option<JudgeMode>,
    /// Verifier specs as given; merged by name with the rubric's and compiled by the scorer.
    pub verifiers: Vec<Value>,
    /// Overrides the rubric's policy.
    pub policy: Option<Policy>,
    pub scale_rewards: ScaleRewards,
    pub on_judge_error: OnJudgeError,
    /// Whether the judge sees the messages' reasoning; `None` = the rubric's, else dropped.
    pub reasoning: Option<ReasoningRule>,
}

/// Every field a scoring request may have.
pub const REQUEST_FIELDS: &[&str] = &[
    "trajectories",
    "rubric",
    "judge",
    "permutations",
    "aggregate",
    "tools",
    "reference",
    "judge_mode",
    "verifiers",
    "policy",
    "scale_rewards",
    "on_judge_error",
    "reasoning",
];

/// Most orders one group may be judged in.
pub const MAX_PERMUTATIONS: u32 = 16;

/// Most judges in one request's panel. No deployment configures more, and the limit keeps a
/// hostile panel of millions of names from costing more than a glance.
pub const MAX_PANEL: usize = 16;

/// Most verifiers one request (or one rubric plus the request's overrides) may carry.
pub const MAX_VERIFIERS: usize = 64;

/// A number of orders checked against [`MAX_PERMUTATIONS`], refused in the words the API and the
/// CLI's `--permutations` share (`expected an integer from 1 to 16, got 17`).
pub fn check_permutations(k: u64) -> Result<u32, String> {
    match u32::try_from(k) {
        Ok(p) if (1..=MAX_PERMUTATIONS).contains(&p) => Ok(p),
        _ => Err(format!(
            "expected an integer from 1 to {MAX_PERMUTATIONS}, got {k}"
        )),
    }
}

/// `e` with its path under `prefix` (e.g. `groups[2]`).
pub(crate) fn prefixed(prefix: &str, e: InputError) -> InputError {
    if prefix.is_empty() {
        e
    } else {
        InputError::new(format!("{prefix}.{}", e.path), e.problem)
    }
}

impl ScoreRequest {
    /// A request for `trajectories` with every option at its default.
    pub fn new(trajectories: Vec<Trajectory>) -> ScoreRequest {
        ScoreRequest {
            trajectories,
            rubric: RubricRef::Named("default".into()),
            judges: Vec::new(),
            permutations: None,
            aggregate: Aggregate::Mean,
            tools: None,
            reference: None,
            judge_mode: None,
            verifiers: Vec::new(),
            policy: None,
            scale_rewards: ScaleRewards::Group,
            on_judge_error: OnJudgeError::Fail,
            reasoning: None,
        }
    }

    /// Validates a request body. A bare array is taken as the trajectories.
    pub fn from_json(v: &Value, max_group_size: usize) -> Result<ScoreRequest, InputError> {
        Self::from_json_at(v, max_group_size, "")
    }

    /// As [`ScoreRequest::from_json`], with every error path under `at` (e.g. `groups[2]`).
    pub fn from_json_at(
        v: &Value,
        max_group_size: usize,
        at: &str,
    ) -> Result<ScoreRequest, InputError> {
        let fail = |path: &str, problem: &str| prefixed(at, InputError::new(path, problem));
        let obj = match v {
            Value::Array(_) => {
                return parse_trajectories(v, max_group_size)
                    .map(ScoreRequest::new)
                    .map_err(|e| prefixed(at, e))
            }
            Value::Object(o) => o,
            _ => {
                let path = if at.is_empty() { "body" } else { at };
                return Err(InputError::new(
                    path,
                    "expected a JSON object with \"trajectories\"",
                ));
            }
        };
        if let Some(k) = obj.keys().find(|k| !REQUEST_FIELDS.contains(&k.as_str())) {
            return Err(fail(k, &unknown_field(k, REQUEST_FIELDS, "known")));
        }
        let trajectories = parse_trajectories(
            obj.get("trajectories")
                .ok_or_else(|| fail("trajectories", "missing"))?,
            max_group_size,
        )
        .map_err(|e| prefixed(at, e))?;
        let mut req = ScoreRequest::new(trajectories);
        req.rubric = match obj.get("rubric") {
            None | Some(Value::Null) => RubricRef::Named("default".into()),
            Some(Value::String(s)) => RubricRef::Named(s.clone()),
            Some(o @ Value::Object(_)) => RubricRef::Inline(Box::new(
                deserialize(o, "rubric").map_err(|e| prefixed(at, e))?,
            )),
            Some(_) => {
                return Err(fail(
                    "rubric",
                    "expected a rubric name or an object with \"text\"",
                ))
            }
        };
        req.judges = match obj.get("judge") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::String(s)) => vec![s.clone()],
            Some(Value::Array(a)) if a.len() > MAX_PANEL => {
                return Err(fail(
                    "judge",
                    &format!("a panel has at most {MAX_PANEL} judges, got {}", a.len()),
                ))
            }
            Some(Value::Array(a)) if !a.is_empty() && a.iter().all(Value::is_string) => {
                let names: Vec<String> = a
                    .iter()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect();
                let mut seen = std::collections::HashSet::new();
                if let Some(d) = names.iter().find(|n| !seen.insert(n.as_str())) {
                    return Err(fail("judge", &format!("{d:?} appears twice in the panel")));
                }
                names
            }
            Some(_) => {
                return Err(fail(
                    "judge",
                    "expected a judge name or a non-empty array of judge names",
                ))
            }
        };
        req.permutations = match obj.get("permutations") {
            None | Some(Value::Null) => None,
            Some(v) => {
                let expected = format!("an integer from 1 to {MAX_PERMUTATIONS}");
                match v {
                    Value::Number(n) => match n.as_u64() {
                        Some(k) => {
                            Some(check_permutations(k).map_err(|m| fail("permutations", &m))?)
                        }
                        None => return Err(fail("permutations", &not_an_integer(n, &expected))),
                    },
                    other => {
                        return Err(fail(
                            "permutations",
                            &format!("expected {expected}, got {}", type_name(other)),
                        ))
                    }
                }
            }
        };
        req.aggregate = match obj.get("aggregate") {
            None | Some(Value::Null) => Aggregate::Mean,
            Some(v) => serde_json::from_value(v.clone())
                .map_err(|_| fail("aggregate", "expected \"mean\" or \"median\""))?,
        };
        req.tools = match obj.get("tools") {
            None | Some(Value::Null) => None,
            Some(t @ Value::Array(_)) => Some(t.clone()),
            Some(_) => return Err(fail("tools", "expected an array of tool definitions")),
        };
        req.reference = match obj.get("reference") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if !s.trim().is_empty() => Some(s.clone()),
            Some(_) => {
                return Err(fail(
                    "reference",
                    "expected a non-empty string: the reference answer shown to the judge",
                ))
            }
        };
        req.judge_mode = match obj.get("judge_mode") {
            None | Some(Value::Null) => None,
            Some(v) => Some(
                serde_json::from_value(v.clone())
                    .map_err(|_| fail("judge_mode", &format!("expected {}", JudgeMode::NAMES)))?,
            ),
        };
        req.verifiers = match obj.get("verifiers") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(a)) if a.len() > MAX_VERIFIERS => {
                return Err(fail(
                    "verifiers",
                    &format!("at most {MAX_VERIFIERS} verifiers, got {}", a.len()),
                ))
            }
            Some(Value::Array(a)) => a.clone(),
            Some(_) => return Err(fail("verifiers", "expected an array of verifier objects")),
        };
        req.policy = match obj.get("policy") {
            None | Some(Value::Null) => None,
            Some(p) => Some(deserialize(p, "policy").map_err(|e| prefixed(at, e))?),
        };
        req.scale_rewards = match obj.get("scale_rewards") {
            None | Some(Value::Null) => ScaleRewards::Group,
            Some(s) => serde_json::from_value(s.clone())
                .map_err(|_| fail("scale_rewards", "expected \"group\", \"batch\" or \"none\""))?,
        };
        req.on_judge_error = match obj.get("on_judge_error").map(|v| v.as_str()) {
            None | Some(Some("fail")) => OnJudgeError::Fail,
            Some(Some("null")) => OnJudgeError::Null,
            Some(_) => return Err(fail("on_judge_error", "expected \"fail\" or \"null\"")),
        };
        req.reasoning = match obj.get("reasoning") {
            None | Some(Value::Null) => None,
            Some(v) => Some(
                serde_json::from_value(v.clone())
                    .map_err(|_| fail("reasoning", "expected \"drop\" or \"show\""))?,
            ),
        };
        Ok(req)
    }
}

/// Many groups in one call (`POST /v1/score_groups`): a whole training step.
#[derive(Debug, Clone)]
pub struct BatchRequest {
    pub groups: Vec<ScoreRequest>,
    /// `batch` normalises advantages by the std of every reward in the batch (TRL's
    /// `scale_rewards="batch"`); `group` and `none` as for one group.
    pub scale_rewards: ScaleRewards,
}

/// Most groups in one batch request.
pub const MAX_BATCH_GROUPS: usize = 1024;

impl BatchRequest {
    pub fn from_json(v: &Value, max_group_size: usize) -> Result<BatchRequest, InputError> {
        let obj = v
            .as_object()
            .ok_or_else(|| InputError::new("body", "expected a JSON object with \"groups\""))?;
        if let Some(k) = obj
            .keys()
            .find(|k| !["groups", "scale_rewards"].contains(&k.as_str()))
        {
            return Err(InputError::new(
                k.clone(),
                unknown_field(k, &["groups", "scale_rewards"], "known"),
            ));
        }
        let groups = obj
            .get("groups")
            .and_then(Value::as_array)
            .ok_or_else(|| InputError::new("groups", "missing or not an array"))?;
        if groups.is_empty() || groups.len() > MAX_BATCH_GROUPS {
            return Err(InputError::new(
                "groups",
                format!(
                    "expected between 1 and {MAX_BATCH_GROUPS} groups, got {}",
                    groups.len()
                ),
            ));
        }
        let scale_rewards = match obj.get("scale_rewards") {
            None | Some(Value::Null) => ScaleRewards::Group,
            Some(s) => serde_json::from_value(s.clone()).map_err(|_| {
                InputError::new("scale_rewards", "expected \"group\", \"batch\" or \"none\"")
            })?,
        };
        let groups = groups
            .iter()
            .enumerate()
            .map(|(i, g)| ScoreRequest::from_json_at(g, max_group_size, &format!("groups[{i}]")))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(BatchRequest {
            groups,
            scale_rewards,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn batch_errors_name_the_group() {
        let ok = json!({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]});
        let bad = json!({"groups": [{"trajectories": [ok]}, {"trajectories": [{"messages": [{"role": "x", "content": "q"}]}]}]});
        let e = BatchRequest::from_json(&bad, 64).unwrap_err().to_string();
        assert!(
            e.starts_with("groups[1].trajectories[0].messages[0].role: unknown role"),
            "{e}"
        );
        let e = BatchRequest::from_json(
            &json!({"groups": [{"trajectories": [ok], "polcy": {}}]}),
            64,
        )
        .unwrap_err();
        assert!(
            e.to_string().starts_with("groups[0].polcy: unknown field"),
            "{e}"
        );
    }

    #[test]
    fn options_parse() {
        let ok = json!({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]});
        let r = ScoreRequest::from_json(
            &json!({"trajectories": [ok], "scale_rewards": "none", "policy": {"type": "weighted", "weights": {"judge": 0}},
                    "verifiers": [{"type": "regex", "pattern": "x"}]}),
            64,
        )
        .unwrap();
        assert_eq!(r.scale_rewards, ScaleRewards::None);
        assert_eq!(r.verifiers.len(), 1);
        assert!(r.policy.is_some());
        let e = ScoreRequest::from_json(
            &json!({"trajectories": [ok], "policy": {"type": "best"}}),
            64,
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "policy.type: unknown variant \"best\", expected one of weighted, gate, \
             correctness_plus_shaping"
        );
    }
}
