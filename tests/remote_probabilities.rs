//! Remote judges in the probability modes: each prompt asked for one token with its
//! `top_logprobs`, the verdict read from them as the local judge reads its distribution, and a
//! server that cannot give them refused in one line, never judged in another mode. Against the
//! mock judge, which answers `logprobs` from the prompt's markers or fails as servers do.

mod common;

use common::{marked_group, remote, rewards, Gavel, Logprobs, MockJudge};
use gavel::domain::prompt::JudgeMode;
use serde_json::{json, Value};

async fn daemon(mock: &MockJudge, dir: &std::path::Path, mode: Option<JudgeMode>) -> Gavel {
    let mut cfg = mock.config(&dir.join("store"));
    remote(&mut cfg, "mock").common.mode = mode;
    Gavel::start(cfg).await
}

/// Each trajectory's `field` (`score`, `confidence`) in a response.
fn each(body: &Value, field: &str) -> Vec<f64> {
    body["scores"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s[field].as_f64().unwrap())
        .collect()
}

fn with_mode(group: Value, mode: &str) -> Value {
    let mut g = group;
    g["judge_mode"] = json!(mode);
    g
}

#[tokio::test]
async fn pointwise_reads_p_yes_from_the_servers_logprobs() {
    let mock = MockJudge::start().await;
    let dir = tempfile::tempdir().unwrap();
    let gavel = daemon(&mock, dir.path(), Some(JudgeMode::Pointwise)).await;
    // The capability check at start: one token, answered.
    assert_eq!(mock.calls(), 1);
    let (status, body) = gavel
        .post("/v1/score_group", &marked_group(&[0.2, 0.9, 0.6]))
        .await;
    assert_eq!(status, 200, "{body}");
    let scores = each(&body, "score");
    for (got, want) in scores.iter().zip([0.2, 0.9, 0.6]) {
        assert!(
            (got - want).abs() < 1e-9,
            "P(yes) is the marker: {scores:?}"
        );
    }
    // How sure: |2·P(yes) − 1|, the answers holding all the listed mass.
    let conf = each(&body, "confidence");
    for (got, want) in conf.iter().zip([0.6, 0.8, 0.2]) {
        assert!((got - want).abs() < 1e-6, "{conf:?}");
    }
    let r = rewards(&body);
    assert!(r[1] > r[2] && r[2] > r[0], "{body}");
    let asked = &mock.requests()[1..];
    assert_eq!(asked.len(), 3, "one prompt per trajectory");
    for q in asked {
        assert_eq!(q["logprobs"], true);
        assert_eq!(q["top_logprobs"], 20);
        assert_eq!(q["max_tokens"], 1, "not max_completion_tokens: {q}");
        assert_eq!(q["temperature"], 0.0);
        assert!(q.get("response_format").is_none());
    }
    // Everything before the trajectory is one byte-identical prefix: a server's prefix cache
    // pays for it once.
    let users: Vec<&str> = asked
        .iter()
        .map(|q| q["messages"][1]["content"].as_str().unwrap())
        .collect();
    let cut = users[0].find("<trajectory").unwrap();
    assert!(users.iter().all(|u| u[..cut] == users[0][..cut]));
    assert!(asked
        .iter()
        .all(|q| q["messages"][0] == asked[0]["messages"][0]));
}

#[tokio::test]
async fn pairwise_asks_both_orders_and_case_variants_add_up() {
    let mock = MockJudge::start().await;
    mock.set_logprobs(Logprobs::Split);
    let dir = tempfile::tempdir().unwrap();
    let gavel = daemon(&mock, dir.path(), None).await;
    assert_eq!(mock.calls(), 0, "a listwise judge is not checked");
    let group = with_mode(marked_group(&[0.3, 0.8, 0.5]), "pairwise");
    let (status, body) = gavel.post("/v1/score_group", &group).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(mock.calls(), 6, "3 trajectories: every ordered pair");
    let r = rewards(&body);
    assert!(r[1] > r[2] && r[2] > r[0], "{body}");
    // The split mass (" 1", "1" halves and quarters) reads as the whole: the same scores as
    // a server that writes one spelling.
    let plain = MockJudge::start().await;
    let other = tempfile::tempdir().unwrap();
    let gavel2 = daemon(&plain, other.path(), None).await;
    let (_, body2) = gavel2.post("/v1/score_group", &group).await;
    let (a, b) = (each(&body, "score"), each(&body2, "score"));
    assert!(
        a.iter().zip(&b).all(|(x, y)| (x - y).abs() < 1e-9),
        "{a:?} {b:?}"
    );
    // Pairwise confidence: the mock's two orders agree exactly, so each pair's is how decisive
    // it is: |0.3 − 0.8| = 0.5 for (0, 1), 0.3 for (1, 2), 0.2 for (0, 2); each trajectory's
    // is the mean over its pairs.
    let conf = each(&body, "confidence");
    for (got, want) in conf.iter().zip([0.35, 0.4, 0.25]) {
        assert!((got - want).abs() < 1e-6, "{conf:?}");
    }
}

