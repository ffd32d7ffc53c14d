//! What the judge is shown of a trajectory, over real HTTP against the mock judge: the reasoning
//! reasoning models write (`reasoning_content`, `thinking`) is dropped and counted by default,
//! shown when the request or the rubric says `show`; and a trajectory with nothing to judge, or
//! a misspelt field at any level, is refused before any judge call.

mod common;

use common::{judge_prompt, marked_group, setup};
use serde_json::{json, Value};

const THOUGHT: &str = "first I multiply 1030 by 4, carefully";

/// The marked group with the first answer's reasoning in `field`.
fn group_with_reasoning(field: &str) -> Value {
    let mut g = marked_group(&[0.8, 0.3]);
    g["trajectories"][0]["messages"][2][field] = json!(THOUGHT);
    g
}

#[tokio::test]
async fn reasoning_is_dropped_and_counted_unless_shown() {
    let (mock, gavel, _dir) = setup().await;

    // Dropped by default: the judge never reads it, and the reply says how much was left out.
    let (status, body) = gavel
        .post(
            "/v1/score_group",
            &group_with_reasoning("reasoning_content"),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["reasoning_dropped"], 1, "{body}");
    let prompt = judge_prompt(&mock.requests()[0]);
    assert!(!prompt.contains(THOUGHT), "{prompt}");
    // The same group without reasoning is the same judging: a cache hit, no call.
    let (status, plain) = gavel
        .post("/v1/score_group", &marked_group(&[0.8, 0.3]))
        .await;
    assert_eq!(status, 200, "{plain}");
    assert_eq!(plain["usage"]["cache_hits"], 1, "{plain}");
    assert!(plain.get("reasoning_dropped").is_none(), "{plain}");
    assert_eq!(mock.calls(), 1);

    // Shown on request: in the prompt, before the answer, and a judging of its own.
    let mut shown = group_with_reasoning("thinking");
    shown["reasoning"] = json!("show");
    let (status, body) = gavel.post("/v1/score_group", &shown).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.get("reasoning_dropped").is_none(), "{body}");
    assert_eq!(mock.calls(), 2);
    let prompt = judge_prompt(&mock.requests()[1]);
    let (thought, answer) = (
        prompt.find(THOUGHT).expect("the reasoning is shown"),
        prompt.find("attempt 0: SCORE=0.8").unwrap(),
    );
    assert!(thought < answer, "{prompt}");

    // Shown by the rubric; the request's `drop` wins over it.
    let rubric = json!({"text": "Grade the answers.", "reasoning": "show"});
    let mut by_rubric = group_with_reasoning("reasoning");
    by_rubric["rubric"] = rubric.clone();
    let (status, body) = gavel.post("/v1/score_group", &by_rubric).await;
    assert_eq!(status, 200, "{body}");
    assert!(judge_prompt(mock.requests().last().unwrap()).contains(THOUGHT));
    by_rubric["reasoning"] = json!("drop");
    let (status, body) = gavel.post("/v1/score_group", &by_rubric).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["reasoning_dropped"], 1, "{body}");
    assert!(!judge_prompt(mock.requests().last().unwrap()).contains(THOUGHT));

    let mut bad = marked_group(&[0.5]);
    bad["reasoning"] = json!("hide");
    let (status, body) = gavel.post("/v1/score_group", &bad).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["param"], "reasoning", "{body}");
}

#[tokio::test]
async fn nothing_to_judge_and_misspelt_fields_are_refused_before_the_judge() {
    let (mock, gavel, _dir) = setup().await;
    let cases = [
        (
            json!({"trajectories": [{"messages": [{"role": "user", "content": "What is 2+2?"}]}]}),
            "trajectories[0].messages",
            "nothing to judge",
        ),
        (
            json!({"trajectories": [{"mesages": [{"role": "assistant", "content": "4"}]}]}),
            "trajectories[0].mesages",
            "did you mean messages?",
        ),
        (
            json!({"trajectories": [{"messages": [
                {"role": "user", "content": "q"},
                {"role": "assistant", "content": "4", "reasoning_contnet": "t"}]}]}),
            "trajectories[0].messages[1].reasoning_contnet",
            "did you mean reasoning_content?",
        ),
    ];
    for (body, param, problem) in cases {
        let (status, reply) = gavel.post("/v1/score_group", &body).await;
        assert_eq!(status, 400, "{reply}");
        assert_eq!(reply["error"]["param"], param, "{reply}");
        let message = reply["error"]["message"].as_str().unwrap();
        assert!(message.contains(problem), "{message}");
    }
    assert_eq!(mock.calls(), 0);
}
