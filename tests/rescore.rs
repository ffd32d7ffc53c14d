//! `gavel rescore` end to end: input forms, rejects, resume after kill -9, retry of rejects,
//! shards. The binary runs as a child process against the in-process mock judge.

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
        let dir = tempfile::tempdir().unwrap();
        let toml = format!(
            "default_judge = \"mock\"\n[judges.mock]\nbackend = \"openai\"\nbase_url = \"{}\"\nmodel = \"m\"\n\
             api_key_env = \"GAVEL_TEST_MOCK_KEY\"\nmax_retries = 1\nmax_backoff_s = 0.05\ntimeout_s = 5\n",
            mock.base_url()
        );
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
    // Kill -9 once a few groups are out.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let n = std::fs::read_to_string(job.path("out.jsonl")).map_or(0, |t| t.lines().count());
        if n >= 5 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "no progress");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    child.start_kill().unwrap();
    child.wait().await.unwrap();
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
    let (code, _) = job.run(&input, &["--progress", "none"]).await;
    assert_eq!(code, Some(1));
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
