//! `gavel rescore` end to end: input forms, rejects, resume after kill -9, retry of rejects,
//! shards. The binary runs as a child process against the in-process mock judge.
//!
//! The crash tests arm the binary's test-only hook `GAVEL_TEST_CRASH_AT=<phase>[:<n>]`
//! (`src/rescore/crash.rs`), which aborts the process at a named step of the ledger, so every
//! step between two durable writes is crashed at deterministically, not only where a kill -9
//! happens to land.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use common::{marked_group, simple_traj, Behaviour, MockJudge, MOCK_KEY};
use serde_json::{json, Value};
use tokio::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_gavel");

struct Job {
    dir: tempfile::TempDir,
}

impl Job {
    fn new(mock: &MockJudge) -> Job {
        Job::with_judges(&[("mock", mock)])
    }

    /// A job whose config names each mock as a judge; the first is the default.
    fn with_judges(judges: &[(&str, &MockJudge)]) -> Job {
        let dir = tempfile::tempdir().unwrap();
        let mut toml = format!("default_judge = \"{}\"\n", judges[0].0);
        for (name, mock) in judges {
            toml.push_str(&format!(
                "[judges.{name}]\nbackend = \"openai\"\nbase_url = \"{}\"\nmodel = \"m\"\n\
                 api_key_env = \"GAVEL_TEST_MOCK_KEY\"\nmax_retries = 1\nmax_backoff_s = 0.05\ntimeout_s = 5\n",
                mock.base_url()
            ));
        }
        std::fs::write(dir.path().join("gavel.toml"), toml).unwrap();
        Job { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn write_lines(&self, name: &str, lines: &[Value]) -> PathBuf {
        let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
        std::fs::write(self.path(name), text).unwrap();
        self.path(name)
    }

    fn cmd(&self, input: &Path, extra: &[&str]) -> Command {
        self.cmd_to(input, &self.path("out.jsonl"), extra)
    }

    fn cmd_to(&self, input: &Path, output: &Path, extra: &[&str]) -> Command {
        let mut c = Command::new(BIN);
        for k in [
            "GAVEL_CONFIG",
            "GAVEL_STORE",
            "GAVEL_STORE_URL",
            "OPENAI_API_KEY",
            "GAVEL_RUBRIC",
            "GAVEL_JUDGE",
            "RUST_LOG",
            "GAVEL_TEST_CRASH_AT",
        ] {
            c.env_remove(k);
        }
        c.env("GAVEL_TEST_MOCK_KEY", MOCK_KEY)
            .arg("rescore")
            .arg(input)
            .arg("-o")
            .arg(output)
            .arg("--config")
            .arg(self.path("gavel.toml"))
            .arg("--store")
            .arg(self.path("store"))
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        c
    }

    async fn run(&self, input: &Path, extra: &[&str]) -> (Option<i32>, String) {
        let out = tokio::time::timeout(Duration::from_secs(60), self.cmd(input, extra).output())
            .await
            .unwrap()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// Kills the running job (SIGKILL) once its output has `lines` lines.
    async fn kill_once_the_output_has(&self, child: &mut tokio::process::Child, lines: usize) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let n =
                std::fs::read_to_string(self.path("out.jsonl")).map_or(0, |t| t.lines().count());
            if n >= lines {
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "no progress");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        child.start_kill().unwrap();
        child.wait().await.unwrap();
    }

    /// Runs with the crash hook armed at `phase` and asserts that the process aborted.
    async fn run_crashing(&self, input: &Path, extra: &[&str], phase: &str) {
        let mut c = self.cmd(input, extra);
        c.env("GAVEL_TEST_CRASH_AT", phase);
        let out = tokio::time::timeout(Duration::from_secs(60), c.output())
            .await
            .unwrap()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        #[cfg(unix)]
        {
            use std::os::unix::process::ExitStatusExt;
            // 6 = SIGABRT: the hook fired, rather than the run ending or failing some other way.
            assert_eq!(
                out.status.signal(),
                Some(6),
                "crash at {phase}: {:?}: {stderr}",
                out.status
            );
        }
        #[cfg(not(unix))]
        assert!(!out.status.success(), "crash at {phase}: {stderr}");
    }

    /// Asserts both files hold only whole JSON lines (no NULs, no torn line) and no temporary
    /// file is left next to them.
    fn assert_clean(&self, when: &str) {
        for name in ["out.jsonl", "out.jsonl.rejects.jsonl"] {
            let bytes = std::fs::read(self.path(name)).unwrap_or_default();
            assert!(!bytes.contains(&0), "{when}: NUL bytes in {name}");
            assert!(
                bytes.is_empty() || bytes.ends_with(b"\n"),
                "{when}: {name} ends in a torn line"
            );
            for l in String::from_utf8(bytes).unwrap().lines() {
                assert!(
                    serde_json::from_str::<Value>(l).is_ok(),
                    "{when}: {name} has a line that is not JSON: {l:?}"
                );
            }
        }
        for e in std::fs::read_dir(self.dir.path()).unwrap() {
            let name = e.unwrap().file_name().to_string_lossy().into_owned();
            assert!(!name.ends_with(".tmp"), "{when}: {name} left behind");
        }
    }

    fn lines(&self, name: &str) -> Vec<Value> {
        std::fs::read_to_string(self.path(name))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}")))
            .collect()
    }
}

/// `n` groups, each with a distinct `group_id` and markers.
fn groups(n: usize) -> Vec<Value> {
    (0..n)
        .map(|i| {
            let mut g = marked_group(&[0.1 + (i % 9) as f64 / 10.0, 0.5]);
            g["group_id"] = json!(format!("g{i}"));
            g
        })
        .collect()
}

fn ids(lines: &[Value]) -> Vec<String> {
    lines
        .iter()
        .map(|l| l["group_id"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn every_input_form_is_scored_and_bad_lines_go_to_rejects() {
    let mock = MockJudge::start().await;
    let job = Job::new(&mock);
    let mut request = marked_group(&[0.9, 0.3]);
    request["labels"] = json!({"split": "train"});
    let art = json!({"trajectories": [
        {"messages_and_choices": [{"role": "user", "content": "q"},
            {"finish_reason": "stop", "index": 0, "logprobs": null, "message": {"role": "assistant", "content": "SCORE=0.7 a"}}],
         "reward": 1.0, "metrics": {}, "tools": null, "logs": []},
        {"messages_and_choices": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "SCORE=0.2 b"}],
         "reward": 0.0, "metrics": {}}],
        "exceptions": [], "group_id": "art-1"});
    let per_line = |gid: &str, answer: &str| {
        let mut t = simple_traj(answer);
        t["group_id"] = json!(gid);
        t["label"] = json!(answer.len());
        t
    };
    let input = job.write_lines(
        "in.jsonl",
        &[
            request,
            art,
            per_line("p", "SCORE=0.8 first"),
            json!("not an object"),
            per_line("p", "SCORE=0.4 second"),
            json!({"trajectories": [{"messages": [{"role": "robot", "content": "x"}]}]}),
        ],
    );
    let (code, stderr) = job.run(&input, &["--progress", "none"]).await;
    assert_eq!(code, Some(1), "rejects make the exit code 1: {stderr}");
    let out = job.lines("out.jsonl");
    assert_eq!(out.len(), 3, "{out:?}");
    let by = |k: &str, v: Value| {
        out.iter()
            .find(|l| l[k] == v)
            .unwrap_or_else(|| panic!("no {k}={v}"))
            .clone()
    };
    let first = by("line", json!(1));
    assert_eq!(first["rewards"], json!([0.9, 0.3]));
    assert_eq!(first["input_meta"], json!({"labels": {"split": "train"}}));
    let art = by("group_id", json!("art-1"));
    assert_eq!(art["rewards"], json!([0.7, 0.2]));
    assert_eq!(art["scores"][0]["components"]["independent_reward"], 1.0);
    assert_eq!(art["input_meta"], json!({"exceptions": []}));
    let grouped = by("group_id", json!("p"));
    assert_eq!(grouped["rewards"], json!([0.8, 0.4]));
    assert_eq!(
        grouped["input_meta"]["trajectories"],
        json!([{"label": 15}, {"label": 16}])
    );
    assert!(grouped["advantages"].as_array().unwrap().len() == 2);
    let rejects = job.lines("out.jsonl.rejects.jsonl");
    assert_eq!(rejects.len(), 2);
    let lines: BTreeSet<u64> = rejects
        .iter()
        .map(|r| r["line"].as_u64().unwrap())
        .collect();
    assert_eq!(lines, BTreeSet::from([4, 6]));
    for r in &rejects {
        assert_eq!(r["error_type"], "invalid_input");
        assert!(r["input"].as_str().unwrap().ends_with("in.jsonl"));
    }
    assert!(rejects.iter().any(|r| r["reason"]
        .as_str()
        .unwrap()
        .contains("unknown role \"robot\"")));
    assert!(stderr.contains("\"rejects\":2"), "{stderr}");

    // A finished job is a no-op when run again.
    let calls = mock.calls();
    let (_, stderr) = job.run(&input, &["--progress", "none"]).await;
    assert_eq!(mock.calls(), calls);
    assert_eq!(job.lines("out.jsonl").len(), 3);
    assert!(stderr.contains("\"groups\":0"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_job_killed_mid_run_resumes_and_writes_every_group_exactly_once() {
    let mock = MockJudge::start().await;
    let job = Job::new(&mock);
    mock.set_fallback(Behaviour::Hang(Duration::from_millis(150)));
    let input = job.write_lines("in.jsonl", &groups(24));
    let mut child = job
        .cmd(&input, &["--concurrency", "2", "--progress", "none"])
        .spawn()
        .unwrap();
    job.kill_once_the_output_has(&mut child, 5).await;
    let partial = job.lines("out.jsonl").len();
    assert!(partial < 24, "killed before the end ({partial})");

    let (code, stderr) = job
        .run(&input, &["--concurrency", "2", "--progress", "none"])
        .await;
    assert_eq!(code, Some(0), "{stderr}");
    let out = job.lines("out.jsonl");
    let got = ids(&out);
    let unique: BTreeSet<&String> = got.iter().collect();
    assert_eq!(got.len(), 24, "every group exactly once: {got:?}");
    assert_eq!(unique.len(), 24);
    for l in &out {
        let i: usize = l["group_id"].as_str().unwrap()[1..].parse().unwrap();
        assert_eq!(l["rewards"][0], json!(0.1 + (i % 9) as f64 / 10.0));
    }
    // At most the groups in flight at the kill were judged twice.
    assert!(mock.calls() <= 24 + 2, "{} judge calls", mock.calls());
}

#[tokio::test(flavor = "multi_thread")]
async fn judge_failures_are_rejected_and_can_be_retried() {
    let mock = MockJudge::start().await;
    let job = Job::new(&mock);
    let input = job.write_lines("in.jsonl", &groups(4));
    mock.set_fallback(Behaviour::Status(500, None, "down".into()));
    let (code, stderr) = job.run(&input, &["--progress", "none"]).await;
    assert_eq!(code, Some(1));
    // Every attempt (1 + max_retries 1, for 4 groups) is in the summary, apart from the calls
    // that gave verdicts.
    assert!(stderr.contains("\"failed_calls\":8"), "{stderr}");
    assert!(stderr.contains("\"judge_calls\":0"), "{stderr}");
    assert!(job.lines("out.jsonl").is_empty());
    let rejects = job.lines("out.jsonl.rejects.jsonl");
    assert_eq!(rejects.len(), 4);
    assert!(rejects
        .iter()
        .all(|r| r["error_type"] == "judge_unavailable"));

    mock.set_fallback(Behaviour::Score);
    let (code, stderr) = job
        .run(&input, &["--retry-rejects", "--progress", "none"])
        .await;
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        ids(&job.lines("out.jsonl"))
            .into_iter()
            .collect::<BTreeSet<_>>()
            .len(),
        4
    );
    assert!(job.lines("out.jsonl.rejects.jsonl").is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn shards_split_the_input_and_concatenate_cleanly() {
    let mock = MockJudge::start().await;
    let job = Job::new(&mock);
    let input = job.write_lines("in.jsonl", &groups(20));
    let mut all = Vec::new();
    for shard in ["0/3", "1/3", "2/3"] {
        let out = job.path(&format!("out-{}.jsonl", &shard[..1]));
        let mut c = job.cmd_to(&input, &out, &["--shard", shard, "--progress", "none"]);
        let o = tokio::time::timeout(Duration::from_secs(60), c.output())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            o.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
        let lines = job.lines(out.file_name().unwrap().to_str().unwrap());
        assert!(
            !lines.is_empty() && lines.len() < 20,
            "shard {shard}: {}",
            lines.len()
        );
        all.extend(ids(&lines));
    }
    all.sort();
    let mut want: Vec<String> = (0..20).map(|i| format!("g{i}")).collect();
    want.sort();
    assert_eq!(all, want);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_output_file_of_another_job_is_not_overwritten() {
    let mock = MockJudge::start().await;
    let job = Job::new(&mock);
    let input = job.write_lines("in.jsonl", &groups(2));
    std::fs::write(job.path("out.jsonl"), "precious\n").unwrap();
    let (code, stderr) = job.run(&input, &["--progress", "none"]).await;
    assert_ne!(code, Some(0));
    assert!(
        stderr.contains("exists and is not the output of this job"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_to_string(job.path("out.jsonl")).unwrap(),
        "precious\n"
    );
}

/// `-o out/x.jsonl` where `out/` does not exist yet: made, as `mkdir -p` would.
#[tokio::test(flavor = "multi_thread")]
async fn an_output_in_a_folder_not_made_yet_is_written() {
    let mock = MockJudge::start().await;
    let job = Job::new(&mock);
    let input = job.write_lines("in.jsonl", &groups(2));
    let output = job.path("runs/today/out.jsonl");
    let out = tokio::time::timeout(
        Duration::from_secs(60),
        job.cmd_to(&input, &output, &["--progress", "none"])
            .output(),
    )
    .await
    .unwrap()
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let text = std::fs::read_to_string(&output).unwrap();
    assert_eq!(text.lines().count(), 2, "{text}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rejects_file_of_another_job_is_not_overwritten() {
    let mock = MockJudge::start().await;
    let job = Job::new(&mock);
    let input = job.write_lines("in.jsonl", &groups(2));
    std::fs::write(job.path("out.jsonl.rejects.jsonl"), "precious\n").unwrap();
    let (code, stderr) = job.run(&input, &["--progress", "none"]).await;
    assert_ne!(code, Some(0));
    assert!(
        stderr.contains("out.jsonl.rejects.jsonl: exists and is not the rejects file of this job"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_to_string(job.path("out.jsonl.rejects.jsonl")).unwrap(),
        "precious\n"
    );
    assert!(!job.path("out.jsonl").exists(), "nothing was written");
    assert_eq!(mock.calls(), 0, "refused before any judge call");
}

/// The README's form: input and output relative to the working directory. The second run is the
/// same job (nothing left to do), not "another job's output".
#[tokio::test(flavor = "multi_thread")]
async fn a_job_with_a_relative_output_resumes_as_itself() {
    let mock = MockJudge::start().await;
    let job = Job::new(&mock);
    job.write_lines("in.jsonl", &groups(3));
    let run = || async {
        let mut c = job.cmd_to(Path::new("in.jsonl"), Path::new("rescored.jsonl"), &[]);
        c.current_dir(job.dir.path()).args(["--progress", "none"]);
        let out = tokio::time::timeout(Duration::from_secs(60), c.output())
            .await
            .unwrap()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, stderr) = run().await;
    assert_eq!(code, Some(0), "{stderr}");
    let calls = mock.calls();
    let first = std::fs::read_to_string(job.path("rescored.jsonl")).unwrap();
    assert_eq!(first.lines().count(), 3);
    let (code, stderr) = run().await;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stderr.contains("\"skipped_already_done\":3"), "{stderr}");
    assert_eq!(mock.calls(), calls, "nothing judged again");
    assert_eq!(
        std::fs::read_to_string(job.path("rescored.jsonl")).unwrap(),
        first
    );
}

/// `-` reads the groups from standard input; the job is named by what was read, so the same
/// lines piped again resume it, and other lines are refused as another job's output.
#[tokio::test(flavor = "multi_thread")]
async fn groups_on_standard_input_resume_by_their_content() {
    use tokio::io::AsyncWriteExt;
    let mock = MockJudge::start().await;
    let job = Job::new(&mock);
    let piped = |lines: Vec<Value>| {
        let mut c = job.cmd(Path::new("-"), &["--progress", "none"]);
        c.stdin(Stdio::piped());
        let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
        async move {
            let mut child = c.spawn().unwrap();
            let mut stdin = child.stdin.take().unwrap();
            stdin.write_all(text.as_bytes()).await.unwrap();
            drop(stdin);
            let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
                .await
                .unwrap()
                .unwrap();
            (
                out.status.code(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            )
        }
    };
    let (code, stderr) = piped(groups(2)).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(job.lines("out.jsonl").len(), 2);
    let calls = mock.calls();
    let (code, stderr) = piped(groups(2)).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stderr.contains("\"skipped_already_done\":2"), "{stderr}");
    assert_eq!(mock.calls(), calls);
    let (code, stderr) = piped(groups(3)).await;
    assert_ne!(code, Some(0));
    assert!(
        stderr.contains("exists and is not the output of this job"),
        "{stderr}"
    );
    assert_eq!(job.lines("out.jsonl").len(), 2, "left as it was");
}

#[tokio::test(flavor = "multi_thread")]
async fn log_filters_without_from_log_are_refused() {
    let mock = MockJudge::start().await;
    let job = Job::new(&mock);
    let input = job.write_lines("in.jsonl", &groups(1));
    let (code, stderr) = job.run(&input, &["--log-limit", "2"]).await;
    assert_eq!(code, Some(1));
    assert!(stderr.contains("there is no --from-log"), "{stderr}");
    assert!(!job.path("out.jsonl").exists(), "nothing was scored");
    assert_eq!(mock.calls(), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_shipped_example_runs_rescore_cleanly() {
    let mock = MockJudge::start().await;
    let job = Job::new(&mock);
    let input = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/runs.jsonl"));
    let (code, stderr) = job
        .run(&input, &["--rubric", "default", "--progress", "none"])
        .await;
    assert_eq!(code, Some(0), "{stderr}");
    let out = job.lines("out.jsonl");
    let mut got = ids(&out);
    got.sort();
    assert_eq!(got, vec!["step12-q3", "step12-q7", "step13-q1"]);
    let q3 = out.iter().find(|l| l["group_id"] == "step12-q3").unwrap();
    // The request's own verifier survives the rubric override.
    assert_eq!(q3["scores"][0]["components"]["answer_line"], 1.0);
    assert_eq!(q3["rubric"]["name"], "default");
    let q7 = out.iter().find(|l| l["group_id"] == "step12-q7").unwrap();
    assert_eq!(q7["input_meta"], json!({"labels": {"split": "train"}}));
    assert!(job.lines("out.jsonl.rejects.jsonl").is_empty());
}

/// What rejects-file lines name: the group id, or `line:N` for a line that is not a group.
fn idents(lines: &[Value]) -> Vec<String> {
    lines
        .iter()
        .map(|l| match l["group_id"].as_str() {
            Some(g) => g.to_string(),
            None => format!("line:{}", l["line"]),
        })
        .collect()
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

#[tokio::test(flavor = "multi_thread")]
async fn a_retry_killed_mid_run_resumes_and_writes_every_group_exactly_once() {
    let mock = MockJudge::start().await;
    let job = Job::new(&mock);
    let input = job.write_lines("in.jsonl", &groups(24));
    mock.set_fallback(Behaviour::Status(500, None, "down".into()));
    let (code, _) = job.run(&input, &["--progress", "none"]).await;
    assert_eq!(code, Some(1));
    assert_eq!(job.lines("out.jsonl.rejects.jsonl").len(), 24);
    let failed_calls = mock.calls();

    mock.set_fallback(Behaviour::Hang(Duration::from_millis(150)));
    let args = [
        "--retry-rejects",
        "--concurrency",
        "2",
        "--progress",
        "none",
    ];
    let mut child = job.cmd(&input, &args).spawn().unwrap();
    job.kill_once_the_output_has(&mut child, 5).await;
    assert!(job.lines("out.jsonl").len() < 24, "killed before the end");

    let (code, stderr) = job.run(&input, &args).await;
    assert_eq!(code, Some(0), "{stderr}");
    job.assert_clean("after the resumed retry");
    let out = job.lines("out.jsonl");
    let want: Vec<String> = sorted((0..24).map(|i| format!("g{i}")).collect());
    assert_eq!(sorted(ids(&out)), want, "every group exactly once");
    for l in &out {
        let i: usize = l["group_id"].as_str().unwrap()[1..].parse().unwrap();
        assert_eq!(l["rewards"][0], json!(0.1 + (i % 9) as f64 / 10.0));
    }
    assert!(job.lines("out.jsonl.rejects.jsonl").is_empty());
    // At most the groups in flight at the kill were judged twice.
    assert!(
        mock.calls() - failed_calls <= 24 + 2,
        "{} calls",
        mock.calls()
    );
}

/// Three judges over one input: `mock` always scores (groups `g*`), `flaky` fails until the test
/// heals it (`f*`), `dead` always fails (`d*`); line 4 is not a group. Everything runs with
/// `--concurrency 1`, so the order is the input's: the first run's rejects file is f0, d0, line 4,
/// f1, f2, d1, f3 — the line a retry keeps is not a prefix of it, so cutting the old file to the
/// new file's length cannot pass for the rewrite — and a retry writes f0 (output), d0 (rejects),
/// f1, f2, d1, f3.
struct RetryCase {
    flaky: MockJudge,
    job: Job,
    input: PathBuf,
    _mocks: [MockJudge; 2],
}

const CASE_GROUPS: [&str; 10] = ["g0", "f0", "d0", "g1", "f1", "g2", "f2", "d1", "g3", "f3"];

impl RetryCase {
    /// The case after its first run: `g*` in the output; `f*`, `d*` and line 4 rejected.
    async fn after_first_run() -> RetryCase {
        let (mock, flaky, dead) = (
            MockJudge::start().await,
            MockJudge::start().await,
            MockJudge::start().await,
        );
        let down = Behaviour::Status(500, None, "down".into());
        flaky.set_fallback(down.clone());
        dead.set_fallback(down);
        let job = Job::with_judges(&[("mock", &mock), ("flaky", &flaky), ("dead", &dead)]);
        let mut lines: Vec<Value> = CASE_GROUPS
            .iter()
            .enumerate()
            .map(|(i, name)| {
                // Distinct markers, so no group can reuse another's cached verdict.
                let mut g = marked_group(&[Self::reward(i), 0.5]);
                g["group_id"] = json!(name);
                match &name[..1] {
                    "f" => g["judge"] = json!("flaky"),
                    "d" => g["judge"] = json!("dead"),
                    _ => {}
                }
                g
            })
            .collect();
        lines.insert(3, json!("not an object"));
        let input = job.write_lines("in.jsonl", &lines);
        let (code, stderr) = job
            .run(&input, &["--concurrency", "1", "--progress", "none"])
            .await;
        assert_eq!(code, Some(1), "{stderr}");
        assert_eq!(
            sorted(ids(&job.lines("out.jsonl"))),
            ["g0", "g1", "g2", "g3"]
        );
        assert_eq!(
            idents(&job.lines("out.jsonl.rejects.jsonl")),
            ["f0", "d0", "line:4", "f1", "f2", "d1", "f3"],
            "in input order"
        );
        flaky.set_fallback(Behaviour::Score);
        RetryCase {
            flaky,
            job,
            input,
            _mocks: [mock, dead],
        }
    }

    fn reward(i: usize) -> f64 {
        (i + 1) as f64 / 20.0
    }

    async fn run(&self, extra: &[&str]) -> (Option<i32>, String) {
        let mut args = vec!["--concurrency", "1", "--progress", "none"];
        args.extend_from_slice(extra);
        let (code, stderr) = self.job.run(&self.input, &args).await;
        assert!(stderr.contains("rescore: {"), "the run finished: {stderr}");
        (code, stderr)
    }

    /// Every group and line 4 is in exactly one of the files, once, and both files are clean.
    fn assert_partition(&self, when: &str) {
        self.job.assert_clean(when);
        let mut all = ids(&self.job.lines("out.jsonl"));
        all.extend(idents(&self.job.lines("out.jsonl.rejects.jsonl")));
        let mut want: Vec<String> = CASE_GROUPS.iter().map(|s| s.to_string()).collect();
        want.push("line:4".into());
        assert_eq!(sorted(all), sorted(want), "{when}: each group once");
    }

    /// The end state of a retry: every group the judges can score is in the output once, with
    /// its reward; the rejects file holds exactly the dead judge's groups and line 4.
    fn assert_retried(&self, when: &str) {
        self.assert_partition(when);
        let out = self.job.lines("out.jsonl");
        assert_eq!(
            sorted(ids(&out)),
            ["f0", "f1", "f2", "f3", "g0", "g1", "g2", "g3"],
            "{when}"
        );
        for l in &out {
            let i = CASE_GROUPS
                .iter()
                .position(|g| *g == l["group_id"])
                .unwrap();
            assert_eq!(l["rewards"][0], json!(Self::reward(i)), "{when}");
        }
        let rejects = self.job.lines("out.jsonl.rejects.jsonl");
        assert_eq!(sorted(idents(&rejects)), ["d0", "d1", "line:4"], "{when}");
        for r in &rejects {
            let want = if r["group_id"].is_null() {
                "invalid_input"
            } else {
                "judge_unavailable"
            };
            assert_eq!(r["error_type"], want, "{when}: {r}");
        }
    }

    /// Crashes a `--retry-rejects` run at `phase` and resumes it twice over from the same
    /// start: once by running the retry again straight away, once by a plain run first (which
    /// must leave a consistent partition whether or not the retry had committed) and the retry
    /// after it. Both must reach the retried end state, and a further retry must change nothing.
    async fn crash_retry_and_recover(phase: &str) {
        for plain_first in [false, true] {
            let when = |what: &str| {
                format!("{what} after a crash at {phase} (plain first: {plain_first})")
            };
            let case = RetryCase::after_first_run().await;
            let args = [
                "--retry-rejects",
                "--concurrency",
                "1",
                "--progress",
                "none",
            ];
            case.job.run_crashing(&case.input, &args, phase).await;
            if plain_first {
                case.run(&[]).await;
                case.assert_partition(&when("plain run"));
            }
            let (code, _) = case.run(&["--retry-rejects"]).await;
            assert_eq!(
                code,
                Some(1),
                "{}: the dead judge's groups stay rejected",
                when("retry")
            );
            case.assert_retried(&when("retry"));
            let calls = case.flaky.calls();
            case.run(&["--retry-rejects"]).await;
            case.assert_retried(&when("second retry"));
            assert_eq!(
                case.flaky.calls(),
                calls,
                "{}: nothing left for flaky",
                when("second retry")
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_retry_without_a_crash_reaches_the_retried_state() {
    let case = RetryCase::after_first_run().await;
    let (code, _) = case.run(&["--retry-rejects"]).await;
    assert_eq!(code, Some(1));
    case.assert_retried("retry");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_retry_crashed_while_writing_the_new_rejects_file_recovers() {
    RetryCase::crash_retry_and_recover("retry-temp-partial").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_retry_crashed_before_the_store_reopens_its_units_recovers() {
    RetryCase::crash_retry_and_recover("retry-temp-written").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_retry_crashed_between_the_store_reopen_and_the_rename_recovers() {
    RetryCase::crash_retry_and_recover("retry-reopened").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_retry_crashed_after_the_rename_recovers() {
    RetryCase::crash_retry_and_recover("retry-renamed").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_retry_crashed_before_an_output_line_is_checkpointed_recovers() {
    // The first retried unit is f0, scored into the output.
    RetryCase::crash_retry_and_recover("before-checkpoint:1").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_retry_crashed_before_a_rejects_line_is_checkpointed_recovers() {
    // The second is d0, rejected again.
    RetryCase::crash_retry_and_recover("before-checkpoint:2").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_retry_crashed_mid_line_recovers() {
    // Half of d0's rejects line, then half of f1's output line.
    RetryCase::crash_retry_and_recover("mid-line:2").await;
    RetryCase::crash_retry_and_recover("mid-line:3").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_retry_crashed_after_a_checkpoint_recovers() {
    RetryCase::crash_retry_and_recover("after-checkpoint:3").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_first_run_crashed_at_each_step_resumes_to_every_group_once() {
    // before-checkpoint:1 is the first line of a job that has never checkpointed a unit.
    for phase in [
        "before-checkpoint:1",
        "mid-line:1",
        "before-checkpoint:3",
        "mid-line:4",
        "after-checkpoint:2",
    ] {
        let mock = MockJudge::start().await;
        let job = Job::new(&mock);
        let input = job.write_lines("in.jsonl", &groups(6));
        let args = ["--concurrency", "1", "--progress", "none"];
        job.run_crashing(&input, &args, phase).await;
        let (code, stderr) = job.run(&input, &args).await;
        assert_eq!(code, Some(0), "after a crash at {phase}: {stderr}");
        job.assert_clean(phase);
        let want: Vec<String> = sorted((0..6).map(|i| format!("g{i}")).collect());
        assert_eq!(sorted(ids(&job.lines("out.jsonl"))), want, "{phase}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_file_cut_below_its_checkpoint_is_refused_not_padded() {
    let mock = MockJudge::start().await;
    let job = Job::new(&mock);
    let input = job.write_lines("in.jsonl", &[groups(1)[0].clone(), json!(7)]);
    let (code, _) = job.run(&input, &["--progress", "none"]).await;
    assert_eq!(code, Some(1));
    std::fs::remove_file(job.path("out.jsonl.rejects.jsonl")).unwrap();
    let (code, stderr) = job.run(&input, &["--progress", "none"]).await;
    assert_eq!(code, Some(1));
    assert!(stderr.contains("checkpoint counts"), "{stderr}");
    let rejects = std::fs::read(job.path("out.jsonl.rejects.jsonl")).unwrap_or_default();
    assert!(!rejects.contains(&0), "padded with NULs");
}
