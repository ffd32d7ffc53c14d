//! End-to-end tests of the `gavel` binary: `score`, `render`, `cache` and `serve` run as child
//! processes against the in-process mock judge from `common`.

mod common;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::time::timeout;

use common::{marked_group, Behaviour, MockJudge, MOCK_KEY};

const BIN: &str = env!("CARGO_BIN_EXE_gavel");
const EXAMPLES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/groups");
/// Variables (and clap env twins) that would change what the child does if they leaked in.
const LEAKY_ENV: &str =
    "GAVEL_CONFIG GAVEL_STORE GAVEL_STORE_URL GAVEL_ADDR GAVEL_LOG_JSON GAVEL_RUBRIC GAVEL_JUDGE \
    GAVEL_RENDER_FORMAT GAVEL_JUDGE_MODE GAVEL_PERMUTATIONS GAVEL_SCORE_OUTPUT GAVEL_RENDER_OUTPUT \
    OPENAI_API_KEY OPENAI_BASE_URL GAVEL_JUDGE_MODEL RUST_LOG GAVEL_API_KEYS";

/// A temp dir holding a config whose default judge `mock` is the mock, and a store path.
struct Setup {
    dir: tempfile::TempDir,
    cfg: PathBuf,
    store: PathBuf,
}

impl Setup {
    fn new(mock: &MockJudge) -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let (cfg, store) = (dir.path().join("gavel.toml"), dir.path().join("store"));
        let toml = format!(
            "default_judge = \"mock\"\n\n[judges.mock]\nbackend = \"openai\"\nbase_url = \"{}\"\n\
             model = \"mock-judge-1\"\napi_key_env = \"GAVEL_TEST_MOCK_KEY\"\nmax_retries = 1\n\
             max_backoff_s = 0.05\ntimeout_s = 5\n",
            mock.base_url()
        );
        std::fs::write(&cfg, toml).unwrap();
        Setup { dir, cfg, store }
    }

    /// Writes a file into the temp dir; returns its path as a string.
    fn write(&self, name: &str, text: &str) -> String {
        let p = self.dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p.display().to_string()
    }

    /// `gavel SUB... --config CFG --store STORE`.
    fn cmd(&self, sub: &[&str]) -> Command {
        let mut c = gavel(self.dir.path());
        c.args(sub)
            .args([OsStr::new("--config"), self.cfg.as_os_str()]);
        c.args([OsStr::new("--store"), self.store.as_os_str()]);
        c
    }

    /// `gavel cache --config CFG --store STORE ACTION` (the flags belong to `cache`: clap refuses
    /// `gavel cache stats --config CFG`).
    fn cache(&self, action: &str) -> Command {
        let mut c = self.cmd(&["cache"]);
        c.arg(action);
        c
    }
}

/// The binary with a clean environment, run in `dir`.
fn gavel(dir: &Path) -> Command {
    let mut c = Command::new(BIN);
    for k in LEAKY_ENV.split_whitespace() {
        c.env_remove(k);
    }
    c.current_dir(dir).env("GAVEL_TEST_MOCK_KEY", MOCK_KEY);
    c.stdin(Stdio::null()).kill_on_drop(true);
    c
}

struct Out {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Out {
    /// Asserts exit 0 and parses every stdout line as JSON.
    fn ok_json(&self) -> Vec<Value> {
        assert_eq!(self.code, Some(0), "stderr: {}", self.stderr);
        let parse = |l: &str| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"));
        self.stdout.lines().map(parse).collect()
    }
}

/// Runs a command to completion (at most 60 s).
async fn run(mut c: Command) -> Out {
    let out = timeout(secs(60), c.output()).await.expect("ran over 60 s");
    let out = out.unwrap();
    let text = |b| String::from_utf8(b).unwrap();
    let (stdout, stderr) = (text(out.stdout), text(out.stderr));
    Out {
        code: out.status.code(),
        stdout,
        stderr,
    }
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn rewards(v: &Value) -> Vec<f64> {
    serde_json::from_value(v["rewards"].clone()).unwrap()
}

fn assert_starts(line: &str, prefix: &str) {
    assert!(line.starts_with(prefix), "{line:?} !~ {prefix:?}…");
}

/// `field` of every element of the array `v`.
fn each<'a>(v: &'a Value, field: &str) -> Vec<&'a Value> {
    v.as_array().unwrap().iter().map(|x| &x[field]).collect()
}

