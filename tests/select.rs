//! `gavel select` end to end: the binary picks exactly the winners of hand-made scored groups
//! (ties, margins, min-reward, null rewards, `--top`), reads rescore output through its `input`
//! file, prints the summary counts, and refuses a bad line without writing anything. One test
//! runs the recipe itself: `gavel rescore` against the mock judge, then `gavel select`.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{json, Value};

use common::cli::{judge_toml, run, CliSetup};
use common::{marked_group, MockJudge};

const BIN: &str = env!("CARGO_BIN_EXE_gavel");

/// A trajectory answering `answer` in `turns` assistant turns (tool calls before the last).
fn traj(answer: &str, turns: usize) -> Value {
    let mut messages = vec![json!({"role": "user", "content": "What is 2 + 2?"})];
    for k in 1..turns {
        let id = format!("c{k}");
        messages.push(json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": id, "type": "function",
             "function": {"name": "calc", "arguments": "{\"expr\": \"2+2\"}"}}]}));
        messages.push(json!({"role": "tool", "tool_call_id": id, "content": "4"}));
    }
    messages.push(json!({"role": "assistant", "content": answer}));
    json!({ "messages": messages })
}

/// A self-contained scored line: trajectories `NAME-0`, `NAME-1`, ... with these turns.
fn group(name: &str, rewards: Value, turns: &[usize]) -> Value {
    let trajs: Vec<Value> = turns
        .iter()
        .enumerate()
        .map(|(i, &t)| traj(&format!("{name}-{i}"), t))
        .collect();
    json!({"group_id": name, "trajectories": trajs, "rewards": rewards})
}

