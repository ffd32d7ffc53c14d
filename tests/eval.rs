//! End-to-end tests of `gavel eval`: the binary as a child process against in-process mock
//! judges (`common`) rigged two ways (one that always prefers the first trajectory shown, one
//! that follows the labels), bad lines named before any judge call, judge failures counted and
//! never scored, the HTML page; and, with `GAVEL_TEST_MODEL`, a 10-group eval of the shipped
//! HaluEval QA set on the real model.

mod common;

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{json, Value};

use common::cli::{judge_toml, run, run_within, CliSetup};
use common::{Behaviour, MockJudge};

const EVALS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/evals");

fn traj(answer: &str) -> Value {
    json!({"messages": [
        {"role": "system", "content": "Answer the question from the knowledge given."},
        {"role": "user", "content": "Who wrote the report?"},
        {"role": "assistant", "content": answer}
    ]})
}

/// Two-trajectory groups: the better one first in two groups and second in two, longer in two
/// and shorter in two. `mark` appends a `SCORE=` marker that follows the labels.
fn pairs_file(mark: bool) -> String {
    let m = |s: f64| {
        if mark {
            format!(" SCORE={s}")
        } else {
            String::new()
        }
    };
    let lines = [
        json!({"id": "g1", "trajectories": [traj(&format!("Ada Lovelace wrote it in 1843.{}", m(0.9))),
               traj(&format!("Bob.{}", m(0.2)))], "labels": [1, 0]}),
        json!({"id": "g2", "trajectories": [traj(&format!("Nobody knows, it was probably a committee of clerks.{}", m(0.1))),
               traj(&format!("Grace.{}", m(0.8)))], "labels": [0, 1]}),
        json!({"id": "g3", "trajectories": [traj(&format!("Alan.{}", m(0.7))),
               traj(&format!("It was written by a long list of people.{}", m(0.3)))], "labels": [1, 0]}),
        json!({"id": "g4", "trajectories": [traj(&format!("A machine.{}", m(0.4))),
               traj(&format!("Edsger Dijkstra, as the report's cover says.{}", m(0.6)))], "labels": [0, 1]}),
    ];
    lines.iter().map(|l| format!("{l}\n")).collect()
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

fn result<'a>(report: &'a Value, set: &str, judge: &str) -> &'a Value {
    report["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["set"] == set && r["judge"] == judge)
        .unwrap_or_else(|| panic!("no result for {set}/{judge}: {report}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_position_judge_shows_its_bias_and_a_faithful_one_is_always_right() {
    let biased = MockJudge::start().await;
    biased.set_fallback(Behaviour::FirstBias(0.3));
    let faithful = MockJudge::start().await;
    let s = CliSetup::new(&format!(
        "default_judge = \"faithful\"\n{}{}",
        judge_toml("biased", &biased, 0),
        judge_toml("faithful", &faithful, 0)
    ));
    // The biased judge sees no markers (every score 0.5, plus 0.3 for the first shown); the
    // faithful one reads markers that follow the labels.
    let plain = s.write("plain.jsonl", &pairs_file(false));
    let marked = s.write("marked.jsonl", &pairs_file(true));

    let out = run(s.command("eval", &["--judge", "biased", "--format", "json", &plain])).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let report = out.json();
    let r = result(&report, "plain", "biased");
    assert_eq!(r["groups"], 4);
    assert_eq!(r["valid_groups"], 4);
    assert_eq!(r["pairs"], 4);
    assert_eq!(r["invalid"], 0);
    // Two orders per group: right when the better one is shown first, wrong otherwise.
    assert_eq!(f(&r["position"]["flip_rate"]), 1.0, "{r}");
    assert_eq!(f(&r["position"]["accuracy_better_first"]), 1.0);
    assert_eq!(f(&r["position"]["accuracy_better_later"]), 0.0);
    assert_eq!(f(&r["pairwise_accuracy"]), 0.5);
    assert_eq!(f(&r["top1_accuracy"]), 0.5);
    assert_eq!(f(&r["kendall_tau"]), 0.0);
    // Length: the sets are balanced, the trivial rules score 0.5 each.
    assert_eq!(f(&r["length"]["prefer_longer"]), 0.5);
    assert_eq!(f(&r["length"]["prefer_shorter"]), 0.5);
    assert_eq!(f(&r["length"]["accuracy_better_longer"]), 0.5);
    assert_eq!(f(&r["calibration"]["mean_best"]), 0.65);
    assert_eq!(f(&r["calibration"]["mean_worst"]), 0.65);
    assert_eq!(r["usage"]["judge_calls"], 8);
    assert_eq!(biased.calls(), 8);
    // Both orders of each group differ, so every group is misranked in one of them; the
    // misranked table lists the groups wrong in the order as given (the better one second).
    let ids: Vec<&str> = r["misranked"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 2, "{ids:?}");
    assert!(ids.contains(&"g2") && ids.contains(&"g4"), "{ids:?}");

    let out = run(s.command("eval", &["--format", "json", &marked])).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let report = out.json();
    let r = result(&report, "marked", "faithful");
    assert_eq!(f(&r["pairwise_accuracy"]), 1.0, "{r}");
    assert_eq!(r["ci95"], json!([1.0, 1.0]));
    assert_eq!(f(&r["top1_accuracy"]), 1.0);
    assert_eq!(f(&r["kendall_tau"]), 1.0);
    assert_eq!(f(&r["position"]["flip_rate"]), 0.0);
    assert_eq!(f(&r["position"]["accuracy_better_first"]), 1.0);
    assert_eq!(f(&r["position"]["accuracy_better_later"]), 1.0);
    assert_eq!(f(&r["calibration"]["mean_best"]), 0.75);
    assert_eq!(f(&r["calibration"]["mean_worst"]), 0.25);
    assert!(r["misranked"].as_array().unwrap().is_empty());

    // A re-run judges nothing again: every verdict comes from the cache.
    let before = faithful.calls();
    let out = run(s.command("eval", &["--format", "json", &marked])).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(faithful.calls(), before);
    let r2 = out.json();
    let r2 = result(&r2, "marked", "faithful");
    assert_eq!(r2["usage"]["cache_hits"], 8);
    assert_eq!(r2["pairwise_accuracy"], r["pairwise_accuracy"]);

    // Both judges on both files: a pooled set, and a comparison that says the faithful judge
    // is better only where it is (paired bootstrap over the same groups).
    let out = run(s.command(
        "eval",
        &[
            "--judge", "biased", "--judge", "faithful", "--format", "json", &plain, &marked,
        ],
    ))
    .await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let report = out.json();
    assert_eq!(report["results"].as_array().unwrap().len(), 6, "{report}");
    let all = result(&report, "all", "biased");
    assert_eq!(all["groups"], 8);
    let cmp: Vec<&Value> = report["comparisons"].as_array().unwrap().iter().collect();
    assert_eq!(cmp.len(), 3);
    // On `marked` the biased judge also sees the markers, plus its bias of 0.3: it still
    // follows the labels where the gap is over 0.3 and the better one is shown later.
    let on_plain = cmp.iter().find(|c| c["set"] == "plain").unwrap();
    assert_eq!(on_plain["a"]["judge"], "biased");
    assert_eq!(on_plain["b"]["judge"], "faithful");
    // The faithful judge reads no markers on `plain`: every score ties, accuracy 0.5 as well.
    assert_eq!(f(&on_plain["difference"]), 0.0);
    assert_eq!(on_plain["verdict"], "no_difference");
    let on_marked = cmp.iter().find(|c| c["set"] == "marked").unwrap();
    // biased on marked: g1 (0.9 vs 0.2) right both ways; g2 (0.1+0.3 vs 0.8) right, (0.8+0.3
    // vs 0.1) right; g3 (0.7 vs 0.3): 1.0 vs 0.3 right, 0.7 vs 0.6 right; g4 (0.4 vs 0.6):
    // 0.7 vs 0.6 wrong, 0.9 vs 0.4 right → 7 of 8.
    assert_eq!(f(&on_marked["accuracy_a"]), 0.875, "{on_marked}");
    assert_eq!(f(&on_marked["accuracy_b"]), 1.0);
    assert_eq!(f(&on_marked["difference"]), 0.125);
    assert_eq!(on_marked["groups"], 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_and_html_reports_and_a_clear_verdict_between_judges() {
    let biased = MockJudge::start().await;
    biased.set_fallback(Behaviour::FirstBias(0.3));
    let faithful = MockJudge::start().await;
    let s = CliSetup::new(&format!(
        "default_judge = \"faithful\"\n{}{}",
        judge_toml("biased", &biased, 0),
        judge_toml("faithful", &faithful, 0)
    ));
    // 40 groups, every one with the better answer shown second and marked: the biased judge
    // (bias 0.3 over a gap of 0.2) gets each wrong in the given order and right reversed; the
    // faithful one always right. An answer with markup must come out escaped in the page.
    let mut text = String::new();
    for i in 0..40 {
        let l = json!({"id": format!("q{i}"), "set": "second",
            "trajectories": [traj("<script>alert(1)</script> Bob. SCORE=0.4"),
                             traj("Ada. SCORE=0.6")],
            "labels": [0, 1]});
        text.push_str(&format!("{l}\n"));
    }
    let file = s.write("second.jsonl", &text);
    let html = s.dir.path().join("report.html");
    let out = run(s.command(
        "eval",
        &[
            "--judge",
            "biased",
            "--judge",
            "faithful",
            "--format",
            "html",
            "-o",
            html.to_str().unwrap(),
            &file,
        ],
    ))
    .await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.starts_with("<!DOCTYPE html>"));
    for want in [
        "Pairwise accuracy",
        "Position bias",
        "Length bias",
        "Comparisons",
        "Misranked groups",
        "B is better",
        "&lt;script&gt;alert(1)&lt;&#x2f;script&gt; Bob.",
    ] {
        assert!(page.contains(want), "missing {want:?}");
    }
    assert!(!page.contains("<script>"), "unescaped input in the page");
    assert!(
        !page.contains("http://") && !page.contains("https://"),
        "external reference"
    );

    // The same run as text (from the cache): the verdict line and the figures.
    let out = run(s.command("eval", &["--judge", "biased", "--judge", "faithful", &file])).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stdout.contains("pairwise accuracy 0.500"),
        "{}",
        out.stdout
    );
    assert!(out
        .stdout
        .contains("pairwise accuracy 1.000 [1.000, 1.000]"));
    assert!(out.stdout.contains("flip rate 1.000"));
    assert!(out.stdout.contains("B is better"), "{}", out.stdout);
    let out = run(s.command(
        "eval",
        &[
            "--judge", "biased", "--judge", "faithful", "--format", "json", &file,
        ],
    ))
    .await;
    let report = out.json();
    let c = &report["comparisons"][0];
    assert_eq!(c["verdict"], "b_better");
    assert_eq!(c["ci95"], json!([0.5, 0.5]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_lines_are_named_before_any_judge_call() {
    let mock = MockJudge::start().await;
    let s = CliSetup::new(&format!(
        "default_judge = \"m\"\n{}",
        judge_toml("m", &mock, 0)
    ));
    let good = json!({"trajectories": [traj("a"), traj("b")], "labels": [1, 0]});
    let lines = [
        good.clone(),
        json!({"trajectories": [traj("a"), traj("b")]}),
        json!({"trajectories": [traj("a"), traj("b")], "labels": [1, 0, 2]}),
        json!({"trajectories": [traj("a"), traj("b")], "labels": [1, 1]}),
        json!({"trajectories": [traj("a"), traj("b")], "labels": [1, "x"]}),
        json!({"trajectories": [traj("a"), traj("b")], "labels": 1}),
        json!({"trajectories": [traj("a")], "labels": [1]}),
        json!({"trajectories": [traj("a"), traj("b")], "labels": [1, 0], "set": 3}),
        json!({"trajectories": [traj("a"), traj("b")], "labels": [1, 0], "judge_mod": "pairwise"}),
        json!({"trajectories": [traj("a"), traj("b")], "labels": [1, 0], "set": "all"}),
    ];
    let mut text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    text.push_str("{not json\n");
    let file = s.write("bad.jsonl", &text);
    let out = run(s.command("eval", &[&file])).await;
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    let problems: Vec<&str> = out.stderr.lines().collect();
    let want = [
        (2, "labels: missing"),
        (3, "labels: 3 labels for 2 trajectories"),
        (4, "labels: all equal"),
        (5, "labels[1]: expected a number"),
        (6, "labels: expected an array of numbers"),
        (7, "labels: all equal"),
        (8, "set: expected a non-empty string"),
        (9, "judge_mod: unknown field, did you mean judge_mode?"),
        (10, "set: \"all\" is the name of the figures pooled"),
        (11, "not valid JSON"),
    ];
    assert_eq!(problems.len(), want.len(), "{}", out.stderr);
    for ((line, what), got) in want.iter().zip(&problems) {
        assert!(
            got.starts_with(&format!("{file}:{line}: ")) && got.contains(what),
            "line {line}: {got}"
        );
    }
    assert_eq!(mock.calls(), 0);

    // Unknown judge or rubric, and bad options: usage errors, nothing judged.
    let ok = s.write("ok.jsonl", &format!("{good}\n"));
    for args in [
        vec!["--judge", "nope", ok.as_str()],
        vec!["--rubric", "nope", ok.as_str()],
        vec!["--orders", "0", ok.as_str()],
        vec!["--orders", "17", ok.as_str()],
        vec!["--permutations", "0", ok.as_str()],
    ] {
        let out = run(s.command("eval", &args)).await;
        assert_eq!(out.code, Some(2), "{args:?}: {}", out.stderr);
        assert_eq!(out.stderr.lines().count(), 1, "{}", out.stderr);
    }
    let missing = s.dir.path().join("missing.jsonl");
    let out = run(s.command("eval", &[missing.to_str().unwrap()])).await;
    assert_eq!(out.code, Some(2));
    assert!(
        out.stderr.contains("missing.jsonl: cannot read"),
        "{}",
        out.stderr
    );
    assert_eq!(mock.calls(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_judge_failure_is_counted_never_scored() {
    let mock = MockJudge::start().await;
    let s = CliSetup::new(&format!(
        "default_judge = \"m\"\n{}",
        judge_toml("m", &mock, 0)
    ));
    // The first request (group 1, as given) fails; everything after is judged.
    mock.push(Behaviour::Status(400, None, "{\"error\":\"bad\"}".into()));
    let file = s.write("pairs.jsonl", &pairs_file(true));
    let out = run(s.command("eval", &["--concurrency", "1", "--format", "json", &file])).await;
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    let report = out.json();
    let r = result(&report, "pairs", "m");
    assert_eq!(r["groups"], 4);
    assert_eq!(r["valid_groups"], 3);
    assert_eq!(r["pairs"], 3);
    assert_eq!(r["invalid"], 1);
    assert_eq!(
        r["errors"]
            .as_object()
            .unwrap()
            .values()
            .map(f)
            .sum::<f64>(),
        1.0
    );
    // The failed group is left out, not scored 0: the others are all right.
    assert_eq!(f(&r["pairwise_accuracy"]), 1.0);
    // Its one call (a 400 is not retried) is counted apart from the calls that gave verdicts.
    assert_eq!(r["usage"]["failed_calls"], 1, "{r}");
    assert_eq!(
        r["usage"]["judge_calls"].as_u64(),
        Some(mock.calls() as u64 - 1)
    );
}

/// A judge without a key: every judging is invalid, and the report says why in the judge's own
/// words, whole (text on stdout; JSON on stdout and the hint on stderr).
#[tokio::test(flavor = "multi_thread")]
async fn a_judge_without_a_key_is_explained_in_full() {
    let s = CliSetup::new(
        "default_judge = \"nokey\"\n[judges.nokey]\nbackend = \"openai\"\n\
         base_url = \"http://127.0.0.1:9/v1\"\nmodel = \"m\"\napi_key_env = \"GAVEL_TEST_UNSET_KEY\"\n",
    );
    let file = s.write("pairs.jsonl", &pairs_file(true));
    // With a config file, only the variable it names (not the no-file variables as well).
    let hint = "judge \"nokey\" has no API key: set the environment variable GAVEL_TEST_UNSET_KEY \
                (its api_key_env)";
    let out = run(s.command("eval", &[&file])).await;
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(
        out.stdout
            .contains(&format!("  no_judge_configured: {hint}\n")),
        "{}",
        out.stdout
    );
    let out = run(s.command("eval", &["--format", "json", &file])).await;
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    let r = out.json();
    assert_eq!(
        result(&r, "pairs", "nokey")["error_messages"]["no_judge_configured"],
        hint
    );
    assert!(
        out.stderr
            .contains(&format!("gavel eval: no_judge_configured: {hint}")),
        "{}",
        out.stderr
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verifier_set_reports_judge_and_verifier_accuracy_apart() {
    // The shipped verifier set, first 6 groups: the mock (no markers) ties every judge score,
    // while the answer-line verifier knows the truth.
    let mock = MockJudge::start().await;
    let s = CliSetup::new(&format!(
        "default_judge = \"m\"\n{}",
        judge_toml("m", &mock, 0)
    ));
    let file = format!("{EVALS}/gavel_answers.jsonl");
    let out = run(s.command(
        "eval",
        &["--limit", "6", "--orders", "1", "--format", "json", &file],
    ))
    .await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let report = out.json();
    let r = result(&report, "gavel_answers", "m");
    assert_eq!(r["groups"], 6);
    assert_eq!(
        f(&r["components"]["answer_line"]["pairwise_accuracy"]),
        1.0,
        "{r}"
    );
    assert_eq!(
        f(&r["components"]["judge"]["pairwise_accuracy"]),
        0.5,
        "{r}"
    );
    assert!(r["position"]["flip_rate"].is_null());
    assert_eq!(
        f(&r["pairwise_accuracy"]),
        1.0,
        "the reward follows the verifier: {r}"
    );
    assert_eq!(report["score"], "reward");
    // Ranking one component instead of the reward: the judge alone ties everything.
    let args = [
        "--limit", "6", "--orders", "1", "--score", "judge", "--format", "json", &file,
    ];
    let out = run(s.command("eval", &args)).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let report = out.json();
    assert_eq!(report["score"], "judge");
    let r = result(&report, "gavel_answers", "m");
    assert_eq!(f(&r["pairwise_accuracy"]), 0.5, "{r}");
    assert_eq!(r["usage"]["cache_hits"], 6, "from the cache: {r}");
    // A component the rewards do not have: every judging invalid, exit 1, never a score.
    let args = [
        "--limit", "6", "--orders", "1", "--score", "nope", "--format", "json", &file,
    ];
    let out = run(s.command("eval", &args)).await;
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    let report = out.json();
    let r = result(&report, "gavel_answers", "m");
    assert_eq!(r["valid_groups"], 0);
    assert_eq!(r["errors"]["no_component"], 6, "{r}");
    assert!(r["pairwise_accuracy"].is_null());
}

/// The three judging modes side by side on a tiny random-weight local model: one result per
/// mode, the probability modes reading one prompt per trajectory (pointwise) or per ordered
/// pair (pairwise), comparisons between every two; and a probability mode asked of a remote
/// judge is a usage error before any call.
#[cfg(feature = "local")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn judge_modes_side_by_side_on_a_local_model() {
    use common::model::testkit::{write_folder, TinyOptions};
    use gavel::model::Arch;
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("tiny");
    let mut o = TinyOptions::new(Arch::Qwen2);
    o.context_length = 8192;
    write_folder(&model, &o).unwrap();
    let s = CliSetup::new(&format!(
        "default_judge = \"tiny\"\n[judges.tiny]\nbackend = \"local\"\nmodel_path = {}\n\
         max_explanation_bytes = 8\n",
        toml::Value::String(model.display().to_string())
    ));
    let file = s.write("pairs.jsonl", &pairs_file(false));
    let args = [
        "--judge-mode",
        "listwise",
        "--judge-mode",
        "pointwise",
        "--judge-mode",
        "pairwise",
        "--format",
        "json",
        &file,
    ];
    let out = run_within(s.command("eval", &args), Duration::from_secs(600)).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let report = out.json();
    let results = report["results"].as_array().unwrap();
    let modes: Vec<&str> = results
        .iter()
        .map(|r| r["judge_mode"].as_str().unwrap())
        .collect();
    assert_eq!(modes, ["listwise", "pointwise", "pairwise"]);
    // Accuracy by confidence for the two probability modes only: listwise verdicts have none.
    let conf: Vec<&str> = report["confidence"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["judge_mode"].as_str().unwrap())
        .collect();
    assert_eq!(conf, ["pointwise", "pairwise"]);
    // 4 two-trajectory groups × 2 orders: listwise 1 call a judging; pointwise 2 questions (one
    // per trajectory) and pairwise 2 (both orders of the one pair) for the first order. The
    // reversed order is a verdict of its own (the key follows the candidates' order), but its
    // prompts are the first order's, each read from the store: no call.
    let calls: Vec<u64> = results
        .iter()
        .map(|r| r["usage"]["judge_calls"].as_u64().unwrap())
        .collect();
    assert_eq!(calls, [8, 8, 8], "{report}");
    assert!(results.iter().all(|r| r["usage"]["cache_hits"] == 0));
    assert_eq!(results[1]["usage"]["completion_tokens"], 0);
    for r in results {
        assert_eq!(r["valid_groups"], 4, "{r}");
        let acc = f(&r["pairwise_accuracy"]);
        assert!((0.0..=1.0).contains(&acc), "{r}");
    }
    // Probability modes see no order: their decisions never flip.
    assert_eq!(f(&results[1]["position"]["flip_rate"]), 0.0);
    assert_eq!(f(&results[2]["position"]["flip_rate"]), 0.0);
    assert_eq!(report["comparisons"].as_array().unwrap().len(), 3);

    let mock = MockJudge::start().await;
    let s = CliSetup::new(&format!(
        "default_judge = \"m\"\n{}",
        judge_toml("m", &mock, 0)
    ));
    // A remote judge reads probabilities too (its server's logprobs): the markers decide, in
    // both probability modes, and pairwise never flips.
    let file = s.write("pairs.jsonl", &pairs_file(true));
    let out = run(s.command(
        "eval",
        &[
            "--judge-mode",
            "pointwise",
            "--judge-mode",
            "pairwise",
            "--format",
            "json",
            &file,
        ],
    ))
    .await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let report: Value = serde_json::from_str(&out.stdout).unwrap();
    let results = report["results"].as_array().unwrap();
    assert_eq!(results.len(), 2, "{report}");
    for r in results {
        assert_eq!(f(&r["pairwise_accuracy"]), 1.0, "{r}");
    }
    assert_eq!(f(&results[1]["position"]["flip_rate"]), 0.0);
    // Both modes carry a confidence: accuracy by it, over 4 groups × 2 orders × 1 pair.
    let conf = report["confidence"].as_array().unwrap();
    assert_eq!(conf.len(), 2, "{report}");
    for c in conf {
        assert_eq!(c["pairs"], 8, "{c}");
        assert_eq!(c["coverage"].as_array().unwrap().len(), 10, "{c}");
        assert_eq!(f(&c["coverage"][9]["accuracy"]), 1.0, "{c}");
        assert_eq!(f(&c["area"]), 1.0, "every pair right: {c}");
    }
    let asked = mock.requests();
    assert!(asked
        .iter()
        .all(|r| r["logprobs"] == true && r["max_tokens"] == 1));
    // 4 groups of 2, each judged as given and reversed (eval's two orders): pointwise 2
    // prompts, pairwise the pair in both orders, asked for the first order only (the reversed
    // order's prompts are the same, read from the store).
    assert_eq!(asked.len(), 4 * 2 + 4 * 2, "{}", asked.len());
    // The HTML report plots accuracy by coverage, a line per mode (from the store: no call).
    let html = s.dir.path().join("confidence.html");
    let out = run(s.command(
        "eval",
        &[
            "--judge-mode",
            "pointwise",
            "--judge-mode",
            "pairwise",
            "--format",
            "html",
            "-o",
            html.to_str().unwrap(),
            &file,
        ],
    ))
    .await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("<h2>Confidence"), "{page}");
    assert_eq!(page.matches("<polyline").count(), 2);
    let out = run(s.command("eval", &["--judge-mode", "pointwise", &file])).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stdout
            .contains("(8 pairs; accuracy-coverage area 1.000)")
            && out.stdout.contains("most confident: 10% 1.000 · 20% 1.000"),
        "{}",
        out.stdout
    );
    assert_eq!(mock.requests().len(), asked.len());
}

/// Two-trajectory groups for the mock in pointwise mode, where a trajectory's P(yes) is its
/// `SCORE=` marker and its confidence |2·P(yes) − 1|. A group's confidence is its less sure
/// trajectory's: 35 groups at 0.9 ranked right (markers 0.95 and 0.02: confidences 0.9 and
/// 0.96), 10 at 0.7 right (0.85 and 0.1: 0.7 and 0.8), then 20 at 0.5 of which 10 wrong
/// (0.8 and 0.25: 0.6 and 0.5). Per pair as the mean of the two confidences, they would read
/// 0.93, 0.75 and 0.55 instead.
fn calibration_file() -> String {
    let mut out = String::new();
    let mut line = |i: usize, better: f64, worse: f64| {
        let l = json!({"id": format!("c{i}"), "trajectories": [
            traj(&format!("Answer {i}, the better one. SCORE={better}")),
            traj(&format!("Answer {i}, the worse one. SCORE={worse}"))], "labels": [1, 0]});
        out.push_str(&format!("{l}\n"));
    };
    for i in 0..35 {
        line(i, 0.95, 0.02);
    }
    for i in 35..45 {
        line(i, 0.85, 0.1);
    }
    for i in 45..65 {
        if i % 2 == 0 {
            line(i, 0.8, 0.25);
        } else {
            line(i, 0.25, 0.8);
        }
    }
    out
}

/// `--calibrate`: the threshold follows from the data by hand. At α = δ = 0.1 a candidate must
/// keep 38 pairs (so that one may be wrong): 0.9 (35 pairs) is skipped, 0.7 (45 of 45 right:
/// bound 0.1^(1/45) = 0.950) passes and 0.5 (55 of 65) fails, so the threshold is 0.7; at
/// α = 0.08 a candidate must keep 48, and the first, 0.5, fails; on 20 groups there are too
/// few pairs to test; a listwise verdict cannot be calibrated; and α outside (0, 1) is refused
/// before any call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calibrate_chooses_the_lowest_threshold_whose_bound_holds() {
    use gavel::eval::calibrate::clopper_pearson_lower;
    let mock = MockJudge::start().await;
    let s = CliSetup::new(&format!(
        "default_judge = \"m\"\n{}",
        judge_toml("m", &mock, 0)
    ));
    let file = s.write("cal.jsonl", &calibration_file());
    // Two orders (the default): each group still counts once, in the order given.
    let base = ["--judge-mode", "pointwise"];
    let with = |more: &[&str]| -> Vec<String> {
        base.iter()
            .chain(more)
            .map(|a| a.to_string())
            .chain([file.clone()])
            .collect()
    };
    let args = with(&[
        "--judge-mode",
        "listwise",
        "--calibrate",
        "--format",
        "json",
    ]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = run(s.command("eval", &args)).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let report = out.json();
    let cal = report["calibration"].as_array().unwrap();
    assert_eq!(cal.len(), 2, "{report}");
    let c = &cal[0];
    assert_eq!(c["judge_mode"], "pointwise", "{c}");
    assert_eq!(c["thresholds"], json!([0.7]), "{c}");
    assert!(c.get("no_threshold").is_none(), "{c}");
    assert_eq!((f(&c["alpha"]), f(&c["delta"])), (0.1, 0.1));
    assert_eq!(
        (c["groups"].as_u64(), c["pairs"].as_u64()),
        (Some(65), Some(65))
    );
    assert_eq!(
        (c["kept_groups"].as_u64(), c["kept_pairs"].as_u64()),
        (Some(45), Some(45))
    );
    assert!((f(&c["coverage"]) - 45.0 / 65.0).abs() < 1e-8, "{c}");
    assert_eq!(f(&c["group_coverage"]), f(&c["coverage"]));
    assert_eq!(f(&c["accuracy"]), 1.0);
    assert!(
        (f(&c["lower_bound"]) - 0.1f64.powf(1.0 / 45.0)).abs() < 1e-8,
        "{c}"
    );
    assert_eq!(
        (c["min_pairs"].as_u64(), c["tested"].as_u64()),
        (Some(38), Some(2))
    );
    let stop = &c["stopped_at"];
    assert_eq!(
        (f(&stop["threshold"]), stop["pairs"].as_u64()),
        (0.5, Some(65))
    );
    assert!((f(&stop["lower_bound"]) - clopper_pearson_lower(55, 65, 0.1)).abs() < 1e-8);
    assert!(f(&stop["lower_bound"]) < 0.9, "{stop}");
    // The listwise result has no confidence: an entry that says so, with no threshold.
    assert_eq!(cal[1]["judge_mode"], "listwise");
    assert_eq!(cal[1]["thresholds"], json!([]));
    assert_eq!(cal[1]["no_threshold"], "no_confidence", "{}", cal[1]);
    let calls = mock.requests().len();

    // The text report: the figures, and the line for a cascade's table. From the store: no call.
    let args = with(&["--calibrate"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = run(s.command("eval", &args)).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    for want in [
        "threshold 0.7: keeps 45 of 65 pairs (coverage 0.692) in 45 of 65 groups",
        "accuracy 1.000 · lower bound 0.950",
        "next candidate down at 0.5: 65 pairs, accuracy 0.846",
        "thresholds = [0.7]   # judge \"m\", pointwise, set \"cal\": α 0.1, δ 0.1, \
         coverage 0.69 of groups, bound 0.950",
    ] {
        assert!(out.stdout.contains(want), "{want:?} in\n{}", out.stdout);
    }
    // A stricter α: the first candidate tested already fails. Never an invented threshold.
    let args = with(&["--calibrate", "--alpha", "0.08", "--format", "json"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = run(s.command("eval", &args)).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let c = &out.json()["calibration"][0];
    assert_eq!(c["thresholds"], json!([]), "{c}");
    assert_eq!(c["no_threshold"], "bound_too_low");
    assert_eq!(
        (c["kept_pairs"].as_u64(), c["tested"].as_u64()),
        (Some(0), Some(1))
    );
    assert!(c["lower_bound"].is_null());
    assert_eq!(f(&c["stopped_at"]["threshold"]), 0.5, "{c}");
    assert_eq!(c["min_pairs"].as_u64(), Some(48), "{c}");
    // 20 groups: 20 pairs, fewer than a candidate must keep.
    let args = with(&["--calibrate", "--limit", "20"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = run(s.command("eval", &args)).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stdout
            .contains("no threshold: 20 labelled pairs with a confidence, and a threshold must keep at least 38")
            && out.stdout.contains("no threshold at α 0.1, δ 0.1: the stage can decide nothing"),
        "{}",
        out.stdout
    );
    // The HTML page has its section and the cascade's line.
    let html = s.dir.path().join("cal.html");
    let args = with(&[
        "--calibrate",
        "--format",
        "html",
        "-o",
        html.to_str().unwrap(),
    ]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = run(s.command("eval", &args)).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(
        page.contains("<h2>Calibration") && page.contains("thresholds = [0.7]"),
        "{page}"
    );
    assert_eq!(
        mock.requests().len(),
        calls,
        "every later run read the store"
    );
    // α outside (0, 1): one plain line, nothing judged.
    for bad in ["0", "1.5"] {
        let args = with(&["--calibrate", "--alpha", bad]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = run(s.command("eval", &args)).await;
        assert_eq!(out.code, Some(2), "{}", out.stderr);
        assert_eq!(
            out.stderr.trim(),
            format!("gavel eval: --alpha must be between 0 and 1 (exclusive), got {bad}")
        );
    }
    // --alpha or --delta without --calibrate would do nothing: refused, not ignored.
    for flag in ["--alpha", "--delta"] {
        let args = with(&[flag, "0.2"]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = run(s.command("eval", &args)).await;
        assert_eq!(out.code, Some(2), "{}", out.stderr);
        assert!(out.stderr.contains("--calibrate"), "{}", out.stderr);
    }
    assert_eq!(mock.requests().len(), calls);
}

#[test]
fn shipped_sets_read_and_are_balanced() {
    // Every shipped line is a valid labelled group (the reader's checks), and the QA set is
    // length-balanced, so "prefer the longer" scores 0.5 there.
    for (name, min_groups) in [
        ("halueval_qa", 200),
        ("halueval_summarization", 100),
        ("gavel_answers", 40),
    ] {
        let path = PathBuf::from(format!("{EVALS}/{name}.jsonl"));
        let groups = gavel::toolkit::groupfile::read_groups::<gavel::eval::Labels>(&path, 64)
            .unwrap_or_else(|p| panic!("{}", p.join("\n")));
        assert!(groups.len() >= min_groups, "{name}: {}", groups.len());
        if name == "halueval_qa" {
            let mut longer = 0;
            for g in &groups {
                let l = &g.extra.labels;
                let len: Vec<usize> = g
                    .request
                    .trajectories
                    .iter()
                    .map(gavel::eval::agent_length)
                    .collect();
                let (b, w) = if l[0] > l[1] { (0, 1) } else { (1, 0) };
                assert_ne!(len[b], len[w]);
                longer += usize::from(len[b] > len[w]);
            }
            assert_eq!(longer * 2, groups.len(), "{name}: not length-balanced");
        }
    }
}

/// A config whose default judge is the local model at `model`, with `extra` judge keys and
/// deadlines patient enough for a debug build on two cores.
fn real_model_config(model: &std::ffi::OsStr, extra: &str) -> String {
    format!(
        "default_judge = \"local\"\n[judges.local]\nbackend = \"local\"\nmodel_path = {}\n\
         {extra}deadline_s = 3600\n\n[server]\nrequest_timeout_s = 3600\n",
        toml::Value::String(model.to_string_lossy().into_owned())
    )
}

/// With `GAVEL_TEST_MODEL` (CI: the 0.5B test model): a 4-group eval of the shipped QA set on
/// the real model produces a complete report. No accuracy threshold here (the 1.5B test below has
/// one). 4 groups in 2 orders reach every figure of the report; each more is another listwise
/// decode on the real model, which CI's 2 cores pay in full.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_model_eval_produces_a_complete_report() {
    let Some(model) = std::env::var_os("GAVEL_TEST_MODEL") else {
        eprintln!("skipped: set GAVEL_TEST_MODEL to a Qwen2.5 GGUF file or model folder to run");
        return;
    };
    let s = CliSetup::new(&real_model_config(
        &model,
        "mode = \"listwise\"\nmax_explanation_bytes = 0\n",
    ));
    let file = format!("{EVALS}/halueval_qa.jsonl");
    let html = s.dir.path().join("real.html");
    let t0 = std::time::Instant::now();
    let hour = Duration::from_secs(3600);
    let args = ["--limit", "4", "--format", "json", &file];
    let out = run_within(s.command("eval", &args), hour).await;
    eprintln!("4 groups, 2 orders, in {:?}", t0.elapsed());
    assert!(matches!(out.code, Some(0 | 1)), "{}", out.stderr);
    let report = out.json();
    let r = result(&report, "halueval_qa", "local");
    assert_eq!(r["groups"], 4);
    let valid = r["valid_groups"].as_u64().unwrap();
    assert_eq!(r["pairs"].as_u64().unwrap(), valid);
    assert_eq!(
        r["usage"]["judge_calls"].as_u64().unwrap() + r["invalid"].as_u64().unwrap(),
        8,
        "{r}"
    );
    assert!(valid > 0, "{r}");
    for key in ["pairwise_accuracy", "top1_accuracy", "seconds_per_group"] {
        let v = f(&r[key]);
        assert!(
            (0.0..=1.0).contains(&v) || key == "seconds_per_group",
            "{key}: {v}"
        );
    }
    let [lo, hi] = [f(&r["ci95"][0]), f(&r["ci95"][1])];
    assert!(lo <= f(&r["pairwise_accuracy"]) && f(&r["pairwise_accuracy"]) <= hi);
    for key in [
        "flip_rate",
        "accuracy_better_first",
        "accuracy_better_later",
    ] {
        assert!(r["position"][key].is_number(), "{key}: {r}");
    }
    for key in [
        "accuracy_better_longer",
        "accuracy_better_shorter",
        "prefer_longer",
    ] {
        assert!(r["length"][key].is_number(), "{key}: {r}");
    }
    assert_eq!(
        r["calibration"]["histogram"]
            .as_array()
            .unwrap()
            .iter()
            .map(f)
            .sum::<f64>(),
        (4 * valid) as f64
    );
    assert!(r["usage"]["prompt_tokens"].as_u64().unwrap() > 0);
    // The HTML page from the same verdicts (all cached now).
    let out = run(s.command(
        "eval",
        &[
            "--limit",
            "4",
            "--format",
            "html",
            "-o",
            html.to_str().unwrap(),
            &file,
        ],
    ))
    .await;
    assert!(matches!(out.code, Some(0 | 1)), "{}", out.stderr);
    assert!(std::fs::read_to_string(&html)
        .unwrap()
        .contains("Pairwise accuracy"));
}

/// With `GAVEL_TEST_MODEL_1_5B` (CI: the 1.5B test model): a local judge in its default mode
/// (pointwise) ranks the right answer above the hallucinated one on the first 20 groups of the
/// shipped QA set with pairwise accuracy of at least 0.8, and the order the group comes in
/// changes nothing (flip rate 0: each answer is judged alone). The shipped judge adapter
/// (`adapters/judge-qwen2.5-coder-1.5b`, as `examples/local-tuned.toml` serves it) loads on
/// that model and reaches at least 0.9 on the same groups.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_1_5b_model_ranks_the_qa_set() {
    let Some(model) = std::env::var_os("GAVEL_TEST_MODEL_1_5B") else {
        eprintln!(
            "skipped: set GAVEL_TEST_MODEL_1_5B to the 1.5B test model (tools/fetch-model.sh 1.5b)"
        );
        return;
    };
    let adapter = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/adapters/judge-qwen2.5-coder-1.5b"
    );
    let tuned = format!(
        "\n[judges.tuned]\nbackend = \"local\"\nmodel_path = {}\nadapter = {}\n\
         mode = \"{TUNED_MODE}\"\ndeadline_s = 3600\n",
        toml::Value::String(model.to_string_lossy().into_owned()),
        toml::Value::String(adapter.into())
    );
    let s = CliSetup::new(&(real_model_config(&model, "") + &tuned));
    let file = format!("{EVALS}/halueval_qa.jsonl");
    let t0 = std::time::Instant::now();
    let args = [
        "--limit", "20", "--format", "json", "--judge", "local", "--judge", "tuned", &file,
    ];
    let out = run_within(s.command("eval", &args), Duration::from_secs(3600)).await;
    eprintln!("20 groups, 2 orders, 2 judges, in {:?}", t0.elapsed());
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let report = out.json();
    let r = result(&report, "halueval_qa", "local");
    eprintln!("{}", serde_json::to_string(r).unwrap());
    assert_eq!(r["judge_mode"], "pointwise", "{r}");
    assert_eq!(r["groups"], 20);
    assert_eq!(r["valid_groups"], 20, "{r}");
    let acc = f(&r["pairwise_accuracy"]);
    assert!(acc >= 0.8, "pairwise accuracy {acc} < 0.8: {r}");
    assert_eq!(f(&r["position"]["flip_rate"]), 0.0, "{r}");
    let t = result(&report, "halueval_qa", "tuned");
    eprintln!("{}", serde_json::to_string(t).unwrap());
    assert_eq!(t["judge_mode"], TUNED_MODE, "{t}");
    assert_eq!(t["valid_groups"], 20, "{t}");
    let acc = f(&t["pairwise_accuracy"]);
    assert!(
        acc >= 0.9,
        "with the shipped adapter: pairwise accuracy {acc} < 0.9: {t}"
    );
}

/// The mode `examples/local-tuned.toml` serves the 1.5B's adapter in.
const TUNED_MODE: &str = "pairwise";

/// With `GAVEL_TEST_MODEL` (CI: the 0.5B test model): the shipped 0.5B judge adapter loads on
/// that model (its recorded base fingerprint is the test model's) and judges QA groups in the
/// mode it was trained for, with a verdict for every trajectory; a judge configured for the
/// other mode is refused at start, naming the mode the adapter serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shipped_0_5b_adapter_loads_on_the_test_model() {
    let Some(model) = std::env::var_os("GAVEL_TEST_MODEL") else {
        eprintln!(
            "skipped: set GAVEL_TEST_MODEL to the 0.5B test model (tools/fetch-model.sh 0.5b)"
        );
        return;
    };
    let adapter = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/adapters/judge-qwen2.5-coder-0.5b"
    );
    let file = format!("{EVALS}/halueval_qa.jsonl");
    let args = ["--limit", "2", "--orders", "1", "--format", "json", &file];
    for mode in ["pairwise", "pointwise"] {
        let extra = format!(
            "adapter = {}\nmode = \"{mode}\"\nmax_explanation_bytes = 0\n",
            toml::Value::String(adapter.into())
        );
        let s = CliSetup::new(&real_model_config(&model, &extra));
        let out = run_within(s.command("eval", &args), Duration::from_secs(1800)).await;
        if mode == "pointwise" {
            assert_ne!(out.code, Some(0), "{}", out.stdout);
            let refusal = "this adapter was trained for mode pairwise";
            assert!(out.stderr.contains(refusal), "{}", out.stderr);
            continue;
        }
        assert_eq!(out.code, Some(0), "{}", out.stderr);
        let report = out.json();
        let r = result(&report, "halueval_qa", "local");
        assert_eq!(r["judge_mode"], mode, "{r}");
        assert_eq!(r["valid_groups"], 2, "{r}");
    }
}
