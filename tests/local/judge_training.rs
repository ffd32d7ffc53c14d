//! `gavel train judge` on the tiny random model: it learns a planted rule (the label follows a
//! marker word) from labelled groups, the adapter it writes is served by a local judge that
//! then ranks the dev groups as training measured, a resumed run writes the identical adapter,
//! and a teacher judge's scores are distilled.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};

use super::hub::tiny_gguf;
use crate::common::cli::{run_within, CliSetup, Out};

const LIMIT: Duration = Duration::from_secs(600);

/// A small deterministic generator (the test's data only).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
}

const WORDS: [&str; 12] = [
    "red", "blue", "stone", "river", "cloud", "seven", "lamp", "green", "road", "tree", "box",
    "wind",
];

/// `n` groups of two answers; the one with `good` in it is labelled better, the other has
/// `bad`. Which comes first is drawn.
fn groups(n: usize, seed: u64, good: &str, bad: &str) -> String {
    let mut r = Lcg(seed);
    let mut out = String::new();
    for i in 0..n {
        let mut words = |k: usize| -> String {
            (0..k)
                .map(|_| WORDS[(r.next() % WORDS.len() as u64) as usize])
                .collect::<Vec<_>>()
                .join(" ")
        };
        let (a, b) = (words(3), words(3));
        let answer = |w: &str, tail: &str| {
            json!({"messages": [
                {"role": "system", "content": "Answer in a few words."},
                {"role": "user", "content": format!("Question {i}: name a thing.")},
                {"role": "assistant", "content": format!("{w} {tail} {w} {w}")}]})
        };
        let (right, wrong) = (answer(good, &a), answer(bad, &b));
        let line = if r.next().is_multiple_of(2) {
            json!({"id": i, "trajectories": [right, wrong], "labels": [1, 0]})
        } else {
            json!({"id": i, "trajectories": [wrong, right], "labels": [0, 1]})
        };
        out.push_str(&line.to_string());
        out.push('\n');
    }
    out
}

struct Run {
    s: CliSetup,
    model: PathBuf,
}

/// A short pointwise template: a tiny random model attends over few positions, so the marker
/// is a large share of what the verdict position sees.
const SYSTEM: &str = "Judge the answer.";
const USER: &str =
    "{% for t in trajectories %}{% for line in t.messages %}{{ line }}\n{% endfor %}{% endfor %}yes or no?";

impl Run {
    fn new(config_judges: &str) -> Run {
        let s = CliSetup::new(config_judges);
        let prompts = s.dir.path().join("prompts");
        std::fs::create_dir_all(&prompts).unwrap();
        std::fs::write(prompts.join("pointwise.system.jinja"), SYSTEM).unwrap();
        std::fs::write(prompts.join("pointwise.user.jinja"), USER).unwrap();
        let cfg = format!("prompts_dir = \"{}\"\n{config_judges}", prompts.display());
        std::fs::write(&s.cfg, cfg).unwrap();
        let model = tiny_gguf(&s.dir.path().join("tiny.gguf"));
        s.write("train.jsonl", &groups(48, 1, "zebra", "apple"));
        s.write("dev.jsonl", &groups(24, 2, "zebra", "apple"));
        Run { s, model }
    }

    async fn train(&self, out: &str, extra: &[&str]) -> Out {
        self.train_with(out, &[&["--quiet"], extra].concat()).await
    }

    /// Without `--quiet`: what a job's log shows (stderr is no terminal here).
    async fn train_with(&self, out: &str, extra: &[&str]) -> Out {
        let model = self.model.display().to_string();
        let cfg = self.s.cfg.display().to_string();
        let mut args = vec![
            "judge",
            "--model",
            &model,
            "--scorer-config",
            &cfg,
            "--layers",
            "2",
            "--batch-size",
            "8",
            "--learning-rate",
            "0.03",
            "-o",
            out,
        ];
        args.extend_from_slice(extra);
        let out = run_within(self.s.plain_command("train", &args), LIMIT).await;
        assert_eq!(out.code, Some(0), "{}", out.stderr);
        out
    }
}

