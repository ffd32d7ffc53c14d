//! Denial of service: every request's work is bounded before it is done, and every refusal is
//! a typed error.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use crate::common::{marked_group, simple_traj, Behaviour, Gavel, MockJudge};
use crate::{raw_exchange, start};

/// A `/get_reward` body: one sample per prompt, each response "ANSWER: 4".
fn reward_body(prompts: &[String]) -> Value {
    let query: Vec<String> = prompts.iter().map(|p| format!("{p}ANSWER: 4")).collect();
    json!({"query": query, "prompts": prompts})
}

fn prompts(tag: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{tag} question {i}? ")).collect()
}

/// A score request that holds the daemon's only `max_in_flight` slot while the mock hangs.
async fn hold_the_only_slot(gavel: &Arc<Gavel>, mock: &MockJudge) -> tokio::task::JoinHandle<u16> {
    mock.push(Behaviour::Hang(Duration::from_millis(2500)));
    let g = gavel.clone();
    let held = tokio::spawn(async move {
        g.post("/v1/score_group", &marked_group(&[0.2, 0.7]))
            .await
            .0
    });
    while mock.calls() == 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    held
}

#[tokio::test]
async fn custom_methods_share_one_metric_label() {
    let mock = MockJudge::start().await;
    let dir = tempfile::tempdir().unwrap();
    let gavel = start(&mock, &dir, |_| {}).await;
    let client = reqwest::Client::new();
    for i in 0..20 {
        let method = reqwest::Method::from_bytes(format!("XRANDOM{i}").as_bytes()).unwrap();
        let resp = client
            .request(method, format!("{}/v1/score_group", gavel.url))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 405);
    }
    let text = gavel.metrics_text().await;
    assert!(
        !text.contains("XRANDOM"),
        "a method became a label:\n{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with("gavel_http_requests_total")
                && l.contains("method=\"other\"")
                && l.contains("status=\"405\"")),
        "{text}"
    );
}

#[tokio::test]
async fn get_reward_caps_samples_per_request_and_groups_in_progress() {
    let mock = MockJudge::start().await;
    let dir = tempfile::tempdir().unwrap();
    let gavel = start(&mock, &dir, |c| {
        c.openrlhf.max_samples = 4;
        c.openrlhf.max_pending_groups = 2;
        c.openrlhf.wait_ms = 60_000;
    })
    .await;
    let (status, body) = gavel
        .post("/get_reward", &reward_body(&prompts("a", 5)))
        .await;
    assert_eq!(status, 413, "{body}");
    assert_eq!(body["error"]["type"], "payload_too_large");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("max_samples"),
        "{body}"
    );
    // Three distinct prompts would open three groups; the limit is two. Nothing is started.
    let (status, body) = gavel
        .post("/get_reward", &reward_body(&prompts("b", 3)))
        .await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["error"]["type"], "overloaded");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("max_pending_groups"),
        "{body}"
    );
    assert_eq!(mock.calls(), 0);
}

