//! Bearer-token auth and request ids.

use std::collections::BTreeSet;

use gavel::config::Secret;
use serde_json::Value;

use crate::common::{marked_group, MockJudge};
use crate::start;

pub const KEY_A: &str = "gk-ops-test-key-aaaa1111";
pub const KEY_B: &str = "gk-ops-test-key-bbbb2222";

async fn call(url: &str, method: &str, path: &str, token: Option<&str>) -> reqwest::Response {
    let m = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let mut req = reqwest::Client::new().request(m.clone(), format!("{url}{path}"));
    if m == reqwest::Method::POST {
        req = req.json(&marked_group(&[0.4, 0.6]));
    }
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    req.send().await.unwrap()
}

async fn assert_unauthorized(resp: reqwest::Response, what: &str) {
    assert_eq!(resp.status(), 401, "{what}");
    assert_eq!(resp.headers()["www-authenticate"], "Bearer", "{what}");
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["type"], "unauthorized", "{what}: {body}");
}

#[tokio::test]
async fn api_keys_guard_every_route_but_the_open_ones() {
    let mock = MockJudge::start().await;
    let dir = tempfile::tempdir().unwrap();
    let gavel = start(&mock, &dir, |c| {
        c.server.api_keys = vec![Secret::new(KEY_A), Secret::new(KEY_B)];
    })
    .await;
    let url = gavel.url.as_str();
    for (method, path) in [
        ("POST", "/v1/score_group"),
        ("GET", "/v1/rubrics"),
        ("GET", "/openapi.json"),
        ("GET", "/no/such/route"),
    ] {
        let what = format!("{method} {path}");
        assert_unauthorized(
            call(url, method, path, None).await,
            &format!("{what}, no key"),
        )
        .await;
        let wrong = call(url, method, path, Some("gk-ops-test-key-wrong")).await;
        assert_unauthorized(wrong, &format!("{what}, wrong key")).await;
        let prefix = call(url, method, path, Some(&KEY_A[..KEY_A.len() - 1])).await;
        assert_unauthorized(prefix, &format!("{what}, truncated key")).await;
    }
    let basic = reqwest::Client::new()
        .get(format!("{url}/v1/rubrics"))
        .header("authorization", format!("Basic {KEY_A}"))
        .send()
        .await
        .unwrap();
    assert_unauthorized(basic, "Basic scheme").await;
    assert_eq!(mock.calls(), 0, "a refused request never reaches the judge");

    for key in [KEY_A, KEY_B] {
        assert_eq!(
            call(url, "GET", "/v1/rubrics", Some(key)).await.status(),
            200
        );
    }
    let scored = call(url, "POST", "/v1/score_group", Some(KEY_B)).await;
    assert_eq!(scored.status(), 200);
    assert_eq!(mock.calls(), 1);
    let missing = call(url, "GET", "/no/such/route", Some(KEY_A)).await;
    assert_eq!(missing.status(), 404, "with a key, an unknown route is 404");
    for path in ["/healthz", "/readyz", "/metrics"] {
        assert_eq!(
            call(url, "GET", path, None).await.status(),
            200,
            "{path} is open"
        );
    }

    // With open_paths emptied, the probes need a key too.
    let closed = start(&mock, &dir, |c| {
        c.store.path = dir.path().join("store2");
        c.server.api_keys = vec![Secret::new(KEY_A)];
        c.server.open_paths.clear();
    })
    .await;
    assert_unauthorized(
        call(&closed.url, "GET", "/healthz", None).await,
        "closed /healthz",
    )
    .await;
    assert_eq!(
        call(&closed.url, "GET", "/healthz", Some(KEY_A))
            .await
            .status(),
        200
    );
}

#[tokio::test]
async fn every_response_carries_a_request_id_and_a_given_one_is_echoed() {
    let mock = MockJudge::start().await;
    let dir = tempfile::tempdir().unwrap();
    let gavel = start(&mock, &dir, |c| {
        c.server.api_keys = vec![Secret::new(KEY_A)]
    })
    .await;
    let client = reqwest::Client::new();
    let id_of = |r: &reqwest::Response| {
        r.headers()
            .get("x-request-id")
            .map(|v| v.to_str().unwrap().to_string())
    };
    let mut ids = BTreeSet::new();
    for path in ["/healthz", "/healthz", "/v1/rubrics", "/nope"] {
        let r = client
            .get(format!("{}{path}", gavel.url))
            .send()
            .await
            .unwrap();
        let id = id_of(&r).unwrap_or_else(|| panic!("{path}: no x-request-id"));
        assert_eq!(id.len(), 36, "{path}: a UUID, got {id}");
        assert_eq!(id.matches('-').count(), 4, "{path}: a UUID, got {id}");
        ids.insert(id);
    }
    assert_eq!(ids.len(), 4, "each request gets its own id");
    // A caller's id is kept, on successes and on errors alike.
    for (path, token, status) in [
        ("/v1/rubrics", Some(KEY_A), 200),
        ("/v1/rubrics", None, 401),
        ("/nope", Some(KEY_A), 404),
    ] {
        let mut req = client
            .get(format!("{}{path}", gavel.url))
            .header("x-request-id", "trace-7f3a-ops");
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        let r = req.send().await.unwrap();
        assert_eq!(r.status().as_u16(), status, "{path}");
        assert_eq!(id_of(&r).as_deref(), Some("trace-7f3a-ops"), "{path}");
    }
}
