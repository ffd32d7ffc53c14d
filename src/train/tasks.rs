//! Training tasks: a JSONL file, one prompt per line — `messages` (system and user turns) plus
//! any fields of a scoring request but `trajectories` (`verifiers`, `rubric`, `policy`, `judge`,
//! ...), which say how the completions of that prompt are scored. Every line is checked when the
//! file is read, so a bad line stops training before the first step.

use crate::toolkit::groupfile::{nonblank_lines, read_text};
use std::path::Path;

use serde_json::{json, Map, Value};

use super::TrainError;
use crate::domain::prompt::ChatMessage;
use crate::score::ScoreRequest;

/// One prompt and how to score its completions.
#[derive(Debug, Clone)]
pub struct Task {
    /// `FILE:LINE`, for messages.
    pub at: String,
    pub messages: Vec<ChatMessage>,
    /// The line without `messages`: the scoring request's other fields.
    pub scoring: Map<String, Value>,
}

impl Task {
    /// The scoring request body for `completions` of this task.
    pub fn request(&self, completions: &[String]) -> Value {
        let mut body = self.scoring.clone();
        let trajectories: Vec<Value> = completions
            .iter()
            .map(|c| {
                let mut msgs: Vec<Value> = self
                    .messages
                    .iter()
                    .map(|m| json!({"role": m.role, "content": m.content}))
                    .collect();
                msgs.push(json!({"role": "assistant", "content": c}));
                json!({ "messages": msgs })
            })
            .collect();
        body.insert("trajectories".into(), Value::Array(trajectories));
        Value::Object(body)
    }
}

/// Reads and checks a task file.
pub fn read_tasks(path: &Path) -> Result<Vec<Task>, TrainError> {
    let file = path.display().to_string();
    let text = read_text(path).map_err(TrainError::Input)?;
    let mut tasks = Vec::new();
    for (n, line) in nonblank_lines(&text) {
        let at = format!("{file}:{n}");
        tasks.push(parse_task(line, &at).map_err(|m| TrainError::Input(format!("{at}: {m}")))?);
    }
    if tasks.is_empty() {
        return Err(TrainError::Input(format!(
            "{file}: no tasks (the file is empty)"
        )));
    }
    Ok(tasks)
}

