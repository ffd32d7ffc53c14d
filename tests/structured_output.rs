//! The servers teams run: structured output negotiated per judge (llama-cpp-python takes
//! `json_object` with a schema, not `json_schema`), judges of one's own that need no key, and
//! refusals quoted whole. All against the mock judge speaking each server's dialect.

mod common;

use common::{marked_group, remote, rewards, Gavel, MockJudge, LLAMA_CPP_PYTHON_FORMAT_REFUSAL};
use gavel::config::StructuredOutput;
use serde_json::Value;

fn format_of(req: &Value) -> Option<&str> {
    req.get("response_format")
        .map(|f| f["type"].as_str().unwrap())
}

/// What a newcomer met with llama-cpp-python's server: every request failed with HTTP 500 after
/// four attempts. Now the judge steps down to the dialect the server takes, once.
#[tokio::test]
async fn auto_finds_the_dialect_llama_cpp_python_takes_and_keeps_it() {
    let mock = MockJudge::start().await;
    mock.accept_formats(&["json_object"]);
    let dir = tempfile::tempdir().unwrap();
    let gavel = Gavel::start(mock.config(&dir.path().join("store"))).await;
    let (_, h) = gavel.get("/healthz").await;
    assert_eq!(h["judges"][0]["structured_output"], "json_schema", "{h}");

    let (status, body) = gavel
        .post("/v1/score_group", &marked_group(&[0.2, 0.9]))
        .await;
    assert_eq!(status, 200, "{body}");
    let reqs = mock.requests();
    assert_eq!(reqs.len(), 2, "refused once, then taken");
    assert_eq!(format_of(&reqs[0]), Some("json_schema"));
    assert_eq!(format_of(&reqs[1]), Some("json_object"));
    // llama-cpp-python's dialect: the schema beside the type.
    assert_eq!(
        reqs[1]["response_format"]["schema"],
        reqs[0]["response_format"]["json_schema"]["schema"]
    );
    assert_eq!(reqs[0]["messages"], reqs[1]["messages"], "the same request");
    let r = rewards(&body);
    assert!(r[1] > r[0], "{body}");
    assert_eq!(body["usage"]["judge_calls"], 1, "{body}");

    // Later groups ask in it at once.
    let (status, _) = gavel
        .post("/v1/score_group", &marked_group(&[0.3, 0.4]))
        .await;
    assert_eq!(status, 200);
    let reqs = mock.requests();
    assert_eq!(reqs.len(), 3);
    assert_eq!(format_of(&reqs[2]), Some("json_object"));
    let (_, h) = gavel.get("/healthz").await;
    assert_eq!(h["judges"][0]["structured_output"], "json_object", "{h}");
}

/// A server that takes no `response_format` at all: down the whole ladder to none, and then the
/// prompt spells the reply out with every id of the group.
#[tokio::test]
async fn a_server_without_structured_output_is_asked_without_it() {
    let mock = MockJudge::start().await;
    mock.accept_formats(&[]);
    let dir = tempfile::tempdir().unwrap();
    let gavel = Gavel::start(mock.config(&dir.path().join("store"))).await;
    let (status, body) = gavel
        .post("/v1/score_group", &marked_group(&[0.2, 0.9]))
        .await;
    assert_eq!(status, 200, "{body}");
    let reqs = mock.requests();
    let formats: Vec<Option<&str>> = reqs.iter().map(format_of).collect();
    assert_eq!(
        formats,
        [
            Some("json_schema"),
            Some("json_object"),
            Some("json_object"),
            None
        ]
    );
    assert!(reqs[1]["response_format"].get("schema").is_some());
    assert!(
        reqs[2]["response_format"].get("schema").is_none(),
        "plain JSON mode"
    );

    gavel
        .post("/v1/score_group", &marked_group(&[0.3, 0.4, 0.5]))
        .await;
    let last = mock.requests().pop().unwrap();
    assert_eq!(format_of(&last), None);
    let system = last["messages"][0]["content"].as_str().unwrap();
    for id in ["1", "2", "3"] {
        assert!(
            system.contains(&format!("{{\"trajectory_id\": \"{id}\"")),
            "the example names trajectory {id}: {system}"
        );
    }
}

/// A judge held to one dialect the server refuses fails at once (no retries of a request that
/// cannot succeed), quoting the server's whole refusal and saying what to change.
#[tokio::test]
async fn a_refused_fixed_dialect_fails_at_once_and_says_what_to_change() {
    let mock = MockJudge::start().await;
    mock.accept_formats(&["json_object"]);
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = mock.config(&dir.path().join("store"));
    remote(&mut cfg, "mock").common.structured_output = StructuredOutput::JsonSchema;
    let gavel = Gavel::start(cfg).await;
    let (status, body) = gavel
        .post("/v1/score_group", &marked_group(&[0.2, 0.9]))
        .await;
    assert_eq!(status, 502, "{body}");
    assert_eq!(body["error"]["type"], "judge_unavailable", "{body}");
    assert_eq!(mock.calls(), 1, "not retried");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("the server refuses structured_output = \"json_schema\""),
        "{message}"
    );
    assert!(
        message.contains(LLAMA_CPP_PYTHON_FORMAT_REFUSAL),
        "the refusal is quoted whole: {message}"
    );
    assert!(
        message.contains("set structured_output = \"auto\""),
        "{message}"
    );
}

/// A server of one's own on 127.0.0.1 may need no key: none is demanded and no Authorization
/// header is sent. One that asks for a key anyway is told so by `/readyz`.
#[tokio::test]
async fn a_judge_without_a_key_sends_no_authorization() {
    let mock = MockJudge::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = mock.config(&dir.path().join("store"));
    let r = remote(&mut cfg, "mock");
    r.api_key = None;
    r.key_required = false;
    let gavel = Gavel::start(cfg).await;
    let (_, h) = gavel.get("/healthz").await;
    assert_eq!(h["judges"][0]["configured"], true, "{h}");
    let (status, body) = gavel
        .post("/v1/score_group", &marked_group(&[0.2, 0.9]))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(mock.auth_headers(), [None]);
    // The mock's model list wants its key: readiness names the fix.
    let (status, body) = gavel.get("/readyz").await;
    assert_eq!(status, 503, "{body}");
    let judge = gavel.scorer.judges().next().unwrap();
    let problem = judge.probe().await.unwrap_err();
    assert!(
        problem.contains("asks for an API key (HTTP 401): name the variable that holds it"),
        "{problem}"
    );

    // The same judge where a key is required is not configured, and says which variable.
    let mut cfg = mock.config(&dir.path().join("store2"));
    remote(&mut cfg, "mock").api_key = None;
    let strict = Gavel::start(cfg).await;
    let (status, body) = strict
        .post("/v1/score_group", &marked_group(&[0.2, 0.9]))
        .await;
    assert_eq!(status, 503, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("set the environment variable OPENAI_API_KEY"),
        "{body}"
    );
}
