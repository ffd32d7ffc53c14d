//! `score` and `render` as a new user meets them coming from `eval`: a labelled eval row is read
//! as the request it holds (its own fields kept aside, a typo still refused), `--judge-mode` and
//! `--permutations` reach the judge over what the line says, `-o` writes a file (folders made)
//! with a summary on stderr, and `score` says on stderr that it is working.

use serde_json::{json, Value};

use super::setup;
use crate::common::cli::{run, CliSetup, Out};
use crate::common::{marked_group, MockJudge};

/// A labelled eval row as `evals/*.jsonl` holds them: a group plus `id`, `labels` and `set`.
fn labelled_row(scores: &[f64]) -> Value {
    let mut row = marked_group(scores);
    let o = row.as_object_mut().unwrap();
    o.insert("id".into(), json!("row-7"));
    o.insert("labels".into(), json!([0, 1]));
    o.insert("set".into(), json!("dev"));
    row
}

/// Every stdout line as JSON, after exit 0.
fn json_lines(out: &Out, what: &str) -> Vec<Value> {
    assert_eq!(out.code, Some(0), "{what}: {}", out.stderr);
    out.stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{what}: {e}: {l}")))
        .collect()
}

/// `gavel render ARGS --config CFG` (render takes no `--store`).
fn render(s: &CliSetup, args: &[&str]) -> tokio::process::Command {
    s.config_command("render", args)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_labelled_eval_row_is_scored_and_rendered_as_its_request() {
    let mock = MockJudge::start().await;
    let s = setup(&mock);
    let file = s.write("row.jsonl", &format!("{}\n", labelled_row(&[0.2, 0.7])));
    let lines = json_lines(&run(s.command("score", &[&file])).await, "score");
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0]["rewards"], json!([0.2, 0.7]), "{}", lines[0]);
    // The row's own fields come back beside the result, as rescore writes them.
    assert_eq!(
        lines[0]["input_meta"],
        json!({"id": "row-7", "labels": [0, 1], "set": "dev"}),
        "{}",
        lines[0]
    );
    assert_eq!(mock.calls(), 1);
    let out = run(render(&s, &[&file, "--format", "json"])).await;
    assert_eq!(json_lines(&out, "render").len(), 1);

    // A shipped eval file's first row, as it is.
    let shipped = concat!(env!("CARGO_MANIFEST_DIR"), "/evals/halueval_qa.jsonl");
    let first = std::fs::read_to_string(shipped).unwrap();
    let first = first.lines().next().unwrap();
    let real = s.write("shipped.jsonl", &format!("{first}\n"));
    let lines = json_lines(&run(s.command("score", &[&real])).await, "shipped row");
    assert_eq!(
        lines[0]["input_meta"]["id"], "halueval_qa-853",
        "{}",
        lines[0]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_typo_of_a_request_field_is_still_refused() {
    let mock = MockJudge::start().await;
    let s = setup(&mock);
    let mut row = labelled_row(&[0.2, 0.7]);
    row["permutatons"] = json!(2);
    let file = s.write("typo.jsonl", &format!("{row}\n"));
    for out in [
        run(s.command("score", &[&file])).await,
        run(render(&s, &[&file])).await,
    ] {
        assert_eq!(out.code, Some(2), "{}", out.stderr);
        assert_eq!(
            out.stderr.trim_end(),
            format!("{file}:1: permutatons: unknown field, did you mean permutations?")
        );
        assert_eq!(out.stdout, "");
    }
    assert_eq!(mock.calls(), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn permutations_from_the_flag_reach_the_judge_over_the_lines() {
    let mock = MockJudge::start().await;
    let s = setup(&mock);
    let mut group = marked_group(&[0.1, 0.5, 0.9]);
    group["permutations"] = json!(4);
    let file = s.write("g.json", &group.to_string());
    let lines = json_lines(
        &run(s.command("score", &["--permutations", "2", &file])).await,
        "score --permutations 2",
    );
    assert_eq!(lines[0]["usage"]["judge_calls"], 2, "{}", lines[0]);
    assert_eq!(mock.calls(), 2, "two orders, not the line's four");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_judge_mode_flag_replaces_the_lines() {
    let mock = MockJudge::start().await;
    let s = setup(&mock);
    let mut group = marked_group(&[0.2, 0.9]);
    group["judge_mode"] = json!("listwise");
    let file = s.write("g.json", &group.to_string());
    let lines = json_lines(
        &run(s.command("score", &["--judge-mode", "pointwise", &file])).await,
        "score --judge-mode pointwise",
    );
    // Pointwise: one prompt per trajectory, each asking for the verdict token's logprobs.
    let asked = mock.requests();
    assert_eq!(asked.len(), 2, "{asked:?}");
    assert!(
        asked.iter().all(|r| r["logprobs"] == json!(true)),
        "{asked:?}"
    );
    assert!(
        lines[0]["scores"][0]["confidence"].is_number(),
        "{}",
        lines[0]
    );

    // render shows the mode's prompts without asking.
    let out = run(render(&s, &["--judge-mode", "pointwise", &file])).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(out.stdout.contains("asks 2 prompts"), "{}", out.stdout);
    assert_eq!(mock.calls(), 2);

    let out = run(s.command("score", &["--judge-mode", "sideways", &file])).await;
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(
        out.stderr
            .contains("expected \"listwise\", \"pointwise\" or \"pairwise\""),
        "{}",
        out.stderr
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn permutations_out_of_bounds_are_one_usage_line() {
    let mock = MockJudge::start().await;
    let s = setup(&mock);
    let file = s.write("g.json", &marked_group(&[0.1, 0.5]).to_string());
    for (cmd, k) in [("score", "17"), ("score", "0"), ("render", "17")] {
        let args = ["--permutations", k, file.as_str()];
        let out = if cmd == "render" {
            run(render(&s, &args)).await
        } else {
            run(s.command(cmd, &args)).await
        };
        assert_eq!(out.code, Some(2), "{cmd} {k}: {}", out.stderr);
        assert_eq!(
            out.stderr,
            format!("gavel {cmd}: --permutations: expected an integer from 1 to 16, got {k}\n")
        );
        assert_eq!(out.stdout, "");
    }
    assert_eq!(mock.calls(), 0);
    assert!(!s.store.exists(), "a usage problem opened the store");
}

#[tokio::test(flavor = "multi_thread")]
async fn score_o_writes_into_new_folders_and_says_so_on_stderr() {
    let mock = MockJudge::start().await;
    let s = setup(&mock);
    let text = format!(
        "{}\n{}\n",
        marked_group(&[0.2, 0.7]),
        marked_group(&[0.9, 0.1])
    );
    let file = s.write("groups.jsonl", &text);
    let out = run(s.command("score", &["-o", "out/x.json", &file])).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(out.stdout, "", "the results went to the file");
    let written = std::fs::read_to_string(s.dir.path().join("out/x.json")).unwrap();
    let lines: Vec<Value> = written
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "{written}");
    assert_eq!(lines[1]["rewards"], json!([0.9, 0.1]));
    assert_eq!(lines[1]["line"], 2);
    let summary = out.stderr.lines().last().unwrap_or_default();
    assert!(
        summary.starts_with("gavel score: 2 groups scored · 2 judge calls, 0 cache hits")
            && summary.ends_with(" · wrote out/x.json"),
        "{}",
        out.stderr
    );
    // Stderr is not a terminal here: a log line says the run started.
    assert!(out.stderr.contains("score starting"), "{}", out.stderr);

    let out = run(render(&s, &["--output", "rendered/r.txt", &file])).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(out.stdout, "");
    let page = std::fs::read_to_string(s.dir.path().join("rendered/r.txt")).unwrap();
    assert!(page.starts_with("=== group 1 ("), "{page}");
    assert!(page.contains("=== group 2 ("), "{page}");
    assert_eq!(
        out.stderr,
        "gavel render: 2 groups · wrote rendered/r.txt\n"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn without_o_score_logs_its_progress_on_stderr_only() {
    let mock = MockJudge::start().await;
    let s = setup(&mock);
    let file = s.write("g.json", &marked_group(&[0.3, 0.6]).to_string());
    let out = run(s.command("score", &[&file])).await;
    // Every stdout line is a result; the progress is on stderr.
    assert_eq!(json_lines(&out, "score").len(), 1);
    assert!(out.stderr.contains("score starting"), "{}", out.stderr);
    assert!(
        !out.stderr.contains("gavel score:"),
        "no summary without -o"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn eval_and_diff_reports_go_into_new_folders_in_the_format_their_name_asks() {
    let mock = MockJudge::start().await;
    let s = setup(&mock);
    let file = s.write("rows.jsonl", &format!("{}\n", labelled_row(&[0.2, 0.7])));
    let out = run(s.command("eval", &["-o", "reports/eval/r.html", &file])).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(out.stdout, "", "the report went to the file");
    let page = std::fs::read_to_string(s.dir.path().join("reports/eval/r.html")).unwrap();
    assert!(page.starts_with("<!DOCTYPE html>"), "{}", &page[..60]);
    let summary = out.stderr.lines().last().unwrap_or_default();
    assert!(
        summary.starts_with("gavel eval: 1 group") && summary.ends_with("reports/eval/r.html"),
        "{}",
        out.stderr
    );

    let args = [
        "--rubric",
        "default",
        "--rubric",
        "default",
        "--judge",
        "mock",
        "-o",
        "reports/diff/d.json",
        "--html",
        "pages/d.html",
        &file,
    ];
    let out = run(s.command("diff", &args)).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let doc: Value = serde_json::from_str(
        &std::fs::read_to_string(s.dir.path().join("reports/diff/d.json")).unwrap(),
    )
    .unwrap();
    assert!(doc["sides"].is_object(), "{doc}");
    let page = std::fs::read_to_string(s.dir.path().join("pages/d.html")).unwrap();
    assert!(page.starts_with("<!DOCTYPE html>"), "{}", &page[..60]);
}
