//! The command as a process among others: a reader that stops early, a terminal that is not
//! there to confirm on, a store another process holds, a store that is not there yet.

use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Stdio;

use serde_json::{json, Value};

use super::setup;
use crate::common::cli::{run, BIN};
use crate::common::{marked_group, MockJudge};

/// `gavel render BIG | head -1`: the reader goes away after one line. Before, the next
/// `println!` panicked ("failed printing to stdout: Broken pipe") and the exit status was 101.
#[test]
fn a_closed_pipe_ends_the_command_quietly() {
    let dir = tempfile::tempdir().unwrap();
    // Far more text than a pipe buffers (64 KiB), so render is still writing when the reader
    // has gone: 200 groups of a few KiB each.
    let long = "x".repeat(2000);
    let text: String = (0..200)
        .map(|i| {
            let mut g = marked_group(&[0.1, 0.2]);
            g["trajectories"][0]["messages"][2]["content"] = json!(format!("{i} {long}"));
            format!("{g}\n")
        })
        .collect();
    let file = dir.path().join("many.jsonl");
    std::fs::write(&file, text).unwrap();
    let mut child = std::process::Command::new(BIN)
        .current_dir(dir.path())
        .env_remove("GAVEL_CONFIG")
        .env_remove("RUST_LOG")
        .arg("render")
        .arg(&file)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    // The reader is dropped here: the pipe is closed with most of the output unwritten.
    assert!(first.starts_with("=== group 1"), "{first}");
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(stderr, "", "nothing on stderr");
    assert_ne!(out.status.code(), Some(101), "{:?}", out.status);
    // Ended by SIGPIPE, as `cat` is: the shell reports 141, and `set -o pipefail` sees it.
    assert_eq!(out.status.signal(), Some(13), "{:?}", out.status);
}

#[tokio::test(flavor = "multi_thread")]
async fn cache_clear_asks_first_and_needs_yes_without_a_terminal() {
    let mock = MockJudge::start().await;
    let s = setup(&mock);
    let file = s.write("g.json", &marked_group(&[0.3, 0.8]).to_string());
    let out = run(s.command("score", &[&file])).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let verdicts = || async {
        let out = run(s.command("cache", &["stats"])).await;
        assert_eq!(out.code, Some(0), "{}", out.stderr);
        out.json()["verdicts"].as_u64().unwrap()
    };
    assert_eq!(verdicts().await, 1);

    // Standard input is not a terminal (the helper gives the child /dev/null): refused.
    let out = run(s.command("cache", &["clear"])).await;
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert_eq!(out.stderr.lines().count(), 1, "{}", out.stderr);
    assert!(
        out.stderr.contains("without --yes") && out.stderr.contains("nothing cleared"),
        "{}",
        out.stderr
    );
    assert_eq!(verdicts().await, 1, "a refused clear clears nothing");

    let out = run(s.command("cache", &["clear", "--yes"])).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stdout.starts_with("cleared 1 verdicts"),
        "{}",
        out.stdout
    );
    assert_eq!(verdicts().await, 0);
}

/// Commands that fail before judging, and `cache stats`, leave no store behind.
#[tokio::test(flavor = "multi_thread")]
async fn looking_and_bad_input_create_no_store() {
    let mock = MockJudge::start().await;
    let s = setup(&mock);
    let store = Path::new(&s.store);

    let out = run(s.command("cache", &["stats"])).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(out.json()["verdicts"], 0);
    assert!(out.stderr.contains("no store at"), "{}", out.stderr);
    let out = run(s.command("cache", &["clear", "--yes"])).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(out.stdout.starts_with("nothing to clear"), "{}", out.stdout);

    let mut bad = marked_group(&[0.1, 0.2]);
    bad["rubric"] = json!("nope");
    for (name, text) in [
        ("broken.json", "{\"trajectories\": [".to_string()),
        ("unknown.json", bad.to_string()),
    ] {
        let file = s.write(name, &text);
        let out = run(s.command("score", &[&file])).await;
        assert_eq!(out.code, Some(2), "{name}: {}", out.stderr);
    }
    assert_eq!(mock.calls(), 0);
    assert!(!store.exists(), "a store was created");
    // And without --store, none appears in the working directory either.
    let out = run(s.config_command("cache", &["stats"])).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(!s.dir.path().join("gavel-store").exists());
}

/// sled allows one process per store: a second one is told so in plain words.
#[tokio::test(flavor = "multi_thread")]
async fn a_store_held_by_another_process_is_named() {
    let mock = MockJudge::start().await;
    let s = setup(&mock);
    // This test process holds the store, as a running daemon would.
    let held = gavel::store::SledStore::open(Path::new(&s.store)).unwrap();
    let file = s.write("g.json", &marked_group(&[0.3, 0.8]).to_string());
    let want = format!(
        "gavel: the store at {} is in use by another gavel process; stop it or use \
         --store/--store-url",
        s.store.display()
    );
    for args in [vec!["score", file.as_str()], vec!["cache", "stats"]] {
        let out = run(s.command(args[0], &args[1..])).await;
        assert_eq!(out.code, Some(1), "{args:?}: {}", out.stderr);
        assert_eq!(out.stderr.trim_end(), want, "{args:?}");
    }
    drop(held);
    let out = run(s.command("score", &[&file])).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let v: Value = out.json();
    assert_eq!(v["rewards"], json!([0.3, 0.8]));
}
