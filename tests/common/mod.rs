//! Test support: an in-process OpenAI-compatible mock judge on 127.0.0.1:0 that speaks the real
//! wire format (so gavel's real client, retry and parse code run), records every request, and
//! misbehaves on demand; plus helpers to run gavel's daemon in-process on port 0.
#![allow(dead_code)]

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};

use gavel::config::{Config, JudgeConfig, RemoteConfig, Secret};
use gavel::score::Scorer;
use gavel::server::{self, AppState};
use gavel::store::{SledStore, VerdictStore};

pub mod cli;

/// The model layer's test fixtures (tiny random-weight models written to disk).
#[cfg(feature = "local")]
pub mod model;

pub const MOCK_KEY: &str = "sk-mock-test-key-0123456789";

/// What the mock judge does with one request.
#[derive(Debug, Clone)]
pub enum Behaviour {
    /// Answer a valid verdict: each trajectory scores the number after the last `SCORE=` in its section
    /// of the prompt, or 0.5 without one.
    Score,
    /// Answer this text as the assistant message content.
    Content(String),
    /// Answer this text with the scores computed as in `Score` substituted for `{verdict}`.
    Wrap(String),
    /// Answer an HTTP error with this status, optional Retry-After seconds, and body.
    Status(u16, Option<u64>, String),
    /// Answer 429 with this exact `Retry-After` text (e.g. "1e20", as a broken proxy might).
    RetryAfterText(String),
    /// Wait this long, then answer as `Score`.
    Hang(Duration),
    /// Drop the connection without answering.
    Reset,
    /// As `Score`, plus this much for whichever trajectory is shown first (position bias).
    FirstBias(f64),
    /// Answer 401 quoting the Authorization header it got, as some servers quote a refused key.
    EchoAuth,
    /// As `Score`, except that a trajectory whose section speaks to the grader ("grader",
    /// "evaluator", "verdict") scores 1.0: a judge that follows notes addressed to it.
    Gullible,
    /// As `Score`, without these top-level fields of the completion (OpenAI-compatible servers
    /// that omit `created`, `id`, ...).
    Without(Vec<&'static str>),
}

#[derive(Default)]
struct MockState {
    requests: Mutex<Vec<Value>>,
    arrivals: Mutex<Vec<std::time::Instant>>,
    in_flight: std::sync::atomic::AtomicUsize,
    /// When set, the mock enforces a request rate like a hosted API: a request arriving sooner
    /// than 90% of this interval after the last admitted one gets 429.
    rate_interval: Mutex<Option<(Duration, Option<std::time::Instant>)>>,
    rate_limited: std::sync::atomic::AtomicUsize,
    max_in_flight: std::sync::atomic::AtomicUsize,
    auth: Mutex<Vec<Option<String>>>,
    queue: Mutex<VecDeque<Behaviour>>,
    fallback: Mutex<Option<Behaviour>>,
    /// Report `usage.prompt_tokens` as an OpenAI server would (o200k_base over the messages)
    /// instead of a fixed 100.
    count_tokens: std::sync::atomic::AtomicBool,
    /// `GET /v1/models` requests (readiness probes).
    model_lists: std::sync::atomic::AtomicUsize,
    /// The `response_format` types the server takes (`None`: any), as llama-cpp-python takes
    /// only `text` and `json_object`; any other is answered as that server does.
    formats: Mutex<Option<Vec<&'static str>>>,
    /// How requests for `logprobs` are answered.
    logprobs: Mutex<Logprobs>,
}

/// How the mock answers a request with `logprobs: true` (its `Score` behaviour): the verdict
/// token's alternatives carry the probability the prompt's markers say (pointwise: P(yes) is the
/// one trajectory's `SCORE=`; pairwise: P("1") = ½ + (first − second)/2), or one of the ways
/// servers fail to.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub enum Logprobs {
    #[default]
    Given,
    /// The reply has no `logprobs` (a server that ignores the parameter).
    Absent,
    /// 400, as OpenAI's reasoning models answer: "logprobs is not supported with this model".
    Refused,
    /// The first token and its alternatives are neither answer.
    OutsideTopK,
    /// The yes (or "1") mass is spread over case and leading-space variants.
    Split,
}

