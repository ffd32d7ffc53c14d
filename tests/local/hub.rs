//! Models by Hugging Face id, through the `gavel` binary: `model_path = "ORG/NAME[:FILE]"` of a
//! local judge and `--model ORG/NAME` of the trainer resolve through a Hugging Face cache folder
//! laid out as the hub lays it out (`HF_HOME/hub/models--ORG--NAME/...`), holding tiny
//! random-weight models written by the test. `HF_HUB_OFFLINE=1` throughout: nothing downloads.

use std::path::{Path, PathBuf};

use serde_json::Value;
use tokio::process::Command;

use crate::common::cli::{run, run_within, CliSetup};
use crate::common::model::testkit::{self, GgmlDType, TinyOptions};
use gavel::model::Arch;

/// Long enough for the example groups in the tiny tokenizer.
const TINY_CONTEXT: usize = 32768;

pub(crate) fn tiny_gguf(path: &Path) -> PathBuf {
    let mut o = TinyOptions::new(Arch::Qwen3);
    o.context_length = TINY_CONTEXT;
    o.gguf_dtype = GgmlDType::Q8_0;
    testkit::write_gguf(path, &o, &[]).unwrap();
    path.to_path_buf()
}

pub(crate) fn tiny_folder(dir: &Path) -> PathBuf {
    let mut o = TinyOptions::new(Arch::Qwen2);
    o.context_length = TINY_CONTEXT;
    testkit::write_folder(dir, &o).unwrap();
    dir.to_path_buf()
}

/// `c` with `HF_HOME` at `hf_home`, offline, and no other Hugging Face setting of the caller's.
pub(crate) fn offline_hub(c: &mut Command, hf_home: &Path) {
    for k in ["HF_HUB_CACHE", "HF_ENDPOINT", "HF_TOKEN", "XDG_CACHE_HOME"] {
        c.env_remove(k);
    }
    c.env("HF_HOME", hf_home).env("HF_HUB_OFFLINE", "1");
}

fn judge_config(model_path: &str) -> String {
    format!(
        "default_judge = \"tiny\"\n[judges.tiny]\nbackend = \"local\"\nmodel_path = \"{model_path}\"\n\
         deadline_s = 300\n"
    )
}

fn rag_group() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples/groups/rag_answer.json")
        .display()
        .to_string()
}

