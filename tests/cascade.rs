//! A cascade of judges (`backend = "cascade"`) over real HTTP: a cheap pointwise stage decides
//! the groups it is sure of, the strong stage the rest, each stage's verdicts cached under its
//! own identity. Two mock judges: `fast` reads probabilities (P(yes) = each trajectory's
//! `SCORE=` marker, so its confidence is |2·marker − 1|), `strong` answers listwise.

mod common;

use common::cli::{judge_toml, run, CliSetup};
use common::{marked_group, remote, simple_traj, Behaviour, Gavel, MockJudge};
use gavel::config::{Config, JudgeConfig};
use gavel::domain::prompt::JudgeMode;
use gavel::judge::cascade::CascadeConfig;
use serde_json::{json, Value};

/// A daemon whose default judge is the cascade `name`: `fast` then `strong`, at threshold `t`.
/// (Each test names its cascade apart: the metrics registry is the process's.)
async fn daemon(
    name: &str,
    fast: &MockJudge,
    strong: &MockJudge,
    store: &std::path::Path,
    t: f64,
) -> Gavel {
    Gavel::start(config(name, fast, strong, store, t)).await
}

fn config(
    name: &str,
    fast: &MockJudge,
    strong: &MockJudge,
    store: &std::path::Path,
    t: f64,
) -> Config {
    let mut cfg = fast.config(store);
    cfg.judges.clear();
    cfg.judges.insert("fast".into(), fast.judge_config());
    cfg.judges.insert("strong".into(), strong.judge_config());
    remote(&mut cfg, "fast").common.mode = Some(JudgeMode::Pointwise);
    cfg.judges.insert(
        name.into(),
        JudgeConfig::Cascade(CascadeConfig {
            stages: vec!["fast".into(), "strong".into()],
            thresholds: vec![t],
        }),
    );
    cfg.default_judge = Some(name.into());
    cfg
}

fn stages(body: &Value) -> Vec<String> {
    body["scores"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["judge"].as_str().unwrap_or("-").to_string())
        .collect()
}

fn calls(body: &Value) -> u64 {
    body["usage"]["judge_calls"].as_u64().unwrap()
}

#[tokio::test]
async fn the_fast_stage_decides_what_it_is_sure_of_and_the_strong_one_the_rest() {
    let (fast, strong) = (MockJudge::start().await, MockJudge::start().await);
    let dir = tempfile::tempdir().unwrap();
    let gavel = daemon("c1", &fast, &strong, &dir.path().join("store"), 0.6).await;

    // Sure of both (confidence 0.9 each): the fast stage's verdict stands.
    let (status, body) = gavel
        .post("/v1/score_group", &marked_group(&[0.95, 0.05]))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(stages(&body), ["fast", "fast"], "{body}");
    assert_eq!(strong.calls(), 0);
    assert_eq!(calls(&body), 2, "two pointwise prompts");

    // Unsure of one (confidence 0.1 < 0.6): the whole group goes to the strong stage, and
    // every reward comes from its verdict.
    let unsure = marked_group(&[0.95, 0.55]);
    let (status, body) = gavel.post("/v1/score_group", &unsure).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(stages(&body), ["strong", "strong"], "{body}");
    assert_eq!(strong.calls(), 1, "one listwise verdict");
    // The fast stage's call counts too: one prompt (the first trajectory's was read in the
    // first group, and is cached), then the strong stage's verdict.
    assert_eq!(calls(&body), 2, "{body}");
    assert_eq!(body["usage"]["distinct_trajectories"], 2, "{body}");
    assert!(
        body["scores"][0]["confidence"].is_null(),
        "the strong stage is listwise: {body}"
    );

    // Again: both stages' verdicts are cached, nothing is asked.
    let before = (fast.calls(), strong.calls());
    let (_, again) = gavel.post("/v1/score_group", &unsure).await;
    assert_eq!((fast.calls(), strong.calls()), before);
    assert_eq!(calls(&again), 0);
    assert_eq!(again["rewards"], body["rewards"]);

    // Metrics count decisions and escalations per stage, described.
    let text = gavel.metrics_text().await;
    for (name, _) in gavel::server::metrics::CASCADE_DESCRIPTIONS {
        assert!(text.contains(&format!("# HELP {name} ")), "{name}:\n{text}");
    }
    for line in [
        r#"gavel_cascade_decisions_total{cascade="c1",stage="fast"} 1"#,
        r#"gavel_cascade_decisions_total{cascade="c1",stage="strong"} 2"#,
        r#"gavel_cascade_escalations_total{cascade="c1",stage="fast",cause="unsure"} 2"#,
    ] {
        assert!(text.contains(line), "{line} not in:\n{text}");
    }
    gavel.stop().await;

    // A lower threshold over the same store: the fast stage's cached verdict now stands, at no
    // call.
    let gavel = daemon("c1", &fast, &strong, &dir.path().join("store"), 0.05).await;
    let before = (fast.calls(), strong.calls());
    let (status, body) = gavel.post("/v1/score_group", &unsure).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(stages(&body), ["fast", "fast"], "{body}");
    assert_eq!(fast.calls(), before.0);
    assert_eq!(strong.calls(), before.1);
    assert_eq!(calls(&body), 0);
}