/// The value of the `/metrics` series written exactly as `series` (name and labels).
async fn series(gavel: &Gavel, series: &str) -> Option<f64> {
    let text = gavel.metrics_text().await;
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// Waits until `/get_reward` has `n` samples in groups filling up, or `task` has ended (a
/// request that was refused instead of waiting); panics after a minute.
async fn until_waiting(gavel: &Gavel, n: f64, task: &tokio::task::JoinHandle<(u16, Value)>) {
    for _ in 0..600 {
        if task.is_finished() || series(gavel, "gavel_openrlhf_pending_samples").await == Some(n) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{n} samples never waited in a group");
}

#[tokio::test]
async fn get_reward_siblings_complete_their_groups_at_max_in_flight() {
    let mock = MockJudge::start().await;
    let dir = tempfile::tempdir().unwrap();
    let gavel = Arc::new(
        start(&mock, &dir, |c| {
            c.server.max_in_flight = 1;
            c.openrlhf.group_size = 2;
            c.openrlhf.max_pending_groups = 2;
            // No group is judged partial in this test: only a sibling can complete one.
            c.openrlhf.wait_ms = 600_000;
        })
        .await,
    );
    let sample = |prompt: &str, score: f64| json!({"query": [format!("{prompt}SCORE={score} ANSWER: 4")], "prompts": [prompt]});
    let post = |body: Value| {
        let g = gavel.clone();
        tokio::spawn(async move { g.post("/get_reward", &body).await })
    };
    // New load past max_in_flight is still refused up front.
    let held = hold_the_only_slot(&gavel, &mock).await;
    let (status, body) = gavel.post("/get_reward", &sample("p? ", 0.2)).await;
    assert_eq!(status, 429, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("max_in_flight"),
        "{body}"
    );
    assert_eq!(held.await.unwrap(), 200);
    let judged = mock.calls();

    // Two partial groups wait, each for its sibling, at max_in_flight 1: the one slot is
    // taken only while a request's samples are placed (before, the first waiter kept it and
    // the second request got 429).
    let p_first = post(sample("p? ", 0.2));
    until_waiting(&gavel, 1.0, &p_first).await;
    let q_first = post(sample("q? ", 0.3));
    until_waiting(&gavel, 2.0, &q_first).await;
    assert!(!p_first.is_finished() && !q_first.is_finished());
    // A third prompt would open a third group: refused, max_pending_groups is the bound.
    let (status, body) = gavel.post("/get_reward", &sample("r? ", 0.5)).await;
    assert_eq!(status, 429, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("max_pending_groups"),
        "{body}"
    );
    // The siblings arrive and complete their groups, each judged whole.
    for (sibling, first, score) in [("p? ", p_first, 0.8), ("q? ", q_first, 0.9)] {
        let (status, body) = gavel.post("/get_reward", &sample(sibling, score)).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["extra_logs"]["group_size"], json!([2]), "{body}");
        assert_eq!(body["rewards"], json!([score]), "{body}");
        let (status, body) = first.await.unwrap();
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["extra_logs"]["group_size"], json!([2]), "{body}");
    }
    assert_eq!(mock.calls() - judged, 2, "one judge call per whole group");
    assert_eq!(
        series(&gavel, "gavel_openrlhf_pending_samples").await,
        Some(0.0)
    );
}

#[tokio::test]
async fn a_group_is_judged_within_the_request_deadline_and_frees_its_place() {
    let mock = MockJudge::start().await;
    let dir = tempfile::tempdir().unwrap();
    let gavel = start(&mock, &dir, |c| {
        c.openrlhf.group_size = 1;
        c.openrlhf.max_pending_groups = 1;
        c.server.request_timeout_s = 1.0;
        // The judge alone would wait far longer: only the group's deadline ends it.
        let j = crate::common::remote(c, "mock");
        (j.timeout_s, j.common.deadline_s, j.max_retries) = (60.0, 120.0, 0);
    })
    .await;
    mock.push(Behaviour::Hang(Duration::from_secs(30)));
    let (status, body) = gavel
        .post("/get_reward", &reward_body(&prompts("slow", 1)))
        .await;
    assert_eq!(status, 504, "{body}");
    // The hung group's judging ended with the deadline, so a new group has room.
    let (status, body) = gavel
        .post("/get_reward", &reward_body(&prompts("next", 1)))
        .await;
    assert_eq!(status, 200, "{body}");
}

#[tokio::test]
async fn panels_and_verifier_lists_are_bounded_before_any_work() {
    let (mock, gavel, _dir) = crate::common::setup().await;
    let mut group = marked_group(&[0.5, 0.6]);
    group["judge"] = json!((0..100_000).map(|i| format!("j{i}")).collect::<Vec<_>>());
    let (status, body) = gavel.post("/v1/score_group", &group).await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("at most 16 judges"),
        "{body}"
    );
    let mut group = marked_group(&[0.5, 0.6]);
    group["verifiers"] = (0..20_000)
        .map(|i| json!({"type": "regex", "name": format!("v{i}"), "pattern": "x"}))
        .collect();
    let (status, body) = gavel.post("/v1/score_group", &group).await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("at most 64 verifiers"),
        "{body}"
    );
    // An inline rubric counts too.
    let mut group = marked_group(&[0.5, 0.6]);
    let verifiers: Vec<Value> = (0..65)
        .map(|i| json!({"type": "regex", "name": format!("r{i}"), "pattern": "x"}))
        .collect();
    group["rubric"] = json!({"text": "Be right.", "verifiers": verifiers});
    let (status, body) = gavel.post("/v1/score_group", &group).await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("counting the rubric's"),
        "{body}"
    );
    assert_eq!(mock.calls(), 0);
}