/// A server that answers without logprobs: the check at start finds it, `/readyz` and every
/// request in a probability mode say so in one line, and listwise still works.
#[tokio::test]
async fn a_server_without_logprobs_is_refused_in_one_line_never_judged_otherwise() {
    let mock = MockJudge::start().await;
    mock.set_logprobs(Logprobs::Absent);
    let dir = tempfile::tempdir().unwrap();
    let gavel = daemon(&mock, dir.path(), Some(JudgeMode::Pointwise)).await;
    assert_eq!(mock.calls(), 1);
    let (status, body) = gavel
        .post("/v1/score_group", &marked_group(&[0.2, 0.9]))
        .await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"]["type"], "judge_unsupported_mode", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("judge \"mock\" (model \"mock-judge-1\" at http://127.0.0.1:")
            && message.contains(
                "cannot judge pointwise or pairwise: its server answers without logprobs"
            ),
        "{message}"
    );
    assert_eq!(mock.calls(), 1, "known: nothing more is asked");
    let judge = gavel.scorer.judges().next().unwrap();
    assert_eq!(judge.probe().await.unwrap_err(), message);
    // Listwise is another request's choice, not a fall-back.
    let (status, body) = gavel
        .post(
            "/v1/score_group",
            &with_mode(marked_group(&[0.2, 0.9]), "listwise"),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert!(mock.requests()[1].get("logprobs").is_none());
    // A listwise verdict says nothing of how sure it is.
    assert!(body["scores"][0]["confidence"].is_null(), "{body}");
}

/// OpenAI's reasoning models refuse `logprobs` with a 400: found at the first request that
/// asks (the judge is configured listwise, so nothing was checked at start).
#[tokio::test]
async fn a_server_that_refuses_logprobs_is_known_after_one_request() {
    let mock = MockJudge::start().await;
    mock.set_logprobs(Logprobs::Refused);
    let dir = tempfile::tempdir().unwrap();
    let gavel = daemon(&mock, dir.path(), None).await;
    let group = with_mode(marked_group(&[0.2, 0.9]), "pointwise");
    let (status, body) = gavel.post("/v1/score_group", &group).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"]["type"], "judge_unsupported_mode", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("refuses logprobs: HTTP 400"),
        "{body}"
    );
    let before = mock.calls();
    assert!(before <= 2, "not retried: {before}");
    let (status, _) = gavel
        .post(
            "/v1/score_group",
            &with_mode(marked_group(&[0.3, 0.4]), "pairwise"),
        )
        .await;
    assert_eq!(status, 503);
    assert_eq!(mock.calls(), before, "nothing more is asked");
}

/// Neither answer among the alternatives: asked once more, then an invalid verdict, never a
/// score.
#[tokio::test]
async fn an_answer_outside_the_top_k_is_no_verdict() {
    let mock = MockJudge::start().await;
    mock.set_logprobs(Logprobs::OutsideTopK);
    let dir = tempfile::tempdir().unwrap();
    let gavel = daemon(&mock, dir.path(), None).await;
    let group = with_mode(
        json!({"trajectories": [marked_group(&[0.2])["trajectories"][0]]}),
        "pointwise",
    );
    let (status, body) = gavel.post("/v1/score_group", &group).await;
    assert_eq!(status, 502, "{body}");
    assert_eq!(body["error"]["type"], "judge_invalid_output", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("neither answer (yes, no) was among the 20 most likely first tokens of its reply (it began \"The\"), asked 2 times"),
        "{message}"
    );
    assert_eq!(mock.calls(), 2);
}

/// Each prompt's reading is cached under its own key: a group judged in another order, or with
/// one trajectory new, asks the server only for prompts it has not read, and gets the same
/// scores as a fresh store would.
#[tokio::test]
async fn each_prompt_is_read_once_whatever_group_it_comes_in() {
    let mock = MockJudge::start().await;
    let dir = tempfile::tempdir().unwrap();
    let gavel = daemon(&mock, dir.path(), None).await;
    let scores = [0.3, 0.8, 0.5];
    for mode in ["pointwise", "pairwise"] {
        let group = with_mode(marked_group(&scores), mode);
        let before = mock.calls();
        let (status, body) = gavel.post("/v1/score_group", &group).await;
        assert_eq!(status, 200, "{body}");
        let asked = mock.calls() - before;
        assert_eq!(asked, if mode == "pointwise" { 3 } else { 6 }, "{mode}");
        assert_eq!(body["usage"]["judge_calls"], asked as u64, "{mode}: {body}");
        // Reversed: another group (another cache key), the same prompts.
        let mut reversed = group.clone();
        reversed["trajectories"].as_array_mut().unwrap().reverse();
        let (status, body_r) = gavel.post("/v1/score_group", &reversed).await;
        assert_eq!(status, 200, "{body_r}");
        assert_eq!(
            mock.calls() - before,
            asked,
            "{mode}: reversed asks nothing new"
        );
        assert_eq!(body_r["usage"]["judge_calls"], 0, "{mode}: {body_r}");
        let mut back = each(&body_r, "score");
        back.reverse();
        let forward = each(&body, "score");
        assert!(
            forward.iter().zip(&back).all(|(a, b)| (a - b).abs() < 1e-9),
            "{mode}: {forward:?} vs reversed {back:?}"
        );
    }
    // One trajectory changed: pointwise asks for that one alone.
    let before = mock.calls();
    let changed = with_mode(marked_group(&[0.3, 0.8, 0.9]), "pointwise");
    let (status, body) = gavel.post("/v1/score_group", &changed).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(mock.calls() - before, 1, "only the new trajectory's prompt");
    assert!((each(&body, "score")[2] - 0.9).abs() < 1e-9, "{body}");
}
