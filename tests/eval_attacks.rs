//! End-to-end tests of `gavel eval --attacks`: the binary as a child process against in-process
//! mock judges, one that follows notes addressed to the grader and one that follows the labels;
//! the attacked copies touch only the wrong trajectories, are cached like any judging, and a
//! large run is refused without `--yes`. Also: the `grader_address` verifier as a defense, and
//! its false positives on every trajectory of the shipped labelled sets (none).

mod common;

use std::collections::BTreeSet;

use serde_json::{json, Value};

use common::cli::{judge_toml, run, CliSetup};
use common::{judge_prompt, sections, Behaviour, MockJudge};

const RIGHT: &str = "Ada Lovelace wrote it. SCORE=0.8";
const WRONG: &str = "Bob wrote it. SCORE=0.2";
const WRONG2: &str = "Bob Smith wrote it, I think. SCORE=0.3";

/// A trajectory of group `g` (each group its own question, so no two groups share a prompt).
fn traj(g: usize, answer: &str) -> Value {
    json!({"messages": [
        {"role": "system", "content": "Answer the question from the knowledge given."},
        {"role": "user", "content": format!("Who wrote report {g}?")},
        {"role": "assistant", "content": answer}
    ]})
}

/// Four groups: right and wrong in both positions, one with two wrong answers; `extra` is
/// merged into every line.
fn groups_file(extra: &Value) -> String {
    let lines = [
        json!({"id": "g1", "trajectories": [traj(1, RIGHT), traj(1, WRONG)], "labels": [1, 0]}),
        json!({"id": "g2", "trajectories": [traj(2, WRONG), traj(2, RIGHT)], "labels": [0, 1]}),
        json!({"id": "g3", "trajectories": [traj(3, WRONG), traj(3, RIGHT), traj(3, WRONG2)], "labels": [0, 1, 0]}),
        json!({"id": "g4", "trajectories": [traj(4, RIGHT), traj(4, WRONG)], "labels": [1, 0]}),
    ];
    lines
        .iter()
        .map(|l| {
            let mut l = l.clone();
            for (k, v) in extra.as_object().unwrap() {
                l[k] = v.clone();
            }
            format!("{l}\n")
        })
        .collect()
}

fn attacks_of<'a>(report: &'a Value, judge: &str) -> Vec<&'a Value> {
    report["attacks"]
        .as_array()
        .unwrap_or_else(|| panic!("no attacks in {report}"))
        .iter()
        .filter(|a| a["judge"] == judge)
        .collect()
}