#[tokio::test]
async fn a_failing_stage_escalates_and_a_failing_last_stage_is_an_error() {
    let (fast, strong) = (MockJudge::start().await, MockJudge::start().await);
    let dir = tempfile::tempdir().unwrap();
    let gavel = daemon("c2", &fast, &strong, &dir.path().join("store"), 0.6).await;
    fast.set_fallback(Behaviour::Status(500, None, "down".into()));
    let before = (fast.calls(), strong.calls());
    let (status, body) = gavel
        .post("/v1/score_group", &marked_group(&[0.95, 0.05]))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(stages(&body), ["strong", "strong"], "{body}");
    // The failed stage's attempts are counted apart from the calls behind the verdict.
    assert_eq!(
        body["usage"]["failed_calls"].as_u64(),
        Some((fast.calls() - before.0) as u64),
        "{body}"
    );
    assert!(fast.calls() > before.0);
    assert_eq!(
        body["usage"]["judge_calls"].as_u64(),
        Some((strong.calls() - before.1) as u64),
        "{body}"
    );
    let text = gavel.metrics_text().await;
    assert!(
        text.contains(
            r#"gavel_cascade_escalations_total{cascade="c2",stage="fast",cause="failed"} 1"#
        ),
        "{text}"
    );
    // The last stage failing too: the request fails as a judge failure, never a score.
    strong.set_fallback(Behaviour::Status(500, None, "down".into()));
    let (status, body) = gavel
        .post("/v1/score_group", &marked_group(&[0.9, 0.2]))
        .await;
    assert_eq!(status, 502, "{body}");
    assert_eq!(body["error"]["type"], "judge_unavailable", "{body}");
}

#[tokio::test]
async fn a_cascade_judges_alone_in_its_stages_own_modes() {
    let (fast, strong) = (MockJudge::start().await, MockJudge::start().await);
    let dir = tempfile::tempdir().unwrap();
    let gavel = daemon("c3", &fast, &strong, &dir.path().join("store"), 0.6).await;
    let mut g = marked_group(&[0.9, 0.1]);
    g["judge"] = json!(["c3", "strong"]);
    let (status, body) = gavel.post("/v1/score_group", &g).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["param"], "judge[0]", "{body}");
    let mut g = marked_group(&[0.9, 0.1]);
    g["judge_mode"] = json!("pairwise");
    let (status, body) = gavel.post("/v1/score_group", &g).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["param"], "judge_mode", "{body}");
    // Named as the judge, it is the default's cascade.
    let mut g = marked_group(&[0.9, 0.1]);
    g["judge"] = json!("c3");
    let (status, body) = gavel.post("/v1/score_group", &g).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(stages(&body), ["fast", "fast"]);
}

