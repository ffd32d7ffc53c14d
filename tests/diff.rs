//! End-to-end tests of `gavel diff`: the binary as a child process against in-process mock
//! judges (`common`), comparing two judges (one with a position bias, so rewards really differ)
//! and two rubrics (the mock reads `SCORE=` markers and ignores the rubric, so nothing moves).

mod common;

use std::path::Path;

use serde_json::{json, Value};

use common::cli::{judge_toml, run, CliSetup, Out};
use common::{marked_group, Behaviour, MockJudge};

const EXAMPLES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/groups");
const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/diff");

/// A config of top-level keys `head` and judge tables `judges`.
fn setup(head: &str, judges: &str) -> CliSetup {
    CliSetup::new(&format!("{head}\n{judges}"))
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

fn assert_close(v: &Value, want: f64, what: &str) {
    assert!((f(v) - want).abs() < 1e-6, "{what}: {v} != {want}");
}

/// `field` of each trajectory row of a group, as numbers.
fn column(g: &Value, field: &str) -> Vec<f64> {
    g["trajectories"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| f(&t[field]))
        .collect()
}

fn assert_all_close(got: &[f64], want: &[f64], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: {got:?} vs {want:?}");
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() < 1e-6, "{what}: {got:?} vs {want:?}");
    }
}

/// Three groups; the third has an HTML-hostile `group_id` and trajectory name.
fn three_groups() -> String {
    let g1 = marked_group(&[0.2, 0.9, 0.5, 0.7]);
    let g2 = marked_group(&[0.9, 0.1]);
    let mut g3 = marked_group(&[0.5, 0.5]);
    g3["group_id"] = json!("<script>alert(1)</script>");
    g3["trajectories"][1]["metadata"] = json!({"name": "<img src=x onerror=alert(2)>"});
    format!("{g1}\n\n{g2}\n{g3}\n")
}

