//! Every configuration shipped in examples/ works as shipped, so none can rot: each scorer config
//! (`examples/*.toml` with judges) builds all its judges and renders the example group with
//! `gavel render`, and `gavel serve` starts on it and answers `/healthz`, both run from the
//! repository's root as the README shows them; each training config parses and validates.
//!
//! A local judge's model is the one thing that does not ship: one named by Hugging Face id is
//! put, as a tiny random-weight model of the same file name, in an offline Hugging Face cache the
//! commands are pointed at; one named by path must exist in the repository.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

use super::hub::{offline_hub, tiny_folder, tiny_gguf};
use crate::common::cli::{run_within, BIN};
use crate::common::model::testkit;
use gavel::config::Config;
use gavel::model::hub::HubId;

/// The group the README scores with examples/local.toml.
const README_GROUP: &str = "examples/groups/retrieval_qa.json";

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The binary in the repository's root, with no caller settings leaking in.
fn gavel(hf_home: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(BIN);
    for k in [
        "GAVEL_CONFIG",
        "GAVEL_STORE",
        "GAVEL_STORE_URL",
        "GAVEL_ADDR",
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "GAVEL_JUDGE_MODEL",
        "GAVEL_API_KEYS",
        "RUST_LOG",
    ] {
        c.env_remove(k);
    }
    offline_hub(&mut c, hf_home);
    c.current_dir(repo_root())
        .args(args)
        .stdin(Stdio::null())
        .kill_on_drop(true);
    c
}

/// Links the real model file `model` into the Hugging Face cache under `hf_home` as `id`'s
/// file, as the hub lays it out (so a config naming the id reads it exactly as shipped).
fn link_real_model(hf_home: &Path, id: &HubId, model: &Path) {
    let repo = hf_home
        .join("hub")
        .join(format!("models--{}", id.repo.replace('/', "--")));
    let snapshot = repo.join("snapshots").join(testkit::HUB_COMMIT);
    std::fs::create_dir_all(&snapshot).unwrap();
    std::fs::create_dir_all(repo.join("refs")).unwrap();
    std::fs::write(repo.join("refs/main"), testkit::HUB_COMMIT).unwrap();
    let link = snapshot.join(id.file.as_deref().expect("a GGUF file"));
    if !link.exists() {
        std::os::unix::fs::symlink(std::fs::canonicalize(model).unwrap(), link).unwrap();
    }
}

/// The test model (`GAVEL_TEST_MODEL`, `GAVEL_TEST_MODEL_1_5B`) whose file a shipped judge
/// adapter was trained on, by the base file name its `gavel_judge.json` records.
fn adapters_base_model(adapter: &Path) -> Result<PathBuf, String> {
    let record = repo_root().join(adapter).join("gavel_judge.json");
    let text =
        std::fs::read_to_string(&record).map_err(|e| format!("{}: {e}", record.display()))?;
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let base = v["base"]["file"].as_str().unwrap().to_string();
    ["GAVEL_TEST_MODEL", "GAVEL_TEST_MODEL_1_5B"]
        .into_iter()
        .filter_map(std::env::var_os)
        .map(PathBuf::from)
        .find(|p| {
            p.file_name()
                .is_some_and(|f| f.to_str() == Some(base.as_str()))
        })
        .ok_or_else(|| {
            format!(
                "its adapter {} was trained on {base}: set GAVEL_TEST_MODEL or \
                 GAVEL_TEST_MODEL_1_5B to that file (tools/fetch-model.sh)",
                adapter.display()
            )
        })
}