/// llama-cpp-python's answer to a `response_format` it does not take (HTTP 500).
pub const LLAMA_CPP_PYTHON_FORMAT_REFUSAL: &str = r#"{"error":{"message":"[{'type': 'literal_error', 'loc': ('body', 'response_format', 'type'), 'msg': "Input should be 'text' or 'json_object'", 'input': 'json_schema', 'ctx': {'expected': "'text' or 'json_object'"}}]","type":"internal_server_error","param":null,"code":null}}"#;

/// A running mock judge.
#[derive(Clone)]
pub struct MockJudge {
    pub addr: SocketAddr,
    state: Arc<MockState>,
}

impl MockJudge {
    pub async fn start() -> MockJudge {
        let state = Arc::new(MockState::default());
        let app = Router::new()
            .route("/v1/chat/completions", post(completions))
            .route("/v1/models", axum::routing::get(models))
            .with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        MockJudge { addr, state }
    }

    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Behaviours for the next requests, in order; after them, the fallback (default `Score`).
    pub fn push(&self, b: Behaviour) {
        self.state.queue.lock().unwrap().push_back(b);
    }

    pub fn set_fallback(&self, b: Behaviour) {
        *self.state.fallback.lock().unwrap() = Some(b);
    }

    pub fn requests(&self) -> Vec<Value> {
        self.state.requests.lock().unwrap().clone()
    }

    /// Report real prompt token counts (o200k_base with OpenAI's framing) from now on, or the
    /// fixed 100 again.
    pub fn report_token_counts(&self, on: bool) {
        self.state
            .count_tokens
            .store(on, std::sync::atomic::Ordering::SeqCst);
    }

    pub fn calls(&self) -> usize {
        self.state.requests.lock().unwrap().len()
    }

    /// When each request arrived.
    pub fn arrivals(&self) -> Vec<std::time::Instant> {
        self.state.arrivals.lock().unwrap().clone()
    }

    /// Enforce `per_minute` requests a minute (answering 429 to requests that come too soon).
    pub fn enforce_rate(&self, per_minute: u32) {
        *self.state.rate_interval.lock().unwrap() =
            Some((Duration::from_secs_f64(60.0 / f64::from(per_minute)), None));
    }

