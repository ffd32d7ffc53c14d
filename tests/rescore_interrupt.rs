//! `gavel rescore` stopped by Ctrl-C (SIGINT) or SIGTERM: it says how far it got and how to go
//! on, exits 128 + the signal (130, 143), and the same command resumes to every group once.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::process::Command;

use common::cli::{judge_toml, BIN};
use common::{marked_group, Behaviour, MockJudge, MOCK_KEY};

fn rescore(dir: &Path, input: &Path) -> Command {
    let mut c = Command::new(BIN);
    for k in [
        "GAVEL_CONFIG",
        "GAVEL_STORE",
        "GAVEL_STORE_URL",
        "GAVEL_RUBRIC",
        "GAVEL_JUDGE",
    ] {
        c.env_remove(k);
    }
    c.env("GAVEL_TEST_MOCK_KEY", MOCK_KEY)
        .env("RUST_LOG", "warn")
        .current_dir(dir)
        .arg("rescore")
        .arg(input)
        .args([
            "-o",
            "out.jsonl",
            "--config",
            "gavel.toml",
            "--store",
            "store",
        ])
        .args(["--concurrency", "2", "--progress", "none"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    c
}

fn out_lines(dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(dir.join("out.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Starts the job, sends `signal` once it has written 2 more lines, and returns its exit code
/// and stderr.
async fn stop_with(dir: &Path, input: &Path, signal: i32) -> (Option<i32>, String) {
    let before = out_lines(dir).len();
    let child = rescore(dir, input).spawn().unwrap();
    let pid = child.id().unwrap() as i32;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while out_lines(dir).len() < before + 2 {
        assert!(tokio::time::Instant::now() < deadline, "no progress");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // SAFETY: sends a signal to the child this test started (and still holds).
    assert_eq!(unsafe { libc::kill(pid, signal) }, 0);
    let out = tokio::time::timeout(Duration::from_secs(30), child.wait_with_output())
        .await
        .expect("stopped within 30 s")
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn setup(mock: &MockJudge) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let cfg = format!("default_judge = \"mock\"\n{}", judge_toml("mock", mock, 1));
    std::fs::write(dir.path().join("gavel.toml"), cfg).unwrap();
    let text: String = (0..16)
        .map(|i| {
            let mut g = marked_group(&[0.1 + (i % 9) as f64 / 10.0, 0.5]);
            g["group_id"] = json!(format!("g{i}"));
            format!("{g}\n")
        })
        .collect();
    let input = dir.path().join("in.jsonl");
    std::fs::write(&input, text).unwrap();
    (dir, input)
}

#[tokio::test(flavor = "multi_thread")]
async fn ctrl_c_says_where_rescore_stopped_and_the_same_command_resumes() {
    let mock = MockJudge::start().await;
    mock.set_fallback(Behaviour::Hang(Duration::from_millis(150)));
    let (dir, input) = setup(&mock);
    let (code, stderr) = stop_with(dir.path(), &input, libc::SIGINT).await;
    assert_eq!(code, Some(130), "{stderr}");
    let done = out_lines(dir.path()).len();
    assert!((2..16).contains(&done), "stopped part way: {done}");
    let want = format!("gavel rescore: stopped by Ctrl-C (SIGINT): {done} of 16 groups done, in out.jsonl; rerun the same command to resume with the other {}", 16 - done);
    assert!(stderr.lines().any(|l| l == want), "{want:?} in:\n{stderr}");

    // SIGTERM (a supervisor's stop) alike.
    let (code, stderr) = stop_with(dir.path(), &input, libc::SIGTERM).await;
    assert_eq!(code, Some(143), "{stderr}");
    assert!(
        stderr.contains("gavel rescore: stopped by SIGTERM: "),
        "{stderr}"
    );

    mock.set_fallback(Behaviour::Score);
    let out = rescore(dir.path(), &input).output().await.unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ids: Vec<String> = out_lines(dir.path())
        .iter()
        .map(|l| l["group_id"].as_str().unwrap().to_string())
        .collect();
    let unique: BTreeSet<&String> = ids.iter().collect();
    assert_eq!(
        (ids.len(), unique.len()),
        (16, 16),
        "every group once: {ids:?}"
    );
}