/// Puts a tiny model in the cache under `hf_home` for every local judge of `cfg` named by id
/// (the real test model where the judge has an adapter: an adapter refuses any other base),
/// and checks that one named by path is in the repository. Err: why the config cannot run here.
/// A judge without an adapter on the same id as one with an adapter (a base judge beside its
/// tuned judge) shares that real model.
fn provide_models(file: &Path, cfg: &Config, hf_home: &Path, tmp: &Path) -> Result<(), String> {
    let local = || {
        cfg.judges
            .iter()
            .filter_map(|(name, j)| Some((name, j.as_local()?)))
    };
    let adapted: Vec<&Path> = local()
        .filter(|(_, j)| j.adapter.is_some())
        .map(|(_, j)| j.model_path.as_path())
        .collect();
    // Judges with an adapter first: their ids get the real model.
    let (first, rest): (Vec<_>, Vec<_>) = local().partition(|(_, j)| j.adapter.is_some());
    for (name, j) in first.into_iter().chain(rest) {
        let path = j.model_path.as_path();
        if j.adapter.is_none() && adapted.contains(&path) {
            continue;
        }
        if repo_root().join(path).exists() {
            continue;
        }
        let text = path.to_str().unwrap();
        let id = HubId::parse(text).unwrap_or_else(|| {
            panic!(
                "{}: [judges.{name}] model_path {text} is neither in the repository nor a \
                 Hugging Face id",
                file.display()
            )
        });
        if let Some(adapter) = &j.adapter {
            link_real_model(hf_home, &id, &adapters_base_model(adapter)?);
            continue;
        }
        let made = tmp.join(format!("{name}-model"));
        let hub = hf_home.join("hub");
        match &id.file {
            Some(f) => {
                let gguf = tiny_gguf(&made);
                testkit::hub_cache_entry(&hub, &id.repo, &[(f.as_str(), gguf.as_path())], true)
            }
            None => {
                let files = testkit::folder_files(&tiny_folder(&made)).unwrap();
                let files: Vec<(&str, &Path)> = files
                    .iter()
                    .map(|(n, p)| (n.as_str(), p.as_path()))
                    .collect();
                testkit::hub_cache_entry(&hub, &id.repo, &files, true)
            }
        }
        .unwrap();
    }
    Ok(())
}