#[tokio::test]
async fn render_is_admitted_like_scoring() {
    let mock = MockJudge::start().await;
    let dir = tempfile::tempdir().unwrap();
    let gavel = Arc::new(start(&mock, &dir, |c| c.server.max_in_flight = 1).await);
    let held = hold_the_only_slot(&gavel, &mock).await;
    let (status, body) = gavel.post("/v1/render", &marked_group(&[0.1, 0.9])).await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(held.await.unwrap(), 200);
    assert_eq!(
        gavel.post("/v1/render", &marked_group(&[0.1, 0.9])).await.0,
        200
    );
}

#[tokio::test]
async fn a_request_over_capacity_is_refused_before_its_body_is_read() {
    let mock = MockJudge::start().await;
    let dir = tempfile::tempdir().unwrap();
    let gavel = Arc::new(start(&mock, &dir, |c| c.server.max_in_flight = 1).await);
    let held = hold_the_only_slot(&gavel, &mock).await;
    // Headers announcing a large body that never comes.
    let head = "POST /v1/score_group HTTP/1.1\r\nHost: gavel\r\ncontent-type: application/json\r\n\
                content-length: 1000000\r\nconnection: close\r\n\r\n";
    let (answer, _) = raw_exchange(&gavel, head.as_bytes(), Duration::from_secs(2)).await;
    assert!(answer.starts_with("HTTP/1.1 429"), "{answer:?}");
    assert!(answer.contains("\"overloaded\""), "{answer}");
    assert_eq!(held.await.unwrap(), 200);
}

#[tokio::test]
async fn a_body_slower_than_body_read_timeout_gets_408() {
    let mock = MockJudge::start().await;
    let dir = tempfile::tempdir().unwrap();
    let gavel = start(&mock, &dir, |c| c.server.body_read_timeout_s = 0.5).await;
    let head = "POST /v1/score_group HTTP/1.1\r\nHost: gavel\r\ncontent-type: application/json\r\n\
                content-length: 1000\r\nconnection: close\r\n\r\n{\"trajector";
    let (answer, _) = raw_exchange(&gavel, head.as_bytes(), Duration::from_secs(10)).await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer:?}");
    assert!(answer.contains("\"request_timeout\"") && answer.contains("body_read_timeout_s"));
    assert_eq!(mock.calls(), 0);
}

#[tokio::test]
async fn a_client_slower_than_header_read_timeout_is_disconnected() {
    let mock = MockJudge::start().await;
    let dir = tempfile::tempdir().unwrap();
    let gavel = start(&mock, &dir, |c| c.server.header_read_timeout_s = 0.5).await;
    // Half a request head, then silence (slowloris).
    let head = "POST /v1/score_group HTTP/1.1\r\nHost: gavel\r\n";
    let (_, closed) = raw_exchange(&gavel, head.as_bytes(), Duration::from_secs(10)).await;
    assert!(closed, "the connection was still open after 10 s");
    // Shutdown is not held up by such a connection either.
    let addr = gavel.url.trim_start_matches("http://").to_string();
    let mut lingering = tokio::net::TcpStream::connect(&addr).await.unwrap();
    tokio::io::AsyncWriteExt::write_all(&mut lingering, head.as_bytes())
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(10), gavel.stop())
        .await
        .expect("the daemon stopped while a slow client was connected");
}

#[tokio::test]
async fn a_judge_prompt_over_max_prompt_bytes_gets_413_before_any_judge_call() {
    let mock = MockJudge::start().await;
    let dir = tempfile::tempdir().unwrap();
    let gavel = start(&mock, &dir, |c| c.server.max_prompt_bytes = 8_000).await;
    let long = "x".repeat(6_000);
    let group = json!({"trajectories": [simple_traj(&long), simple_traj(&format!("{long}y"))],
                       "permutations": 4});
    let (status, body) = gavel.post("/v1/score_group", &group).await;
    assert_eq!(status, 413, "{body}");
    assert_eq!(body["error"]["type"], "payload_too_large");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("max_prompt_bytes"),
        "{body}"
    );
    let (status, _) = gavel.post("/v1/render", &group).await;
    assert_eq!(status, 413);
    assert_eq!(mock.calls(), 0);
    // A group under the limit is judged as usual.
    assert_eq!(
        gavel
            .post("/v1/score_group", &marked_group(&[0.3, 0.8]))
            .await
            .0,
        200
    );
}