/// Judge `plain` scores by the markers; judge `biased` adds 0.5 to whichever trajectory it
/// reads first (capped at 1). Hand-computed:
///
/// | group | A (plain)          | B (biased)         | flips | τ-b                 |
/// |-------|--------------------|--------------------|-------|---------------------|
/// | 1     | .2 .9 .5 .7        | .7 .9 .5 .7        | 1     | 3/√30 = 0.547723    |
/// | 2     | .9 .1              | 1 .1               | 0     | 1                   |
/// | 3     | .5 .5              | 1 .5               | 0     | undefined (A ties)  |
#[tokio::test(flavor = "multi_thread")]
async fn judge_diff_reports_exact_numbers_html_and_reruns_from_the_cache() {
    let (plain, biased) = (MockJudge::start().await, MockJudge::start().await);
    biased.set_fallback(Behaviour::FirstBias(0.5));
    let judges = judge_toml("plain", &plain, 1) + &judge_toml("biased", &biased, 1);
    let s = setup("default_judge = \"plain\"", &judges);
    let file = s.write("groups.jsonl", &three_groups());
    let html = s.path("report.html");

    let out = run(s.command(
        "diff",
        &[
            "--judge", "plain", "--judge", "biased", "--format", "json", "--html", &html, &file,
        ],
    ))
    .await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    let r = out.json();
    assert_eq!((plain.calls(), biased.calls()), (3, 3));
    assert_eq!(r["compare"], "judge");
    assert_eq!(r["sides"]["a"]["label"], "plain");
    assert_eq!(r["sides"]["b"]["judge"], "biased");
    assert_eq!(r["sides"]["a"]["rubric"], Value::Null);
    let groups = r["groups"].as_array().unwrap();
    assert_eq!(groups.len(), 3);

    let g = &groups[0];
    assert_eq!(
        (&g["index"], &g["line"], &g["label"]),
        (&json!(1), &json!(1), &json!("line 1"))
    );
    assert_eq!(g["status"], "ok");
    assert_all_close(&column(g, "reward_a"), &[0.2, 0.9, 0.5, 0.7], "g1 A");
    assert_all_close(&column(g, "reward_b"), &[0.7, 0.9, 0.5, 0.7], "g1 B");
    assert_all_close(&column(g, "delta"), &[0.5, 0.0, 0.0, 0.0], "g1 delta");
    assert_eq!(column(g, "rank_a"), [4.0, 1.0, 3.0, 2.0]);
    assert_eq!(column(g, "rank_b"), [2.5, 1.0, 4.0, 2.5]);
    assert_eq!(g["rank_flips"], 1);
    assert_eq!(g["pairs"], 6);
    assert_close(&g["kendall_tau_b"], 3.0 / 30f64.sqrt(), "g1 tau");
    assert_close(&g["mean_abs_delta"], 0.125, "g1 mean |delta|");
    assert_eq!(g["moved_most"]["trajectory_id"], "1");
    assert_close(&g["moved_most"]["delta"], 0.5, "g1 mover");
    assert_eq!(g["usage"]["a"]["judge_calls"], 1);

    let g = &groups[1];
    assert_eq!(
        (&g["line"], &g["label"]),
        (&json!(3), &json!("line 3")),
        "blank line 2 skipped"
    );
    assert_all_close(&column(g, "delta"), &[0.1, 0.0], "g2 delta");
    assert_eq!(g["delta"], Value::Null);
    assert_eq!(g["trajectories"][0]["delta"], 0.1, "float noise tidied");
    assert_eq!(
        (&g["rank_flips"], &g["kendall_tau_b"]),
        (&json!(0), &json!(1.0))
    );

    let g = &groups[2];
    assert_eq!(g["group_id"], "<script>alert(1)</script>");
    assert_eq!(g["label"], "<script>alert(1)</script>");
    assert_eq!(
        g["trajectories"][1]["label"],
        "<img src=x onerror=alert(2)>"
    );
    assert_eq!(g["kendall_tau_b"], Value::Null, "A is all ties");
    assert_eq!(g["rank_flips"], 0);
    assert_eq!(column(g, "rank_a"), [1.5, 1.5]);
    assert_eq!(column(g, "rank_b"), [1.0, 2.0]);
    assert_all_close(&column(g, "delta"), &[0.5, 0.0], "g3 delta");

    let sm = &r["summary"];
    assert_eq!(sm["groups"], 3);
    assert_eq!(sm["groups_compared"], 3);
    assert_eq!(sm["groups_failed"], 0);
    assert_eq!(sm["trajectories_compared"], 8);
    assert_close(&sm["mean_abs_delta"], 1.1 / 8.0, "mean |delta|");
    assert_close(&sm["mean_delta"], 1.1 / 8.0, "mean delta");
    assert_close(
        &sm["mean_kendall_tau_b"],
        (3.0 / 30f64.sqrt() + 1.0) / 2.0,
        "mean tau",
    );
    assert_eq!(sm["groups_tau_undefined"], 1);
    assert_eq!(sm["groups_with_rank_flips"], 1);
    assert_close(
        &sm["fraction_groups_with_rank_flips"],
        1.0 / 3.0,
        "flip fraction",
    );
    assert_eq!(sm["rank_flips"], 1);
    let movers: Vec<(i64, &str)> = sm["top_movers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["group"].as_i64().unwrap(),
                m["trajectory_id"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(movers, [(1, "1"), (3, "1"), (2, "1")]);
    assert_eq!(sm["judge_calls"], json!({"a": 3, "b": 3}));
    assert_eq!(sm["cache_hits"], json!({"a": 0, "b": 0}));

    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.starts_with("<!DOCTYPE html>"), "{}", &page[..80]);
    assert_eq!(page.matches("<svg").count(), 3, "three plots");
    assert!(
        !page.contains("http://") && !page.contains("https://"),
        "external reference"
    );
    assert!(
        !page.contains("<script") && !page.contains("<img"),
        "unescaped label"
    );
    assert!(page.contains("&lt;script&gt;alert(1)&lt;&#x2f;script&gt;"));
    assert!(page.contains("&lt;img src=x onerror=alert(2)&gt;"));
    assert_eq!(page.matches("<details").count(), 3);
    assert!(page.contains("<title>gavel diff: judge plain vs biased</title>"));

    // Again, as a table: every verdict comes from the store.
    let out = run(s.command("diff", &["--judge", "plain", "--judge", "biased", &file])).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    assert_eq!(
        (plain.calls(), biased.calls()),
        (3, 3),
        "re-run made judge calls"
    );
    let t = &out.stdout;
    for l in t.lines() {
        assert!(l.chars().count() <= 100, "over 100 columns: {l:?}");
    }
    let lines: Vec<&str> = t.lines().collect();
    let has = |prefix: &str| lines.iter().any(|l| l.starts_with(prefix));
    assert!(
        has("[1] line 1 · τ-b 0.548 · 1 rank flip · mean |Δ| 0.125"),
        "{t}"
    );
    assert!(has("[2] line 3 · τ-b 1.000 · 0 rank flips"), "{t}");
    assert!(has("[3] <script>alert(1)</script> · τ-b undefined"), "{t}");
    let row = lines
        .iter()
        .find(|l| l.trim_start().starts_with("1 "))
        .unwrap();
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        cells[..7],
        ["1", "0.200", "0.700", "+0.500", "4", "→", "2.5"],
        "{row}"
    );
    assert!(row.ends_with("◀ moved most"), "{row}");
    assert!(
        has("summary: 3 of 3 groups compared, 8 trajectories"),
        "{t}"
    );
    assert!(
        t.contains("mean |Δ| 0.138 · mean Δ +0.138 · mean τ-b 0.774 (1 undefined)"),
        "{t}"
    );
    assert!(t.contains("rank flips in 1 of 3 groups (33%)"), "{t}");
    assert!(
        t.contains("judge calls A 0 · B 0 · failed calls A 0 · B 0 · cache hits A 3 · B 3"),
        "{t}"
    );
}

