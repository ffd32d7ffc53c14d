//! The request examples of the document. The ops tests validate each against its schema and
//! send it to the daemon, which must accept it. The examples share their groups, so each group
//! is written once.

use serde_json::{json, Value};

/// One arithmetic trajectory: a calculator call, then `final_answer`.
fn calculator_trajectory(final_answer: &str) -> Value {
    json!({
        "messages": [
            {"role": "system", "content": "You answer arithmetic questions. End with ANSWER: <n>."},
            {"role": "user", "content": "What is 1030 * 4?"},
            {
                "role": "assistant",
                "content": null,
                "tool_calls": [{
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "calculator", "arguments": "{\"expression\": \"1030*4\"}"}
                }]
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "4120"},
            {"role": "assistant", "content": final_answer}
        ]
    })
}

/// The two calculator trajectories: one right, one guessing.
fn calculator_trajectories() -> Value {
    json!([
        calculator_trajectory("1030 * 4 = 4120.\nANSWER: 4120"),
        calculator_trajectory("About 4000.\nANSWER: 4000"),
    ])
}

/// A group with tool calls, judged plus an exact-answer verifier.
pub fn verified() -> Value {
    json!({
        "trajectories": calculator_trajectories(),
        "rubric": "default",
        "permutations": 1,
        "verifiers": [{"type": "answer_line", "kind": "integer", "expected": 4120}],
        "policy": {
            "type": "correctness_plus_shaping",
            "correctness": "answer_line",
            "shaping": {"judge": 0.1}
        },
        "scale_rewards": "group",
        "on_judge_error": "fail"
    })
}

/// Just the trajectories.
pub fn minimal() -> Value {
    let answer = |a: &str| {
        json!({"messages": [
            {"role": "user", "content": "Name a prime above 10."},
            {"role": "assistant", "content": a}
        ]})
    };
    json!({"trajectories": [answer("11"), answer("12")]})
}

/// Two groups, advantages scaled over the batch.
pub fn batch() -> Value {
    json!({
        "groups": [
            minimal(),
            {
                "trajectories": calculator_trajectories(),
                "rubric": {"text": "The exact answer matters most; then fewer tool calls."}
            }
        ],
        "scale_rewards": "batch"
    })
}

/// Eight samples of one prompt (a full group).
pub fn one_group() -> Value {
    const PROMPT: &str =
        "<|im_start|>user\nWhat is 6 * 7? End with ANSWER: <n>.<|im_end|>\n<|im_start|>assistant\n";
    let responses = [
        "6 * 7 = 42.\nANSWER: 42",
        "ANSWER: 42",
        "6 * 7 is 48.\nANSWER: 48",
        "Let me think: 6 * 7 = 42.\nANSWER: 42",
        "ANSWER: 36",
        "6 sevens make 42.\nANSWER: 42",
        "ANSWER: 13",
        "I am not sure.\nANSWER: 40",
    ];
    let (prompts, labels) = ([PROMPT; 8], ["42"; 8]);
    json!({
        "query": responses.map(|r| format!("{PROMPT}{r}")),
        "prompts": prompts,
        "labels": labels
    })
}

#[cfg(test)]
mod tests {
    /// The examples are the ones the hand-written document carried, value for value.
    #[test]
    fn examples_are_the_documented_ones() {
        let batch = super::batch();
        assert_eq!(batch["groups"][0], super::minimal());
        assert_eq!(
            batch["groups"][1]["trajectories"],
            super::verified()["trajectories"]
        );
        let q = super::one_group();
        assert_eq!(q["query"].as_array().unwrap().len(), 8);
        assert!(q["query"][2]
            .as_str()
            .unwrap()
            .ends_with("assistant\n6 * 7 is 48.\nANSWER: 48"));
    }
}