    /// Requests answered 429 by the enforced rate.
    pub fn rate_limited(&self) -> usize {
        self.state
            .rate_limited
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The most requests the mock ever had in progress at once.
    pub fn max_concurrent(&self) -> usize {
        self.state
            .max_in_flight
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// `GET /v1/models` requests so far.
    pub fn model_lists(&self) -> usize {
        self.state
            .model_lists
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Answer requests for `logprobs` this way from now on.
    pub fn set_logprobs(&self, l: Logprobs) {
        *self.state.logprobs.lock().unwrap() = l;
    }

    /// Take only these `response_format` types from now on (`text` is always taken).
    pub fn accept_formats(&self, formats: &[&'static str]) {
        *self.state.formats.lock().unwrap() = Some(formats.to_vec());
    }

    pub fn auth_headers(&self) -> Vec<Option<String>> {
        self.state.auth.lock().unwrap().clone()
    }

    /// A judge config pointing at this mock, with fast retries for tests.
    pub fn judge_config(&self) -> JudgeConfig {
        let mut j = RemoteConfig::new(self.base_url(), Some(Secret::new(MOCK_KEY)));
        j.common.model = "mock-judge-1".into();
        j.common.deadline_s = 20.0;
        j.timeout_s = 5.0;
        j.max_retries = 2;
        j.max_backoff_s = 0.05;
        JudgeConfig::Remote(j)
    }

    /// A gavel config with this mock as the default judge `mock`; [`remote`] edits it.
    pub fn config(&self, store: &std::path::Path) -> Config {
        let mut cfg = Config::from_env(&|_| None).expect("no variables, no error");
        cfg.judges.clear();
        cfg.judges.insert("mock".into(), self.judge_config());
        cfg.default_judge = Some("mock".into());
        cfg.store.path = store.to_path_buf();
        cfg
    }
}

/// The trajectory ids in a judge prompt and the text of each one's section.
pub fn sections(prompt: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = prompt;
    while let Some(start) = rest.find("<trajectory id=\"") {
        let after = &rest[start + 16..];
        let id_end = after.find('"').unwrap();
        let id = after[..id_end].to_string();
        let body_end = after.find("</trajectory>").unwrap_or(after.len());
        out.push((id, after[id_end..body_end].to_string()));
        rest = &after[body_end..];
    }
    out
}

fn marker_score(section: &str) -> f64 {
    section
        .rfind("SCORE=")
        .and_then(|i| {
            let num: String = section[i + 6..]
                .chars()
                .take_while(|c| c.is_ascii_digit() || *c == '.')
                .collect();
            num.parse().ok()
        })
        .unwrap_or(0.5)
}

/// Checklist item ids listed in the judge's system prompt (`- [id] ...` lines).
fn checklist_ids(req: &Value) -> Vec<String> {
    let system = req["messages"][0]["content"].as_str().unwrap_or("");
    system
        .lines()
        .filter_map(|l| {
            l.strip_prefix("- [")
                .and_then(|r| r.split_once(']'))
                .map(|(id, _)| id.to_string())
        })
        .collect()
}

/// Items named by the last `MET=a,b` marker in a section.
fn met_items(section: &str) -> Vec<String> {
    section
        .rfind("MET=")
        .map(|i| {
            section[i + 4..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == ',' || *c == '_')
                .collect::<String>()
                .split(',')
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// The verdict the `Score` behaviour gives for a request. With a checklist rubric, every item
/// named in a `MET=` marker is met.
pub fn verdict_for(req: &Value) -> Value {
    let items = checklist_ids(req);
    // The first user message holds the group (later ones are re-asks).
    let prompt = req["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "user")
        .and_then(|m| m["content"].as_str())
        .unwrap_or("");
    let scores: Vec<Value> = sections(prompt)
        .into_iter()
        .map(|(id, body)| {
            let mut entry = json!({"trajectory_id": id, "explanation": format!("mock read {} chars", body.len()), "score": marker_score(&body)});
            if !items.is_empty() {
                let met = met_items(&body);
                entry["items"] = items.iter().map(|i| json!({"id": i, "met": met.contains(i)})).collect();
            }
            entry
        })
        .collect();
    json!({ "scores": scores })
}

fn completion(req: &Value, content: String, prompt_tokens: u64) -> Response {
    Json(completion_body(req, content, prompt_tokens)).into_response()
}

fn completion_body(req: &Value, content: String, prompt_tokens: u64) -> Value {
    json!({
        "id": "chatcmpl-mock",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": req["model"],
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop", "logprobs": null}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 20, "total_tokens": prompt_tokens + 20},
    })
}

/// The answer to a request for one token with its `top_logprobs` (see [`Logprobs`]).
fn logprob_completion(req: &Value, style: Logprobs, prompt_tokens: u64) -> Response {
    if style == Logprobs::Refused {
        let body = json!({"error": {"message": "logprobs is not supported with this model", "type": "invalid_request_error", "param": "logprobs", "code": "unsupported_parameter"}});
        return (StatusCode::BAD_REQUEST, body.to_string()).into_response();
    }
    let marks: Vec<f64> = sections(&judge_prompt(req))
        .iter()
        .map(|(_, body)| marker_score(body))
        .collect();
    let (first, p) = match marks[..] {
        [a, b] => (["1", "2"], 0.5 + (a - b) / 2.0),
        [a] => (["Yes", "No"], a),
        // A question without a trajectory (the capability check at start).
        [] => (["Yes", "No"], 0.9),
        _ => panic!("a probability prompt shows one or two trajectories: {marks:?}"),
    };
    let p = p.clamp(0.001, 0.999);
    let mut alternatives: Vec<(String, f64)> = match style {
        Logprobs::OutsideTopK => vec![("The".into(), 0.6), ("I".into(), 0.3)],
        Logprobs::Split => vec![
            (first[0].to_string(), p / 2.0),
            (format!(" {}", first[0].to_lowercase()), p / 4.0),
            (first[0].to_uppercase(), p / 4.0),
            (first[1].to_string(), 1.0 - p),
        ],
        _ => vec![(first[0].to_string(), p), (first[1].to_string(), 1.0 - p)],
    };
    alternatives.sort_by(|a, b| b.1.total_cmp(&a.1));
    let top: Vec<Value> = alternatives
        .iter()
        .map(|(t, p)| json!({"token": t, "logprob": p.ln(), "bytes": t.as_bytes()}))
        .collect();
    let (token, prob) = alternatives[0].clone();
    let mut body = completion_body(req, token.clone(), prompt_tokens);
    body["usage"]["completion_tokens"] = json!(1);
    if style != Logprobs::Absent {
        body["choices"][0]["logprobs"] = json!({"content": [
            {"token": token, "logprob": prob.ln(), "bytes": token.as_bytes(), "top_logprobs": top}
        ]});
    }
    Json(body).into_response()
}

/// Counts a request in progress for as long as it lives.
struct InFlight(Arc<MockState>);

impl InFlight {
    fn new(state: &Arc<MockState>) -> InFlight {
        use std::sync::atomic::Ordering::SeqCst;
        let now = state.in_flight.fetch_add(1, SeqCst) + 1;
        state.max_in_flight.fetch_max(now, SeqCst);
        InFlight(state.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0
            .in_flight
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// The model list, for keys that are `MOCK_KEY`; 401 for any other.
async fn models(State(state): State<Arc<MockState>>, headers: HeaderMap) -> Response {
    state
        .model_lists
        .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let auth = headers.get("authorization").and_then(|v| v.to_str().ok());
    if auth != Some(format!("Bearer {MOCK_KEY}").as_str()) {
        return (StatusCode::UNAUTHORIZED, "invalid api key").into_response();
    }
    Json(json!({"object": "list", "data": [{"id": "mock-judge-1", "object": "model", "owned_by": "mock"}]}))
        .into_response()
}

async fn completions(
    State(state): State<Arc<MockState>>,
    headers: HeaderMap,
    Json(req): Json<Value>,
) -> Response {
    let _in_flight = InFlight::new(&state);
    state
        .arrivals
        .lock()
        .unwrap()
        .push(std::time::Instant::now());
    state.requests.lock().unwrap().push(req.clone());
    state.auth.lock().unwrap().push(
        headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string),
    );
    let prompt_tokens = if state.count_tokens.load(std::sync::atomic::Ordering::SeqCst) {
        let msgs: Vec<gavel::domain::prompt::ChatMessage> = req["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| gavel::domain::prompt::ChatMessage {
                role: m["role"].as_str().unwrap_or_default().to_string(),
                content: m["content"].as_str().unwrap_or_default().to_string(),
            })
            .collect();
        gavel::domain::prompt::count_tokens(&msgs) as u64
    } else {
        100
    };
    let completion = |req: &Value, content: String| completion(req, content, prompt_tokens);
    if let Some(formats) = state.formats.lock().unwrap().as_ref() {
        let asked = req["response_format"]["type"].as_str().unwrap_or("text");
        if asked != "text" && !formats.contains(&asked) {
            return (
                StatusCode::INTERNAL_SERVER_ERROR,
                LLAMA_CPP_PYTHON_FORMAT_REFUSAL,
            )
                .into_response();
        }
    }
    let next = state.queue.lock().unwrap().pop_front();
    let behaviour = next
        .or_else(|| state.fallback.lock().unwrap().clone())
        .unwrap_or(Behaviour::Score);
    let style = *state.logprobs.lock().unwrap();
    match behaviour {
        Behaviour::Score if req["logprobs"] == true => {
            logprob_completion(&req, style, prompt_tokens)
        }
        Behaviour::Score => completion(&req, verdict_for(&req).to_string()),
        Behaviour::Gullible => {
            let mut v = verdict_for(&req);
            let prompt = judge_prompt(&req);
            for ((_, body), entry) in sections(&prompt)
                .iter()
                .zip(v["scores"].as_array_mut().unwrap())
            {
                let lower = body.to_lowercase();
                if ["grader", "evaluator", "verdict"]
                    .iter()
                    .any(|w| lower.contains(w))
                {
                    entry["score"] = json!(1.0);
                }
            }
            completion(&req, v.to_string())
        }
        Behaviour::Content(text) => completion(&req, text),
        Behaviour::Wrap(text) => completion(
            &req,
            text.replace("{verdict}", &verdict_for(&req).to_string()),
        ),
        Behaviour::Status(code, retry_after, body) => {
            let mut resp = (StatusCode::from_u16(code).unwrap(), body).into_response();
            if let Some(s) = retry_after {
                resp.headers_mut()
                    .insert("retry-after", s.to_string().parse().unwrap());
            }
            resp
        }
        Behaviour::RetryAfterText(text) => {
            let mut resp = (StatusCode::TOO_MANY_REQUESTS, "slow down").into_response();
            resp.headers_mut()
                .insert("retry-after", text.parse().unwrap());
            resp
        }
        Behaviour::Hang(d) => {
            tokio::time::sleep(d).await;
            completion(&req, verdict_for(&req).to_string())
        }
        Behaviour::Reset => panic!("mock judge drops this connection on purpose"),
        Behaviour::EchoAuth => {
            let auth = headers
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default();
            let body = json!({"error": {"message": format!("Incorrect API key provided: {auth}")}});
            (StatusCode::UNAUTHORIZED, body.to_string()).into_response()
        }
        Behaviour::Without(fields) => {
            let mut body = completion_body(&req, verdict_for(&req).to_string(), prompt_tokens);
            for f in fields {
                body.as_object_mut().unwrap().remove(f);
            }
            Json(body).into_response()
        }
        Behaviour::FirstBias(bias) => {
            let mut v = verdict_for(&req);
            if let Some(first) = v["scores"].as_array_mut().and_then(|a| a.first_mut()) {
                let s = first["score"].as_f64().unwrap();
                first["score"] = json!((s + bias).min(1.0));
            }
            completion(&req, v.to_string())
        }
    }
}

/// gavel's daemon running in-process on 127.0.0.1:0.
pub struct Gavel {
    pub url: String,
    pub scorer: Arc<Scorer>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    handle: Option<tokio::task::JoinHandle<()>>,
}

impl Gavel {
    pub async fn start(cfg: Config) -> Gavel {
        let store: Arc<dyn VerdictStore> = Arc::new(SledStore::open(&cfg.store.path).unwrap());
        Gavel::start_with_store(cfg, store).await
    }

    /// As [`Gavel::start`], over a store the caller opened (e.g. Postgres).
    pub async fn start_with_store(cfg: Config, store: Arc<dyn VerdictStore>) -> Gavel {
        let scorer = Scorer::new(cfg.scorer_parts(), store).unwrap();
        // As `gavel serve` does before it listens.
        scorer.check_judges().await;
        let scorer = Arc::new(scorer);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let state = AppState::new(scorer.clone(), cfg.server.clone())
            .with_openrlhf(cfg.openrlhf.clone())
            .unwrap();
        let handle = tokio::spawn(async move {
            server::serve(listener, state, async {
                let _ = rx.await;
            })
            .await
            .unwrap();
        });
        Gavel {
            url,
            scorer,
            shutdown: Some(tx),
            handle: Some(handle),
        }
    }

    /// Stops the daemon and waits until it has released the store.
    pub async fn stop(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(h) = self.handle.take() {
            h.await.unwrap();
        }
    }

    pub async fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        let resp = reqwest::Client::new()
            .post(format!("{}{path}", self.url))
            .json(body)
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap_or(Value::Null))
    }

    pub async fn post_raw(&self, path: &str, body: Vec<u8>) -> (u16, Value) {
        let resp = reqwest::Client::new()
            .post(format!("{}{path}", self.url))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap_or(Value::Null))
    }

    /// The `/metrics` text.
    pub async fn metrics_text(&self) -> String {
        reqwest::get(format!("{}/metrics", self.url))
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        let resp = reqwest::get(format!("{}{path}", self.url)).await.unwrap();
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap_or(Value::Null))
    }
}

/// A message list: system, user, then one assistant answer.
pub fn simple_traj(answer: &str) -> Value {
    json!({"messages": [
        {"role": "system", "content": "You answer arithmetic questions. End with ANSWER: <n>."},
        {"role": "user", "content": "What is 1030 * 4?"},
        {"role": "assistant", "content": answer}]})
}

/// A group of simple trajectories whose final answers carry `SCORE=` markers for the mock.
pub fn marked_group(scores: &[f64]) -> Value {
    let trajs: Vec<Value> = scores
        .iter()
        .enumerate()
        .map(|(i, s)| simple_traj(&format!("attempt {i}: SCORE={s} ANSWER: {}", 4000 + i)))
        .collect();
    json!({ "trajectories": trajs })
}

/// The first user message of a recorded judge request.
pub fn judge_prompt(req: &Value) -> String {
    req["messages"][1]["content"].as_str().unwrap().to_string()
}

/// A mock judge and a daemon using it as the default judge `mock`, over a fresh store.
pub async fn setup() -> (MockJudge, Gavel, tempfile::TempDir) {
    let mock = MockJudge::start().await;
    let dir = tempfile::tempdir().unwrap();
    let gavel = Gavel::start(mock.config(&dir.path().join("store"))).await;
    (mock, gavel, dir)
}

/// An array of numbers as `f64`s (panics on anything else, e.g. a null reward).
pub fn floats(v: &Value) -> Vec<f64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_f64().unwrap())
        .collect()
}

/// A response's `rewards`.
pub fn rewards(v: &Value) -> Vec<f64> {
    floats(&v["rewards"])
}

/// Equal within 1e-9, element by element.
pub fn close(a: &[f64], b: &[f64]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-9)
}

/// POSTs a JSON body (with the mock's key as bearer token) and reads the whole answer; returns
/// (status, body, seconds). The benchmarks time requests with it.
pub async fn timed_post(c: &reqwest::Client, url: &str, body: Vec<u8>) -> (u16, Vec<u8>, f64) {
    let t = std::time::Instant::now();
    let resp = c
        .post(url)
        .header("content-type", "application/json")
        .header("authorization", format!("Bearer {MOCK_KEY}"))
        .body(body)
        .send()
        .await
        .expect("request reaches 127.0.0.1");
    let status = resp.status().as_u16();
    let bytes = resp.bytes().await.expect("whole answer");
    (status, bytes.to_vec(), t.elapsed().as_secs_f64())
}

/// The remote table of `cfg`'s judge `name`, to edit.
pub fn remote<'a>(cfg: &'a mut Config, name: &str) -> &'a mut RemoteConfig {
    cfg.judges
        .get_mut(name)
        .and_then(JudgeConfig::as_remote_mut)
        .expect("a remote judge of that name")
}