#[test]
fn a_cascade_table_is_read_and_checked_with_the_file() {
    let env = |_: &str| None;
    let file = |extra: &str| {
        format!(
            "default_judge = \"c\"\n\
             [judges.fast]\nbackend = \"remote\"\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"m\"\nmode = \"pointwise\"\n\
             [judges.strong]\nbackend = \"remote\"\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"m\"\n\
             [judges.c]\nbackend = \"cascade\"\n{extra}"
        )
    };
    let cfg = Config::from_toml(
        &file("stages = [\"fast\", \"strong\"]\nthresholds = [0.62]\n"),
        "g.toml",
        &env,
    )
    .unwrap();
    let c = cfg.judges["c"].as_cascade().unwrap();
    assert_eq!(c.thresholds, [0.62]);
    for (extra, problem) in [
        (
            "stages = [\"strong\", \"fast\"]\nthresholds = [0.5]\n",
            "stage \"strong\" judges listwise",
        ),
        (
            "stages = [\"fast\", \"nope\"]\nthresholds = [0.5]\n",
            "stage \"nope\" is not a [judges.NAME] table",
        ),
        (
            "stages = [\"fast\", \"strong\"]\n",
            "thresholds needs one value per stage but the last",
        ),
        (
            "stages = [\"fast\", \"strong\"]\nthresholds = [0.5]\nmodel = \"x\"\n",
            "model is a key of backend",
        ),
    ] {
        let e = Config::from_toml(&file(extra), "g.toml", &env)
            .unwrap_err()
            .to_string();
        assert!(e.contains("[judges.c]") && e.contains(problem), "{e}");
    }
}

#[tokio::test]
async fn render_shows_the_first_stages_prompt_and_the_plan() {
    let (fast, strong) = (MockJudge::start().await, MockJudge::start().await);
    let dir = tempfile::tempdir().unwrap();
    let gavel = daemon("c4", &fast, &strong, &dir.path().join("store"), 0.7).await;
    let (status, shown) = gavel.post("/v1/render", &marked_group(&[0.9, 0.1])).await;
    assert_eq!(status, 200, "{shown}");
    assert_eq!(shown["template"]["name"], "pointwise", "{shown}");
    assert_eq!(
        shown["cascade"],
        json!([
            {"judge": "fast", "mode": "pointwise", "threshold": 0.7},
            {"judge": "strong", "mode": "listwise"}
        ]),
        "{shown}"
    );
}

/// `gavel eval` of a cascade: which stage decided how much and how right it was there, from
/// the responses; its last stage beside it for the paired comparison.
#[tokio::test]
async fn eval_reports_what_each_stage_decided() {
    let (fast, strong) = (MockJudge::start().await, MockJudge::start().await);
    let s = CliSetup::new(&format!(
        "default_judge = \"c5\"\n{}\nmode = \"pointwise\"\n\n{}[judges.c5]\nbackend = \"cascade\"\n\
         stages = [\"fast\", \"strong\"]\nthresholds = [0.6]\n",
        judge_toml("fast", &fast, 0).trim_end(),
        judge_toml("strong", &strong, 0)
    ));
    // Two groups the fast stage is sure of (right), one it is not (the strong stage decides;
    // the markers rank it wrong, so the strong stage's accuracy there is 0).
    let line = |a: f64, b: f64, labels: [u8; 2]| {
        json!({"trajectories": [simple_traj(&format!("A SCORE={a}")), simple_traj(&format!("B SCORE={b}"))],
               "labels": labels})
        .to_string()
    };
    let file = s.write(
        "set.jsonl",
        &[
            line(0.95, 0.05, [1, 0]),
            line(0.1, 0.9, [0, 1]),
            line(0.55, 0.5, [0, 1]),
        ]
        .join("\n"),
    );
    let out = run(s.command(
        "eval",
        &[
            "--judge", "c5", "--judge", "strong", "--format", "json", &file,
        ],
    ))
    .await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let report = out.json();
    let c = &report["cascades"][0];
    assert_eq!(c["judge"], "c5", "{report}");
    assert_eq!(c["judgings"], 6, "3 groups × 2 orders: {c}");
    assert_eq!(c["stages"][0]["stage"], "fast");
    assert_eq!(c["stages"][0]["decided"], 4, "{c}");
    assert_eq!(c["stages"][0]["pairwise_accuracy"], 1.0, "{c}");
    assert_eq!(c["stages"][1]["decided"], 2, "{c}");
    assert_eq!(c["stages"][1]["pairwise_accuracy"], 0.0, "{c}");
    assert!(
        (c["last_stage_saved"].as_f64().unwrap() - 2.0 / 3.0).abs() < 1e-6,
        "{c}"
    );
    // The last stage alone is the other combination, compared pairwise with the cascade.
    assert_eq!(
        report["comparisons"].as_array().unwrap().len(),
        1,
        "{report}"
    );
    assert_eq!(
        report["cascades"].as_array().unwrap().len(),
        1,
        "only the cascade: {report}"
    );
}
