//! Where the reports of `gavel eval` and `gavel diff` go: `-o FILE` takes its format from the
//! file's name unless `--format` says otherwise, nothing else lands on standard output, and one
//! summary line goes to stderr whatever the format. And what the HTML pages show: headings in
//! words, wide tables in a box that scrolls rather than cutting columns off.

mod common;

use serde_json::{json, Value};

use common::cli::{judge_toml, run, CliSetup, Out};
use common::{marked_group, simple_traj, Behaviour, MockJudge};

/// Two judges (one biased toward whatever it reads first) and a labelled file of 6 groups.
async fn eval_setup() -> (CliSetup, String, MockJudge, MockJudge) {
    let faithful = MockJudge::start().await;
    let biased = MockJudge::start().await;
    biased.set_fallback(Behaviour::FirstBias(0.3));
    let s = CliSetup::new(&format!(
        "default_judge = \"faithful\"\n{}{}",
        judge_toml("faithful", &faithful, 0),
        judge_toml("biased", &biased, 0)
    ));
    let text: String = (0..6)
        .map(|i| {
            let l = json!({"id": format!("q{i}"),
                "trajectories": [simple_traj("Bob. SCORE=0.4"), simple_traj("Ada. SCORE=0.6")],
                "labels": [0, 1]});
            format!("{l}\n")
        })
        .collect();
    let file = s.write("labelled.jsonl", &text);
    (s, file, faithful, biased)
}

/// The one line `gavel CMD:` says on stderr.
fn summary<'a>(out: &'a Out, cmd: &str) -> &'a str {
    let prefix = format!("gavel {cmd}: ");
    let lines: Vec<&str> = out
        .stderr
        .lines()
        .filter(|l| l.starts_with(&prefix))
        .collect();
    assert_eq!(lines.len(), 1, "one summary line: {}", out.stderr);
    lines[0]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eval_writes_the_format_its_file_asks_for_and_always_says_how_it_went() {
    let (s, file, _faithful, _biased) = eval_setup().await;
    let judges = ["--judge", "faithful", "--judge", "biased"];

    // `-o report.html` without `--format`: a page, nothing on stdout, the accuracy on stderr.
    let html = s.path("report.html");
    let out = run(s.command("eval", &[&judges[..], &["-o", &html, &file]].concat())).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(out.stdout, "", "the report went to the file");
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.starts_with("<!DOCTYPE html>"), "{}", &page[..60]);
    let line = summary(&out, "eval");
    assert!(
        line.starts_with("gavel eval: 6 groups · pairwise accuracy 1.000"),
        "{line}"
    );
    assert!(
        line.contains("[1.000, 1.000] (faithful · as in file"),
        "{line}"
    );
    assert!(
        line.contains("0.500 [0.500, 0.500] (biased · as in file"),
        "{line}"
    );
    assert!(line.ends_with(&format!(" · wrote {html}")), "{line}");

    // `.json` the same; `--format` wins over the name.
    let json_file = s.path("report.json");
    let out = run(s.command("eval", &[&judges[..], &["-o", &json_file, &file]].concat())).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&json_file).unwrap()).unwrap();
    assert_eq!(doc["results"].as_array().unwrap().len(), 2);
    summary(&out, "eval");
    let txt = s.path("report.html.txt");
    let forced = s.path("forced.html");
    for (path, format) in [(&txt, None), (&forced, Some("text"))] {
        let mut args = vec!["-o", path.as_str(), file.as_str()];
        if let Some(f) = format {
            args.extend(["--format", f]);
        }
        let out = run(s.command("eval", &args)).await;
        assert_eq!(out.code, Some(0), "{}", out.stderr);
        let text = std::fs::read_to_string(path).unwrap();
        assert!(text.starts_with("gavel eval · "), "{path}: {text}");
    }

    // `--format html` to stdout, and text to stdout: the summary line on stderr too.
    for format in ["html", "text", "json"] {
        let out = run(s.command("eval", &["--format", format, &file])).await;
        assert_eq!(out.code, Some(0), "{}", out.stderr);
        assert!(!out.stdout.is_empty(), "{format}");
        let line = summary(&out, "eval");
        assert!(line.contains("pairwise accuracy 1.000"), "{format}: {line}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_eval_page_keeps_its_wide_tables_in_scrolling_boxes() {
    let (s, file, _faithful, _biased) = eval_setup().await;
    let out = run(s.command(
        "eval",
        &[
            "--judge", "faithful", "--judge", "biased", "--format", "html", &file,
        ],
    ))
    .await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let page = &out.stdout;
    for heading in ["<h2>Results</h2>\n", "<h2>Comparisons</h2>\n"] {
        let at = page.find(heading).unwrap_or_else(|| panic!("no {heading}"));
        assert!(
            page[at + heading.len()..]
                .starts_with("<div class=\"box scroll\"><table class=\"res\">"),
            "{heading} is not followed by a scrolling box"
        );
    }
    // The box scrolls (not `overflow: hidden`), headings wrap, and the page is wide enough for
    // every column at 1,300 px.
    assert!(page.contains(".box.scroll { overflow-x: auto; }"));
    assert!(page.contains("table.res th { white-space: normal;"));
    assert!(page.contains("main { max-width: 1320px; }"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn diff_writes_its_report_to_the_file_alone_and_says_how_it_went() {
    let mock = MockJudge::start().await;
    let s = CliSetup::new(&format!(
        "default_judge = \"mock\"\n{}",
        judge_toml("mock", &mock, 0)
    ));
    let file = s.write(
        "g.jsonl",
        &format!(
            "{}\n{}\n",
            marked_group(&[0.2, 0.9]),
            marked_group(&[0.5, 0.3])
        ),
    );
    let sides = ["--rubric", "default", "--rubric", "rag_faithfulness"];

    // `-o report.html`: the page, no table on stdout, the summary on stderr.
    let html = s.path("report.html");
    let out = run(s.command("diff", &[&sides[..], &["-o", &html, &file]].concat())).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(out.stdout, "", "no table beside the page");
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.starts_with("<!DOCTYPE html>"));
    assert!(page.contains("<h2>Summary</h2>"), "a heading in words");
    assert!(!page.contains("DiffSummary"), "no type name on the page");
    let line = summary(&out, "diff");
    assert!(
        line.starts_with("gavel diff: 2 of 2 groups compared · mean |Δ| 0.000"),
        "{line}"
    );
    assert!(line.ends_with(&format!(" · wrote {html}")), "{line}");

    // `-o report.json`: JSON; the table on stdout without -o, with the summary on stderr.
    let json_file = s.path("report.json");
    let out = run(s.command("diff", &[&sides[..], &["-o", &json_file, &file]].concat())).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&json_file).unwrap()).unwrap();
    assert_eq!(doc["summary"]["groups"], 2);
    let out = run(s.command("diff", &[&sides[..], &[file.as_str()]].concat())).await;
    assert!(out.stdout.starts_with("gavel diff · A = rubric default"));
    summary(&out, "diff");
}
