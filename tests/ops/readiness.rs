//! `/readyz`: store and judges, probe caching, what a 503 says.

use std::collections::BTreeMap;

use gavel::config::{JudgeConfig, Secret};
use serde_json::json;

use crate::common::{MockJudge, MOCK_KEY};
use crate::openapi::{assert_matches, openapi, schema_ref};
use crate::start;

const OPERATOR_KEY: &str = "gavel-operator-key-0001";

#[tokio::test]
async fn readyz_checks_store_and_every_judge_and_caches_judge_probes() {
    let mock = MockJudge::start().await;
    let dir = tempfile::tempdir().unwrap();
    let gavel = start(&mock, &dir, |c| c.server.ready_cache_s = 60.0).await;
    for _ in 0..3 {
        let (status, body) = gavel.get("/readyz").await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["status"], "ready");
        assert_eq!(body["store"]["ok"], true);
        assert_eq!(body["judges"], json!([{"name": "mock", "ok": true}]));
    }
    assert_eq!(
        mock.model_lists(),
        1,
        "probes within ready_cache_s reuse the first"
    );
    gavel.stop().await;

    let uncached = start(&mock, &dir, |c| c.server.ready_cache_s = 0.0).await;
    for _ in 0..3 {
        assert_eq!(uncached.get("/readyz").await.0, 200);
    }
    assert_eq!(
        mock.model_lists(),
        4,
        "with ready_cache_s = 0 every call probes"
    );
    uncached.stop().await;

    // A judge whose server is gone, one without a key, one whose key is refused.
    let gone = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let broken = start(&mock, &dir, |c| {
        let key = Some(Secret::new(MOCK_KEY));
        let mut down = JudgeConfig::openai(format!("http://{gone}/v1"), "m", key);
        down.as_remote_mut().unwrap().timeout_s = 2.0;
        c.judges.insert("down".into(), down);
        c.judges.insert(
            "keyless".into(),
            JudgeConfig::openai(mock.base_url(), "m", None),
        );
        let refused = Some(Secret::new("sk-refused-by-mock-9876"));
        c.judges.insert(
            "refused".into(),
            JudgeConfig::openai(mock.base_url(), "m", refused),
        );
        c.server.api_keys = vec![Secret::new(OPERATOR_KEY)];
    })
    .await;
    // Without a key (kubelet): which checks pass, nothing else — no judge URL, no error chain.
    let (status, anonymous) = broken.get("/readyz").await;
    assert_eq!(status, 503, "{anonymous}");
    assert_eq!(anonymous["error"]["type"], "not_ready");
    assert_eq!(
        anonymous["error"]["message"],
        "not ready: store ok; of 4 judges, 2 unreachable, 1 not configured (details for callers \
         with an API key, and in the log)"
    );
    let text = anonymous.to_string();
    assert!(
        !text.contains("127.0.0.1") && !text.contains("problem") && !text.contains("API key\""),
        "{anonymous}"
    );
    assert_eq!(anonymous["judges"].as_array().unwrap().len(), 4);
    assert_matches(
        &openapi(),
        &schema_ref("NotReady"),
        &anonymous,
        "an anonymous 503",
    );
    // With a key: every problem.
    let resp = reqwest::Client::new()
        .get(format!("{}/readyz", broken.url))
        .bearer_auth(OPERATOR_KEY)
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(status, 503, "{body}");
    assert!(body.to_string().contains(&gone.to_string()), "{body}");
    assert_eq!(body["error"]["type"], "not_ready");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("judge \"down\"") && message.contains("unreachable"),
        "{message}"
    );
    assert!(
        message.contains("not configured: judge \"keyless\" has no API key"),
        "{message}"
    );
    assert!(
        message.contains("judge \"refused\"") && message.contains("refuses its API key"),
        "{message}"
    );
    assert!(!body.to_string().contains("sk-refused-by-mock"), "{body}");
    let ok: BTreeMap<&str, bool> = body["judges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| (j["name"].as_str().unwrap(), j["ok"].as_bool().unwrap()))
        .collect();
    let expected = [
        ("down", false),
        ("keyless", false),
        ("mock", true),
        ("refused", false),
    ];
    assert_eq!(ok, BTreeMap::from(expected));
    assert_eq!(body["store"]["ok"], true);
    assert_matches(
        &openapi(),
        &schema_ref("NotReady"),
        &body,
        "a 503 from /readyz",
    );
    // Liveness does not depend on the judges.
    assert_eq!(broken.get("/healthz").await.0, 200);
}

#[tokio::test]
async fn a_judge_without_a_key_is_not_configured_not_unreachable() {
    let mock = MockJudge::start().await;
    let dir = tempfile::tempdir().unwrap();
    let gavel = start(&mock, &dir, |c| {
        crate::common::remote(c, "mock").api_key = None;
    })
    .await;
    let (status, body) = gavel.get("/readyz").await;
    assert_eq!(status, 503, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert_eq!(
        message,
        "not ready: store ok; of 1 judge, 1 not configured (details for callers with an API key, \
         and in the log)"
    );
    assert!(!message.contains("unreachable"), "{message}");
    assert_eq!(body["judges"], json!([{"name": "mock", "ok": false}]));
    assert_eq!(mock.model_lists(), 0, "a judge without a key is not probed");
}
