//! The scoring log's side of scoring: every scored group becomes one [`ScoringLogEntry`] for a
//! store that keeps a log (Postgres), with the request in a canonical body that
//! [`ScoreRequest::from_json`] reads back, so `gavel rescore --from-log` can score it again.

use std::time::Duration;

use serde_json::{json, Map, Value};

use super::request::{OnJudgeError, RubricRef, ScoreRequest};
use super::response::ScoreResponse;
use crate::domain::reward::ScaleRewards;
use crate::domain::trajectory::{content_hash, Message, Role, Trajectory};
use crate::store::ScoringLogEntry;

/// The log entry for one scored group.
pub fn entry(req: &ScoreRequest, resp: &ScoreResponse, latency: Duration) -> ScoringLogEntry {
    let request = request_body(req);
    ScoringLogEntry {
        request_hash: content_hash(&request),
        request,
        rubric_name: resp.rubric.name.clone(),
        rubric_version: resp.rubric.version.clone(),
        template_name: resp.template.as_ref().map(|t| t.name.clone()),
        template_version: resp.template.as_ref().map(|t| t.version.clone()),
        judges: to_json(&resp.judges),
        rewards: to_json(&resp.rewards),
        scores: to_json(&resp.scores),
        usage: to_json(&resp.usage),
        error: resp.error.as_ref().map(to_json),
        latency_ms: latency.as_secs_f64() * 1000.0,
    }
}

fn to_json<T: serde::Serialize>(v: &T) -> Value {
    serde_json::to_value(v).expect("plain response data serialises")
}

/// The request as a body [`ScoreRequest::from_json`] accepts, with every option that differs
/// from its default. Messages are written in OpenAI's wire format.
pub fn request_body(req: &ScoreRequest) -> Value {
    let mut body = Map::new();
    body.insert(
        "trajectories".into(),
        req.trajectories.iter().map(trajectory).collect(),
    );
    body.insert(
        "rubric".into(),
        match &req.rubric {
            RubricRef::Named(n) => json!(n),
            RubricRef::Inline(spec) => json!(spec),
        },
    );
    if !req.judges.is_empty() {
        body.insert("judge".into(), json!(req.judges));
    }
    if let Some(p) = req.permutations {
        body.insert("permutations".into(), json!(p));
    }
    if req.aggregate != Default::default() {
        body.insert("aggregate".into(), json!(req.aggregate));
    }
    if let Some(t) = &req.tools {
        body.insert("tools".into(), t.clone());
    }
    if let Some(r) = &req.reference {
        body.insert("reference".into(), json!(r));
    }
    if let Some(m) = req.judge_mode {
        body.insert("judge_mode".into(), json!(m));
    }
    if !req.verifiers.is_empty() {
        body.insert("verifiers".into(), json!(req.verifiers));
    }
    if let Some(p) = &req.policy {
        body.insert("policy".into(), json!(p));
    }
    if req.scale_rewards != ScaleRewards::Group {
        body.insert("scale_rewards".into(), json!(req.scale_rewards));
    }
    if req.on_judge_error == OnJudgeError::Null {
        body.insert("on_judge_error".into(), json!("null"));
    }
    if let Some(r) = req.reasoning {
        body.insert("reasoning".into(), json!(r));
    }
    Value::Object(body)
}

fn trajectory(t: &Trajectory) -> Value {
    let mut o = Map::new();
    o.insert("messages".into(), t.messages.iter().map(message).collect());
    if let Some(r) = t.reward {
        o.insert("reward".into(), json!(r));
    }
    if !t.metrics.is_empty() {
        o.insert("metrics".into(), Value::Object(t.metrics.clone()));
    }
    if !t.metadata.is_empty() {
        o.insert("metadata".into(), Value::Object(t.metadata.clone()));
    }
    Value::Object(o)
}

