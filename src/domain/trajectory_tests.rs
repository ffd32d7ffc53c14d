//! The trajectory parser's tests: what it accepts, and every refusal's wording.

use super::*;
use serde_json::json;

fn err(v: Value) -> String {
    parse_trajectories(&v, 64).unwrap_err().to_string()
}

#[test]
fn accepts_openai_messages_with_tool_calls_and_parts() {
    let v = json!([{"messages": [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {"role": "assistant", "content": null, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"x\":1}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "42"},
        {"role": "assistant", "content": "ANSWER: 42"}],
      "reward": 0.5, "metrics": {"turns": 3}}]);
    let t = &parse_trajectories(&v, 64).unwrap()[0];
    assert_eq!(t.messages.len(), 5);
    assert_eq!(t.messages[1].content.as_deref(), Some("a\nb"));
    assert_eq!(t.messages[2].tool_calls[0].name, "f");
    assert_eq!(t.messages[3].tool_call_id.as_deref(), Some("c1"));
    assert_eq!(t.reward, Some(0.5));
    assert_eq!(t.metrics["turns"], 3);
    assert_eq!(t.final_answer(), Some("ANSWER: 42"));
}

#[test]
fn accepts_art_messages_and_choices() {
    let v = json!([{"messages_and_choices": [
        {"role": "user", "content": "q"},
        {"finish_reason": "stop", "index": 0, "logprobs": null,
         "message": {"role": "assistant", "content": "answer"}}],
      "reward": 1.0, "metrics": {}}]);
    let t = &parse_trajectories(&v, 64).unwrap()[0];
    assert_eq!(t.messages[1].role, Role::Assistant);
    assert_eq!(t.messages[1].content.as_deref(), Some("answer"));
}

#[test]
fn refusals_name_trajectory_message_and_field() {
    let ok = json!({"role": "assistant", "content": "x"});
    assert_eq!(
        err(json!([{"messages": [ok]}, {"messages": [ok, {"role": "robot", "content": "x"}]}])),
        "trajectories[1].messages[1].role: unknown role \"robot\" (expected system, user, assistant or tool)"
    );
    assert_eq!(
        err(json!([{"messages": [ok, {"role": "tool", "content": "x"}]}])),
        "trajectories[0].messages[1].tool_call_id: missing (required for role \"tool\")"
    );
    assert_eq!(
        err(json!([{"messages": [{"role": "user", "content": 5}]}])),
        "trajectories[0].messages[0].content: expected a string, null or a list of text parts, got a number"
    );
    assert_eq!(
        err(json!([{"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]}])),
        "trajectories[0].messages[0].content[0].type: unsupported content part \"image_url\": only text parts can be judged"
    );
    assert_eq!(
        err(json!([{"msgs": []}])),
        "trajectories[0]: missing \"messages\" (or ART's \"messages_and_choices\")"
    );
    assert_eq!(
        err(json!([])),
        "trajectories: a group needs at least one trajectory"
    );
    assert_eq!(
        err(json!([{"messages": []}])),
        "trajectories[0].messages: no messages"
    );
    assert_eq!(
        err(json!([{"messages": [ok], "reward": "high"}])),
        "trajectories[0].reward: expected a number or null, got a string"
    );
    assert_eq!(
        err(json!([{"messages": [{"role": "assistant", "tool_calls": [{"id": "1"}]}]}])),
        "trajectories[0].messages[0].tool_calls[0].function: missing"
    );
    let too_many: Vec<Value> = (0..65).map(|_| json!({"messages": [ok]})).collect();
    assert_eq!(
        err(Value::Array(too_many)),
        "trajectories: 65 trajectories, more than the maximum group size of 64"
    );
}

#[test]
fn content_hash_is_stable_and_sensitive() {
    let a = json!({"b": 1, "a": [1, 2]});
    assert_eq!(content_hash(&a), content_hash(&a.clone()));
    assert_ne!(
        content_hash(&a),
        content_hash(&json!({"b": 1, "a": [2, 1]}))
    );
    assert!(content_hash(&a).starts_with("sha256:"));
}

#[test]
fn a_near_miss_of_a_field_is_refused_at_every_level_and_other_fields_ignored() {
    let answer = json!({"role": "assistant", "content": "x"});
    assert_eq!(
        err(json!([{"mesages": [answer]}])),
        "trajectories[0].mesages: unknown field, did you mean messages?"
    );
    assert_eq!(
        err(json!([{"messages": [answer], "rewrd": 1.0}])),
        "trajectories[0].rewrd: unknown field, did you mean reward?"
    );
    assert_eq!(
        err(
            json!([{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "contnet": "x"}]}])
        ),
        "trajectories[0].messages[1].contnet: unknown field, did you mean content?"
    );
    assert_eq!(
        err(
            json!([{"messages": [{"role": "assistant", "tool_calls": [{"id": "1", "fucntion": {"name": "f"}}]}]}])
        ),
        "trajectories[0].messages[0].tool_calls[0].fucntion: unknown field, did you mean function?"
    );
    assert_eq!(
        err(json!([{"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f", "argumnets": "{}"}}]}]}])),
        "trajectories[0].messages[0].tool_calls[0].function.argumnets: unknown field, did you mean arguments?"
    );
    // Fields of other frameworks are theirs: ART's `tools` and `logs`, OpenAI's `refusal`.
    let v = json!([{"messages": [{"role": "assistant", "content": "x", "refusal": null, "annotations": []}],
                    "tools": [], "logs": ["step"]}]);
    assert!(parse_trajectories(&v, 64).is_ok());
}