fn has(v: &Value, needle: &str) -> bool {
    v.as_str().is_some_and(|t| t.contains(needle))
}

/// `gavel serve` running as a child process.
struct Daemon {
    child: Child,
    url: String,
    stderr: Arc<Mutex<String>>,
}

impl Daemon {
    /// Spawns `c --addr 127.0.0.1:0` and waits (at most 30 s) for its listening line.
    async fn spawn(mut c: Command) -> Daemon {
        c.args(["--addr", "127.0.0.1:0"]).stdout(Stdio::piped());
        c.stderr(Stdio::piped());
        let mut child = c.spawn().unwrap();
        let stderr = Arc::new(Mutex::new(String::new()));
        let (mut err, log) = (child.stderr.take().unwrap(), stderr.clone());
        tokio::spawn(async move {
            let mut buf = String::new();
            let _ = err.read_to_string(&mut buf).await;
            log.lock().unwrap().push_str(&buf);
        });
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let listening = async {
            while let Some(l) = lines.next_line().await.unwrap() {
                if let Some(u) = l.strip_prefix("gavel listening on ") {
                    return Some(u.to_string());
                }
            }
            None
        };
        let url = timeout(secs(30), listening)
            .await
            .expect("not listening in 30 s");
        let Some(url) = url else {
            let status = timeout(secs(10), child.wait()).await.unwrap().unwrap();
            tokio::time::sleep(Duration::from_millis(100)).await; // let the stderr reader finish
            let err = stderr.lock().unwrap();
            panic!("gavel serve exited ({status}) before listening: {err}");
        };
        assert_starts(&url, "http://127.0.0.1:");
        // Keep draining stdout so a later write never meets a closed pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Daemon { child, url, stderr }
    }

    fn sigterm(&self) {
        let pid = self.child.id().expect("daemon still running").to_string();
        let kill = std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status();
        assert!(kill.unwrap().success(), "kill -TERM {pid} failed");
    }

    /// Waits at most 10 s for the daemon to exit.
    async fn wait(mut self) -> ExitStatus {
        let Ok(st) = timeout(secs(10), self.child.wait()).await else {
            let err = self.stderr.lock().unwrap();
            panic!("still running 10 s on; stderr: {err}");
        };
        st.unwrap()
    }

    /// SIGTERM, then asserts a clean exit within 10 s.
    async fn stop(self) {
        self.sigterm();
        let stderr = self.stderr.clone();
        let st = self.wait().await;
        tokio::time::sleep(Duration::from_millis(50)).await; // let the stderr reader finish
        let err = stderr.lock().unwrap();
        assert!(st.success(), "daemon exited with {st}; stderr: {err}");
    }
}

/// Sends a request (at most 30 s) and returns status and JSON body.
async fn send(req: reqwest::RequestBuilder) -> (u16, Value) {
    let resp = req.timeout(secs(30)).send().await.unwrap();
    (resp.status().as_u16(), resp.json().await.unwrap())
}

async fn post(url: &str, body: &Value) -> (u16, Value) {
    let url = format!("{url}/v1/score_group");
    send(reqwest::Client::new().post(url).json(body)).await
}

#[tokio::test(flavor = "multi_thread")]
async fn score_json_prints_rewards_and_second_run_hits_the_disk_cache() {
    let mock = MockJudge::start().await;
    let s = Setup::new(&mock);
    let file = s.write("group.json", &marked_group(&[0.9, 0.1, 0.6]).to_string());

    let lines = run(s.cmd(&["score", &file])).await.ok_json();
    assert_eq!(lines.len(), 1, "{lines:?}");
    let r = &lines[0];
    assert_eq!(rewards(r), vec![0.9, 0.1, 0.6]);
    assert_eq!(each(&r["scores"], "trajectory_id"), ["1", "2", "3"]);
    assert_eq!(r["usage"]["judge_calls"], 1);
    assert_eq!(r["usage"]["cache_hits"], 0);
    assert!(r.get("line").is_none(), "no line in a .json result: {r}");
    assert_eq!(mock.calls(), 1);
    assert_eq!(mock.requests()[0]["model"], "mock-judge-1");
    assert_eq!(mock.auth_headers()[0], Some(format!("Bearer {MOCK_KEY}")));

    let lines = run(s.cmd(&["score", &file])).await.ok_json();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(rewards(&lines[0]), vec![0.9, 0.1, 0.6]);
    assert_eq!(lines[0]["usage"]["cache_hits"], 1);
    assert_eq!(lines[0]["usage"]["judge_calls"], 0);
    assert_eq!(mock.calls(), 1, "the verdict came from the store");
}