fn parse_task(line: &str, at: &str) -> Result<Task, String> {
    let v: Value = serde_json::from_str(line).map_err(|e| format!("not valid JSON: {e}"))?;
    let Value::Object(mut obj) = v else {
        return Err("expected a JSON object with \"messages\"".into());
    };
    if obj.contains_key("trajectories") {
        return Err("trajectories: not allowed in a task (the policy writes them)".into());
    }
    let msgs = obj
        .remove("messages")
        .ok_or("messages: missing (the system and user turns of the prompt)")?;
    let arr = msgs.as_array().ok_or("messages: expected an array")?;
    if arr.is_empty() {
        return Err("messages: empty".into());
    }
    let mut messages = Vec::new();
    for (k, m) in arr.iter().enumerate() {
        let role = m["role"]
            .as_str()
            .ok_or(format!("messages[{k}].role: missing or not a string"))?;
        if !matches!(role, "system" | "user" | "assistant") {
            return Err(format!(
                "messages[{k}].role: {role:?} (expected system, user or assistant)"
            ));
        }
        let content = m["content"]
            .as_str()
            .ok_or(format!("messages[{k}].content: missing or not a string"))?;
        messages.push(ChatMessage {
            role: role.into(),
            content: content.into(),
        });
    }
    let task = Task {
        at: at.to_string(),
        messages,
        scoring: obj,
    };
    if let Some(Value::Array(vs)) = task.scoring.get("verifiers") {
        for (k, v) in vs.iter().enumerate() {
            crate::domain::verify::Verifier::from_json(v, &format!("verifiers[{k}]"))
                .map_err(|e| e.to_string())?;
        }
    }
    // The scoring fields must make a valid request: check with a placeholder completion.
    ScoreRequest::from_json(&task.request(&["x".into(), "y".into()]), usize::MAX)
        .map_err(|e| e.to_string())?;
    Ok(task)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_lines_name_file_line_and_field() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.jsonl");
        let good = r#"{"messages": [{"role": "user", "content": "1 2 3"}], "verifiers": [{"type": "regex", "pattern": "^4"}]}"#;
        std::fs::write(&p, format!("{good}\n\n{good}\n")).unwrap();
        let tasks = read_tasks(&p).unwrap();
        assert_eq!(tasks.len(), 2);
        assert!(tasks[1].at.ends_with("t.jsonl:3"));
        let req = tasks[0].request(&["4".into()]);
        assert_eq!(req["trajectories"][0]["messages"][1]["content"], "4");
        for (line, want) in [
            (r#"{"verifiers": []}"#, ":1: messages: missing"),
            (
                r#"{"messages": [{"role": "tool", "content": "x"}]}"#,
                "messages[0].role",
            ),
            (
                r#"{"messages": [{"role": "user", "content": "x"}], "verifiers": [{"type": "nope"}]}"#,
                "unknown verifier type",
            ),
            ("{", ":1: not valid JSON"),
        ] {
            std::fs::write(&p, line).unwrap();
            let e = read_tasks(&p).unwrap_err().to_string();
            assert!(e.contains(want), "{e}");
            assert!(e.starts_with(&p.display().to_string()), "{e}");
        }
    }

    /// The tasks docs/training.md and examples/train.toml point at read as they are
    /// (a verifier they name with an option it does not have stopped the documented run).
    #[test]
    fn the_example_tasks_read() {
        let path = Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/examples/train_tasks.jsonl"
        ));
        let tasks = read_tasks(path).unwrap();
        assert_eq!(tasks.len(), 3);
    }

    /// The policy QA experiment's training prompts
    /// (experiments/policy-from-judge/build_policy_tasks.py) read as tasks, and none carries an
    /// answer, a reference or a verifier: the reward is the judge's alone.
    /// Their source rows are none of the held-out test questions' rows, nor of the dev ones; the
    /// same holds for the further prompts of train_more.jsonl, and the larger dev set,
    /// dev_more.jsonl, shares a row with none of them.
    #[test]
    fn the_policy_qa_tasks_read_without_their_answers() {
        let dir = Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/experiments/policy-from-judge/policy_qa"
        ));
        let tasks = read_tasks(&dir.join("train.jsonl")).unwrap();
        assert_eq!(tasks.len(), 400);
        let ids: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("row_ids.json")).unwrap())
                .unwrap();
        let rows = |key: &str| -> Vec<u64> {
            ids[key]
                .as_array()
                .unwrap_or_else(|| panic!("row_ids.json has no {key}"))
                .iter()
                .map(|v| v.as_u64().unwrap())
                .collect()
        };
        let train = rows("train_row_ids");
        let test: std::collections::BTreeSet<u64> = rows("test_row_ids").into_iter().collect();
        assert_eq!((train.len(), test.len()), (400, 200));
        assert!(train.iter().all(|r| !test.contains(r)));
        // The dev questions (what a run's settings are chosen on) are neither train nor test,
        // and dev.jsonl holds exactly them, in order.
        let dev = rows("dev_row_ids");
        assert_eq!(dev.len(), 100);
        assert!(dev.iter().all(|r| !test.contains(r) && !train.contains(r)));
        // The row ids a held-out file's lines carry, in order.
        let on_lines = |file: &str| -> Vec<u64> {
            std::fs::read_to_string(dir.join(file))
                .unwrap()
                .lines()
                .map(|l| {
                    serde_json::from_str::<serde_json::Value>(l).unwrap()["row_id"]
                        .as_u64()
                        .unwrap()
                })
                .collect()
        };
        assert_eq!(on_lines("dev.jsonl"), dev);
        // The further training prompts: tasks too, none of the held-out, dev or train rows.
        let more = rows("train_more_row_ids");
        assert_eq!(more.len(), 1600);
        assert!(more
            .iter()
            .all(|r| !test.contains(r) && !dev.contains(r) && !train.contains(r)));
        assert_eq!(
            read_tasks(&dir.join("train_more.jsonl")).unwrap().len(),
            1600
        );
        // The larger dev set: none of the rows above, and dev_more.jsonl holds exactly its rows.
        let dev_more = rows("dev_more_row_ids");
        assert_eq!(dev_more.len(), 400);
        assert!(dev_more.iter().all(|r| !test.contains(r)
            && !dev.contains(r)
            && !train.contains(r)
            && !more.contains(r)));
        assert_eq!(on_lines("dev_more.jsonl"), dev_more);
        for file in ["train.jsonl", "train_more.jsonl"] {
            let text = std::fs::read_to_string(dir.join(file)).unwrap();
            for line in text.lines() {
                let v: serde_json::Value = serde_json::from_str(line).unwrap();
                assert!(
                    v.get("answer").is_none() && v.get("reference").is_none(),
                    "{file}: {line}"
                );
                assert!(v.get("verifiers").is_none(), "{file}: {line}");
            }
        }
    }
}
