//! Help that fits the command (the store's options only where a store is used; each `train`
//! action only its own flags) and one spelling of output flags, the old ones still accepted.

use std::path::Path;

use super::setup;
use crate::common::cli::{run, BIN};
use crate::common::{marked_group, MockJudge};

/// `gavel ARGS... --help`, its text.
fn help(args: &[&str]) -> String {
    let out = std::process::Command::new(BIN)
        .args(args)
        .arg("--help")
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    assert!(out.status.success(), "{args:?} --help: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// Whether the help lists `flag` as an option of its own (not merely mentions it in prose).
fn lists(help: &str, flag: &str) -> bool {
    help.lines().any(|l| {
        let l = l.trim_start();
        l.starts_with(&format!("{flag} ")) || l.starts_with(&format!("{flag}=")) || l == flag || {
            // `-o, --output <FILE>`
            l.starts_with('-') && l.split([',', ' ']).any(|w| w == flag)
        }
    })
}

#[test]
fn store_options_are_listed_only_where_a_store_is_used() {
    for cmd in [
        "score", "diff", "eval", "rescore", "serve", "migrate", "cache",
    ] {
        let h = help(&[cmd]);
        assert!(
            lists(&h, "--store-url"),
            "{cmd} --help lacks --store-url:\n{h}"
        );
        assert!(lists(&h, "--config"), "{cmd}:\n{h}");
    }
    for cmd in ["render", "lint"] {
        let h = help(&[cmd]);
        assert!(!lists(&h, "--store"), "{cmd} --help lists --store:\n{h}");
        assert!(
            !lists(&h, "--store-url"),
            "{cmd} --help lists --store-url:\n{h}"
        );
        assert!(lists(&h, "--config"), "{cmd}:\n{h}");
    }
}

#[test]
fn each_train_action_lists_only_its_own_flags() {
    let run_flags = help(&["train"]);
    for f in [
        "--learning-rate",
        "--lora-r",
        "--use-rslora",
        "--sft",
        "--filter-pass-rate",
    ] {
        assert!(lists(&run_flags, f), "train --help lacks {f}:\n{run_flags}");
    }
    // Every run flag shows where its default comes from.
    let line = run_flags
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("--learning-rate"))
        .take(3)
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        line.contains("[default: train.toml's `learning_rate`, else 0.00001]"),
        "{line}"
    );

    let toy = help(&["train", "toy"]);
    for f in ["--output-dir", "--steps", "--seed", "--no-train", "--quiet"] {
        assert!(lists(&toy, f), "train toy --help lacks {f}:\n{toy}");
    }
    let sample = help(&["train", "sample"]);
    for f in [
        "--output",
        "--config",
        "--model",
        "--group-size",
        "--temperature",
        "--init-adapter",
    ] {
        assert!(
            lists(&sample, f),
            "train sample --help lacks {f}:\n{sample}"
        );
    }
    let merge = help(&["train", "merge"]);
    for f in ["--adapter", "--output", "--model"] {
        assert!(lists(&merge, f), "train merge --help lacks {f}:\n{merge}");
    }
    for (name, h) in [("toy", &toy), ("sample", &sample), ("merge", &merge)] {
        for f in [
            "--learning-rate",
            "--sft",
            "--offline",
            "--beta",
            "--filter-pass-rate",
        ] {
            assert!(!lists(h, f), "train {name} --help lists {f}:\n{h}");
        }
    }
    assert!(!lists(&toy, "--model") && !lists(&merge, "--group-size"));
}

/// `-o/--output` everywhere, and the old spellings still do what they did.
#[tokio::test(flavor = "multi_thread")]
async fn output_flags_are_spelled_one_way_and_the_old_ways_still_work() {
    assert!(lists(&help(&["diff"]), "--output"));
    assert!(
        !lists(&help(&["diff"]), "--html"),
        "the old spelling is hidden"
    );
    assert!(lists(&help(&["train", "sample"]), "-o"));
    assert!(!lists(&help(&["train", "sample"]), "--out"));

    let mock = MockJudge::start().await;
    let s = setup(&mock);
    let file = s.write("g.json", &marked_group(&[0.2, 0.6]).to_string());
    for flag in ["-o", "--output", "--html"] {
        let page = s.path(&format!("report{}.html", flag.len()));
        let args = [
            "--rubric",
            "default,default",
            flag,
            page.as_str(),
            file.as_str(),
        ];
        let out = run(s.command("diff", &args)).await;
        assert_eq!(out.code, Some(0), "diff {flag}: {}", out.stderr);
        let html = std::fs::read_to_string(&page).unwrap();
        assert!(html.starts_with("<!DOCTYPE html>"), "diff {flag}");
    }

    // `train merge --out` / `-o` / `--output` and `train sample --out` parse: with a missing
    // adapter the command gets past parsing and says so (clap's own errors exit 2).
    let dir = tempfile::tempdir().unwrap();
    for flag in ["--out", "-o", "--output"] {
        let out = std::process::Command::new(BIN)
            .current_dir(dir.path())
            .args([
                "train",
                "--model",
                "no-such-model",
                "merge",
                "--adapter",
                "nope",
                flag,
                "m",
            ])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "merge {flag}: {err}");
        assert!(err.contains("no-such-model"), "merge {flag}: {err}");
        assert!(!Path::new(&dir.path().join("m")).exists());
    }
    for flag in ["--out", "-o"] {
        let out = std::process::Command::new(BIN)
            .current_dir(dir.path())
            .args([
                "train",
                "sample",
                flag,
                "s.jsonl",
                "--use-rslora",
                "--model",
                "m.gguf",
            ])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "sample {flag}: {err}");
        assert!(!err.contains("unexpected argument"), "{err}");
    }
}