/// `gavel serve --config FILE` starts (within 120 s: it loads its judges' models) and answers
/// `/healthz` with 200.
async fn serve_starts(file: &str, hf_home: &Path, store: &Path) {
    let store = store.display().to_string();
    let args = [
        "serve",
        "--config",
        file,
        "--addr",
        "127.0.0.1:0",
        "--store",
        &store,
    ];
    let mut child = gavel(hf_home, &args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let listening = async {
        while let Some(l) = lines.next_line().await.unwrap() {
            if let Some(u) = l.strip_prefix("gavel listening on ") {
                return Some(u.to_string());
            }
        }
        None
    };
    let url = tokio::time::timeout(Duration::from_secs(120), listening)
        .await
        .unwrap_or_else(|_| panic!("{file}: gavel serve not listening in 120 s"));
    let Some(url) = url else {
        let out = child.wait_with_output().await.unwrap();
        panic!(
            "{file}: gavel serve exited before listening: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let resp = reqwest::get(format!("{url}/healthz")).await.unwrap();
    assert_eq!(resp.status(), 200, "{file}: /healthz");
    child.kill().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_example_config_works_as_shipped() {
    let tmp = tempfile::tempdir().unwrap();
    let mut files: Vec<PathBuf> = std::fs::read_dir(repo_root().join("examples"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    files.sort();
    let (mut scorers, mut trainers) = (0, 0);
    let mut tried = Vec::new();
    for (i, path) in files.iter().enumerate() {
        // A Hugging Face cache per config: two configs may name one id, one with a tiny model
        // in its place, the other (with an adapter) with the real one.
        let hf = tmp.path().join(format!("hf-{i}"));
        let rel = path
            .strip_prefix(repo_root())
            .unwrap()
            .display()
            .to_string();
        let text = std::fs::read_to_string(path).unwrap();
        let table: toml::Table = text.parse().unwrap_or_else(|e| panic!("{rel}: {e}"));
        if !table.contains_key("judges") {
            let t = gavel::train::config::TrainConfig::from_file(path)
                .unwrap_or_else(|e| panic!("{rel}: {e}"));
            t.validate().unwrap_or_else(|e| panic!("{rel}: {e}"));
            trainers += 1;
            continue;
        }
        // Read as gavel reads it: its relative paths from its folder.
        let cfg = Config::from_file(path).unwrap_or_else(|e| panic!("{e}"));
        if let Err(why) = provide_models(path, &cfg, &hf, tmp.path()) {
            eprintln!("{rel} skipped: {why}");
            continue;
        }
        let group = "examples/groups/rag_answer.json";
        let render = gavel(&hf, &["render", "--config", &rel, group]);
        let out = run_within(render, Duration::from_secs(120)).await;
        assert_eq!(
            out.code,
            Some(0),
            "gavel render --config {rel}: {}",
            out.stderr
        );
        assert!(
            out.stdout.starts_with("=== group 1"),
            "{rel}: {}",
            out.stdout
        );
        serve_starts(&rel, &hf, &tmp.path().join(format!("store-{scorers}"))).await;
        scorers += 1;
        tried.push(rel);
    }
    assert!(scorers >= 2 && trainers >= 1, "{files:?}");
    // With the real test models, the tuned config too (its adapter needs its own base model).
    if std::env::var_os("GAVEL_TEST_MODEL_1_5B").is_some() {
        assert!(
            tried.iter().any(|f| f == "examples/local-tuned.toml"),
            "{tried:?}"
        );
    }
}

/// `gavel score --config examples/local.toml GROUP` as the README shows it, with the 0.5B test
/// model (`GAVEL_TEST_MODEL`) standing in for the 1.5B the config names: it is put in an offline
/// Hugging Face cache under the config's id (linked, not copied), so the config is read exactly
/// as shipped. The judge must answer in its pointwise mode with a probability of its own for
/// every distinct trajectory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn examples_local_toml_scores_with_a_real_model() {
    let Some(model) = std::env::var_os("GAVEL_TEST_MODEL") else {
        eprintln!(
            "skipped: set GAVEL_TEST_MODEL to the 0.5B test model (tools/fetch-model.sh 0.5b) to \
             score with examples/local.toml"
        );
        return;
    };
    let cfg = Config::from_file(&repo_root().join("examples/local.toml")).unwrap();
    let judge = &cfg.judges[cfg.default_judge_name().unwrap()];
    let path = judge.as_local().unwrap().model_path.to_str().unwrap();
    let id = HubId::parse(path).expect("examples/local.toml names its model by id");
    let tmp = tempfile::tempdir().unwrap();
    let hf = tmp.path().join("hf");
    link_real_model(&hf, &id, Path::new(&model));

    let store = tmp.path().join("store").display().to_string();
    let group = README_GROUP;
    let args = [
        "score",
        "--config",
        "examples/local.toml",
        group,
        "--store",
        &store,
    ];
    let t0 = std::time::Instant::now();
    let out = run_within(gavel(&hf, &args), Duration::from_secs(1800)).await;
    eprintln!("scored {group} in {:?}", t0.elapsed());
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let v: serde_json::Value = serde_json::from_str(out.stdout.trim()).unwrap();
    assert_eq!(v["template"]["name"], "pointwise", "{v}");
    assert_eq!(v["judges"][0]["name"], "local", "{v}");
    // One question per distinct trajectory, each with a judge component of its own in 0..=1.
    let n = v["scores"].as_array().unwrap().len();
    assert_eq!(v["usage"]["judge_calls"], n as u64, "{v}");
    let judged: Vec<f64> = v["scores"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["components"]["judge"].as_f64().unwrap())
        .collect();
    eprintln!(
        "{group}: judge components {judged:?}, rewards {}",
        v["rewards"]
    );
    assert!(judged.iter().all(|x| (0.0..=1.0).contains(x)), "{judged:?}");
    assert!(judged.windows(2).any(|w| w[0] != w[1]), "{judged:?}");
}
