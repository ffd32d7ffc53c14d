//! OpenRLHF's remote reward model protocol as plain data. OpenRLHF posts
//! `{"query": [...], "prompts": [...], "labels": [...]}` — each query is the prompt followed by
//! one sampled response — and reads back `{"rewards": [...], "scores": [...], "extra_logs": {}}`.
//! Here: parsing that body into [`Sample`]s, building the `score_group` request for one
//! assembled group (a prompt's samples), and answering each sample from the group's response.
//! Assembling samples into groups across requests is [`assemble`]; HTTP is `server::openrlhf`.

pub mod assemble;
pub mod config;
pub mod wire;

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{json, Map, Value};

use crate::domain::input::deserialize;
use crate::domain::rubric::Rubric;
use crate::domain::trajectory::{type_name, InputError, Message, Role, Trajectory};
use crate::score::{RubricRef, ScoreRequest, ScoreResponse};
pub use config::OpenRlhfConfig;

/// Every field a `/get_reward` body may have: serde's own list, from the type it parses into.
pub fn fields() -> &'static [&'static str] {
    crate::domain::input::struct_fields::<wire::GetRewardRequest>()
}

/// One sampled response to score.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub prompt: String,
    pub response: String,
    /// The dataset's label for the prompt (`None` when absent or empty).
    pub label: Option<String>,
}

impl Sample {
    /// Samples of one `scope` (the caller and its run) with the same prompt and label form one
    /// group: two runs, or two key holders, sending the same prompt are never judged relative
    /// to each other. (JSON keeps the key unambiguous whatever the texts contain.)
    pub fn group_key(&self, scope: &str) -> String {
        json!([scope, self.prompt, self.label]).to_string()
    }
}

/// Reads a `/get_reward` body. `strip_suffixes` are cut from the end of each response.
pub fn parse_request(v: &Value, strip_suffixes: &[String]) -> Result<Vec<Sample>, InputError> {
    if !v.is_object() {
        return Err(InputError::new(
            "body",
            format!(
                "expected an object with \"query\" and \"prompts\", got {}",
                type_name(v)
            ),
        ));
    }
    let body: wire::GetRewardRequest = deserialize(v, "")?;
    let queries = body
        .query
        .ok_or_else(|| InputError::new("query", "missing"))?
        .0;
    let prompts = body
        .prompts
        .ok_or_else(|| {
            InputError::new(
                "prompts",
                "missing (gavel groups samples by prompt; OpenRLHF sends it with the queries)",
            )
        })?
        .0;
    if queries.is_empty() {
        return Err(InputError::new("query", "no samples"));
    }
    if prompts.len() != queries.len() {
        return Err(InputError::new(
            "prompts",
            format!(
                "{} prompts for {} queries (one each)",
                prompts.len(),
                queries.len()
            ),
        ));
    }
    let labels: Vec<Option<String>> = match body.labels {
        None => vec![None; queries.len()],
        Some(a) if a.len() == queries.len() => a
            .into_iter()
            .map(|l| match l? {
                wire::Label::Text(s) if s.trim().is_empty() => None,
                wire::Label::Text(s) => Some(s),
                wire::Label::Number(wire::LabelNumber(n)) => Some(n.to_string()),
                wire::Label::Flag(b) => Some(b.to_string()),
            })
            .collect(),
        Some(a) => {
            return Err(InputError::new(
                "labels",
                format!(
                    "{} labels for {} queries (one each)",
                    a.len(),
                    queries.len()
                ),
            ))
        }
    };
    Ok(queries
        .into_iter()
        .zip(prompts)
        .zip(labels)
        .map(|((query, prompt), label)| {
            // The query is the prompt followed by the response; a query that does not start with
            // its prompt (a tokenizer that decodes differently) is judged whole.
            let response = query.strip_prefix(prompt.as_str()).unwrap_or(&query);
            Sample {
                response: strip_end(response, strip_suffixes).to_string(),
                prompt,
                label,
            }
        })
        .collect())
}

/// `text` without trailing whitespace and any of `suffixes` at its end, repeatedly.
fn strip_end<'a>(text: &'a str, suffixes: &[String]) -> &'a str {
    let mut t = text.trim_end();
    while let Some(rest) = suffixes
        .iter()
        .filter(|s| !s.is_empty())
        .find_map(|s| t.strip_suffix(s.as_str()))
    {
        t = rest.trim_end();
    }
    t
}

/// Whether labels feed a verifier, and which.
#[derive(Debug, Clone, PartialEq)]
pub enum LabelUse {
    /// Labels are not used: the rubric has no such verifier and no `label_kind` is set.
    Ignore,
    /// Each group's label is the `expected` answer of the verifier `name`.
    Feed { name: String, kind: Option<String> },
}

