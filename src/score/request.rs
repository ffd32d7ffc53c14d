//! Scoring requests: deserialized into `request_wire`'s types, then validated here (the
//! group's size, a panel's names, the bounds of each option), every refusal naming its field.

use serde_json::Value;

use super::request_wire as wire;
pub use super::request_wire::{
    OnJudgeError, MAX_BATCH_GROUPS, MAX_PANEL, MAX_PERMUTATIONS, MAX_VERIFIERS,
};
use crate::domain::input::{deserialize, not_an_integer, struct_fields};
use crate::domain::prompt::JudgeMode;
use crate::domain::reward::{Policy, ScaleRewards};
use crate::domain::rubric::RubricSpec;
use crate::domain::trajectory::{trajectories_from_wire, InputError, ReasoningRule, Trajectory};
use crate::judge::Aggregate;

/// A rubric named in the request or given inline.
#[derive(Debug, Clone, PartialEq)]
pub enum RubricRef {
    Named(String),
    /// Boxed: a spec is ten times the size of a name.
    Inline(Box<RubricSpec>),
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

/// Every field a scoring request may have: serde's own list, from the type it parses into.
pub fn request_fields() -> &'static [&'static str] {
    struct_fields::<wire::Group>()
}

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
    e.under(prefix)
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
        match v {
            // A bare array is the group's trajectories, and its refusals name them so.
            Value::Array(_) => {
                let list = deserialize(v, &join(at, "trajectories"))?;
                trajectories_from_wire(list, max_group_size)
                    .map(ScoreRequest::new)
                    .map_err(|e| e.under(at))
            }
            Value::Object(_) => {
                let group: wire::Group = deserialize(v, at)?;
                ScoreRequest::from_wire(group, max_group_size).map_err(|e| e.under(at))
            }
            _ => Err(InputError::new(
                if at.is_empty() { "body" } else { at },
                wire::NOT_A_GROUP,
            )),
        }
    }

    /// A request body's text parsed straight into the request, without a JSON tree: the
    /// daemon's common case. `None` when the text is refused (or is not JSON): its refusal is
    /// [`ScoreRequest::from_json`]'s on the JSON value, in the same words wherever it arises.
    pub fn from_text(text: &[u8], max_group_size: usize) -> Option<ScoreRequest> {
        match serde_json::from_slice(text).ok()? {
            wire::ScoreRequest::Group(g) => ScoreRequest::from_wire(g, max_group_size).ok(),
            wire::ScoreRequest::Bare(wire::TrajectoryArray(list)) => {
                trajectories_from_wire(list, max_group_size)
                    .ok()
                    .map(ScoreRequest::new)
            }
        }
    }

    /// What a deserialized request means, for groups of at most `max_group_size`; errors name
    /// the request's field.
    pub fn from_wire(g: wire::Group, max_group_size: usize) -> Result<ScoreRequest, InputError> {
        let mut req = ScoreRequest::new(trajectories_from_wire(g.trajectories, max_group_size)?);
        req.rubric = match g.rubric {
            None => RubricRef::Named("default".into()),
            Some(wire::RubricRef::Name(s)) => RubricRef::Named(s),
            Some(wire::RubricRef::Inline(spec)) => RubricRef::Inline(spec),
        };
        req.judges = match g.judge {
            None => Vec::new(),
            Some(wire::JudgeRef::One(name)) => vec![name],
            Some(wire::JudgeRef::Panel(wire::Panel(names))) => panel(names)?,
        };
        req.permutations = match g.permutations {
            None => None,
            Some(wire::Permutations(n)) => Some(match n.as_u64() {
                Some(k) => check_permutations(k).map_err(|m| InputError::new("permutations", m))?,
                None => {
                    let expected = wire::permutations_expected();
                    return Err(InputError::new(
                        "permutations",
                        not_an_integer(&n, &expected),
                    ));
                }
            }),
        };
        req.aggregate = g.aggregate.unwrap_or(Aggregate::Mean);
        req.tools = g.tools.map(Value::Array);
        req.reference = match g.reference {
            Some(s) if s.trim().is_empty() => {
                return Err(InputError::new("reference", wire::REFERENCE))
            }
            r => r,
        };
        req.judge_mode = g.judge_mode;
        req.verifiers = g.verifiers.unwrap_or_default();
        if req.verifiers.len() > MAX_VERIFIERS {
            return Err(InputError::new(
                "verifiers",
                format!(
                    "at most {MAX_VERIFIERS} verifiers, got {}",
                    req.verifiers.len()
                ),
            ));
        }
        req.policy = g.policy;
        req.scale_rewards = g.scale_rewards.unwrap_or(ScaleRewards::Group);
        req.on_judge_error = g.on_judge_error;
        req.reasoning = g.reasoning;
        Ok(req)
    }
}

/// A panel's judges: 1..=[`MAX_PANEL`] names, none twice.
fn panel(names: Vec<Value>) -> Result<Vec<String>, InputError> {
    if names.len() > MAX_PANEL {
        return Err(InputError::new(
            "judge",
            format!(
                "a panel has at most {MAX_PANEL} judges, got {}",
                names.len()
            ),
        ));
    }
    let names = names
        .into_iter()
        .map(|n| match n {
            Value::String(s) => Some(s),
            _ => None,
        })
        .collect::<Option<Vec<String>>>()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| InputError::new("judge", wire::JUDGE))?;
    let mut seen = std::collections::HashSet::new();
    if let Some(d) = names.iter().find(|n| !seen.insert(n.as_str())) {
        return Err(InputError::new(
            "judge",
            format!("{d:?} appears twice in the panel"),
        ));
    }
    Ok(names)
}

