//! Training-framework integrations over real HTTP against the mock judge: OpenRLHF's
//! `POST /get_reward` (groups assembled from concurrent single-sample requests), and the Python
//! client's pytest suite (`clients/python/tests`) run against a real `gavel serve` child process.

mod common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

use common::{floats, rewards, Behaviour, MockJudge, MOCK_KEY};
use gavel::config::{Config, OpenRlhfConfig};
use gavel::score::Scorer;
use gavel::server::{self, AppState};
use gavel::store::{SledStore, VerdictStore};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// A daemon in-process on 127.0.0.1:0 with this `[openrlhf]` section, judged by `mock`.
struct Daemon {
    url: String,
    _dir: tempfile::TempDir,
}

impl Daemon {
    async fn start(mock: &MockJudge, openrlhf: OpenRlhfConfig) -> Daemon {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg: Config = mock.config(&dir.path().join("store"));
        cfg.openrlhf = openrlhf;
        let store: Arc<dyn VerdictStore> = Arc::new(SledStore::open(&cfg.store.path).unwrap());
        let scorer = Arc::new(Scorer::new(cfg.scorer_parts(), store).unwrap());
        let state = AppState::new(scorer, cfg.server.clone())
            .with_openrlhf(cfg.openrlhf.clone())
            .unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move {
            server::serve(listener, state, std::future::pending())
                .await
                .unwrap()
        });
        Daemon { url, _dir: dir }
    }

    async fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        let resp = reqwest::Client::new()
            .post(format!("{}{path}", self.url))
            .json(body)
            .timeout(Duration::from_secs(60))
            .send()
            .await
            .unwrap();
        (resp.status().as_u16(), resp.json().await.unwrap())
    }
}

fn openrlhf(group_size: usize, wait_ms: u64) -> OpenRlhfConfig {
    OpenRlhfConfig {
        group_size,
        wait_ms,
        ..OpenRlhfConfig::default()
    }
}

const PROMPT_A: &str = "<|im_start|>user\nWhat is 1030 * 4?<|im_end|>\n<|im_start|>assistant\n";
const PROMPT_B: &str = "<|im_start|>user\nWhat is 7 * 6?<|im_end|>\n<|im_start|>assistant\n";

/// One OpenRLHF sample: the query is the prompt followed by the response.
fn sample(prompt: &str, response: &str, label: &str) -> Value {
    json!({"query": [format!("{prompt}{response}<|im_end|>")], "prompts": [prompt], "labels": [label]})
}