/// The mock judge ignores the rubric, so two rubrics give the same rewards: every delta is 0,
/// τ-b is 1 and nothing moved; each rubric still got its own verdicts (and cache entries).
#[tokio::test(flavor = "multi_thread")]
async fn rubric_diff_with_a_rubric_blind_judge_changes_nothing() {
    let mock = MockJudge::start().await;
    let s = setup(
        "default_judge = \"mock\"\nrubrics_dir = \"rubrics\"",
        &judge_toml("mock", &mock, 1),
    );
    for name in ["strict", "lenient"] {
        let text = std::fs::read_to_string(format!("{DATA}/{name}.toml")).unwrap();
        s.write(&format!("rubrics/{name}.toml"), &text);
    }
    let text = format!(
        "{}\n{}\n",
        marked_group(&[0.3, 0.8, 0.6]),
        marked_group(&[1.0, 0.0])
    );
    let file = s.write("groups.jsonl", &text);
    let args = [
        "--rubric", "strict", "--rubric", "lenient", "--judge", "mock",
    ];

    let json_args = ["--format", "json", "--concurrency", "1", &file];
    let out = run(s.command("diff", &[&args[..], &json_args].concat())).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    let r = out.json();
    assert_eq!(mock.calls(), 4, "two groups under two rubrics");
    assert!(
        mock.max_concurrent() <= 2,
        "one group (two sides) at a time"
    );
    let systems: Vec<String> = mock
        .requests()
        .iter()
        .map(|q| q["messages"][0]["content"].as_str().unwrap().to_string())
        .collect();
    for marker in ["STRICT-RUBRIC-MARKER", "LENIENT-RUBRIC-MARKER"] {
        let n = systems.iter().filter(|t| t.contains(marker)).count();
        assert_eq!(n, 2, "{marker} in {n} judge prompts");
    }
    assert_eq!(r["compare"], "rubric");
    assert_eq!(
        (&r["sides"]["a"]["label"], &r["sides"]["b"]["label"]),
        (&json!("strict"), &json!("lenient"))
    );
    assert_eq!(r["sides"]["a"]["judge"], "mock");
    let va = r["sides"]["a"]["rubric_version"].as_str().unwrap();
    let vb = r["sides"]["b"]["rubric_version"].as_str().unwrap();
    assert!(va.starts_with("sha256:") && va != vb, "{va} {vb}");
    for (g, rewards) in r["groups"]
        .as_array()
        .unwrap()
        .iter()
        .zip([&[0.3, 0.8, 0.6][..], &[1.0, 0.0]])
    {
        assert_all_close(&column(g, "reward_a"), rewards, "A");
        assert_all_close(&column(g, "reward_b"), rewards, "B");
        assert!(column(g, "delta").iter().all(|d| *d == 0.0), "{g}");
        assert_eq!(column(g, "rank_a"), column(g, "rank_b"));
        assert_eq!(
            (&g["rank_flips"], &g["kendall_tau_b"]),
            (&json!(0), &json!(1.0))
        );
        assert_eq!(g["moved_most"], Value::Null);
    }
    let sm = &r["summary"];
    assert_eq!(
        (&sm["mean_abs_delta"], &sm["mean_kendall_tau_b"]),
        (&json!(0.0), &json!(1.0))
    );
    assert_eq!(sm["groups_with_rank_flips"], 0);
    assert_eq!(sm["top_movers"], json!([]));

    // The same comparison again (the judge from default_judge): all from the store.
    let out = run(s.command(
        "diff",
        &["--rubric", "strict,lenient", "--format", "json", &file],
    ))
    .await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    assert_eq!(mock.calls(), 4, "re-run made judge calls");
    assert_eq!(out.json()["summary"]["cache_hits"], json!({"a": 2, "b": 2}));
}