#[tokio::test(flavor = "multi_thread")]
async fn score_jsonl_prints_one_line_per_group() {
    let mock = MockJudge::start().await;
    let s = Setup::new(&mock);
    let groups = [vec![0.2, 0.7], vec![1.0, 0.0, 0.3], vec![0.4]];
    let line = |g| format!("{}\n", marked_group(g));
    let text: String = groups.iter().map(|g| line(g)).collect();
    let file = s.write("groups.jsonl", &text);

    let lines = run(s.cmd(&["score", &file])).await.ok_json();
    assert_eq!(lines.len(), 3, "{lines:?}");
    for (i, (line, g)) in lines.iter().zip(&groups).enumerate() {
        assert_eq!(line["line"], i + 1);
        assert_eq!(&rewards(line), g);
    }
    assert_eq!(mock.calls(), 3);
}

/// The README's batch example: `examples/groups.jsonl` holds the example groups, one a line,
/// each scored (and rendered) exactly as its own file is.
#[tokio::test(flavor = "multi_thread")]
async fn the_shipped_batch_file_scores_like_its_groups() {
    let mock = MockJudge::start().await;
    let s = Setup::new(&mock);
    let batch = format!("{EXAMPLES}/../groups.jsonl");
    let render = |file: &str| {
        let mut c = gavel(s.dir.path());
        c.args(["render", file, "--format", "json"]);
        run(c)
    };
    let lines = render(&batch).await.ok_json();
    assert_eq!(lines.len(), 3, "{lines:?}");
    for (i, name) in ["rag_answer", "retrieval_qa", "agent_tool_use"]
        .iter()
        .enumerate()
    {
        let own = render(&format!("{EXAMPLES}/{name}.json")).await.ok_json();
        assert_eq!(lines[i]["line"], i + 1);
        assert_eq!(lines[i]["messages"], own[0]["messages"], "{name}");
        assert_eq!(lines[i]["cache_key"], own[0]["cache_key"], "{name}");
    }
    assert_eq!(mock.calls(), 0, "render calls no judge");
    let scored = run(s.cmd(&["score", &batch])).await.ok_json();
    assert_eq!(scored.len(), 3, "{scored:?}");
    assert!(scored
        .iter()
        .all(|l| l["rewards"].as_array().is_some_and(|r| r.len() >= 2)));
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_files_are_reported_by_file_and_line_and_nothing_is_judged() {
    let mock = MockJudge::start().await;
    let s = Setup::new(&mock);
    let mut robot = marked_group(&[0.5, 0.5]);
    robot["trajectories"][0]["messages"][1]["role"] = json!("robot");
    let good = marked_group(&[0.1, 0.2]);
    let text = format!("{good}\n{{\"trajectories\": [oops\n{robot}\n");
    let f = s.write("bad.jsonl", &text);

    let out = run(s.cmd(&["score", &f])).await;
    assert_eq!(out.code, Some(2), "stderr: {}", out.stderr);
    assert_eq!(out.stdout, "");
    let err: Vec<&str> = out.stderr.lines().collect();
    assert_eq!(err.len(), 2, "{}", out.stderr);
    assert_starts(err[0], &format!("{f}:2: not valid JSON"));
    let role = "trajectories[0].messages[1].role: unknown role \"robot\"";
    assert_starts(err[1], &format!("{f}:3: {role}"));
    assert_eq!(mock.calls(), 0, "nothing is judged when the file is bad");

    let missing = s.dir.path().join("no-such-group.json");
    let missing = missing.display().to_string();
    let out = run(s.cmd(&["score", &missing])).await;
    assert_eq!(out.code, Some(2), "stderr: {}", out.stderr);
    assert_eq!(out.stdout, "");
    let err: Vec<&str> = out.stderr.lines().collect();
    assert_eq!(err.len(), 1, "{}", out.stderr);
    assert_starts(err[0], &format!("{missing}: cannot read"));

    let b = s.write("broken.json", "{\n \"trajectories\": [\n  oops\n ]\n}\n");
    let out = run(s.cmd(&["score", &b])).await;
    assert_eq!(out.code, Some(2), "stderr: {}", out.stderr);
    let err: Vec<&str> = out.stderr.lines().collect();
    assert_eq!(err.len(), 1, "{}", out.stderr);
    assert_starts(err[0], &format!("{b}:3: not valid JSON"));
    assert_eq!(mock.calls(), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn render_needs_no_judge_and_reports_dedup() {
    let dir = tempfile::tempdir().unwrap();
    let render = |name: &str, format: &str| {
        let mut c = gavel(dir.path());
        let file = format!("{EXAMPLES}/{name}.json");
        c.env_remove("GAVEL_TEST_MOCK_KEY");
        c.args(["render", &file, "--format", format]);
        run(c)
    };

    let lines = render("agent_tool_use", "json").await.ok_json();
    assert_eq!(lines.len(), 1, "{lines:?}");
    let r = &lines[0];
    assert_eq!(each(&r["messages"], "role"), ["system", "user"]);
    let tokens = r["prompt_tokens"].as_u64().unwrap();
    let without = r["prompt_tokens_without_dedup"].as_u64().unwrap();
    assert!(tokens > 0 && tokens < without, "{tokens} vs {without}");
    assert_eq!(r["tokens_saved_by_dedup"], without - tokens);
    assert!(r["shared_blocks"].as_u64().unwrap() >= 1, "{r}");
    assert_eq!(r["distinct_trajectories"], 4);
    assert_eq!(r["trajectory_ids"], json!(["1", "2", "3", "4"]));
    assert!(!dir.path().join("gavel-store").exists(), "made a store");

    let out = render("agent_tool_use", "text").await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    for id in 1..=4 {
        let tag = format!("<trajectory id=\"{id}\">");
        assert!(out.stdout.contains(&tag), "{tag} missing:\n{}", out.stdout);
    }
    let saved = without - tokens;
    let want = format!("--- tokens: {tokens} (without dedup {without}, saved {saved}");
    let n = out.stdout.lines().filter(|l| l.starts_with(&want)).count();
    assert_eq!(n, 1, "want one {want:?} line in:\n{}", out.stdout);
    // Counts read as English: the plural only for more than one.
    assert_eq!(r["shared_blocks"], 1, "{r}");
    let counts = "· shared prefix 2 messages · 1 shared block · 4 distinct trajectories";
    assert!(
        out.stdout.contains(counts),
        "{counts:?} not in:\n{}",
        out.stdout
    );
    let out = render("all_identical", "text").await;
    assert!(
        out.stdout
            .contains("· 0 shared blocks · 1 distinct trajectory\n"),
        "{}",
        out.stdout
    );

    let lines = render("all_identical", "json").await.ok_json();
    assert_eq!(lines[0]["distinct_trajectories"], 1);

    for name in ["agent_tool_use", "all_identical", "rag_answer"] {
        let lines = render(name, "json").await.ok_json();
        assert_eq!(lines.len(), 1, "{name}");
        assert_eq!(lines[0]["messages"].as_array().unwrap().len(), 2, "{name}");
        assert_eq!(lines[0]["trajectory_ids"][0], "1", "{name}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn cache_stats_and_clear() {
    let mock = MockJudge::start().await;
    let s = Setup::new(&mock);
    let file = s.write("group.json", &marked_group(&[0.3, 0.8]).to_string());
    let stats = || async { run(s.cache("stats")).await.ok_json().remove(0) };

    run(s.cmd(&["score", &file])).await.ok_json();
    assert_eq!(mock.calls(), 1);
    let st = stats().await;
    assert_eq!(st["verdicts"], 1, "{st}");
    assert_eq!(st["backend"], "sled", "{st}");

    // No terminal to confirm on: `--yes` (tests/cli_ux covers the refusal without it).
    let mut clear = s.cache("clear");
    clear.arg("--yes");
    let out = run(clear).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    assert!(out.stdout.contains("cleared 1"), "{}", out.stdout);
    assert_eq!(stats().await["verdicts"], 0);

    let lines = run(s.cmd(&["score", &file])).await.ok_json();
    assert_eq!(rewards(&lines[0]), vec![0.3, 0.8]);
    assert_eq!(lines[0]["usage"]["judge_calls"], 1);
    assert_eq!(lines[0]["usage"]["cache_hits"], 0);
    assert_eq!(mock.calls(), 2, "after clear the judge is asked again");
}

#[tokio::test(flavor = "multi_thread")]
async fn daemon_keeps_verdicts_across_restart_and_stops_on_sigterm() {
    let mock = MockJudge::start().await;
    let s = Setup::new(&mock);
    let group = marked_group(&[0.25, 0.75, 0.5]);

    let d = Daemon::spawn(s.cmd(&["serve"])).await;
    let (status, body) = post(&d.url, &group).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(rewards(&body), vec![0.25, 0.75, 0.5]);
    assert_eq!(body["usage"]["judge_calls"], 1);
    assert_eq!(mock.calls(), 1);
    d.stop().await;

    let d = Daemon::spawn(s.cmd(&["serve"])).await;
    let (status, body) = post(&d.url, &group).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(rewards(&body), vec![0.25, 0.75, 0.5]);
    assert_eq!(body["usage"]["cache_hits"], 1);
    assert_eq!(body["usage"]["judge_calls"], 0);
    assert_eq!(mock.calls(), 1, "the verdict came from the store");
    d.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn daemon_without_a_judge_starts_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = gavel(dir.path());
    c.arg("serve").arg("--store").arg(dir.path().join("store"));
    let d = Daemon::spawn(c).await;

    let (status, h) = send(reqwest::Client::new().get(format!("{}/healthz", d.url))).await;
    assert_eq!(status, 200, "{h}");
    assert_eq!(h["judge_configured"], false, "{h}");
    let judges = h["judges"].as_array().unwrap();
    assert_eq!(judges.len(), 1, "{h}");
    assert_eq!(judges[0]["name"], "default", "{h}");
    assert_eq!(judges[0]["configured"], false, "{h}");
    assert!(has(&judges[0]["problem"], "OPENAI_API_KEY"), "{h}");

    let (status, body) = post(&d.url, &marked_group(&[0.5, 0.6])).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"]["type"], "no_judge_configured", "{body}");
    assert!(has(&body["error"]["message"], "OPENAI_API_KEY"), "{body}");
    d.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_drains_the_request_in_flight() {
    let mock = MockJudge::start().await;
    mock.push(Behaviour::Hang(Duration::from_millis(1500)));
    let s = Setup::new(&mock);
    let d = Daemon::spawn(s.cmd(&["serve"])).await;

    let url = d.url.clone();
    let request = tokio::spawn(async move { post(&url, &marked_group(&[0.6, 0.2])).await });
    // SIGTERM once the judge holds the request, and at least 300 ms in.
    let started = Instant::now();
    let judged = async {
        while mock.calls() == 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    timeout(secs(10), judged)
        .await
        .expect("the daemon never called the judge");
    tokio::time::sleep(Duration::from_millis(300).saturating_sub(started.elapsed())).await;
    d.sigterm();

    let (status, body) = timeout(secs(10), request)
        .await
        .expect("request hung")
        .unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(rewards(&body), vec![0.6, 0.2]);
    let st = d.wait().await;
    assert!(st.success(), "{st}");
    assert_eq!(mock.calls(), 1);

    // The drained verdict was flushed to the store before exit.
    assert_eq!(run(s.cache("stats")).await.ok_json()[0]["verdicts"], 1);
}

/// The SIGTERM handler must exist before the listening line is printed: a supervisor that stops
/// the daemon as soon as it is up must still get a graceful exit (status 0, store flushed).
/// Installing the handler lazily failed most of these 20 tries.
#[tokio::test(flavor = "multi_thread")]
async fn sigterm_right_after_the_listening_line_is_still_graceful() {
    let mock = MockJudge::start().await;
    let s = Setup::new(&mock);
    for _ in 0..20 {
        Daemon::spawn(s.cmd(&["serve"])).await.stop().await;
    }
}