/// Posts every body at once, each from its own task; answers in the order given.
async fn concurrently(d: &Arc<Daemon>, bodies: Vec<Value>) -> Vec<(u16, Value)> {
    let tasks: Vec<_> = bodies
        .into_iter()
        .map(|b| {
            let d = d.clone();
            tokio::spawn(async move { d.post("/get_reward", &b).await })
        })
        .collect();
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.unwrap());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_single_samples_are_assembled_by_prompt_and_each_group_is_judged_once() {
    let mock = MockJudge::start().await;
    // Groups complete only by filling up: the wait is far longer than the test.
    let d = Arc::new(Daemon::start(&mock, openrlhf(4, 120_000)).await);
    let marks = [0.9, 0.2, 0.6, 0.4];
    let mut bodies = Vec::new();
    for (i, m) in marks.iter().enumerate() {
        bodies.push(sample(
            PROMPT_A,
            &format!("try {i}: SCORE={m} ANSWER: 41{i}0"),
            "",
        ));
        bodies.push(sample(
            PROMPT_B,
            &format!("guess {i}: SCORE={} ANSWER: 4{i}", 1.0 - m),
            "",
        ));
    }
    let answers = concurrently(&d, bodies).await;
    assert_eq!(mock.calls(), 2, "one judge call per prompt");
    for (k, (status, body)) in answers.iter().enumerate() {
        assert_eq!(*status, 200, "{body}");
        let want = if k % 2 == 0 {
            marks[k / 2]
        } else {
            1.0 - marks[k / 2]
        };
        assert_eq!(rewards(body), vec![want], "sample {k}: {body}");
        assert_eq!(floats(&body["scores"]), vec![want]);
        assert_eq!(body["extra_logs"]["group_size"], json!([4]));
        assert_eq!(floats(&body["extra_logs"]["judge"]), vec![want]);
    }
    // Each judge call saw exactly one prompt's four responses.
    for req in mock.requests() {
        let prompt = common::judge_prompt(&req);
        assert_eq!(common::sections(&prompt).len(), 4, "{prompt}");
        let tries = common::sections(&prompt)
            .iter()
            .filter(|(_, body)| body.contains("try "))
            .count();
        assert!(tries == 0 || tries == 4, "{prompt}");
    }
    // The rewards are the ones /v1/score_group gives for the same group.
    let traj = |i: usize, m: f64| {
        json!({"messages": [{"role": "user", "content": PROMPT_A},
            {"role": "assistant", "content": format!("try {i}: SCORE={m} ANSWER: 41{i}0")}]})
    };
    let group: Vec<Value> = marks.iter().enumerate().map(|(i, m)| traj(i, *m)).collect();
    let (status, direct) = d
        .post("/v1/score_group", &json!({"trajectories": group}))
        .await;
    assert_eq!(status, 200, "{direct}");
    let via_openrlhf: Vec<f64> = (0..4).map(|i| rewards(&answers[2 * i].1)[0]).collect();
    assert_eq!(rewards(&direct), via_openrlhf);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_partial_group_is_judged_when_the_wait_ends() {
    let mock = MockJudge::start().await;
    let d = Arc::new(Daemon::start(&mock, openrlhf(8, 300)).await);
    let answers = concurrently(
        &d,
        vec![
            sample(PROMPT_A, "first SCORE=0.7", ""),
            sample(PROMPT_A, "second SCORE=0.3", ""),
        ],
    )
    .await;
    assert_eq!(mock.calls(), 1);
    let got: Vec<f64> = answers.iter().map(|(_, b)| rewards(b)[0]).collect();
    assert_eq!(got, vec![0.7, 0.3]);
    for (status, body) in &answers {
        assert_eq!(*status, 200, "{body}");
        assert_eq!(body["extra_logs"]["group_size"], json!([2]));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn labels_feed_the_rubrics_answer_line_and_match_score_group() {
    let mock = MockJudge::start().await;
    let cfg = OpenRlhfConfig {
        rubric: "retrieval_qa".into(),
        ..openrlhf(3, 120_000)
    };
    let d = Arc::new(Daemon::start(&mock, cfg).await);
    let responses = [
        "SCORE=0.2\nANSWER: 4120",
        "SCORE=0.9\nANSWER: 4121",
        "SCORE=0.8\nANSWER: 4120",
    ];
    // One request carrying a whole group, as OpenRLHF sends when a worker has several samples.
    let body = json!({
        "query": responses.iter().map(|r| format!("{PROMPT_A}{r}")).collect::<Vec<_>>(),
        "prompts": [PROMPT_A, PROMPT_A, PROMPT_A],
        "labels": ["4120", "4120", "4120"],
    });
    let (status, got) = d.post("/get_reward", &body).await;
    assert_eq!(status, 200, "{got}");
    assert_eq!(
        floats(&got["extra_logs"]["answer_line"]),
        vec![1.0, 0.0, 1.0]
    );
    let r = rewards(&got);
    assert!(
        r[0] > r[1] && r[2] > r[1],
        "a wrong answer never outranks a right one: {r:?}"
    );
    assert!(r[2] > r[0], "the judge breaks the tie: {r:?}");
    let trajs: Vec<Value> = responses
        .iter()
        .map(|t| json!({"messages": [{"role": "user", "content": PROMPT_A}, {"role": "assistant", "content": t}]}))
        .collect();
    let (status, direct) = d
        .post(
            "/v1/score_group",
            &json!({"trajectories": trajs, "rubric": "retrieval_qa",
                    "verifiers": [{"type": "answer_line", "expected": "4120"}]}),
        )
        .await;
    assert_eq!(status, 200, "{direct}");
    assert_eq!(rewards(&direct), r);
    assert_eq!(
        direct["usage"]["cache_hits"], 1,
        "the same group, the same verdict"
    );

    // This rubric needs a label: a sample without one is refused before anything is judged.
    let (status, err) = d
        .post("/get_reward", &sample(PROMPT_B, "ANSWER: 42", ""))
        .await;
    assert_eq!(status, 400, "{err}");
    assert_eq!(err["error"]["type"], "invalid_request");
    assert!(
        err["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("labels[0]: missing"),
        "{err}"
    );
    assert_eq!(mock.calls(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_judge_failure_fails_every_request_of_the_group_with_a_typed_error() {
    let mock = MockJudge::start().await;
    mock.set_fallback(Behaviour::Status(500, None, "boom".into()));
    let d = Arc::new(Daemon::start(&mock, openrlhf(2, 120_000)).await);
    let answers = concurrently(
        &d,
        vec![
            sample(PROMPT_A, "one SCORE=0.5", ""),
            sample(PROMPT_A, "two SCORE=0.6", ""),
        ],
    )
    .await;
    for (status, body) in &answers {
        assert_eq!(*status, 502, "{body}");
        assert_eq!(body["error"]["type"], "judge_unavailable");
        assert!(
            body.get("rewards").is_none(),
            "never a made-up reward: {body}"
        );
    }
    // Judged once (with its retries), not once per request.
    assert_eq!(mock.calls(), 3, "one call plus max_retries = 2");
}

#[tokio::test]
async fn bad_bodies_get_typed_errors_naming_the_field() {
    let mock = MockJudge::start().await;
    let d = Daemon::start(&mock, openrlhf(2, 100)).await;
    for (body, message) in [
        (json!({"query": ["a"]}), "prompts: missing"),
        (
            json!({"query": ["a", "b"], "prompts": ["a"]}),
            "prompts: 1 prompts for 2 queries",
        ),
        (
            json!({"query": ["a"], "prompts": ["a"], "extra": 1}),
            "extra: unknown field",
        ),
        (json!(["a"]), "body: expected an object"),
    ] {
        let (status, err) = d.post("/get_reward", &body).await;
        assert_eq!(status, 400, "{err}");
        assert_eq!(err["error"]["type"], "invalid_request");
        let got = err["error"]["message"].as_str().unwrap();
        assert!(got.starts_with(message), "{got:?} !~ {message:?}");
    }
    assert_eq!(mock.calls(), 0);
}

// ---- the Python client's test suite against `gavel serve` ----

/// The interpreter for the Python tests: `GAVEL_PYTHON`, else `python3`.
fn python() -> String {
    std::env::var("GAVEL_PYTHON").unwrap_or_else(|_| "python3".into())
}

/// Why the Python tests cannot run here, if they cannot.
fn python_missing() -> Option<String> {
    let out = std::process::Command::new(python())
        .args(["-c", "import httpx, pytest"])
        .stdin(Stdio::null())
        .output();
    match out {
        Err(e) => Some(format!("{} not runnable: {e}", python())),
        Ok(o) if !o.status.success() => Some(format!(
            "{} lacks httpx or pytest ({}); `pip install ./clients/python[test]`",
            python(),
            String::from_utf8_lossy(&o.stderr)
                .lines()
                .last()
                .unwrap_or("")
        )),
        Ok(_) => None,
    }
}

/// A config with two judges: `mock` (healthy) and `broken` (answers 500 to everything).
fn serve_config(dir: &Path, mock: &MockJudge, broken: &MockJudge) -> PathBuf {
    let judge = |name: &str, m: &MockJudge| {
        format!(
            "[judges.{name}]\nbackend = \"openai\"\nbase_url = \"{}\"\nmodel = \"mock-judge-1\"\n\
             api_key_env = \"GAVEL_TEST_MOCK_KEY\"\nmax_retries = 0\nmax_backoff_s = 0.05\ntimeout_s = 5\n\n",
            m.base_url()
        )
    };
    let toml = format!(
        "default_judge = \"mock\"\n\n{}{}[openrlhf]\ngroup_size = 2\nwait_ms = 500\n",
        judge("mock", mock),
        judge("broken", broken)
    );
    let path = dir.join("gavel.toml");
    std::fs::write(&path, toml).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn python_client_tests_pass_against_gavel_serve() {
    let required = std::env::var("GAVEL_REQUIRE_PYTHON").is_ok_and(|v| v == "1");
    if let Some(why) = python_missing() {
        assert!(!required, "GAVEL_REQUIRE_PYTHON=1 but {why}");
        eprintln!(
            "skipping the Python client tests: {why} (set GAVEL_REQUIRE_PYTHON=1 to fail instead)"
        );
        return;
    }
    let (mock, broken) = (MockJudge::start().await, MockJudge::start().await);
    broken.set_fallback(Behaviour::Status(500, None, "judge down".into()));
    let dir = tempfile::tempdir().unwrap();
    let cfg = serve_config(dir.path(), &mock, &broken);
    let mut child = Command::new(env!("CARGO_BIN_EXE_gavel"))
        .args(["serve", "--addr", "127.0.0.1:0", "--config"])
        .arg(&cfg)
        .arg("--store")
        .arg(dir.path().join("store"))
        .env_remove("GAVEL_ADDR")
        .env("GAVEL_TEST_MOCK_KEY", MOCK_KEY)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let url = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(l) = lines.next_line().await.unwrap() {
            if let Some(u) = l.strip_prefix("gavel listening on ") {
                return u.to_string();
            }
        }
        panic!("gavel serve exited before listening");
    })
    .await
    .expect("gavel serve not listening within 30 s");
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });

    let client = Path::new(ROOT).join("clients/python");
    let out = Command::new(python())
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider"])
        .arg(client.join("tests"))
        .env("GAVEL_URL", &url)
        .env("GAVEL_TEST_BROKEN_JUDGE", "broken")
        .env("PYTHONPATH", client.join("src"))
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .current_dir(ROOT)
        .stdin(Stdio::null())
        .output();
    let out = tokio::time::timeout(Duration::from_secs(300), out)
        .await
        .expect("pytest ran over 300 s")
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{text}");
    assert!(out.status.success(), "pytest failed:\n{text}");
    assert!(mock.calls() > 0, "the suite never reached the judge");
    let _ = child.kill().await;
}