/// The README's example: one .json group, two shipped rubrics, text and HTML.
#[tokio::test(flavor = "multi_thread")]
async fn readme_example_on_a_shipped_group() {
    let mock = MockJudge::start().await;
    let s = setup("default_judge = \"mock\"", &judge_toml("mock", &mock, 1));
    let file = format!("{EXAMPLES}/rag_answer.json");
    let html = s.path("report.html");
    let args = [
        "--rubric",
        "default",
        "--rubric",
        "rag_faithfulness",
        &file,
        "--html",
        &html,
    ];
    let out = run(s.command("diff", &args)).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    assert_eq!(mock.calls(), 2);
    let t = &out.stdout;
    assert!(
        t.starts_with("gavel diff · A = rubric default · B = rubric rag_faithfulness"),
        "{t}"
    );
    // No marker: the mock scores 0.5 throughout, so τ-b is undefined.
    assert!(
        t.contains("[1] rag_answer.json · τ-b undefined · 0 rank flips"),
        "{t}"
    );
    assert!(
        t.contains("summary: 1 of 1 group compared, 4 trajectories"),
        "{t}"
    );
    assert!(out.stderr.contains("wrote"), "{}", out.stderr);
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("Rubric diff"));
    assert_eq!(page.matches("<svg").count(), 3);
}

