//! Trust: the daemon refuses to serve a reachable address without keys, and OpenRLHF groups
//! never mix callers or runs.

use std::process::Stdio;
use std::time::Duration;

use gavel::config::Secret;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

use crate::common::cli::BIN;
use crate::common::{sections, MockJudge};
use crate::start;

/// Runs `gavel serve --addr 0.0.0.0:0` with `env` and an optional config text; returns whether
/// it started listening (then it is stopped) and what it wrote to stderr otherwise.
async fn serve_on_every_address(env: &[(&str, &str)], config: Option<&str>) -> (bool, String) {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(BIN);
    for k in [
        "GAVEL_CONFIG",
        "GAVEL_API_KEYS",
        "GAVEL_ADDR",
        "OPENAI_API_KEY",
        "RUST_LOG",
    ] {
        cmd.env_remove(k);
    }
    cmd.env("GAVEL_STORE", dir.path().join("store"));
    if let Some(text) = config {
        let path = dir.path().join("gavel.toml");
        std::fs::write(&path, text).unwrap();
        cmd.env("GAVEL_CONFIG", path);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd
        .args(["serve", "--addr", "0.0.0.0:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = tokio::time::timeout(Duration::from_secs(60), stdout.next_line())
        .await
        .expect("gavel serve either listens or exits within 60 s")
        .unwrap();
    if first.is_some_and(|l| l.starts_with("gavel listening")) {
        child.kill().await.unwrap();
        return (true, String::new());
    }
    let out = child.wait_with_output().await.unwrap();
    assert!(!out.status.success());
    (false, String::from_utf8_lossy(&out.stderr).into_owned())
}

#[tokio::test]
async fn serve_refuses_a_reachable_address_without_api_keys() {
    let (listening, stderr) = serve_on_every_address(&[], None).await;
    assert!(!listening);
    assert!(
        stderr.contains("refusing to serve on 0.0.0.0") && stderr.contains("GAVEL_API_KEYS"),
        "{stderr}"
    );
    // With a key it serves; without one only when the config says so on purpose.
    assert!(
        serve_on_every_address(&[("GAVEL_API_KEYS", "k-123")], None)
            .await
            .0
    );
    let open = "[server]\nallow_unauthenticated = true\n";
    assert!(serve_on_every_address(&[], Some(open)).await.0);
}

/// A `/get_reward` request for one sample of the shared prompt, as `key`, in run `run`.
async fn one_sample(url: &str, key: &str, run: Option<&str>, answer: &str) -> (u16, Value) {
    let prompt = "What is 2 + 2? ";
    let mut req = reqwest::Client::new()
        .post(format!("{url}/get_reward"))
        .bearer_auth(key)
        .json(&json!({"query": [format!("{prompt}{answer}")], "prompts": [prompt]}));
    if let Some(run) = run {
        req = req.header("x-gavel-run", run);
    }
    let resp = req.send().await.unwrap();
    (resp.status().as_u16(), resp.json().await.unwrap())
}

#[tokio::test]
async fn openrlhf_groups_are_scoped_by_caller_and_run() {
    let mock = MockJudge::start().await;
    let dir = tempfile::tempdir().unwrap();
    let gavel = start(&mock, &dir, |c| {
        c.server.api_keys = vec![Secret::new("key-alice"), Secret::new("key-bob")];
        c.openrlhf.group_size = 2;
        c.openrlhf.wait_ms = 1500;
    })
    .await;
    let url = gavel.url.clone();
    // Alice and Bob send the same prompt at once; so does Alice's second run.
    let (a, b, c) = tokio::join!(
        one_sample(&url, "key-alice", None, "SCORE=0.9 4"),
        one_sample(&url, "key-bob", None, "SCORE=0.1 5"),
        one_sample(&url, "key-alice", Some("run-2"), "SCORE=0.3 6"),
    );
    for (status, body) in [&a, &b, &c] {
        assert_eq!(*status, 200, "{body}");
    }
    // Three groups of one, judged apart (before, Alice's and Bob's samples were one group).
    let groups: Vec<usize> = mock
        .requests()
        .iter()
        .map(|r| sections(&crate::common::judge_prompt(r)).len())
        .collect();
    assert_eq!(groups, vec![1, 1, 1], "each caller and run judged alone");
    // Two samples of one caller and run still make one group (judged as soon as it is full).
    let (d, e) = tokio::join!(
        one_sample(&url, "key-bob", Some("r"), "SCORE=0.2 7"),
        one_sample(&url, "key-bob", Some("r"), "SCORE=0.8 8"),
    );
    assert_eq!((d.0, e.0), (200, 200));
    let last = mock.requests().last().cloned().unwrap();
    assert_eq!(sections(&crate::common::judge_prompt(&last)).len(), 2);
    // A run header that is not a short visible string is refused.
    let (status, body) = one_sample(&url, "key-bob", Some(&"r".repeat(200)), "4").await;
    assert_eq!(status, 400, "{body}");
}
