//! The committed labelled files under `evals/` (built by `evals/build_sets.py`) checked against
//! `evals/row_ids.json` and against what the train and dev splits promise: every file has the
//! groups row_ids.json counts, each a well-formed labelled group that gavel's reader accepts; the
//! HaluEval source rows of the eval, dev and train files are pairwise disjoint per source; the
//! out-of-domain `halueval_dialogue` set never reaches a train or dev file; and no train or dev
//! `gavel_answers` group repeats an eval group's task (user message, right final answer); the
//! reference-graded QA set is graded against the right answer, without the knowledge, on rows no
//! other QA file uses.
//! Reads files only: no judge, no network.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use serde_json::Value;

const EVALS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/evals");

/// Every labelled file: its path under `evals/` without `.jsonl` (also its key in row_ids.json)
/// and the `set` its lines carry.
const FILES: [(&str, &str); 11] = [
    ("halueval_qa", "halueval_qa"),
    ("halueval_summarization", "halueval_summarization"),
    ("gavel_answers", "gavel_answers"),
    ("halueval_dialogue", "halueval_dialogue"),
    ("dev/halueval_qa", "halueval_qa"),
    ("dev/halueval_summarization", "halueval_summarization"),
    ("dev/gavel_answers", "gavel_answers"),
    ("train/halueval_qa", "halueval_qa"),
    ("train/halueval_summarization", "halueval_summarization"),
    ("train/gavel_answers", "gavel_answers"),
    ("halueval_qa_reference", "halueval_qa_reference"),
];

/// The HaluEval sources split three ways, eval first.
const HALUEVAL_SPLIT: [&str; 2] = ["halueval_qa", "halueval_summarization"];

fn path(name: &str) -> PathBuf {
    PathBuf::from(format!("{EVALS}/{name}.jsonl"))
}

fn read(name: &str) -> String {
    let p = path(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn lines(name: &str) -> Vec<Value> {
    read(name)
        .lines()
        .enumerate()
        .map(|(i, l)| {
            serde_json::from_str(l).unwrap_or_else(|e| panic!("{name}.jsonl:{}: {e}", i + 1))
        })
        .collect()
}

fn row_ids() -> Value {
    let p = format!("{EVALS}/row_ids.json");
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{p}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{p}: {e}"))
}

fn is_train_or_dev(name: &str) -> bool {
    name.starts_with("train/") || name.starts_with("dev/")
}

fn str_of<'a>(v: &'a Value, what: &str) -> &'a str {
    v.as_str()
        .unwrap_or_else(|| panic!("{what}: not a string: {v}"))
}

/// The source row id in a HaluEval line's `id`, `<set>-<row>`.
fn source_row(name: &str, set: &str, group: &Value) -> u64 {
    let id = str_of(&group["id"], name);
    let row = id
        .strip_prefix(set)
        .and_then(|r| r.strip_prefix('-'))
        .unwrap_or_else(|| panic!("{name}: id {id} is not {set}-<row>"));
    row.parse()
        .unwrap_or_else(|_| panic!("{name}: id {id}: row {row:?} is not a number"))
}

/// The source row ids row_ids.json records for a HaluEval file (one list, or one per length
/// kind).
fn recorded_rows(record: &Value, name: &str) -> Vec<u64> {
    let lists: Vec<&Value> = if record.get("row_ids").is_some() {
        vec![&record["row_ids"]]
    } else {
        vec![
            &record["row_ids_right_longer"],
            &record["row_ids_right_shorter"],
        ]
    };
    lists
        .into_iter()
        .flat_map(|l| {
            l.as_array()
                .unwrap_or_else(|| panic!("row_ids.json: {name}: no row id list"))
                .iter()
                .map(|v| v.as_u64().expect("a row id"))
        })
        .collect()
}

/// The message contents of every trajectory of a group.
fn contents(group: &Value) -> impl Iterator<Item = &str> {
    group["trajectories"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|t| t["messages"].as_array().into_iter().flatten())
        .filter_map(|m| m["content"].as_str())
}

