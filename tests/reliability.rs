//! Reliability and throughput controls: single-flight, overload, judge rate limits and
//! concurrency caps, position-bias control, panels, chunking, accounting and metrics.

mod common;

use std::time::Duration;

use common::{close, floats, marked_group, simple_traj, Behaviour, Gavel, MockJudge};
use gavel::config::Config;
use serde_json::{json, Value};

async fn start(mock: &MockJudge, dir: &tempfile::TempDir, edit: impl FnOnce(&mut Config)) -> Gavel {
    let mut cfg = mock.config(&dir.path().join("store"));
    edit(&mut cfg);
    Gavel::start(cfg).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn thirty_two_concurrent_identical_requests_make_one_judge_call() {
    let mock = MockJudge::start().await;
    let dir = tempfile::tempdir().unwrap();
    let gavel = std::sync::Arc::new(start(&mock, &dir, |_| {}).await);
    mock.set_fallback(Behaviour::Hang(Duration::from_millis(300)));
    let group = marked_group(&[0.2, 0.9, 0.4]);
    let tasks: Vec<_> = (0..32)
        .map(|_| {
            let (g, body) = (gavel.clone(), group.clone());
            tokio::spawn(async move { g.post("/v1/score_group", &body).await })
        })
        .collect();
    let mut hits = 0;
    for t in tasks {
        let (status, r) = t.await.unwrap();
        assert_eq!(status, 200, "{r}");
        assert!(close(&floats(&r["rewards"]), &[0.2, 0.9, 0.4]));
        hits += r["usage"]["cache_hits"].as_u64().unwrap();
    }
    assert_eq!(mock.calls(), 1);
    assert_eq!(hits, 31);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn requests_over_max_in_flight_get_429_at_once() {
    let mock = MockJudge::start().await;
    let dir = tempfile::tempdir().unwrap();
    let gavel = start(&mock, &dir, |c| c.server.max_in_flight = 2).await;
    mock.set_fallback(Behaviour::Hang(Duration::from_millis(1500)));
    let client = reqwest::Client::new();
    let send = |i: usize| {
        let (client, url) = (client.clone(), format!("{}/v1/score_group", gavel.url));
        tokio::spawn(async move {
            let r = client
                .post(url)
                .json(&marked_group(&[0.1 * i as f64, 0.5]))
                .send()
                .await
                .unwrap();
            let retry_after = r
                .headers()
                .get("retry-after")
                .map(|v| v.to_str().unwrap().to_string());
            (
                r.status().as_u16(),
                retry_after,
                r.json::<Value>().await.unwrap(),
            )
        })
    };
    let first: Vec<_> = (0..2).map(send).collect();
    // Wait until both are being judged (so both hold their slot), then send a third.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while mock.calls() < 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "the first two never reached the judge"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (status, retry_after, body) = send(5).await.unwrap();
    assert_eq!(status, 429, "{body}");
    assert_eq!(retry_after.as_deref(), Some("1"));
    assert_eq!(body["error"]["type"], "overloaded");
    for t in first {
        assert_eq!(t.await.unwrap().0, 200);
    }
    // Capacity is back once those finished.
    assert_eq!(
        gavel
            .post("/v1/score_group", &marked_group(&[0.3, 0.3]))
            .await
            .0,
        200
    );
}

/// Scores six distinct groups at once through a judge configured by `edit`.
async fn six_at_once(mock: &MockJudge, edit: impl FnOnce(&mut gavel::config::RemoteConfig)) {
    let dir = tempfile::tempdir().unwrap();
    let gavel = std::sync::Arc::new(start(mock, &dir, |c| edit(common::remote(c, "mock"))).await);
    let tasks: Vec<_> = (0..6)
        .map(|i| {
            let g = gavel.clone();
            tokio::spawn(async move {
                g.post("/v1/score_group", &marked_group(&[i as f64 / 10.0, 0.9]))
                    .await
            })
        })
        .collect();
    for t in tasks {
        assert_eq!(t.await.unwrap().0, 200);
    }
    assert_eq!(mock.calls(), 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn judge_concurrency_is_capped() {
    let mock = MockJudge::start().await;
    mock.set_fallback(Behaviour::Hang(Duration::from_millis(300)));
    six_at_once(&mock, |j| j.max_concurrency = Some(2)).await;
    // Without the cap all six would be in flight together.
    assert_eq!(
        mock.max_concurrent(),
        2,
        "never more than max_concurrency calls in flight"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn judge_request_rate_is_capped() {
    let mock = MockJudge::start().await;
    six_at_once(&mock, |j| j.requests_per_minute = Some(300)).await;
    // 300 a minute, no burst: one call every 200 ms, so six span about 1 s (unlimited, they
    // would all arrive within a few ms). Scheduling can shift single arrivals; the whole span
    // is checked with room to spare.
    let arrivals = mock.arrivals();
    let span = *arrivals.last().unwrap() - arrivals[0];
    assert!(span >= Duration::from_millis(800), "{span:?}");
}

#[tokio::test]
async fn permutations_average_out_position_bias_and_report_disagreement() {
    let mock = MockJudge::start().await;
    let dir = tempfile::tempdir().unwrap();
    let gavel = start(&mock, &dir, |_| {}).await;
    mock.set_fallback(Behaviour::FirstBias(0.4));
    let mut group = marked_group(&[0.2, 0.5]);
    let (_, one) = gavel.post("/v1/score_group", &group).await;
    // One order: whichever is shown first gets +0.4.
    assert!(close(&floats(&one["rewards"]), &[0.6, 0.5]));
    assert!(one["scores"][0].get("disagreement").is_none());
    group["permutations"] = json!(2);
    let (status, two) = gavel.post("/v1/score_group", &group).await;
    assert_eq!(status, 200, "{two}");
    // Two orders: each is first once, so each gets +0.2 on average, with std 0.2.
    assert!(
        close(&floats(&two["rewards"]), &[0.4, 0.7]),
        "{}",
        two["rewards"]
    );
    assert!((two["scores"][0]["disagreement"].as_f64().unwrap() - 0.2).abs() < 1e-9);
    // The identity order came from the cache; the reversed one was a new call.
    assert_eq!(two["usage"]["cache_hits"], 1);
    assert_eq!(two["usage"]["judge_calls"], 1);
    assert_eq!(mock.calls(), 2);
    let second = common::judge_prompt(&mock.requests()[1]);
    let secs = common::sections(&second);
    assert!(
        secs[0].1.contains("attempt 1"),
        "the second order shows trajectory 2 first"
    );
    // Reproducible: the same request is answered entirely from the cache.
    let (_, again) = gavel.post("/v1/score_group", &group).await;
    assert_eq!(again["rewards"], two["rewards"]);
    assert_eq!(again["usage"]["cache_hits"], 2);
}

#[tokio::test]
async fn a_panel_aggregates_judges_by_mean_or_median() {
    let (a, b, c) = (
        MockJudge::start().await,
        MockJudge::start().await,
        MockJudge::start().await,
    );
    let dir = tempfile::tempdir().unwrap();
    let gavel = start(&a, &dir, |cfg| {
        cfg.judges.insert("b".into(), b.judge_config());
        cfg.judges.insert("c".into(), c.judge_config());
    })
    .await;
    b.set_fallback(Behaviour::FirstBias(0.3));
    c.set_fallback(Behaviour::FirstBias(0.1));
    let mut group = marked_group(&[0.2, 0.5]);
    group["judge"] = json!(["mock", "b", "c"]);
    let (status, r) = gavel.post("/v1/score_group", &group).await;
    assert_eq!(status, 200, "{r}");
    // Trajectory 1 (shown first): 0.2, 0.5, 0.3 → mean 1/3; trajectory 2: 0.5 everywhere.
    assert!(
        close(&floats(&r["rewards"]), &[1.0 / 3.0, 0.5]),
        "{}",
        r["rewards"]
    );
    assert_eq!(
        r["scores"][0]["judges"],
        json!({"mock": 0.2, "b": 0.5, "c": 0.30000000000000004})
    );
    assert_eq!(r["judges"].as_array().unwrap().len(), 3);
    group["aggregate"] = json!("median");
    let (_, r) = gavel.post("/v1/score_group", &group).await;
    assert!(
        close(&floats(&r["rewards"]), &[0.30000000000000004, 0.5]),
        "{}",
        r["rewards"]
    );
    assert_eq!(
        r["usage"]["cache_hits"], 3,
        "the panel's verdicts were cached per judge"
    );
    assert_eq!((a.calls(), b.calls(), c.calls()), (1, 1, 1));
}

#[tokio::test]
async fn groups_over_the_context_are_judged_in_anchored_chunks() {
    let mock = MockJudge::start().await;
    let dir = tempfile::tempdir().unwrap();
    let gavel = start(&mock, &dir, |c| {
        let j = &mut common::remote(c, "mock").common;
        j.context_tokens = Some(3000);
        j.max_tokens = 500;
    })
    .await;
    let scores = [0.9, 0.1, 0.8, 0.3, 0.6, 0.2, 0.7, 0.4];
    let trajs: Vec<Value> = scores
        .iter()
        .enumerate()
        .map(|(i, s)| {
            simple_traj(&format!(
                "{} SCORE={s}",
                format!("working step {i} ").repeat(100)
            ))
        })
        .collect();
    let (status, r) = gavel
        .post("/v1/score_group", &json!({"trajectories": trajs}))
        .await;
    assert_eq!(status, 200, "{r}");
    let chunks = r["usage"]["chunks"].as_u64().unwrap();
    assert!(chunks >= 2, "{}", r["usage"]);
    assert_eq!(mock.calls() as u64, chunks);
    // The mock judges consistently, so anchoring keeps every score on one scale.
    assert!(close(&floats(&r["rewards"]), &scores), "{}", r["rewards"]);
    for req in mock.requests() {
        let msgs: Vec<gavel::domain::prompt::ChatMessage> =
            serde_json::from_value(req["messages"].clone()).unwrap();
        assert!(gavel::domain::prompt::count_tokens(&msgs) <= 3000 - 500);
        // Both anchors are in every chunk.
        let p = common::judge_prompt(&req);
        assert!(p.contains("working step 0") && p.contains("working step 1"));
    }
}

#[tokio::test]
async fn usage_counts_retries_by_cause_and_cost() {
    let mock = MockJudge::start().await;
    let dir = tempfile::tempdir().unwrap();
    let gavel = start(&mock, &dir, |c| {
        let j = common::remote(c, "mock");
        j.prompt_price_per_million = Some(2.0);
        j.completion_price_per_million = Some(8.0);
    })
    .await;
    mock.push(Behaviour::Status(429, Some(0), "slow down".into()));
    mock.push(Behaviour::Status(503, None, "busy".into()));
    let (status, r) = gavel
        .post("/v1/score_group", &marked_group(&[0.1, 0.2]))
        .await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["usage"]["retries"], json!({"http_429": 1, "http_5xx": 1}));
    // The mock reports 100 prompt and 20 completion tokens per call.
    assert!(
        (r["usage"]["cost"].as_f64().unwrap() - (100.0 * 2.0 + 20.0 * 8.0) / 1e6).abs() < 1e-15
    );
    let resp = reqwest::get(format!("{}/metrics", gavel.url))
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let text = resp.text().await.unwrap();
    for name in [
        "gavel_judge_retries_total",
        "gavel_judge_calls_total",
        "gavel_http_requests_total",
        "gavel_verdicts_total",
    ] {
        assert!(text.contains(name), "{name} missing from /metrics");
    }
    assert!(text.contains("cause=\"http_429\""));
}