fn write_lines(path: &Path, lines: &[Value]) {
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

struct Ran {
    code: Option<i32>,
    stderr: String,
    out: Vec<Value>,
}

/// `gavel select SCORED -o OUT EXTRA...` in `dir`, with no `GAVEL_SELECT_*` leaking in.
fn select(dir: &Path, scored: &Path, out: &Path, extra: &[&str]) -> Ran {
    let mut c = Command::new(BIN);
    for k in [
        "GAVEL_SELECT_OUTPUT",
        "GAVEL_SELECT_BEST_OF",
        "GAVEL_SELECT_TOP",
        "GAVEL_SELECT_MIN_REWARD",
        "GAVEL_SELECT_MIN_MARGIN",
        "RUST_LOG",
    ] {
        c.env_remove(k);
    }
    c.current_dir(dir).stdin(Stdio::null());
    c.arg("select").arg(scored).arg("-o").arg(out).args(extra);
    let o = c.output().unwrap();
    let text = std::fs::read_to_string(out).unwrap_or_default();
    Ran {
        code: o.status.code(),
        stderr: String::from_utf8(o.stderr).unwrap(),
        out: text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect(),
    }
}

/// The final answer of each output line, with its rank.
fn picks(out: &[Value]) -> Vec<(String, u64)> {
    out.iter()
        .map(|l| {
            let m = l["messages"].as_array().unwrap();
            let answer = m.last().unwrap()["content"].as_str().unwrap().to_string();
            (answer, l["rank"].as_u64().unwrap())
        })
        .collect()
}

fn pairs(v: &[(&str, u64)]) -> Vec<(String, u64)> {
    v.iter().map(|(a, r)| (a.to_string(), *r)).collect()
}

#[test]
fn ties_go_to_fewer_turns_then_to_the_first() {
    let dir = tempfile::tempdir().unwrap();
    let scored = dir.path().join("scored.jsonl");
    write_lines(
        &scored,
        &[
            // 0.9 twice: the 2-turn one beats the 3-turn one before it.
            group("a", json!([0.5, 0.9, 0.9, 0.1]), &[1, 3, 2, 1]),
            // 0.9 twice with equal turns: the first.
            group("b", json!([0.2, 0.9, 0.9]), &[1, 2, 2]),
            // No tie: the best, however many turns it took.
            group("c", json!([0.2, 0.3, 0.8]), &[1, 1, 3]),
        ],
    );
    let out = dir.path().join("sft.jsonl");
    let r = select(dir.path(), &scored, &out, &["--best-of"]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(picks(&r.out), pairs(&[("a-2", 1), ("b-1", 1), ("c-2", 1)]));
    assert_eq!(r.out[0]["group_id"], "a");
    assert_eq!(r.out[0]["reward"], 0.9);
    // Where the group is: its line in the scored file, which holds the trajectories.
    assert_eq!(r.out[2]["line"], 3);
    // The 2-turn winner's tool call, in OpenAI's chat format with decoded arguments.
    let call = &r.out[0]["messages"][1]["tool_calls"][0];
    assert_eq!(call["function"]["arguments"], json!({"expr": "2+2"}));
    assert_eq!(r.out[0]["messages"][2]["tool_call_id"], "c1");
    assert!(r.out[0].get("tools").is_none(), "{}", r.out[0]);
}

/// One file exercising every rule at once, with and without the options.
fn rules_file(dir: &Path) -> PathBuf {
    let scored = dir.join("scored.jsonl");
    write_lines(
        &scored,
        &[
            group("kept", json!([1.0, 0.2]), &[1, 1]),
            group("nulls", json!([null, null]), &[1, 1]),
            group("low", json!([0.4, 0.1]), &[1, 1]),
            group("close", json!([0.9, 0.85]), &[1, 1]),
            group("tie", json!([0.7, 0.7]), &[1, 1]),
            // The nulls are neither winners nor the next-best.
            group("lone", json!([null, 0.6, null]), &[1, 1, 1]),
            // 0.9 − 0.8 passes a margin of 0.1 despite floating point.
            group("exact", json!([0.8, 0.9]), &[1, 1]),
        ],
    );
    scored
}

#[test]
fn min_reward_margins_and_null_rewards_drop_exactly_their_groups() {
    let dir = tempfile::tempdir().unwrap();
    let scored = rules_file(dir.path());
    let out = dir.path().join("sft.jsonl");
    let r = select(
        dir.path(),
        &scored,
        &out,
        &["--min-reward", "0.5", "--min-margin", "0.1"],
    );
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(
        picks(&r.out),
        pairs(&[("kept-0", 1), ("lone-1", 1), ("exact-1", 1)])
    );
    assert!(
        r.stderr.contains(
            "7 groups read, 3 kept (3 trajectories), 4 dropped: 1 no reward, \
             1 below min-reward, 2 margin too small"
        ),
        "{}",
        r.stderr
    );
    // Kept: (1.0 + 0.6 + 0.9) / 3; all: 7.15 over the 11 non-null rewards.
    assert!(
        r.stderr
            .contains("mean reward 0.8333 kept, 0.6500 all (11 rewards read)"),
        "{}",
        r.stderr
    );

    // Without the options only the all-null group goes; the tie goes to the first.
    let r = select(dir.path(), &scored, &out, &[]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let want = [
        ("kept-0", 1),
        ("low-0", 1),
        ("close-0", 1),
        ("tie-0", 1),
        ("lone-1", 1),
        ("exact-1", 1),
    ];
    assert_eq!(picks(&r.out), pairs(&want));
    assert!(
        r.stderr
            .contains("7 groups read, 6 kept (6 trajectories), 1 dropped: 1 no reward, 0 below"),
        "{}",
        r.stderr
    );
}

#[test]
fn top_k_keeps_the_best_k_and_measures_the_margin_below_them() {
    let dir = tempfile::tempdir().unwrap();
    let scored = dir.path().join("scored.jsonl");
    write_lines(
        &scored,
        &[group("g", json!([0.3, 0.9, 0.6, 0.1]), &[1, 1, 1, 1])],
    );
    let out = dir.path().join("sft.jsonl");
    let r = select(dir.path(), &scored, &out, &["--top", "2"]);
    assert_eq!(picks(&r.out), pairs(&[("g-1", 1), ("g-2", 2)]));
    assert_eq!(r.out[1]["reward"], 0.6);
    // The margin is 0.6 − 0.3 (2nd vs 3rd), not 0.9 − 0.6.
    let r = select(
        dir.path(),
        &scored,
        &out,
        &["--top", "2", "--min-margin", "0.35"],
    );
    assert_eq!(picks(&r.out), vec![], "{}", r.stderr);
    assert!(r.stderr.contains("1 margin too small"), "{}", r.stderr);
    let r = select(
        dir.path(),
        &scored,
        &out,
        &["--top", "2", "--min-margin", "0.25"],
    );
    assert_eq!(picks(&r.out), pairs(&[("g-1", 1), ("g-2", 2)]));
    // A minimum keeps the top K that reach it.
    let r = select(
        dir.path(),
        &scored,
        &out,
        &["--top", "2", "--min-reward", "0.7"],
    );
    assert_eq!(picks(&r.out), pairs(&[("g-1", 1)]));
    assert!(r.stderr.contains("1 kept (1 trajectories)"), "{}", r.stderr);
}

#[test]
fn rescore_output_is_read_through_its_input_file() {
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    let tools = json!([{"type": "function", "function": {"name": "calc", "parameters": {}}}]);
    // rescore's input: a request body with tools, then one-trajectory lines of group "p".
    let mut body = json!({"trajectories": [traj("l1-0", 1), traj("l1-1", 2)]});
    body["tools"] = tools.clone();
    let mut p0 = traj("p-0", 1);
    p0["group_id"] = json!("p");
    let mut p1 = traj("p-1", 1);
    p1["group_id"] = json!("p");
    write_lines(&logs.join("runs.jsonl"), &[body, p0, p1]);
    // Its output, as rescore writes it: `input` is relative to the scored file's folder here
    // (select runs in `dir`, not in `logs`).
    let scored = logs.join("rescored.jsonl");
    write_lines(
        &scored,
        &[
            json!({"line": 1, "input": "runs.jsonl", "rewards": [0.2, 0.8], "advantages": [-1, 1]}),
            json!({"group_id": "p", "input": "runs.jsonl", "rewards": [0.9, null]}),
        ],
    );
    let out = dir.path().join("sft.jsonl");
    let r = select(dir.path(), &scored, &out, &[]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(picks(&r.out), pairs(&[("l1-1", 1), ("p-0", 1)]));
    assert_eq!(r.out[0]["line"], 1);
    assert_eq!(r.out[0]["tools"], tools);
    assert!(r.out[0].get("group_id").is_none());
    assert_eq!(r.out[1]["group_id"], "p");
    assert!(r.out[1].get("line").is_none());
}

#[test]
fn a_bad_line_is_named_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let scored = dir.path().join("scored.jsonl");
    let out = dir.path().join("sft.jsonl");
    std::fs::write(&out, "the previous output\n").unwrap();
    let cases = [
        (
            group("g", json!([0.1, 0.2, 0.3]), &[1, 1]),
            "3: rewards: 3 rewards for 2 trajectories",
        ),
        (
            json!({"input": "nope.jsonl", "line": 1, "rewards": [1]}),
            "3: input: nope.jsonl: no such file",
        ),
        (
            json!({"line": 2, "error_type": "judge_timeout", "error": "x"}),
            "3: a rejected group",
        ),
        // A group file that was never scored: the message says what to run.
        (
            json!({"trajectories": [traj("1", 1), traj("2", 1)]}),
            "3: rewards: missing: this group is not scored yet; run `gavel rescore",
        ),
    ];
    for (bad, want) in cases {
        let text = format!("{}\n\n{bad}\n", group("ok", json!([1.0, 0.0]), &[1, 1]));
        std::fs::write(&scored, text).unwrap();
        let mut c = Command::new(BIN);
        c.current_dir(dir.path()).env_remove("GAVEL_SELECT_TOP");
        let o = c
            .arg("select")
            .arg(&scored)
            .arg("-o")
            .arg(&out)
            .output()
            .unwrap();
        let stderr = String::from_utf8(o.stderr).unwrap();
        assert_eq!(o.status.code(), Some(2), "{stderr}");
        let at = format!("{}:{want}", scored.display());
        assert!(stderr.starts_with(&at), "want {at}, got {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert_eq!(
            std::fs::read_to_string(&out).unwrap(),
            "the previous output\n"
        );
        assert!(!dir.path().join("sft.jsonl.tmp").exists());
    }
    // No output file at all when there was none.
    std::fs::remove_file(&out).unwrap();
    let r = select(dir.path(), &scored, &out, &[]);
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert!(!out.exists());
}

/// The recipe: `gavel rescore` (the mock judge reads the `SCORE=` markers) then `gavel select`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rescore_then_select_keeps_the_judges_favourite() {
    let mock = MockJudge::start().await;
    let setup = CliSetup::new(&format!(
        "default_judge = \"mock\"\n{}",
        judge_toml("mock", &mock, 1)
    ));
    let runs = setup.path("runs.jsonl");
    write_lines(
        Path::new(&runs),
        &[marked_group(&[0.3, 0.9, 0.6]), marked_group(&[0.5, 0.4])],
    );
    let rescored = setup.path("rescored.jsonl");
    let c = setup.command("rescore", &[&runs, "-o", &rescored, "--progress", "none"]);
    let r = run(c).await;
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let out = setup.dir.path().join("sft.jsonl");
    // Group 1's 0.9 beats its 0.6 by 0.3, group 2's 0.5 its 0.4 by only 0.1.
    let s = select(
        setup.dir.path(),
        Path::new(&rescored),
        &out,
        &["--min-margin", "0.2"],
    );
    assert_eq!(s.code, Some(0), "{}", s.stderr);
    let answers: Vec<String> = picks(&s.out).into_iter().map(|(a, _)| a).collect();
    assert_eq!(
        answers,
        vec!["attempt 1: SCORE=0.9 ANSWER: 4001"],
        "{}",
        s.stderr
    );
    assert_eq!(s.out[0]["line"], 1);
    // Without a margin both groups keep their best, in rescore's output order (which need not
    // be its input's), each with the input line it came from.
    let s = select(setup.dir.path(), Path::new(&rescored), &out, &[]);
    let mut kept: Vec<(Value, String, Value)> = s
        .out
        .iter()
        .map(|l| {
            let answer = l["messages"][2]["content"].as_str().unwrap().to_string();
            (l["line"].clone(), answer, l["reward"].clone())
        })
        .collect();
    kept.sort_by_key(|k| k.0.as_u64());
    let want = [
        (1, "attempt 1: SCORE=0.9 ANSWER: 4001", 0.9),
        (2, "attempt 0: SCORE=0.5 ANSWER: 4000", 0.5),
    ];
    let want: Vec<(Value, String, Value)> = want
        .iter()
        .map(|(l, a, r)| (json!(l), a.to_string(), json!(r)))
        .collect();
    assert_eq!(kept, want, "{}", s.stderr);
}