fn join(at: &str, field: &str) -> String {
    if at.is_empty() {
        field.to_string()
    } else {
        format!("{at}.{field}")
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

impl BatchRequest {
    pub fn from_json(v: &Value, max_group_size: usize) -> Result<BatchRequest, InputError> {
        if !v.is_object() {
            return Err(InputError::new(
                "body",
                "expected a JSON object with \"groups\"",
            ));
        }
        let batch: wire::BatchRequest = deserialize(v, "").map_err(|e| bare_group_named(v, e))?;
        BatchRequest::from_wire(batch, max_group_size)
    }

    /// As [`ScoreRequest::from_text`], for a batch.
    pub fn from_text(text: &[u8], max_group_size: usize) -> Option<BatchRequest> {
        let batch = serde_json::from_slice(text).ok()?;
        BatchRequest::from_wire(batch, max_group_size).ok()
    }

    /// What a deserialized batch means; errors name the group (`groups[2].trajectories`).
    pub fn from_wire(
        b: wire::BatchRequest,
        max_group_size: usize,
    ) -> Result<BatchRequest, InputError> {
        let wire::Groups(groups) = b
            .groups
            .ok_or_else(|| InputError::new("groups", wire::GROUPS))?;
        if groups.is_empty() || groups.len() > MAX_BATCH_GROUPS {
            return Err(InputError::new(
                "groups",
                format!(
                    "expected between 1 and {MAX_BATCH_GROUPS} groups, got {}",
                    groups.len()
                ),
            ));
        }
        let scale_rewards = b.scale_rewards.unwrap_or(ScaleRewards::Group);
        let groups = groups
            .into_iter()
            .enumerate()
            .map(|(i, g)| {
                let group = match g {
                    wire::ScoreRequest::Group(g) => ScoreRequest::from_wire(g, max_group_size),
                    wire::ScoreRequest::Bare(wire::TrajectoryArray(list)) => {
                        trajectories_from_wire(list, max_group_size).map(ScoreRequest::new)
                    }
                };
                group.map_err(|e| e.under(&format!("groups[{i}]")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(BatchRequest {
            groups,
            scale_rewards,
        })
    }
}

/// serde's path into a group sent as a bare array (`groups[1][0]`) as the API names it: the
/// array is that group's `trajectories` (`groups[1].trajectories[0]`).
fn bare_group_named(v: &Value, e: InputError) -> InputError {
    let Some(rest) = e.path.strip_prefix("groups[") else {
        return e;
    };
    let Some((index, after)) = rest.split_once(']') else {
        return e;
    };
    let bare = index
        .parse::<usize>()
        .ok()
        .is_some_and(|i| v["groups"][i].is_array());
    if bare && after.starts_with('[') {
        let path = format!("groups[{index}].trajectories{after}");
        InputError::new(path, e.problem)
    } else {
        e
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
    fn the_text_parses_as_the_json_value_does() {
        let ok = json!({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]});
        let accepted = [
            json!({"trajectories": [ok, [{"role": "developer", "content": "s"}, {"role": "assistant", "content": [{"type": "text", "text": "a"}]}]],
                   "judge": ["a", "b"], "permutations": 3, "reference": "r", "on_judge_error": "null",
                   "tools": [{"type": "function"}], "rubric": {"text": "Be right."}}),
            json!([ok, {"messages_and_choices": [{"role": "user", "content": "q"},
                    {"finish_reason": "stop", "message": {"role": "assistant", "content": "a"}}], "reward": 1}]),
        ];
        for body in accepted {
            let text = body.to_string();
            let from_text = ScoreRequest::from_text(text.as_bytes(), 64).expect("accepted");
            let from_json = ScoreRequest::from_json(&body, 64).unwrap();
            assert_eq!(format!("{from_text:?}"), format!("{from_json:?}"));
        }
        let refused = [
            json!({"trajectories": [{"messages": [{"role": "robot", "content": "q"}]}]}),
            json!({"trajectories": [ok], "permutations": 17}),
            json!({"trajectories": [ok], "judge": ["a", "a"]}),
            json!({"trajectories": [ok, ok], "polcy": {}}),
            json!([ok, ok, ok]),
        ];
        for body in refused {
            assert!(
                ScoreRequest::from_text(body.to_string().as_bytes(), 2).is_none(),
                "{body}"
            );
            assert!(ScoreRequest::from_json(&body, 2).is_err(), "{body}");
        }
        assert!(ScoreRequest::from_text(b"{\"trajectories\": [", 64).is_none());
        // A key twice: the JSON value keeps the last, and so does the request, by way of the value.
        let twice = r#"{"trajectories": [[{"role": "assistant", "content": "a"}]], "permutations": 2, "permutations": 3}"#;
        assert!(ScoreRequest::from_text(twice.as_bytes(), 64).is_none());
        let value: Value = serde_json::from_str(twice).unwrap();
        assert_eq!(
            ScoreRequest::from_json(&value, 64).unwrap().permutations,
            Some(3)
        );
        let batch = json!({"groups": [[ok], {"trajectories": [ok]}], "scale_rewards": "batch"});
        let from_text = BatchRequest::from_text(batch.to_string().as_bytes(), 64).unwrap();
        let from_json = BatchRequest::from_json(&batch, 64).unwrap();
        assert_eq!(format!("{from_text:?}"), format!("{from_json:?}"));
    }

    #[test]
    fn the_request_fields_are_serdes_list() {
        assert_eq!(
            request_fields(),
            [
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
            ]
        );
    }

    #[test]
    fn a_bare_group_in_a_batch_names_its_trajectories() {
        let e = BatchRequest::from_json(
            &json!({"groups": [[{"messages": [{"role": "assistant", "content": 5}]}]]}),
            64,
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "groups[0].trajectories[0].messages[0].content: expected a string, null or a list of \
             text parts, got a number"
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