#[test]
fn every_file_has_the_recorded_groups_and_each_is_a_labelled_group() {
    let ids = row_ids();
    for (name, set) in FILES {
        let record = &ids[name];
        assert!(record.is_object(), "row_ids.json has no entry {name}");
        let groups = lines(name);
        assert_eq!(
            groups.len() as u64,
            record["groups"].as_u64().expect("groups"),
            "{name}: line count differs from row_ids.json"
        );
        assert_eq!(record["file"]["name"], format!("{name}.jsonl"), "{name}");
        assert_eq!(
            read(name).len() as u64,
            record["file"]["bytes"].as_u64().expect("bytes"),
            "{name}: size differs from row_ids.json"
        );
        let mut seen = BTreeSet::new();
        for g in &groups {
            let id = str_of(&g["id"], name);
            assert!(seen.insert(id.to_string()), "{name}: id {id} twice");
            assert_eq!(g["set"], set, "{name}: {id}");
            let labels = g["labels"].as_array().expect("labels");
            let trajs = g["trajectories"].as_array().expect("trajectories");
            assert_eq!(
                labels.len(),
                trajs.len(),
                "{name}: {id}: labels per trajectory"
            );
            assert!(
                trajs.len() >= 2,
                "{name}: {id}: fewer than two trajectories"
            );
            let distinct: BTreeSet<String> = labels.iter().map(|l| l.to_string()).collect();
            assert!(
                distinct.len() >= 2,
                "{name}: {id}: no preference among the labels"
            );
            assert!(labels.iter().all(Value::is_number), "{name}: {id}: labels");
            for t in trajs {
                let messages = t["messages"].as_array().expect("messages");
                assert_eq!(messages[0]["role"], "system", "{name}: {id}");
                let last = messages.last().expect("a message");
                assert_eq!(last["role"], "assistant", "{name}: {id}");
                assert!(last["content"].is_string(), "{name}: {id}: final message");
            }
        }
        // And gavel's own reader (`gavel eval`, `gavel train judge`) takes every line.
        let read = gavel::toolkit::groupfile::read_groups::<gavel::eval::Labels>(&path(name), 64)
            .unwrap_or_else(|p| panic!("{name}: {}", p.join("\n")));
        assert_eq!(read.len(), groups.len(), "{name}");
    }
}

#[test]
fn halueval_rows_of_eval_dev_and_train_are_pairwise_disjoint_per_source() {
    let ids = row_ids();
    let mut split_files = 0;
    for set in HALUEVAL_SPLIT {
        let mut owner: BTreeMap<u64, String> = BTreeMap::new();
        for name in [
            set.to_string(),
            format!("dev/{set}"),
            format!("train/{set}"),
        ] {
            let rows: Vec<u64> = lines(&name)
                .iter()
                .map(|g| source_row(&name, set, g))
                .collect();
            let in_file: BTreeSet<u64> = rows.iter().copied().collect();
            assert_eq!(in_file.len(), rows.len(), "{name}: a source row used twice");
            let recorded: BTreeSet<u64> = recorded_rows(&ids[name.as_str()], &name)
                .into_iter()
                .collect();
            assert_eq!(in_file, recorded, "{name}: rows differ from row_ids.json");
            for row in rows {
                if let Some(first) = owner.insert(row, name.clone()) {
                    panic!("{set} row {row} is in both {first} and {name}");
                }
            }
            split_files += 1;
        }
    }
    assert_eq!(split_files, 6);
    // The dialogue set's rows are the ones recorded too (its source is its own file).
    let dialogue: BTreeSet<u64> = lines("halueval_dialogue")
        .iter()
        .map(|g| source_row("halueval_dialogue", "halueval_dialogue", g))
        .collect();
    let recorded: BTreeSet<u64> = recorded_rows(&ids["halueval_dialogue"], "halueval_dialogue")
        .into_iter()
        .collect();
    assert_eq!(
        dialogue, recorded,
        "halueval_dialogue: rows differ from row_ids.json"
    );
    assert_eq!(dialogue.len(), 100);
}

#[test]
fn the_dialogue_set_never_reaches_a_train_or_dev_file() {
    let dialogue = lines("halueval_dialogue");
    // Every text of the dialogue set that is its own: the knowledge-bearing system prompts and
    // the replies being judged.
    let mut texts = BTreeSet::new();
    for g in &dialogue {
        for t in g["trajectories"].as_array().expect("trajectories") {
            let messages = t["messages"].as_array().expect("messages");
            for m in [&messages[0], messages.last().expect("a message")] {
                texts.insert(str_of(&m["content"], "halueval_dialogue").to_string());
            }
        }
    }
    assert!(texts.len() >= 200, "{}", texts.len());
    let listed = &row_ids()["splits"];
    for (name, _) in FILES.iter().filter(|(n, _)| is_train_or_dev(n)) {
        let raw = read(name);
        assert!(
            !raw.contains("halueval_dialogue"),
            "{name} names halueval_dialogue"
        );
        for g in lines(name) {
            let id = str_of(&g["id"], name);
            assert_ne!(g["set"], "halueval_dialogue", "{name}: {id}");
            for c in contents(&g) {
                assert!(
                    !texts.contains(c),
                    "{name}: {id} has a dialogue set message: {c}"
                );
            }
        }
        let split = name.split('/').next().unwrap();
        let members = listed["files"][split].as_array().expect("splits.files");
        assert!(
            members.iter().any(|m| m == name),
            "{name} not in splits.files.{split}"
        );
    }
    for split in ["train", "dev"] {
        for m in listed["files"][split].as_array().expect("splits.files") {
            assert!(!str_of(m, split).contains("dialogue"), "{split}: {m}");
        }
    }
    assert!(listed["files"]["eval"]
        .as_array()
        .expect("splits.files.eval")
        .iter()
        .any(|m| m == "halueval_dialogue"));
}