/// Side B's judge answers 500 for the first group: that group is reported failed with the
/// error type and left out of the summary; the other group is compared; exit 1.
#[tokio::test(flavor = "multi_thread")]
async fn a_failing_judge_fails_its_group_and_exits_1() {
    let (plain, flaky) = (MockJudge::start().await, MockJudge::start().await);
    flaky.push(Behaviour::Status(500, None, "down".into()));
    let judges = judge_toml("plain", &plain, 0) + &judge_toml("flaky", &flaky, 0);
    let s = setup("default_judge = \"plain\"", &judges);
    let text = format!(
        "{}\n{}\n",
        marked_group(&[0.4, 0.6]),
        marked_group(&[0.9, 0.3])
    );
    let file = s.write("groups.jsonl", &text);
    // One group at a time, in file order: side B of group 1 meets the 500.
    let args = [
        "--judge",
        "plain",
        "--judge",
        "flaky",
        "--concurrency",
        "1",
        &file,
    ];

    let out = run(s.command("diff", &[&args[..], &["--format", "json"]].concat())).await;
    assert_eq!(out.code, Some(1), "stderr: {}", out.stderr);
    let r = out.json();
    let g = &r["groups"][0];
    assert_eq!(g["status"], "failed");
    assert_eq!(g["errors"].as_array().unwrap().len(), 1, "{g}");
    assert_eq!(
        (&g["errors"][0]["side"], &g["errors"][0]["type"]),
        (&json!("b"), &json!("judge_unavailable"))
    );
    assert!(
        g.get("trajectories").is_none() && g.get("kendall_tau_b").is_none(),
        "{g}"
    );
    assert_eq!(g["usage"]["a"]["judge_calls"], 1);
    assert_eq!(r["groups"][1]["status"], "ok");
    assert_eq!(r["groups"][1]["kendall_tau_b"], 1.0);
    let sm = &r["summary"];
    assert_eq!(
        (&sm["groups_compared"], &sm["groups_failed"]),
        (&json!(1), &json!(1))
    );
    assert_eq!(sm["trajectories_compared"], 2);
    assert_eq!(sm["judge_calls"], json!({"a": 2, "b": 1}));
    // The 500 cost a call that gave no verdict: counted apart, not lost.
    assert_eq!(sm["failed_calls"], json!({"a": 0, "b": 1}));

    // Again, as a table: group 1 fails no more (its verdict was never stored, the judge is
    // asked again and now answers); the cached verdicts are not asked for.
    let html = s.path("r.html");
    let out = run(s.command("diff", &[&args[..], &["--html", &html]].concat())).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    assert_eq!((plain.calls(), flaky.calls()), (2, 3));

    // And with the judge down for good: a FAILED line in the table, exit 1.
    flaky.set_fallback(Behaviour::Status(500, None, "down".into()));
    let text = format!("{}\n", marked_group(&[0.1, 0.2, 0.3]));
    let file = s.write("new.jsonl", &text);
    let out = run(s.command(
        "diff",
        &[
            "--judge", "plain", "--judge", "flaky", &file, "--html", &html,
        ],
    ))
    .await;
    assert_eq!(out.code, Some(1), "stderr: {}", out.stderr);
    assert!(out.stdout.contains("[1] line 1 · FAILED"), "{}", out.stdout);
    assert!(
        out.stdout.contains("failed calls A 0 · B 1"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("side B: judge_unavailable: "),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout
            .contains("summary: 0 of 1 group compared, 1 failed"),
        "{}",
        out.stdout
    );
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("failed on B: judge_unavailable"), "{page}");
    // One failed group is "1 group failed", not "1 groups failed".
    assert!(
        page.contains("<div class=\"big\">1</div><div class=\"lbl\">group failed</div>"),
        "{page}"
    );
}

/// A judge without a key fails each group with the judge's own hint, whole.
#[tokio::test(flavor = "multi_thread")]
async fn a_judge_without_a_key_is_explained_in_full() {
    let s = setup(
        "default_judge = \"nokey\"",
        "[judges.nokey]\nbackend = \"openai\"\nbase_url = \"http://127.0.0.1:9/v1\"\n\
         model = \"m\"\napi_key_env = \"GAVEL_TEST_UNSET_KEY\"\n",
    );
    let file = s.write("g.json", &marked_group(&[0.4, 0.6]).to_string());
    let out = run(s.command(
        "diff",
        &["--rubric", "default", "--rubric", "rag_faithfulness", &file],
    ))
    .await;
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    let hint = "side A: no_judge_configured: judge \"nokey\" has no API key: set the environment \
                variable GAVEL_TEST_UNSET_KEY (its api_key_env)\n";
    assert!(out.stdout.contains(hint), "{}", out.stdout);
}

