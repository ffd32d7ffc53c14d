//! `gavel train toy` as a new user runs it twice: the help says its real defaults, the run ends
//! with the mean reward of its first and last ten steps (one step's is noise), and a folder that
//! holds a run is refused unless `--resume` continues it or `--overwrite` starts it again; a
//! real run (`gavel train --config`) alike.
#![cfg(feature = "train")]

use std::path::Path;
use std::process::Output;

use serde_json::Value;

fn gavel(args: &[&str]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_gavel"))
        .args(args)
        .env_remove("GAVEL_TRAIN_CONFIG")
        .env_remove("GAVEL_TRAIN_OUTPUT_DIR")
        .env_remove("GAVEL_TRAIN_STEPS")
        .env_remove("GAVEL_TRAIN_RESUME")
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `(step, drawn_reward_mean)` of every step line of `run/metrics.jsonl`: what the run's last line
/// averages.
fn steps(run: &Path) -> Vec<(u64, f64)> {
    std::fs::read_to_string(run.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter_map(|v| Some((v["step"].as_u64()?, v["drawn_reward_mean"].as_f64()?)))
        .collect()
}

fn mean(v: &[(u64, f64)]) -> f64 {
    v.iter().map(|s| s.1).sum::<f64>() / v.len() as f64
}

#[test]
fn the_toy_help_says_its_defaults() {
    let out = gavel(&["train", "toy", "--help"]);
    let help = text(&out.stdout);
    assert!(help.contains("[default: 400, the toy run's]"), "{help}");
    assert!(help.contains("[default: 7, the toy run's]"), "{help}");
    assert!(
        help.contains("--resume") && help.contains("--overwrite"),
        "{help}"
    );
}

#[test]
fn a_toy_folder_with_a_run_is_refused_resumed_or_overwritten() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("toy");
    let d = dir.to_str().unwrap();
    let run = dir.join("run");
    let toy = |extra: &[&str]| {
        let mut args = vec!["train", "toy", "--output-dir", d, "--quiet"];
        args.extend(extra);
        gavel(&args)
    };

    let out = toy(&["--steps", "12"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let got = steps(&run);
    assert_eq!(got.len(), 12);
    let stdout = text(&out.stdout);
    let want = format!(
        "trained to step 12: mean reward {:.3} over steps 1–10, {:.3} over steps 3–12; adapters in ",
        mean(&got[..10]),
        mean(&got[2..])
    );
    assert!(stdout.starts_with(&want), "{want:?}\n{stdout}");

    // Again into the same folder: refused, nothing touched.
    let out = toy(&["--steps", "12"]);
    assert_eq!(out.status.code(), Some(1));
    let e = text(&out.stderr);
    assert!(
        e.contains("holds a toy run (run, toy-model, toy-tasks.jsonl, train.toml)"),
        "{e}"
    );
    assert!(e.contains("--resume") && e.contains("--overwrite"), "{e}");
    assert_eq!(steps(&run), got);

    // --resume continues from the last checkpoint: every step once, in order.
    let out = toy(&["--steps", "14", "--resume"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let resumed = steps(&run);
    assert_eq!(
        resumed.iter().map(|s| s.0).collect::<Vec<_>>(),
        (1..=14).collect::<Vec<_>>()
    );
    assert_eq!(&resumed[..12], &got[..]);
    assert!(text(&out.stdout).starts_with("trained to step 14: mean reward "));

    // A real run into the toy's run/ (the toy's train.toml names it) is refused alike, naming
    // the checkpoint --resume would continue from.
    let cfg = dir.join("train.toml");
    let out = gavel(&[
        "train",
        "--config",
        cfg.to_str().unwrap(),
        "--steps",
        "15",
        "--quiet",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let e = text(&out.stderr);
    assert!(
        e.contains("is not empty") && e.contains("checkpoint-14"),
        "{e}"
    );
    let out = gavel(&[
        "train",
        "--config",
        cfg.to_str().unwrap(),
        "--steps",
        "15",
        "--quiet",
        "--resume",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(steps(&run).len(), 15);

    // --overwrite starts again: the old run's steps and checkpoints are gone.
    let out = toy(&["--steps", "3", "--overwrite"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(steps(&run).len(), 3);
    assert!(!run.join("checkpoint-15").exists());
    assert!(text(&out.stdout).starts_with("trained to step 3: mean reward "));
}