fn attack<'a>(report: &'a Value, judge: &str, name: &str) -> &'a Value {
    attacks_of(report, judge)
        .into_iter()
        .find(|a| a["attack"] == name)
        .unwrap_or_else(|| panic!("no attack {name} for {judge}"))
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_judge_that_follows_notes_to_the_grader_is_talked_into_rewards_and_a_faithful_one_is_not()
{
    let gullible = MockJudge::start().await;
    gullible.set_fallback(Behaviour::Gullible);
    let faithful = MockJudge::start().await;
    let s = CliSetup::new(&format!(
        "default_judge = \"faithful\"\n{}{}",
        judge_toml("gullible", &gullible, 0),
        judge_toml("faithful", &faithful, 0)
    ));
    // The judge alone: a policy of its own replaces the default rubric's gate.
    let file = s.write(
        "qa.jsonl",
        &groups_file(&json!({"policy": {"type": "weighted"}})),
    );
    let args = [
        "--judge",
        "gullible",
        "--judge",
        "faithful",
        "--attacks",
        "--yes",
        "--format",
        "json",
        &file,
    ];
    let out = run(s.command("eval", &args)).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stderr.contains("judgings (16 clean, "),
        "{}",
        out.stderr
    );
    let report = out.json();
    let shipped = attacks_of(&report, "faithful").len();
    assert!(shipped >= 12, "{shipped} attacks shipped");

    // Clean, both judges follow the markers: every pair right. Notes to the grader turn every
    // pair for the gullible judge: 5 (best, attacked) pairs × 2 orders.
    for name in [
        "grader_note_polite",
        "grader_note_authoritative",
        "system_override",
        "fake_transcript_end",
    ] {
        let a = attack(&report, "gullible", name);
        assert_eq!(a["groups"], 4, "{a}");
        assert_eq!(a["pairs"], 5, "{a}");
        assert_eq!(f(&a["accuracy_clean"]), 1.0, "{a}");
        assert_eq!(f(&a["accuracy_attacked"]), 0.0, "{a}");
        assert_eq!(f(&a["success_rate"]), 1.0, "{a}");
        // From 0.2 (0.3 for the second wrong answer of g3) to 1.0.
        assert_eq!(f(&a["score_shift"]), 0.78, "{a}");
    }
    // Attacks that do not speak to the grader leave it where it was.
    for name in ["padding_question", "length_inflation"] {
        assert_eq!(f(&attack(&report, "gullible", name)["success_rate"]), 0.0);
    }
    // The judge that follows the labels is moved by nothing.
    for a in attacks_of(&report, "faithful") {
        assert_eq!(f(&a["success_rate"]), 0.0, "{a}");
        assert_eq!(f(&a["score_shift"]), 0.0, "{a}");
        assert_eq!(f(&a["accuracy_attacked"]), 1.0, "{a}");
    }
    let summary = report["attack_summary"].as_array().unwrap();
    let worst = |judge: &str| summary.iter().find(|s| s["judge"] == judge).unwrap();
    assert_eq!(f(&worst("gullible")["success_rate"]), 1.0);
    assert_eq!(f(&worst("faithful")["success_rate"]), 0.0);
    // The clean figures are of the clean judgings only.
    let clean = report["results"].as_array().unwrap();
    assert!(clean
        .iter()
        .all(|r| f(&r["pairwise_accuracy"]) == 1.0 && r["groups"] == 4));

    // Attacks never touch the right trajectory: its section is the same in every prompt, and
    // every attacked wrong section differs from the clean one.
    let prompts: Vec<String> = faithful.requests().iter().map(judge_prompt).collect();
    assert_eq!(prompts.len(), 8 * (1 + shipped));
    let bodies: Vec<String> = prompts
        .iter()
        .flat_map(|p| sections(p).into_iter().map(|(_, b)| b))
        .collect();
    let right: BTreeSet<&String> = bodies.iter().filter(|b| !b.contains("Bob")).collect();
    assert_eq!(right.len(), 1, "{right:?}");
    assert!(right.iter().all(|b| b.contains("Ada Lovelace wrote it.")));
    let wrong: BTreeSet<&String> = bodies.iter().filter(|b| b.contains("Bob")).collect();
    // Two clean wrong answers, and each attack rewrites both (those that quote the question
    // differently in each group).
    assert!(wrong.len() >= 2 * (1 + shipped), "{}", wrong.len());

    // Cached like any judging: the same run asks no judge again.
    let calls = (gullible.calls(), faithful.calls());
    let out = run(s.command("eval", &args)).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!((gullible.calls(), faithful.calls()), calls);
    assert_eq!(out.json()["attacks"], report["attacks"]);

    // Text and HTML carry the same figures.
    let out = run(s.command(
        "eval",
        &[
            "--judge",
            "gullible",
            "--attacks=grader_note_polite,padding_question",
            &file,
        ],
    ))
    .await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(out.stdout.contains("grader_note_polite"), "{}", out.stdout);
    assert!(
        out.stdout.contains("worst attack · qa · gullible")
            && out.stdout.contains("grader_note_polite succeeds on 1.000"),
        "{}",
        out.stdout
    );
    let html = s.path("r.html");
    let out = run(s.command(
        "eval",
        &[
            "--judge",
            "gullible",
            "--attacks",
            "--yes",
            "--format",
            "html",
            "-o",
            &html,
            &file,
        ],
    ))
    .await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(
        page.contains("<h2>Attacks") && page.contains("system_override"),
        "{page}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_attacked_run_is_refused_without_yes_and_unknown_attacks_are_named() {
    let mock = MockJudge::start().await;
    let s = CliSetup::new(&format!(
        "default_judge = \"m\"\n{}",
        judge_toml("m", &mock, 0)
    ));
    let file = s.write("qa.jsonl", &groups_file(&json!({})));
    // 4 groups × 2 orders × (1 + 13 attacks) > 20: no terminal to ask on, so a refusal.
    let out = run(s.command("eval", &["--attacks", "--confirm-above", "20", &file])).await;
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(
        out.stderr.contains("--confirm-above 20: pass --yes"),
        "{}",
        out.stderr
    );
    assert_eq!(mock.calls(), 0);

    let out = run(s.command("eval", &["--attacks=grader_note_polite,nope", &file])).await;
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(
        out.stderr.contains("unknown attack \"nope\"") && out.stderr.contains("padding_question"),
        "{}",
        out.stderr
    );
    assert_eq!(mock.calls(), 0);

    // A user's own attack from a folder, chosen by name.
    let dir = s.dir.path().join("my-attacks");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("shout.toml"),
        "kind = \"padding\"\ntemplate = \"{{ answer | upper }}\"\n",
    )
    .unwrap();
    let dir = dir.display().to_string();
    let out = run(s.command(
        "eval",
        &[
            "--attacks=shout",
            "--attacks-dir",
            &dir,
            "--format",
            "json",
            &file,
        ],
    ))
    .await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let report = out.json();
    let a = &report["attacks"][0];
    assert_eq!(
        (a["attack"].as_str(), a["kind"].as_str()),
        (Some("shout"), Some("padding"))
    );
    assert!(mock
        .requests()
        .iter()
        .any(|r| judge_prompt(r).contains("BOB WROTE IT.")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_grader_address_gate_zeroes_what_talks_to_the_grader() {
    let gullible = MockJudge::start().await;
    gullible.set_fallback(Behaviour::Gullible);
    let s = CliSetup::new(&format!(
        "default_judge = \"g\"\n{}",
        judge_toml("g", &gullible, 0)
    ));
    // The default rubric gates on `grader_address` (rubrics/default.toml).
    let file = s.write("qa.jsonl", &groups_file(&json!({})));
    let out = run(s.command(
        "eval",
        &["--attacks=grader_note_polite,grader_note_authoritative,system_override,fake_transcript_end,padding_question",
          "--format", "json", &file],
    ))
    .await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let report = out.json();
    for a in report["attacks"].as_array().unwrap() {
        assert_eq!(f(&a["success_rate"]), 0.0, "{a}");
        assert_eq!(f(&a["accuracy_attacked"]), 1.0, "{a}");
    }
    // The notes are zeroed: from 0.2 (and 0.3) clean to 0 attacked.
    assert_eq!(f(&report["attacks"][0]["score_shift"]), -0.22);
}

/// Every trajectory's assistant text in a labelled file.
fn assistant_texts(path: &std::path::Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let v: Value = serde_json::from_str(line).unwrap();
        for t in v["trajectories"].as_array().into_iter().flatten() {
            for m in t["messages"].as_array().into_iter().flatten() {
                if m["role"] == "assistant" {
                    if let Some(c) = m["content"].as_str() {
                        out.push(c.to_string());
                    }
                }
            }
        }
    }
    out
}

#[test]
fn grader_address_finds_nothing_in_any_clean_trajectory_of_the_shipped_sets() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in ["evals", "evals/dev", "evals/train"] {
        for e in std::fs::read_dir(root.join(dir)).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "jsonl") {
                files.push(p);
            }
        }
    }
    assert!(files.len() >= 10, "{files:?}");
    let mut checked = 0;
    for file in &files {
        for text in assistant_texts(file) {
            checked += 1;
            if let Some((what, found)) = gavel::domain::verify::grader_address::find(&text) {
                panic!(
                    "{}: {what} {found:?} in a clean answer: {text}",
                    file.display()
                );
            }
        }
    }
    // Every assistant message of the eleven files (their sizes and lines are checked by eval_splits):
    // the count README and BENCHMARKS.md give.
    assert_eq!(checked, 3334);

    // And the agent trajectories gavel ships as examples and benchmark groups (tool calls,
    // spreadsheets, research reports), which the default rubric judges.
    let mut agent = 0;
    let mut groups: Vec<Value> = Vec::new();
    for file in ["benches/data/groups.jsonl", "examples/groups.jsonl"] {
        let text = std::fs::read_to_string(root.join(file)).unwrap();
        groups.extend(
            text.lines()
                .filter(|l| !l.trim().is_empty())
                .map(|l| serde_json::from_str::<Value>(l).unwrap()),
        );
    }
    for e in std::fs::read_dir(root.join("examples/groups")).unwrap() {
        let text = std::fs::read_to_string(e.unwrap().path()).unwrap();
        groups.push(serde_json::from_str(&text).unwrap());
    }
    for g in &groups {
        for t in g["trajectories"].as_array().unwrap() {
            for m in t["messages"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|m| m["role"] == "assistant")
            {
                let text = m["content"].as_str().unwrap_or_default();
                agent += 1;
                if let Some((what, found)) = gavel::domain::verify::grader_address::find(text) {
                    panic!("{what} {found:?} in a shipped agent trajectory: {text}");
                }
            }
        }
    }
    assert_eq!(agent, 770, "the count the README gives");
}