impl LabelUse {
    pub fn of(cfg: &OpenRlhfConfig, rubric: &Rubric) -> LabelUse {
        let named = |v: &Value| {
            v.get("name")
                .or_else(|| v.get("type"))
                .and_then(Value::as_str)
                == Some(cfg.label_verifier.as_str())
        };
        if cfg.label_kind.is_some() || rubric.verifiers.iter().any(named) {
            LabelUse::Feed {
                name: cfg.label_verifier.clone(),
                kind: cfg.label_kind.clone(),
            }
        } else {
            LabelUse::Ignore
        }
    }

    /// Refuses a sample without a label when the verifier needs one.
    pub fn check(&self, samples: &[Sample], rubric: &str) -> Result<(), InputError> {
        let LabelUse::Feed { name, .. } = self else {
            return Ok(());
        };
        match samples.iter().position(|s| s.label.is_none()) {
            None => Ok(()),
            Some(i) => Err(InputError::new(
                format!("labels[{i}]"),
                format!(
                    "missing: rubric {rubric:?} checks each response with the verifier {name:?}, \
                     whose expected answer is the label"
                ),
            )),
        }
    }
}

/// The `score_group` request for one assembled group (samples sharing prompt and label).
pub fn group_request(cfg: &OpenRlhfConfig, labels: &LabelUse, samples: &[Sample]) -> ScoreRequest {
    let message = |role, text: &str| Message {
        role,
        content: Some(text.to_string()),
        tool_calls: Vec::new(),
        tool_call_id: None,
        name: None,
        reasoning: None,
    };
    let trajectories = samples
        .iter()
        .map(|s| Trajectory {
            messages: vec![
                message(Role::User, &s.prompt),
                message(Role::Assistant, &s.response),
            ],
            reward: None,
            metrics: Map::new(),
            metadata: Map::new(),
        })
        .collect();
    let mut req = ScoreRequest::new(trajectories);
    req.rubric = RubricRef::Named(cfg.rubric.clone());
    req.judges = cfg.judge.iter().cloned().collect();
    if let (LabelUse::Feed { name, kind }, Some(label)) =
        (labels, samples.first().and_then(|s| s.label.as_ref()))
    {
        // Merged by name into the rubric's verifier when it has one (which keeps its type,
        // kind and weight); otherwise a new answer_line verifier.
        let mut v = json!({"type": "answer_line", "name": name, "expected": label});
        if let Some(k) = kind {
            v["kind"] = json!(k);
        }
        req.verifiers = vec![v];
    }
    req
}

/// One sample's answer, cut from its group's response.
#[derive(Debug, Clone, PartialEq)]
pub struct SampleReward {
    pub reward: Option<f64>,
    pub advantage: f64,
    pub components: BTreeMap<String, Option<f64>>,
    /// Samples in the group it was judged with.
    pub group_size: usize,
}

/// Each trajectory's reward, advantage and components, in order.
pub fn split_response(resp: ScoreResponse) -> Vec<SampleReward> {
    let n = resp.rewards.len();
    resp.rewards
        .into_iter()
        .zip(resp.advantages)
        .zip(resp.scores)
        .map(|((reward, advantage), s)| SampleReward {
            reward,
            advantage,
            components: s.components,
            group_size: n,
        })
        .collect()
}

