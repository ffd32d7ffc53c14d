//! One rule for every command that reads a group file: each bad line, unknown names included,
//! is one `FILE:LINE: problem` line, all before any judge call or store, exit 2. And `-` reads
//! the group file from standard input.

use std::path::Path;
use std::process::Stdio;

use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;

use super::setup;
use crate::common::cli::{run, CliSetup, Out};
use crate::common::{marked_group, MockJudge};

/// A group with `extra` fields merged in.
fn group_with(extra: Value) -> Value {
    let mut g = marked_group(&[0.2, 0.7]);
    g.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    g
}

/// Seven lines: good, bad JSON, unknown rubric, unknown judge, unknown verifier type, a policy
/// naming no component, and a probability mode for a checklist rubric. Each line carries
/// `labels` when `labelled` (what eval needs).
fn bad_lines(labelled: bool) -> String {
    let extras = [
        json!({}),
        json!({"rubric": "nope"}),
        json!({"judge": "ghost"}),
        json!({"verifiers": [{"type": "psychic"}]}),
        json!({"policy": {"type": "weighted", "weights": {"vibes": 1.0}}}),
        json!({"judge_mode": "pointwise", "rubric": {"text": "t", "items": [{"id": "a", "text": "does a"}]}}),
    ];
    let mut lines: Vec<String> = extras
        .into_iter()
        .map(|mut e| {
            if labelled {
                e["labels"] = json!([0, 1]);
            }
            group_with(e).to_string()
        })
        .collect();
    lines.insert(1, "{\"trajectories\": [oops".into());
    lines.iter().map(|l| format!("{l}\n")).collect()
}

/// The start of each expected problem line, in file order.
fn wanted(file: &str) -> Vec<String> {
    [
        "2: not valid JSON",
        "3: rubric: unknown rubric \"nope\"",
        "4: judge: unknown judge \"ghost\" (configured: mock)",
        "5: verifiers[0].type: unknown verifier type \"psychic\"",
        "6: policy: weights.vibes: no component named \"vibes\"",
        "7: judge_mode: rubric \"inline\" is a checklist, which is judged listwise only",
    ]
    .iter()
    .map(|w| format!("{file}:{w}"))
    .collect()
}

fn assert_listed(out: &Out, want: &[String], what: &str) {
    assert_eq!(out.code, Some(2), "{what}: stderr: {}", out.stderr);
    let lines: Vec<&str> = out.stderr.lines().collect();
    assert_eq!(lines.len(), want.len(), "{what}: {}", out.stderr);
    for (l, w) in lines.iter().zip(want) {
        assert!(l.starts_with(w.as_str()), "{what}: {l:?} !~ {w:?}");
    }
    assert_eq!(out.stdout, "", "{what}: nothing is printed");
}

#[tokio::test(flavor = "multi_thread")]
async fn every_command_lists_every_bad_line_before_any_judge_call() {
    let mock = MockJudge::start().await;
    let s = setup(&mock);
    let file = s.write("runs.jsonl", &bad_lines(false));
    let labelled = s.write("labelled.jsonl", &bad_lines(true));
    // diff's two sides name their rubrics, which replace lines 3 and 7's own: those lines are
    // fine there.
    let cases: [(&str, Vec<&str>, &str, &[&str]); 4] = [
        ("score", vec![&file], &file, &[]),
        ("render", vec![&file], &file, &[]),
        (
            "diff",
            vec!["--rubric", "default,default", &file],
            &file,
            &[":3: ", ":7: "],
        ),
        ("eval", vec![&labelled], &labelled, &[]),
    ];
    for (cmd, args, f, fine) in cases {
        let out = if cmd == "render" {
            run(render(&s, &args)).await
        } else {
            run(s.command(cmd, &args)).await
        };
        let want: Vec<String> = wanted(f)
            .into_iter()
            .filter(|w| !fine.iter().any(|l| w.contains(l)))
            .collect();
        assert_listed(&out, &want, cmd);
    }
    assert_eq!(mock.calls(), 0, "nothing is judged when a line is bad");
    assert!(!Path::new(&s.store).exists(), "bad input opened the store");
}