/// A gavel_answers group's task instances: (user message, right final answer) for each
/// trajectory labelled best, the answer read from its `ANSWER:` line (thousands separators
/// dropped) and checked against the group's verifier.
fn answer_tasks(name: &str, g: &Value) -> Vec<(String, i64)> {
    let id = str_of(&g["id"], name);
    let labels: Vec<f64> = g["labels"]
        .as_array()
        .expect("labels")
        .iter()
        .map(|l| l.as_f64().expect("a label"))
        .collect();
    let top = labels.iter().copied().fold(f64::MIN, f64::max);
    let expected = g["verifiers"][0]["expected"]
        .as_i64()
        .expect("verifier expected");
    let mut out = Vec::new();
    for (t, l) in g["trajectories"]
        .as_array()
        .expect("trajectories")
        .iter()
        .zip(&labels)
    {
        if *l < top {
            continue;
        }
        let messages = t["messages"].as_array().expect("messages");
        let user = str_of(&messages[1]["content"], name);
        assert_eq!(messages[1]["role"], "user", "{name}: {id}");
        let last = str_of(&messages.last().expect("a message")["content"], name);
        let answer = last
            .lines()
            .rev()
            .find_map(|line| line.strip_prefix("ANSWER:"))
            .unwrap_or_else(|| panic!("{name}: {id}: no ANSWER line"))
            .trim()
            .replace(',', "");
        let value: i64 = answer
            .parse()
            .unwrap_or_else(|_| panic!("{name}: {id}: ANSWER {answer:?}"));
        assert_eq!(
            value, expected,
            "{name}: {id}: right answer differs from the verifier"
        );
        out.push((user.to_string(), value));
    }
    assert!(!out.is_empty(), "{name}: {id}: no right trajectory");
    out
}

#[test]
fn answers_splits_repeat_no_eval_task() {
    let mut owner: BTreeMap<(String, i64), String> = BTreeMap::new();
    for g in lines("gavel_answers") {
        for task in answer_tasks("gavel_answers", &g) {
            owner.insert(task, "gavel_answers".to_string());
        }
    }
    // Dev first, then train: neither may repeat the eval file's tasks, nor train dev's.
    for name in ["dev/gavel_answers", "train/gavel_answers"] {
        let mut own = BTreeSet::new();
        for g in lines(name) {
            let id = str_of(&g["id"], name).to_string();
            assert!(
                id.starts_with(&format!(
                    "gavel_answers-{}-",
                    name.split('/').next().unwrap()
                )),
                "{name}: id {id}"
            );
            let tasks: BTreeSet<(String, i64)> = answer_tasks(name, &g).into_iter().collect();
            for task in tasks {
                if let Some(first) = owner.get(&task) {
                    panic!("{name}: {id} repeats a task of {first}: {task:?}");
                }
                assert!(
                    own.insert(task.clone()),
                    "{name}: {id}: task twice in the file: {task:?}"
                );
            }
        }
        assert!(own.len() >= 40, "{name}: {}", own.len());
        owner.extend(own.into_iter().map(|t| (t, name.to_string())));
    }
}

#[test]
fn the_reference_set_is_graded_against_the_right_answer_on_rows_no_other_qa_file_uses() {
    let name = "halueval_qa_reference";
    let record = &row_ids()[name];
    let groups = lines(name);
    assert_eq!(groups.len(), 100);
    let mut rows = BTreeSet::new();
    for g in &groups {
        let id = str_of(&g["id"], name);
        rows.insert(source_row(name, name, g));
        let labels: Vec<f64> = g["labels"]
            .as_array()
            .expect("labels")
            .iter()
            .map(|l| l.as_f64().expect("a number"))
            .collect();
        let right = labels
            .iter()
            .position(|&l| l == 1.0)
            .expect("a right answer");
        let answer = g["trajectories"][right]["messages"]
            .as_array()
            .and_then(|m| m.last())
            .and_then(|m| m["content"].as_str())
            .expect("a final answer");
        assert_eq!(
            g["reference"], answer,
            "{name}: {id}: the reference is the right answer"
        );
        assert!(
            contents(g).all(|c| !c.contains("Knowledge:")),
            "{name}: {id}: the knowledge is left out, so only the reference can decide"
        );
    }
    let recorded: BTreeSet<u64> = [
        "row_ids_right_longer",
        "row_ids_right_shorter",
        "row_ids_equal",
    ]
    .iter()
    .flat_map(|k| record[*k].as_array().expect(k).iter())
    .map(|v| v.as_u64().expect("a row id"))
    .collect();
    assert_eq!(rows, recorded, "{name}: rows differ from row_ids.json");
    for other in ["halueval_qa", "dev/halueval_qa", "train/halueval_qa"] {
        for g in lines(other) {
            let row = source_row(other, "halueval_qa", &g);
            assert!(
                !rows.contains(&row),
                "halueval_qa row {row} is in {name} and {other}"
            );
        }
    }
}