fn message(m: &Message) -> Value {
    let role = match m.role {
        Role::System => "system",
        Role::User => "user",
        Role::Assistant => "assistant",
        // A tool result without a call id came in as the legacy `function` role.
        Role::Tool if m.tool_call_id.is_none() => "function",
        Role::Tool => "tool",
    };
    let mut o = Map::new();
    o.insert("role".into(), json!(role));
    o.insert("content".into(), json!(m.content));
    if !m.tool_calls.is_empty() {
        o.insert(
            "tool_calls".into(),
            m.tool_calls
                .iter()
                .map(|c| {
                    json!({"id": c.id, "type": "function",
                           "function": {"name": c.name, "arguments": c.arguments}})
                })
                .collect(),
        );
    }
    if let Some(id) = &m.tool_call_id {
        o.insert("tool_call_id".into(), json!(id));
    }
    if let Some(n) = &m.name {
        o.insert("name".into(), json!(n));
    }
    // As OpenAI-compatible servers write a reasoning model's thinking.
    if let Some(r) = &m.reasoning {
        o.insert("reasoning_content".into(), json!(r));
    }
    Value::Object(o)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::trajectory::ReasoningRule;

    /// Every option set away from its default, and every message shape.
    fn rich() -> Value {
        json!({
            "trajectories": [
                {"messages": [
                    {"role": "developer", "content": "be brief"},
                    {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
                    {"role": "assistant", "content": null, "tool_calls": [
                        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"x": 1}}}]},
                    {"role": "tool", "tool_call_id": "c1", "content": "42"},
                    {"role": "function", "name": "f", "content": "legacy"},
                    {"role": "assistant", "content": "ANSWER: 42", "thinking": "6 times 7"}],
                 "reward": 0.5, "metrics": {"turns": 3}, "metadata": {"run": "r1"}},
                {"messages_and_choices": [
                    {"role": "user", "content": "q"},
                    {"finish_reason": "stop", "message": {"role": "assistant", "content": "x"}}]}
            ],
            "rubric": {"text": "be exact", "items": [{"id": "a", "text": "answers"}]},
            "judge": ["j1", "j2"],
            "permutations": 2,
            "aggregate": "median",
            "tools": [{"type": "function", "function": {"name": "f"}}],
            "verifiers": [{"type": "answer_line", "expected": "42"}],
            "policy": {"type": "gate", "gate": "answer_line"},
            "scale_rewards": "none",
            "on_judge_error": "null",
            "reasoning": "show"
        })
    }

    #[test]
    fn the_canonical_body_reads_back_as_the_same_request() {
        let req = ScoreRequest::from_json(&rich(), 64).unwrap();
        let body = request_body(&req);
        let again = ScoreRequest::from_json(&body, 64).unwrap();
        assert_eq!(request_body(&again), body);
        assert_eq!(again.trajectories, req.trajectories);
        assert_eq!(again.rubric, req.rubric);
        assert_eq!(again.judges, req.judges);
        assert_eq!(again.permutations, Some(2));
        assert_eq!(again.aggregate, req.aggregate);
        assert_eq!(again.policy, req.policy);
        assert_eq!(again.scale_rewards, ScaleRewards::None);
        assert_eq!(again.on_judge_error, OnJudgeError::Null);
        assert_eq!(again.reasoning, Some(ReasoningRule::Show));
        assert_eq!(
            again.trajectories[0].messages[5].reasoning.as_deref(),
            Some("6 times 7")
        );
        assert_eq!(
            body["trajectories"][0]["messages"][2]["tool_calls"][0]["function"]["arguments"],
            json!("{\"x\":1}")
        );
    }

    #[test]
    fn defaults_stay_out_of_the_body() {
        let req = ScoreRequest::from_json(
            &json!([{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}]),
            64,
        )
        .unwrap();
        let body = request_body(&req);
        let keys: Vec<&str> = body
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(keys, vec!["trajectories", "rubric"]);
        assert_eq!(body["rubric"], json!("default"));
    }
}
