//! Against a real OpenAI-compatible server, llama-cpp-python's, not the mock: listwise scoring
//! out of the box (the structured-output dialect negotiated, no key), and the probability modes
//! read from its `logprobs`. `GAVEL_TEST_LLAMA_SERVER` names the server's base URL
//! (`http://127.0.0.1:PORT/v1`; `benches/remote_logprobs.sh` starts one on the 1.5B test GGUF
//! with `logits_all`, and `SERVE_ONLY=1` keeps it up for this); without it every test skips with
//! that reason. The model decides the scores, so the tests check what any model must give:
//! valid verdicts in every mode, probabilities in range, the same verdict for the same prompt,
//! and no position bias in pairwise mode.

mod common;

use common::{remote, simple_traj, Gavel};
use gavel::config::Config;
use gavel::domain::prompt::JudgeMode;
use serde_json::{json, Value};

/// How far two readings of the same prompt by the server may differ: llama.cpp reuses the KV of
/// the longest prefix it shares with the previous prompt, and a prompt evaluated in other
/// batches rounds differently (about 0.002 in P seen on the 1.5B).
const TOLERANCE: f64 = 0.01;

/// The server's base URL, or None (and the reason printed) when it is not set.
fn server() -> Option<String> {
    let url = std::env::var("GAVEL_TEST_LLAMA_SERVER").ok();
    if url.is_none() {
        eprintln!(
            "skipped: set GAVEL_TEST_LLAMA_SERVER to a llama-cpp-python server's base URL \
             (SERVE_ONLY=1 benches/remote_logprobs.sh starts one)"
        );
    }
    url
}

/// The daemon a newcomer gets with no config file: the server's URL and a model name in the
/// environment, no key, `mode` as given.
async fn daemon(url: &str, dir: &std::path::Path, mode: Option<JudgeMode>) -> Gavel {
    let env = |k: &str| match k {
        "OPENAI_BASE_URL" => Some(url.to_string()),
        "GAVEL_JUDGE_MODEL" => Some("qwen2.5-coder-1.5b-instruct".to_string()),
        _ => None,
    };
    let mut cfg = Config::from_env(&env).expect("a valid environment");
    cfg.store.path = dir.join("store");
    let judge = remote(&mut cfg, "default");
    judge.common.mode = mode;
    // A CPU server takes seconds per prompt; a group's prompts wait in its queue.
    judge.common.deadline_s = 600.0;
    judge.timeout_s = 300.0;
    Gavel::start(cfg).await
}

/// A group of three answers to one arithmetic question: right, wrong, right and explained.
fn group() -> Value {
    json!({"trajectories": [
        simple_traj("1030 * 4 = 4120. ANSWER: 4120"),
        simple_traj("1030 * 4 = 4300. ANSWER: 4300"),
        simple_traj("1000 * 4 = 4000 and 30 * 4 = 120, so 4120. ANSWER: 4120"),
    ]})
}

fn scores(body: &Value, field: &str) -> Vec<Option<f64>> {
    body["scores"]
        .as_array()
        .expect("scores")
        .iter()
        .map(|s| s[field].as_f64())
        .collect()
}

#[tokio::test]
async fn listwise_works_out_of_the_box() {
    let Some(url) = server() else { return };
    let dir = tempfile::tempdir().unwrap();
    let gavel = daemon(&url, dir.path(), None).await;
    let (status, body) = gavel.post("/v1/score_group", &group()).await;
    assert_eq!(status, 200, "{body}");
    let s = scores(&body, "score");
    assert!(
        s.iter()
            .all(|x| x.is_some_and(|x| (0.0..=1.0).contains(&x))),
        "{body}"
    );
    assert!(
        scores(&body, "confidence").iter().all(Option::is_none),
        "listwise verdicts carry no confidence: {body}"
    );
    // The dialect chosen is one that holds the reply to the schema (llama-cpp-python takes
    // `json_object` with a schema), shown in /healthz.
    let (_, health) = gavel.get("/healthz").await;
    let chosen = health["judges"][0]["structured_output"].clone();
    assert!(
        chosen == "json_schema" || chosen == "json_object",
        "{health}"
    );
}

#[tokio::test]
async fn pointwise_reads_p_yes_and_repeats_itself() {
    let Some(url) = server() else { return };
    let dir = tempfile::tempdir().unwrap();
    let gavel = daemon(&url, dir.path(), Some(JudgeMode::Pointwise)).await;
    // A 200 in this mode means the server gave logprobs: a server that cannot is refused with
    // 503 judge_unsupported_mode, never judged in another mode.
    let (status, body) = gavel.post("/v1/score_group", &group()).await;
    assert_eq!(status, 200, "{body}");
    let judged: Vec<f64> = body["scores"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["components"]["judge"].as_f64().expect("a judge score"))
        .collect();
    assert!(judged.iter().all(|p| (0.0..=1.0).contains(p)), "{body}");
    let conf = scores(&body, "confidence");
    assert!(
        conf.iter()
            .all(|c| c.is_some_and(|c| (0.0..=1.0).contains(&c))),
        "{body}"
    );
    // A fresh store asks the server again: temperature 0, one token, the same probabilities.
    let again_dir = tempfile::tempdir().unwrap();
    let again = daemon(&url, again_dir.path(), Some(JudgeMode::Pointwise)).await;
    let (_, body2) = again.post("/v1/score_group", &group()).await;
    for (i, s) in body2["scores"].as_array().unwrap().iter().enumerate() {
        let p = s["components"]["judge"].as_f64().unwrap();
        assert!((p - judged[i]).abs() < TOLERANCE, "{judged:?} then {body2}");
    }
}

#[tokio::test]
async fn pairwise_has_no_position_bias() {
    let Some(url) = server() else { return };
    let dir = tempfile::tempdir().unwrap();
    let gavel = daemon(&url, dir.path(), Some(JudgeMode::Pairwise)).await;
    let (status, body) = gavel.post("/v1/score_group", &group()).await;
    assert_eq!(status, 200, "{body}");
    let forward = scores(&body, "score");
    // The same group reversed, on a fresh store (the first store would answer every prompt
    // from its readings): every pair is asked in both orders either way, so each trajectory
    // keeps its score (flip rate 0), whatever the model prefers.
    let mut reversed = group();
    reversed["trajectories"].as_array_mut().unwrap().reverse();
    let fresh_dir = tempfile::tempdir().unwrap();
    let fresh = daemon(&url, fresh_dir.path(), Some(JudgeMode::Pairwise)).await;
    let (status, body_r) = fresh.post("/v1/score_group", &reversed).await;
    assert_eq!(status, 200, "{body_r}");
    let mut backward = scores(&body_r, "score");
    backward.reverse();
    for (f, b) in forward.iter().zip(&backward) {
        let (f, b) = (f.expect("a score"), b.expect("a score"));
        assert!(
            (f - b).abs() < TOLERANCE,
            "{forward:?} reversed {backward:?}"
        );
    }
}