/// `gavel render ARGS --config CFG` (render keeps no store, so it takes no `--store`).
fn render(s: &CliSetup, args: &[&str]) -> tokio::process::Command {
    s.config_command("render", args)
}

/// A name every line would share is one usage line, not one per line; the line's own names are
/// still checked under it.
#[tokio::test(flavor = "multi_thread")]
async fn an_unknown_rubric_or_judge_flag_is_one_usage_line() {
    let mock = MockJudge::start().await;
    let s = setup(&mock);
    let file = s.write(
        "two.jsonl",
        &format!("{}\n{}\n", marked_group(&[0.1, 0.2]), marked_group(&[0.3])),
    );
    for (cmd, flag, name, want) in [
        (
            "score",
            "--rubric",
            "nope",
            "gavel score: --rubric: unknown rubric \"nope\"",
        ),
        (
            "score",
            "--judge",
            "ghost",
            "gavel score: --judge: unknown judge \"ghost\"",
        ),
        (
            "render",
            "--rubric",
            "nope",
            "gavel render: --rubric: unknown rubric \"nope\"",
        ),
    ] {
        let args = [flag, name, file.as_str()];
        let out = if cmd == "render" {
            run(render(&s, &args)).await
        } else {
            run(s.command(cmd, &args)).await
        };
        assert_eq!(out.code, Some(2), "{cmd} {flag}: {}", out.stderr);
        assert_eq!(out.stderr.lines().count(), 1, "{}", out.stderr);
        assert!(out.stderr.starts_with(want), "{:?} !~ {want:?}", out.stderr);
    }
    assert_eq!(mock.calls(), 0);
    assert!(!Path::new(&s.store).exists(), "bad input opened the store");
}

/// `cmd ARGS... -` with `input` on standard input.
async fn with_stdin(mut c: tokio::process::Command, input: &str) -> Out {
    c.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(input.as_bytes()).await.unwrap();
    drop(stdin);
    let out = child.wait_with_output().await.unwrap();
    Out {
        code: out.status.code(),
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dash_reads_the_group_file_from_standard_input() {
    let mock = MockJudge::start().await;
    let s = setup(&mock);
    // One pretty-printed group: one result, without a line number.
    let one = serde_json::to_string_pretty(&marked_group(&[0.3, 0.8])).unwrap();
    let out = with_stdin(s.command("score", &["-"]), &one).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let lines: Vec<Value> = out
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 1, "{}", out.stdout);
    assert_eq!(lines[0]["rewards"], json!([0.3, 0.8]));
    assert!(lines[0].get("line").is_none(), "{}", lines[0]);

    // JSONL: one result per line, each with its line.
    let jsonl = format!(
        "{}\n\n{}\n",
        marked_group(&[0.1, 0.9]),
        marked_group(&[0.6, 0.4])
    );
    let out = with_stdin(s.command("score", &["-"]), &jsonl).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let lines: Vec<Value> = out
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "{}", out.stdout);
    assert_eq!(
        (&lines[0]["line"], &lines[1]["line"]),
        (&json!(1), &json!(3))
    );
    assert_eq!(lines[1]["rewards"], json!([0.6, 0.4]));

    // A bad line is named as a line of standard input.
    let bad = format!(
        "{}\n{}\n",
        marked_group(&[0.1]),
        group_with(json!({"rubric": "nope"}))
    );
    let out = with_stdin(render(&s, &["-"]), &bad).await;
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(
        out.stderr
            .starts_with("<stdin>:2: rubric: unknown rubric \"nope\""),
        "{}",
        out.stderr
    );
    // A broken pretty-printed group is one problem, not one per line.
    let broken = one.replacen("\"messages\"", "\"messages\" oops", 1);
    let out = with_stdin(s.command("score", &["-"]), &broken).await;
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert_eq!(out.stderr.lines().count(), 1, "{}", out.stderr);
    assert!(out.stderr.starts_with("<stdin>:"), "{}", out.stderr);
    assert_eq!(
        mock.calls(),
        3,
        "the three good groups were judged, nothing else"
    );
}