/// The scores of one `gavel score` result line: four, each in 0..=1.
fn check_scored(stdout: &str) -> Value {
    let v: Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    let r: Vec<f64> = serde_json::from_value(v["rewards"].clone()).unwrap();
    assert_eq!(r.len(), 4, "{v}");
    assert!(r.iter().all(|x| (0.0..=1.0).contains(x)), "{r:?}");
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_judge_model_by_id_comes_from_the_hugging_face_cache() {
    let tmp = tempfile::tempdir().unwrap();
    let hf = tmp.path().join("hf");
    let gguf = tiny_gguf(&tmp.path().join("w.gguf"));
    // A GGUF repository with two files (linked into blobs, as the hub lays it out) and a
    // safetensors repository (plain files).
    testkit::hub_cache_entry(
        &hf.join("hub"),
        "tiny-org/Tiny-GGUF",
        &[("tiny-q8_0.gguf", &gguf), ("tiny-f16.gguf", &gguf)],
        true,
    )
    .unwrap();
    let folder = tiny_folder(&tmp.path().join("folder"));
    let files = testkit::folder_files(&folder).unwrap();
    let files: Vec<(&str, &Path)> = files
        .iter()
        .map(|(n, p)| (n.as_str(), p.as_path()))
        .collect();
    testkit::hub_cache_entry(&hf.join("hub"), "tiny-org/Tiny-Instruct", &files, false).unwrap();

    for (id, reported) in [
        ("tiny-org/Tiny-GGUF:tiny-q8_0.gguf", "tiny-qwen3"),
        ("tiny-org/Tiny-Instruct", ""),
    ] {
        let s = CliSetup::new(&judge_config(id));
        let mut c = s.command("score", &[&rag_group()]);
        offline_hub(&mut c, &hf);
        let out = run_within(c, std::time::Duration::from_secs(300)).await;
        assert_eq!(out.code, Some(0), "{id}: {}", out.stderr);
        let v = check_scored(&out.stdout);
        assert_eq!(v["judges"][0]["name"], "tiny", "{v}");
        if !reported.is_empty() {
            assert_eq!(v["judges"][0]["model"], reported, "{v}");
        }
    }

    // The id alone, for a repository of two GGUF files: one line naming both.
    let s = CliSetup::new(&judge_config("tiny-org/Tiny-GGUF"));
    let mut c = s.command("score", &[&rag_group()]);
    offline_hub(&mut c, &hf);
    let out = run(c).await;
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(
        out.stderr.contains(
            "model_path tiny-org/Tiny-GGUF: the repository holds 2 GGUF files; name one after a \
             colon (tiny-org/Tiny-GGUF:FILE): tiny-f16.gguf, tiny-q8_0.gguf"
        ),
        "{}",
        out.stderr
    );
    assert_eq!(out.stderr.trim().lines().count(), 1, "{}", out.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_path_that_exists_wins_over_the_id() {
    let tmp = tempfile::tempdir().unwrap();
    let hf = tmp.path().join("hf");
    let gguf = tiny_gguf(&tmp.path().join("w.gguf"));
    // The cache's tiny-org/Model cannot be resolved without a file name (two GGUFs) ...
    testkit::hub_cache_entry(
        &hf.join("hub"),
        "tiny-org/Model",
        &[("a.gguf", &gguf), ("b.gguf", &gguf)],
        true,
    )
    .unwrap();
    let s = CliSetup::new(&judge_config("tiny-org/Model"));
    let score = || {
        let mut c = s.command("score", &[&rag_group()]);
        offline_hub(&mut c, &hf);
        c
    };
    let out = run(score()).await;
    assert!(out.stderr.contains("holds 2 GGUF files"), "{}", out.stderr);
    // ... but a folder of that name in the working directory is used as it is.
    tiny_folder(&s.dir.path().join("tiny-org/Model"));
    let out = run_within(score(), std::time::Duration::from_secs(300)).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    check_scored(&out.stdout);
}

#[tokio::test]
async fn offline_a_model_not_in_the_cache_stops_the_start_naming_the_cache() {
    let tmp = tempfile::tempdir().unwrap();
    let hf = tmp.path().join("hf");
    let s = CliSetup::new(&judge_config("Qwen/Qwen2.5-1.5B-Instruct"));
    let mut c = s.command("score", &[&rag_group()]);
    offline_hub(&mut c, &hf);
    let out = run(c).await;
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    let refs = hf.join("hub/models--Qwen--Qwen2.5-1.5B-Instruct/refs/main");
    assert!(
        out.stderr.contains(&format!(
            "[judges.tiny]: model_path Qwen/Qwen2.5-1.5B-Instruct: no such file or folder, and \
             not in the Hugging Face cache: no {}; HF_HUB_OFFLINE is set",
            refs.display()
        )),
        "{}",
        out.stderr
    );
    assert_eq!(out.stderr.trim().lines().count(), 1, "{}", out.stderr);
    assert!(out.stdout.is_empty(), "{}", out.stdout);
}

/// `gavel train` and `gavel train merge` with `--model ORG/NAME`: the toy model, put in the
/// cache as a safetensors repository, trains a step; the adapter names the id as its base (as
/// PEFT adapters do), and merging reads the base from the cache's snapshot folder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_trainer_takes_its_model_by_id() {
    let s = CliSetup::new("");
    let dir = s.dir.path();
    let hf = dir.join("hf");
    let gavel = |args: &[&str]| {
        let mut c = Command::new(crate::common::cli::BIN);
        c.current_dir(dir)
            .args(args)
            .stdin(std::process::Stdio::null());
        for k in ["GAVEL_CONFIG", "GAVEL_STORE", "GAVEL_STORE_URL", "RUST_LOG"] {
            c.env_remove(k);
        }
        offline_hub(&mut c, &hf);
        c
    };
    let out = run(gavel(&[
        "train",
        "toy",
        "--no-train",
        "--output-dir",
        "toy",
    ]))
    .await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let files = testkit::folder_files(&dir.join("toy/toy-model")).unwrap();
    let files: Vec<(&str, &Path)> = files
        .iter()
        .map(|(n, p)| (n.as_str(), p.as_path()))
        .collect();
    testkit::hub_cache_entry(&hf.join("hub"), "tiny-org/Toy", &files, true).unwrap();
    std::fs::remove_dir_all(dir.join("toy/toy-model")).unwrap();

    let train = [
        "train",
        "--config",
        "toy/train.toml",
        "--model",
        "tiny-org/Toy",
        "--steps",
        "1",
        "--output-dir",
        "run",
        "--store",
        "store",
        "--quiet",
    ];
    let out = run_within(gavel(&train), std::time::Duration::from_secs(300)).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let adapter: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("run/checkpoint-1/adapter_config.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(adapter["base_model_name_or_path"], "tiny-org/Toy");

    let merge = [
        "train",
        "--config",
        "toy/train.toml",
        "--model",
        "tiny-org/Toy",
        "merge",
        "--adapter",
        "run/checkpoint-1",
        "--out",
        "merged",
    ];
    let out = run(gavel(&merge)).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    for f in ["model.safetensors", "config.json", "tokenizer.json"] {
        assert!(dir.join("merged").join(f).is_file(), "merged/{f}");
    }

    // Not in the cache: the trainer stops with the same one line as the judge (in a folder of
    // its own: `run` holds a run now, which a new one is refused).
    let mut missing = train;
    missing[4] = "tiny-org/Absent";
    missing[8] = "run-absent";
    let out = run(gavel(&missing)).await;
    assert_ne!(out.code, Some(0));
    assert!(
        out.stderr.contains(
            "model_path tiny-org/Absent: no such file or folder, and not in the Hugging Face cache"
        ),
        "{}",
        out.stderr
    );
}