/// The `/get_reward` answer: `rewards` and `scores` (the same numbers; OpenRLHF filters on
/// `scores` and trains on `rewards`), and `extra_logs`, per-sample arrays OpenRLHF averages into
/// its logs: `group_size`, `advantage`, and each component that applies to every sample.
pub fn response_body(answers: &[SampleReward]) -> Value {
    let rewards: Vec<Option<f64>> = answers.iter().map(|a| a.reward).collect();
    let mut logs = Map::new();
    logs.insert(
        "group_size".into(),
        answers.iter().map(|a| a.group_size).collect(),
    );
    logs.insert(
        "advantage".into(),
        answers.iter().map(|a| a.advantage).collect(),
    );
    let names: BTreeSet<&String> = answers.iter().flat_map(|a| a.components.keys()).collect();
    for name in names {
        // OpenRLHF turns each list into a tensor: a component missing or null for any sample
        // would break that, so such a component is left out.
        let values: Option<Vec<f64>> = answers
            .iter()
            .map(|a| a.components.get(name).copied().flatten())
            .collect();
        if let Some(values) = values {
            logs.insert(name.clone(), json!(values));
        }
    }
    let body = wire::GetRewardResponse {
        scores: rewards.clone(),
        rewards,
        extra_logs: logs,
    };
    serde_json::to_value(body).expect("plain data serialises")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strip() -> Vec<String> {
        OpenRlhfConfig::default().strip_suffixes
    }

    fn err(v: Value) -> String {
        parse_request(&v, &strip()).unwrap_err().to_string()
    }

    #[test]
    fn queries_split_into_prompt_and_response_with_end_markers_cut() {
        let s = parse_request(
            &json!({"query": ["Q: 2+2?\nA: ANSWER: 4<|im_end|>\n", "other text"],
                    "prompts": ["Q: 2+2?\nA:", "Q: 2+3?"], "labels": ["4", 5]}),
            &strip(),
        )
        .unwrap();
        assert_eq!(s[0].prompt, "Q: 2+2?\nA:");
        assert_eq!(s[0].response, " ANSWER: 4");
        assert_eq!(s[0].label.as_deref(), Some("4"));
        // Not prefixed by its prompt: judged whole.
        assert_eq!(s[1].response, "other text");
        assert_eq!(s[1].label.as_deref(), Some("5"));
        assert_ne!(s[0].group_key("k"), s[1].group_key("k"));
        assert_ne!(s[0].group_key("k"), s[0].group_key("other caller"));
        let none = parse_request(
            &json!({"query": ["a"], "prompts": ["a"], "labels": [""]}),
            &[],
        )
        .unwrap();
        assert_eq!(none[0].label, None);
        assert_eq!(strip_end("x </s></s>  ", &strip()), "x");
    }

    #[test]
    fn refusals_name_the_field() {
        assert_eq!(
            err(json!({"query": ["a"]})),
            "prompts: missing (gavel groups samples by prompt; OpenRLHF sends it with the queries)"
        );
        assert_eq!(
            err(json!({"query": ["a", "b"], "prompts": ["a"]})),
            "prompts: 1 prompts for 2 queries (one each)"
        );
        assert_eq!(
            err(json!({"query": ["a", 3], "prompts": ["a", "b"]})),
            "query[1]: expected a string, got a number"
        );
        assert_eq!(
            err(json!({"query": [], "prompts": []})),
            "query: no samples"
        );
        assert_eq!(
            err(json!({"query": ["a"], "prompts": ["a"], "labels": [{}]})),
            "labels[0]: expected a string, a number or null, got an object"
        );
        assert_eq!(
            err(json!({"query": ["a"], "prompts": ["a"], "label": []})),
            "label: unknown field, did you mean labels?"
        );
        assert_eq!(
            err(json!({"query": ["a"], "prompts": ["a"], "answers": []})),
            "answers: unknown field (known: query, prompts, labels)"
        );
    }

    fn rubric(verifiers: Vec<Value>) -> Rubric {
        let spec = serde_json::from_value(json!({"text": "t", "verifiers": verifiers})).unwrap();
        Rubric::from_spec(spec, "r", "r.toml").unwrap()
    }

    #[test]
    fn labels_feed_the_rubrics_answer_line_or_a_configured_one() {
        let cfg = OpenRlhfConfig::default();
        let with = rubric(vec![json!({"type": "answer_line", "kind": "integer"})]);
        let feed = LabelUse::of(&cfg, &with);
        assert_eq!(
            feed,
            LabelUse::Feed {
                name: "answer_line".into(),
                kind: None
            }
        );
        assert_eq!(LabelUse::of(&cfg, &rubric(vec![])), LabelUse::Ignore);
        let kinded = OpenRlhfConfig {
            label_kind: Some("integer".into()),
            ..OpenRlhfConfig::default()
        };
        assert!(
            matches!(LabelUse::of(&kinded, &rubric(vec![])), LabelUse::Feed { kind: Some(k), .. } if k == "integer")
        );

        let samples = parse_request(
            &json!({"query": ["p 4", "p 5"], "prompts": ["p", "p"], "labels": ["4", "4"]}),
            &[],
        )
        .unwrap();
        let req = group_request(&cfg, &feed, &samples);
        assert_eq!(req.trajectories.len(), 2);
        assert_eq!(req.trajectories[1].final_answer(), Some(" 5"));
        assert_eq!(
            req.verifiers,
            vec![json!({"type": "answer_line", "name": "answer_line", "expected": "4"})]
        );
        assert!(group_request(&cfg, &LabelUse::Ignore, &samples)
            .verifiers
            .is_empty());
        let unlabeled = parse_request(&json!({"query": ["p 4"], "prompts": ["p"]}), &[]).unwrap();
        assert_eq!(
            feed.check(&unlabeled, "qa").unwrap_err().to_string(),
            "labels[0]: missing: rubric \"qa\" checks each response with the verifier \"answer_line\", whose expected answer is the label"
        );
        assert!(LabelUse::Ignore.check(&unlabeled, "qa").is_ok());
    }

    #[test]
    fn extra_logs_keep_components_every_sample_has() {
        let a = |r: f64, comps: &[(&str, Option<f64>)]| SampleReward {
            reward: Some(r),
            advantage: if r > 0.5 { 1.0 } else { -1.0 },
            components: comps.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            group_size: 2,
        };
        let body = response_body(&[
            a(0.9, &[("judge", Some(0.9)), ("answer_line", Some(1.0))]),
            a(0.1, &[("judge", Some(0.1)), ("answer_line", None)]),
        ]);
        assert_eq!(body["rewards"], json!([0.9, 0.1]));
        assert_eq!(body["scores"], body["rewards"]);
        assert_eq!(body["extra_logs"]["judge"], json!([0.9, 0.1]));
        assert_eq!(body["extra_logs"]["group_size"], json!([2, 2]));
        assert_eq!(body["extra_logs"]["advantage"], json!([1.0, -1.0]));
        assert!(body["extra_logs"].get("answer_line").is_none());
    }
}