/// Usage and file problems: one line each on stderr, exit 2, no judge call.
#[tokio::test(flavor = "multi_thread")]
async fn bad_arguments_and_files_exit_2_before_any_judge_call() {
    let mock = MockJudge::start().await;
    let s = setup("default_judge = \"mock\"", &judge_toml("mock", &mock, 1));
    let good = s.write("good.jsonl", &format!("{}\n", marked_group(&[0.1, 0.2])));
    let expect_2 = |out: Out, lines: usize, starts: &[String]| {
        assert_eq!(
            out.code,
            Some(2),
            "stdout: {} stderr: {}",
            out.stdout,
            out.stderr
        );
        assert_eq!(out.stdout, "");
        let err: Vec<&str> = out.stderr.lines().collect();
        assert_eq!(err.len(), lines, "{}", out.stderr);
        for (l, want) in err.iter().zip(starts) {
            assert!(l.starts_with(want.as_str()), "{l:?} !~ {want:?}");
        }
    };
    let usage = |m: &str| vec![format!("gavel diff: {m}")];

    let cases: [(&[&str], &str); 6] = [
        (&["--rubric", "default"], "nothing to compare"),
        (&[], "nothing to compare"),
        (
            &["--rubric", "default", "--judge", "mock"],
            "nothing to compare",
        ),
        (
            &["--rubric", "a,b", "--judge", "c,d"],
            "two rubrics and two judges",
        ),
        (&["--rubric", "a,b,c"], "3 rubrics given"),
        (
            &["--rubric", "default", "--rubric", "nope"],
            "--rubric: unknown rubric \"nope\"",
        ),
    ];
    for (args, want) in cases {
        let out = run(s.command("diff", &[args, &[good.as_str()]].concat())).await;
        expect_2(out, 1, &usage(want));
    }
    let out = run(s.command("diff", &["--judge", "mock", "--judge", "ghost", &good])).await;
    expect_2(
        out,
        1,
        &usage("--judge: unknown judge \"ghost\" (configured: mock)"),
    );

    let mut robot = marked_group(&[0.5, 0.5]);
    robot["trajectories"][0]["messages"][1]["role"] = json!("robot");
    let mut extra = marked_group(&[0.5]);
    extra["rubrc"] = json!("default");
    let mut bad_id = marked_group(&[0.5]);
    bad_id["group_id"] = json!([1]);
    let mut bad_rubric = marked_group(&[0.5]);
    bad_rubric["rubric"] = json!("missing_rubric");
    let text = format!(
        "{}\n{{\"trajectories\": [oops\n{robot}\n{extra}\n{bad_id}\n{bad_rubric}\n",
        marked_group(&[0.1])
    );
    let bad = s.write("bad.jsonl", &text);
    let out = run(s.command("diff", &["--judge", "mock", "--judge", "mock", &bad])).await;
    let want = [
        format!("{bad}:2: not valid JSON"),
        format!("{bad}:3: trajectories[0].messages[1].role: unknown role \"robot\""),
        format!("{bad}:4: rubrc: unknown field, did you mean rubric?"),
        format!("{bad}:5: group_id: expected a string or a number"),
        format!("{bad}:6: rubric: unknown rubric \"missing_rubric\""),
    ];
    expect_2(out, 5, &want);
    // With the files's lines valid, the rubric a line names is checked too.
    let text = format!("{}\n{bad_rubric}\n", marked_group(&[0.1]));
    let bad = s.write("bad_rubric.jsonl", &text);
    let out = run(s.command("diff", &["--judge", "mock", "--judge", "mock", &bad])).await;
    let want = format!("{bad}:2: rubric: unknown rubric \"missing_rubric\"");
    expect_2(out, 1, &[want]);

    let missing = s.path("missing.json");
    let out = run(s.command("diff", &["--judge", "mock,mock", &missing])).await;
    expect_2(out, 1, &[format!("{missing}: cannot read")]);
    let empty = s.write("empty.jsonl", "\n\n");
    let out = run(s.command("diff", &["--judge", "mock,mock", &empty])).await;
    expect_2(out, 1, &[format!("{empty}: no groups")]);

    assert_eq!(mock.calls(), 0, "nothing is judged when the input is bad");
    assert!(!Path::new(&s.store).exists(), "bad input opened the store");
}
