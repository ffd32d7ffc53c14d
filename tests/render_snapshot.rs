//! Every prompt `gavel render` writes for the shipped examples and eval sets, under each shipped
//! config, is the one recorded in `tests/data/render_snapshot.json`: a refactor that changes a
//! judge's prompt, its chunking or its token counts fails here. The record holds a SHA-256 of
//! each render's JSON output and its exit code (a group a config refuses stays refused).
//!
//! A deliberate prompt change re-records it, with the change measured by `gavel eval` first:
//!   GAVEL_RENDER_SNAPSHOT=update cargo test --test render_snapshot
//! `GAVEL_RENDER_BIN` renders with another build of gavel (how the record was first taken, from
//! the build before the module reorganisation).
//!
//! The local judges' configs name the 1.5B test model (their token counts are its tokenizer's):
//! without GAVEL_TEST_MODEL_1_5B they are skipped, with a printed reason.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use sha2::{Digest, Sha256};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const SNAPSHOT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/data/render_snapshot.json"
);

/// The shipped configs: the remote judge needs nothing, the local ones their model.
const CONFIGS: [(&str, bool); 3] = [
    ("examples/gavel.toml", false),
    ("examples/local.toml", true),
    ("examples/local-tuned.toml", true),
];

/// The shipped group files: the examples as they are, the eval sets without their labels.
fn group_files() -> Vec<(String, bool)> {
    let mut files = vec![("examples/groups.jsonl".to_string(), false)];
    let mut add = |dir: &str, ext: &str, labelled: bool| {
        let mut found: Vec<String> = std::fs::read_dir(Path::new(ROOT).join(dir))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(ext))
            .map(|n| format!("{dir}/{n}"))
            .collect();
        found.sort();
        files.extend(found.into_iter().map(|f| (f, labelled)));
    };
    add("examples/groups", ".json", false);
    add("evals", ".jsonl", true);
    add("evals/dev", ".jsonl", true);
    add("evals/train", ".jsonl", true);
    files
}

/// An eval set as plain groups: `gavel render` keeps `id`, `set` and `labels` aside now, but a
/// build from before refused them, and `GAVEL_RENDER_BIN` may name one.
fn unlabelled(file: &Path, out: &Path) {
    let text: String = std::fs::read_to_string(file)
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let mut g: Value = serde_json::from_str(l).unwrap();
            for k in ["id", "set", "labels"] {
                g.as_object_mut().unwrap().remove(k);
            }
            format!("{g}\n")
        })
        .collect();
    std::fs::write(out, text).unwrap();
}

/// A copy of a config whose local judge loads `model` (the same file the model id names). The
/// copy lives elsewhere, so its adapter, read from the config's folder, is written absolute.
fn with_model(config: &str, model: &str, out: &Path) -> PathBuf {
    let text = std::fs::read_to_string(Path::new(ROOT).join(config)).unwrap();
    let folder = Path::new(ROOT).join(config).parent().unwrap().to_path_buf();
    let text: String = text
        .lines()
        .map(|l| {
            if l.starts_with("model_path") {
                return format!("model_path = {}\n", Value::from(model));
            }
            if let Some(rest) = l.strip_prefix("adapter = \"") {
                let rel = &rest[..rest.find('"').unwrap()];
                let abs = folder.join(rel).display().to_string();
                return format!("adapter = {}\n", Value::from(abs));
            }
            format!("{l}\n")
        })
        .collect();
    let path = out.join(Path::new(config).file_name().unwrap());
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn every_shipped_prompt_renders_as_recorded() {
    let bin = std::env::var("GAVEL_RENDER_BIN").unwrap_or(env!("CARGO_BIN_EXE_gavel").into());
    let model = std::env::var("GAVEL_TEST_MODEL_1_5B").ok();
    if model.is_none() {
        println!("skipping the local judges' renders: GAVEL_TEST_MODEL_1_5B is unset");
    }
    let tmp = tempfile::tempdir().unwrap();
    let mut got = BTreeMap::new();
    for (config, local) in CONFIGS {
        let config_path = match (local, &model) {
            (false, _) => Path::new(ROOT).join(config),
            (true, Some(m)) => with_model(config, m, tmp.path()),
            (true, None) => continue,
        };
        for (file, labelled) in group_files() {
            let input = match labelled {
                false => Path::new(ROOT).join(&file),
                true => {
                    let p = tmp.path().join(file.replace('/', "_"));
                    unlabelled(&Path::new(ROOT).join(&file), &p);
                    p
                }
            };
            let out = Command::new(&bin)
                .current_dir(ROOT)
                .env_remove("GAVEL_CONFIG")
                .env_remove("GAVEL_RUBRIC")
                .env_remove("GAVEL_JUDGE")
                .env_remove("GAVEL_RENDER_FORMAT")
                .env_remove("GAVEL_RENDER_OUTPUT")
                .env_remove("GAVEL_JUDGE_MODE")
                .env_remove("GAVEL_PERMUTATIONS")
                .args(["render", "--format", "json", "--config"])
                .arg(&config_path)
                .arg(&input)
                .output()
                .unwrap();
            let digest = hex::encode(Sha256::digest(&out.stdout));
            let key = format!("{config} {file}");
            let code = out.status.code().unwrap_or(-1);
            got.insert(key, Value::from(format!("{code} {digest}")));
        }
    }
    if std::env::var("GAVEL_RENDER_SNAPSHOT").as_deref() == Ok("update") {
        let text = serde_json::to_string_pretty(&got).unwrap();
        std::fs::write(SNAPSHOT, text + "\n").unwrap();
        println!("recorded {} renders in {SNAPSHOT}", got.len());
        return;
    }
    let want: BTreeMap<String, Value> =
        serde_json::from_str(&std::fs::read_to_string(SNAPSHOT).unwrap()).unwrap();
    let changed: Vec<String> = got
        .iter()
        .filter(|(k, v)| want.get(*k) != Some(v))
        .map(|(k, v)| format!("{k}: {v} (recorded {:?})", want.get(k)))
        .collect();
    assert!(
        changed.is_empty(),
        "renders changed (diff `gavel render --format json` before and after):\n{}",
        changed.join("\n")
    );
    // A shipped file added shows above (no record); one removed, here.
    let missing: Vec<&String> = want
        .keys()
        .filter(|k| !got.contains_key(*k) && (model.is_some() || k.starts_with(CONFIGS[0].0)))
        .collect();
    assert!(missing.is_empty(), "recorded but not rendered: {missing:?}");
    assert!(got.len() >= 16, "only {} renders", got.len());
}
