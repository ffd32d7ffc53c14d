//! `/metrics`: every listed metric, with the values the requests made should leave.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{marked_group, Behaviour, MockJudge};
use crate::start;

fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    text.lines().find_map(|line| {
        let (series, value) = line.rsplit_once(' ')?;
        let (n, rest) = match series.split_once('{') {
            Some((n, rest)) => (n, rest.trim_end_matches('}')),
            None => (series, ""),
        };
        if n != name {
            return None;
        }
        let have: BTreeMap<&str, &str> = rest
            .split(',')
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k, v.trim_matches('"')))
            .collect();
        labels
            .iter()
            .all(|(k, v)| have.get(k) == Some(v))
            .then(|| value.parse().ok())?
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn metrics_cover_requests_judges_queue_depth_cache_and_errors() {
    let mock = MockJudge::start().await;
    let dir = tempfile::tempdir().unwrap();
    // A judge name of its own: the recorder is shared by every test in this process.
    let gavel = std::sync::Arc::new(
        start(&mock, &dir, |c| {
            let mut j = c.judges.remove("mock").unwrap();
            j.as_remote_mut().unwrap().max_concurrency = Some(1);
            c.judges.insert("queued".into(), j);
            c.default_judge = Some("queued".into());
            c.server.max_in_flight = 3;
        })
        .await,
    );
    let judge = [("judge", "queued")];
    mock.set_fallback(Behaviour::Hang(Duration::from_millis(1200)));
    let groups: Vec<Value> = (0..3)
        .map(|i| marked_group(&[0.1 * i as f64, 0.9]))
        .collect();
    let tasks: Vec<_> = groups
        .iter()
        .map(|g| {
            let (gavel, g) = (gavel.clone(), g.clone());
            tokio::spawn(async move { gavel.post("/v1/score_group", &g).await })
        })
        .collect();
    // Three requests in: one judge call in flight, two waiting for the concurrency cap.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = gavel.metrics_text().await;
        let queued = sample(&text, "gavel_judge_queue_depth", &judge);
        let calling = sample(&text, "gavel_judge_calls_in_flight", &judge);
        let scoring = sample(&text, "gavel_score_requests_in_flight", &[]);
        if (queued, calling, scoring) == (Some(2.0), Some(1.0), Some(3.0)) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "queue {queued:?}, calls {calling:?}, scoring {scoring:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A fourth is refused at once.
    let (status, _) = gavel
        .post("/v1/score_group", &marked_group(&[0.3, 0.3]))
        .await;
    assert_eq!(status, 429);
    for t in tasks {
        assert_eq!(t.await.unwrap().0, 200);
    }
    mock.set_fallback(Behaviour::Score);
    // A cache hit, a re-ask, and a judge failure.
    assert_eq!(gavel.post("/v1/score_group", &groups[0]).await.0, 200);
    mock.push(Behaviour::Content("no verdict here".into()));
    assert_eq!(
        gavel
            .post("/v1/score_group", &marked_group(&[0.7, 0.2]))
            .await
            .0,
        200
    );
    mock.push(Behaviour::Status(400, None, "bad request".into()));
    assert_eq!(
        gavel
            .post("/v1/score_group", &marked_group(&[0.8, 0.1]))
            .await
            .0,
        502
    );
    mock.push(Behaviour::Status(503, None, "busy".into()));
    assert_eq!(
        gavel
            .post("/v1/score_group", &marked_group(&[0.6, 0.6]))
            .await
            .0,
        200
    );

    let text = gavel.metrics_text().await;
    assert_eq!(sample(&text, "gavel_judge_queue_depth", &judge), Some(0.0));
    assert_eq!(
        sample(&text, "gavel_judge_calls_in_flight", &judge),
        Some(0.0)
    );
    let route = |status| {
        [
            ("route", "/v1/score_group"),
            ("method", "POST"),
            ("status", status),
        ]
    };
    assert!(sample(&text, "gavel_http_requests_total", &route("200")) >= Some(6.0));
    assert!(sample(&text, "gavel_http_requests_total", &route("429")) >= Some(1.0));
    assert!(sample(&text, "gavel_overloaded_total", &[]) >= Some(1.0));
    let failed = [("judge", "queued"), ("type", "judge_unavailable")];
    assert_eq!(
        sample(&text, "gavel_judge_errors_total", &failed),
        Some(1.0)
    );
    assert_eq!(sample(&text, "gavel_judge_reasks_total", &judge), Some(1.0));
    let ok = [("judge", "queued"), ("outcome", "ok")];
    assert_eq!(sample(&text, "gavel_judge_calls_total", &ok), Some(6.0));
    let prompt = [("judge", "queued"), ("kind", "prompt")];
    assert_eq!(
        sample(&text, "gavel_judge_tokens_total", &prompt),
        Some(600.0)
    );
    let retried = [("judge", "queued"), ("cause", "http_5xx")];
    assert_eq!(
        sample(&text, "gavel_judge_retries_total", &retried),
        Some(1.0)
    );
    assert!(sample(&text, "gavel_verdicts_total", &[("source", "cache")]) >= Some(1.0));
    // Latencies are histograms (buckets), not summaries.
    let bucket = [("route", "/v1/score_group"), ("le", "+Inf")];
    assert!(sample(&text, "gavel_http_request_seconds_bucket", &bucket) >= Some(6.0));
    let bucket = [("judge", "queued"), ("le", "+Inf")];
    assert_eq!(
        sample(&text, "gavel_judge_call_seconds_bucket", &bucket),
        Some(8.0)
    );
    assert!(text.contains("gavel_judge_call_seconds_bucket{judge=\"queued\",le=\"0.005\"}"));
    // A score off the scale is clamped, and counted in the usage and here.
    mock.push(Behaviour::Content(
        r#"{"scores": [{"trajectory_id": "1", "score": 1.4}, {"trajectory_id": "2", "score": 0.5}]}"#
            .into(),
    ));
    let (status, body) = gavel
        .post("/v1/score_group", &marked_group(&[0.11, 0.12]))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["usage"]["clamped_scores"], 1, "{body}");
    let text = gavel.metrics_text().await;
    assert_eq!(
        sample(&text, "gavel_judge_scores_clamped_total", &judge),
        Some(1.0)
    );
    // Calls that gave no verdict are counted apart, with their tokens: the 400 above (one
    // call, no tokens), then an unusable reply and its re-ask (two calls of 100 prompt tokens).
    assert_eq!(
        sample(&text, "gavel_judge_failed_calls_total", &judge),
        Some(1.0)
    );
    mock.push(Behaviour::Content("no verdict here".into()));
    mock.push(Behaviour::Content("still none".into()));
    let mut group = marked_group(&[0.13, 0.14]);
    group["on_judge_error"] = serde_json::json!("null");
    let (status, body) = gavel.post("/v1/score_group", &group).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["error"]["type"], "judge_invalid_output", "{body}");
    assert_eq!(body["usage"]["failed_calls"], 2, "{body}");
    assert_eq!(body["usage"]["failed_prompt_tokens"], 200, "{body}");
    assert_eq!(body["usage"]["prompt_tokens"], 0, "{body}");
    let text = gavel.metrics_text().await;
    assert_eq!(
        sample(&text, "gavel_judge_failed_calls_total", &judge),
        Some(3.0)
    );
    let prompt = [("judge", "queued"), ("kind", "prompt")];
    assert_eq!(
        sample(&text, "gavel_judge_failed_tokens_total", &prompt),
        Some(200.0)
    );
    // Every exported name is described and starts with gavel_.
    for name in gavel::server::metrics::names() {
        assert!(name.starts_with("gavel_"), "{name}");
        assert!(
            text.contains(&format!("# HELP {name} ")),
            "{name} has no HELP line:\n{text}"
        );
    }
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        assert!(line.starts_with("gavel_"), "{line}");
    }
}