#[test]
fn a_trajectory_without_an_answer_is_refused_not_judged() {
    let user = json!({"role": "user", "content": "q"});
    assert_eq!(
        err(json!([{"messages": [user]}])),
        "trajectories[0].messages: no assistant message: nothing to judge"
    );
    assert_eq!(
        err(json!([[user, {"role": "tool", "tool_call_id": "c", "content": "42"}]])),
        "trajectories[0]: no assistant message: nothing to judge"
    );
    // An empty answer is a turn (a policy that said nothing), judged as one.
    let empty = json!([[user, {"role": "assistant", "content": ""}]]);
    assert!(parse_trajectories(&empty, 64).is_ok());
}

#[test]
fn reasoning_is_read_from_each_field_reasoning_models_write() {
    for field in REASONING_FIELDS {
        let v = json!([[{"role": "user", "content": "q"},
                        {"role": "assistant", "content": "42", *field: "6 times 7"}]]);
        let t = &parse_trajectories(&v, 64).unwrap()[0];
        assert_eq!(
            t.messages[1].reasoning.as_deref(),
            Some("6 times 7"),
            "{field}"
        );
        assert_eq!(t.final_answer(), Some("42"));
    }
    let both = json!([[{"role": "assistant", "content": "42", "thinking": "b", "reasoning_content": "a"}]]);
    assert_eq!(
        parse_trajectories(&both, 64).unwrap()[0].messages[0]
            .reasoning
            .as_deref(),
        Some("a")
    );
    assert_eq!(
        err(json!([[{"role": "assistant", "content": "42", "thinking": 7}]])),
        "trajectories[0][0].thinking: expected a string, got a number"
    );
    let group = parse_trajectories(
        &json!([[{"role": "assistant", "content": "1", "thinking": "t"}],
                [{"role": "assistant", "content": "2"}]]),
        64,
    )
    .unwrap();
    let (dropped, n) = without_reasoning(&group).unwrap();
    assert_eq!(n, 1);
    assert!(dropped
        .iter()
        .flat_map(|t| &t.messages)
        .all(|m| m.reasoning.is_none()));
    assert!(without_reasoning(&dropped).is_none());
}