fn metrics(dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(dir.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn dev_rankings(lines: &[Value]) -> Vec<f64> {
    lines
        .iter()
        .filter_map(|l| l["dev"]["mean_ranking"].as_f64())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planted_rule_is_learned_and_the_adapter_serves_it() {
    planted_rule("verdict").await;
}

/// The adapter of every position (K layers over the whole prompt, the context's keys and
/// values changed too) learns it as well, and is served as such; its features (hidden states
/// of every position) round-trip through the features file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_adapter_of_every_position_learns_the_rule_and_is_served() {
    let r = planted_rule("all").await;
    let flags = planted_flags("all");
    let kept = r.s.dir.path().join("out/features");
    let kept = kept.to_str().unwrap();
    let again = [&flags[..], &["--features", kept]].concat();
    let out = r.train("again", &again).await;
    assert!(
        out.stderr.contains("train features read from"),
        "{}",
        out.stderr
    );
    assert_eq!(
        adapter_bytes(&r.s.dir.path().join("again/best")),
        adapter_bytes(&r.s.dir.path().join("out/best"))
    );
}

/// The base model's pointwise dev figure, as a run's log gives it.
fn base_dev(out: &Out) -> f64 {
    let base = out
        .stderr
        .split("base model on dev: pointwise ")
        .nth(1)
        .unwrap_or_else(|| panic!("{}", out.stderr));
    base.split_whitespace().next().unwrap().parse().unwrap()
}

fn planted_flags(reach: &str) -> Vec<&str> {
    vec![
        "--train",
        "train.jsonl",
        "--dev",
        "dev.jsonl",
        "--epochs",
        "20",
        "--eval-every",
        "24",
        "--mode",
        "pointwise",
        "--reach",
        reach,
    ]
}

/// Trains on the planted rule with adapters of reach `reach`, checks that dev learns it and
/// that a local judge serving the adapter ranks the dev groups by it.
async fn planted_rule(reach: &str) -> Run {
    let r = Run::new("");
    let out = r.train("out", &planted_flags(reach)).await;
    // The random base model does not know the rule (it may rank by chance either way).
    let base = base_dev(&out);
    assert!(base < 0.9, "base {base}: {}", out.stderr);
    let dev = dev_rankings(&metrics(&r.s.dir.path().join("out")));
    assert!(dev.len() >= 2, "{dev:?}");
    let best = dev.iter().copied().fold(0.0, f64::max);
    assert!(best >= 0.95, "dev ranking {dev:?}");

    // The adapter, served: a local judge with it ranks the dev groups as training measured.
    let best_dir = r.s.dir.path().join("out/best");
    let record: Value =
        serde_json::from_str(&std::fs::read_to_string(best_dir.join("gavel_judge.json")).unwrap())
            .unwrap();
    assert_eq!(record["reach"], reach);
    assert_eq!(record["modes"], json!(["pointwise"]));
    let cfg = format!(
        "prompts_dir = \"{p}\"\ndefault_judge = \"tuned\"\n[judges.base]\nbackend = \"local\"\nmodel_path = \"{m}\"\n\
         [judges.tuned]\nbackend = \"local\"\nmodel_path = \"{m}\"\nadapter = \"{a}\"\n",
        m = r.model.display(),
        a = best_dir.display(),
        p = r.s.dir.path().join("prompts").display()
    );
    let cfg_path = r.s.write("served.toml", &cfg);
    let mut c = r.s.plain_command(
        "eval",
        &["dev.jsonl", "--judge", "base", "--judge", "tuned"],
    );
    c.args(["--config", &cfg_path, "--format", "json"]);
    c.args([
        "--store",
        &r.s.dir.path().join("eval-store").display().to_string(),
    ]);
    let eval = run_within(c, LIMIT).await;
    assert_eq!(eval.code, Some(0), "{}", eval.stderr);
    let report = eval.json();
    let acc = |judge: &str| -> f64 {
        report["results"]
            .as_array()
            .unwrap()
            .iter()
            .find(|row| row["judge"] == judge && row["set"] == "dev")
            .unwrap_or_else(|| panic!("no row for {judge}: {report}"))["pairwise_accuracy"]
            .as_f64()
            .unwrap()
    };
    assert!(acc("tuned") >= 0.95, "{report}");
    assert!(acc("tuned") > acc("base") + 0.1, "{report}");
    r
}

/// The adapter files of a checkpoint or of best/.
fn adapter_bytes(dir: &Path) -> (Vec<u8>, String) {
    (
        std::fs::read(dir.join("adapter_model.safetensors")).unwrap(),
        std::fs::read_to_string(dir.join("adapter_config.json")).unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_run_writes_the_identical_adapter() {
    let r = Run::new("");
    let flags = [
        "--train",
        "train.jsonl",
        "--dev",
        "dev.jsonl",
        "--epochs",
        "2",
        "--eval-every",
        "12",
        "--mode",
        "pointwise,pairwise",
    ];
    r.train("whole", &flags).await;
    let whole = r.s.dir.path().join("whole");
    // 96 pointwise and 96 pairwise examples, batches of 8, 2 epochs: 48 steps, checkpoints
    // every 12.
    let listing: Vec<_> = std::fs::read_dir(&whole)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(
        whole.join("checkpoint-12").is_dir() && whole.join("checkpoint-48").is_dir(),
        "{listing:?}"
    );
    // Both modes measured on dev (pairwise by Bradley–Terry over both orders).
    let last = metrics(&whole).pop().unwrap();
    let modes: Vec<&str> = last["dev"]["ranking"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r[0].as_str().unwrap())
        .collect();
    // Then the two modes' scores averaged: the combined mode, measured beside them.
    assert_eq!(
        modes,
        ["pointwise", "pairwise", "pointwise+pairwise"],
        "{last}"
    );
    // The adapter records its data and its dev figures, base and adapted.
    let record: Value =
        serde_json::from_slice(&std::fs::read(whole.join("best/gavel_judge.json")).unwrap())
            .unwrap();
    let t = &record["training"];
    assert_eq!(t["train"], json!(["train.jsonl"]), "{record}");
    assert_eq!(t["dev"], json!(["dev.jsonl"]), "{record}");
    assert!(
        t["dev_figures"]["mean_ranking"].as_f64().unwrap()
            > t["dev_base_figures"]["mean_ranking"].as_f64().unwrap(),
        "{record}"
    );
    // A run stopped after its first checkpoint, resumed.
    let part = r.s.dir.path().join("part");
    std::fs::create_dir_all(part.join("checkpoint-12")).unwrap();
    for f in std::fs::read_dir(whole.join("checkpoint-12")).unwrap() {
        let f = f.unwrap();
        std::fs::copy(f.path(), part.join("checkpoint-12").join(f.file_name())).unwrap();
    }
    // It reads the first run's features back from disk instead of running the base model
    // again: the identical adapter shows they round-trip exactly.
    let kept = whole.join("features");
    let kept = kept.to_str().unwrap();
    let mut resumed = flags.to_vec();
    resumed.extend(["--resume", "--features", kept]);
    let out = r.train("part", &resumed).await;
    for split in ["train", "dev"] {
        assert!(
            out.stderr
                .contains(&format!("{split} features read from {kept}")),
            "{}",
            out.stderr
        );
    }
    // So the base network (the 1.5B's dense copy is some 6 GB) is never opened.
    let unopened = "the base model's network was not opened";
    assert!(out.stderr.contains(unopened), "{}", out.stderr);
    assert_eq!(
        adapter_bytes(&part.join("checkpoint-48")),
        adapter_bytes(&whole.join("checkpoint-48"))
    );
    // And a fresh run with another seed does not write it (the comparison can fail); its
    // features are computed anew (another output folder), and equal the kept ones.
    let out = r
        .train_with("other", &[&flags[..], &["--seed", "7"]].concat())
        .await;
    assert!(!out.stderr.contains("features read from"), "{}", out.stderr);
    // Its log (no terminal, so no bar) says how far the frozen pass has gone.
    for split in ["train", "dev"] {
        let line = format!("train judge: {split} features, ");
        assert!(out.stderr.contains(&line), "{}", out.stderr);
    }
    assert!(!out.stderr.contains(unopened), "{}", out.stderr);
    let names = |dir: &Path| -> Vec<_> {
        let mut v: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        v.sort();
        v
    };
    let other = r.s.dir.path().join("other/features");
    assert_eq!(names(&other), names(&whole.join("features")));
    for name in names(&other) {
        assert_eq!(
            std::fs::read(other.join(&name)).unwrap(),
            std::fs::read(whole.join("features").join(&name)).unwrap(),
            "{name:?}"
        );
    }
    assert_ne!(
        adapter_bytes(&r.s.dir.path().join("other/checkpoint-48")).0,
        adapter_bytes(&whole.join("checkpoint-48")).0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_teachers_scores_are_distilled() {
    use crate::common::cli::judge_toml;
    use crate::common::MockJudge;
    let mock = MockJudge::start().await;
    // The teacher reads `SCORE=` in each trajectory; the marker words follow its scores.
    let r = Run::new(&judge_toml("teacher", &mock, 0));
    let text = groups(120, 3, "zebra SCORE=0.9", "apple SCORE=0.1");
    r.s.write("unlabelled.jsonl", &text);
    let out = r
        .train(
            "taught",
            &[
                "--teacher",
                "teacher",
                "--teacher-groups",
                "unlabelled.jsonl",
                "--epochs",
                "12",
                "--eval-every",
                "24",
                "--mode",
                "pointwise",
            ],
        )
        .await;
    assert!(
        mock.calls() >= 120,
        "the teacher scored every group: {}",
        mock.calls()
    );
    let dev = dev_rankings(&metrics(&r.s.dir.path().join("taught")));
    let best = dev.iter().copied().fold(0.0, f64::max);
    assert!(
        best >= 0.95,
        "agreement with the teacher on its dev groups {dev:?}: {}",
        out.stderr
    );
    // A second run takes the teacher's verdicts from the store: no new calls.
    let calls = mock.calls();
    r.train(
        "again",
        &[
            "--teacher",
            "teacher",
            "--teacher-groups",
            "unlabelled.jsonl",
            "--epochs",
            "1",
            "--eval-every",
            "24",
            "--mode",
            "pointwise",
        ],
    )
    .await;
    assert_eq!(mock.calls(), calls);
}

/// `n` groups of two answers of random words, nothing marking the better one but its length:
/// it is the shorter (2 words against 12) in the first `shorter` groups, the longer in the rest.
fn length_groups(n: usize, shorter: usize, seed: u64) -> String {
    let mut r = Lcg(seed);
    let mut out = String::new();
    for i in 0..n {
        let mut words = |k: usize| -> String {
            (0..k)
                .map(|_| WORDS[(r.next() % WORDS.len() as u64) as usize])
                .collect::<Vec<_>>()
                .join(" ")
        };
        let (short, long) = (words(2), words(12));
        let answer = |text: &str| {
            json!({"messages": [
                {"role": "system", "content": "Answer in a few words."},
                {"role": "user", "content": format!("Question {i}: name a thing.")},
                {"role": "assistant", "content": text}]})
        };
        let (right, wrong) = if i < shorter {
            (answer(&short), answer(&long))
        } else {
            (answer(&long), answer(&short))
        };
        let line = if r.next().is_multiple_of(2) {
            json!({"id": i, "trajectories": [right, wrong], "labels": [1, 0]})
        } else {
            json!({"id": i, "trajectories": [wrong, right], "labels": [0, 1]})
        };
        out.push_str(&line.to_string());
        out.push('\n');
    }
    out
}

/// Where the better answer is mostly the shorter, an adapter learns "prefer the shorter";
/// `--balance-length` weighs the groups where it is the longer as much, and then it does not.
/// Dev: the better answer always the shorter, so the length rule scores 1 and no rule 0.5.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn balanced_lengths_keep_length_from_being_learnt() {
    let r = Run::new("");
    r.s.write("train.jsonl", &length_groups(48, 36, 5));
    r.s.write("dev.jsonl", &length_groups(24, 24, 6));
    let flags = [
        "--train",
        "train.jsonl",
        "--dev",
        "dev.jsonl",
        "--epochs",
        "20",
        "--eval-every",
        "24",
        "--mode",
        "pointwise",
    ];
    let plain = r.train("plain", &flags).await;
    let kept = r.s.dir.path().join("plain/features");
    let kept = kept.to_str().unwrap();
    let balanced = r
        .train(
            "balanced",
            &[&flags[..], &["--balance-length", "--features", kept]].concat(),
        )
        .await;
    // Each group gives two pointwise examples, both on the same side of the length rule.
    let counts =
        "train.jsonl: pointwise training labels favour the longer trajectory in 24 examples, the \
                  shorter in 72";
    for out in [&plain, &balanced] {
        assert!(out.stderr.contains(counts), "{}", out.stderr);
    }
    assert!(balanced
        .stderr
        .contains("(weighed equal: --balance-length)"));
    let best = |run: &str| {
        dev_rankings(&metrics(&r.s.dir.path().join(run)))
            .into_iter()
            .fold(0.0, f64::max)
    };
    let base = base_dev(&plain);
    let (plain, balanced) = (best("plain"), best("balanced"));
    assert!(
        base <= 0.75,
        "the random base model ranks by length already: {base}"
    );
    assert!(plain >= 0.9, "unbalanced: length learnt, dev {plain}");
    assert!(balanced <= 0.75, "balanced: dev {balanced} (plain {plain})");
    let record: Value = serde_json::from_slice(
        &std::fs::read(r.s.dir.path().join("balanced/best/gavel_judge.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(record["training"]["balance_length"], true, "{record}");
}

/// `--augment attacks` adds one attacked copy of each training group (the attacks in turn),
/// never of a dev group, and a misspelt attack is refused before anything is computed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attacked_copies_join_the_training_groups_only() {
    let r = Run::new("");
    let train = r.s.path("train.jsonl");
    let dev = r.s.path("dev.jsonl");
    let base = ["--train", &train, "--dev", &dev, "--epochs", "1"];
    let plain = r.train("plain", &base).await;
    let augmented = r
        .train(
            "augmented",
            &[
                &base[..],
                &[
                    "--augment",
                    "attacks",
                    "--augment-attacks",
                    "grader_note_polite,padding_question",
                ],
            ]
            .concat(),
        )
        .await;
    assert!(
        augmented
            .stderr
            .contains("train judge: 48 attacked copies added to 48 training groups"),
        "{}",
        augmented.stderr
    );
    // Pointwise: one example per trajectory. Training examples double, dev examples do not.
    let counts = |out: &Out| -> (usize, usize) {
        let line = out
            .stderr
            .lines()
            .find(|l| l.contains(" training and "))
            .unwrap_or_else(|| panic!("{}", out.stderr));
        let n: Vec<usize> = line
            .split_whitespace()
            .filter_map(|w| w.parse().ok())
            .take(2)
            .collect();
        (n[0], n[1])
    };
    let (t0, d0) = counts(&plain);
    assert_eq!(counts(&augmented), (2 * t0, d0));

    let args = [
        &base[..],
        &[
            "--augment",
            "attacks",
            "--augment-attacks",
            "grader_note_politeness",
            "-o",
            "x",
        ],
    ]
    .concat();
    let model = r.model.display().to_string();
    let cfg = r.s.cfg.display().to_string();
    let out = run_within(
        r.s.plain_command(
            "train",
            &[
                &["judge", "--model", &model, "--scorer-config", &cfg][..],
                &args,
            ]
            .concat(),
        ),
        LIMIT,
    )
    .await;
    assert_ne!(out.code, Some(0));
    assert!(
        out.stderr
            .contains("unknown attack \"grader_note_politeness\""),
        "{}",
        out.stderr
    );
}
