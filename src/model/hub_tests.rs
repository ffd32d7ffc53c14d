//! `model::hub`: ids, the cache's settings from the environment, and resolution against cache
//! folders laid out as the hub lays them out (`refs/main`, `snapshots/COMMIT/...` linking into
//! `blobs/`, or plain files), holding real tiny models that load. Offline only: nothing here
//! touches the network.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::hub::{Hub, HubId};
use super::hub_download::{etag, plan, Plan};
use super::testkit::{folder_files, hub_cache_entry, write_folder, write_gguf, TinyOptions};
use super::{Arch, LocalError, ModelFiles, ModelFormat};

fn id(s: &str) -> HubId {
    HubId::parse(s).unwrap_or_else(|| panic!("{s} should be an id"))
}

fn offline(cache: &Path) -> Hub {
    let cache = cache.display().to_string();
    Hub::from_env(&|k| match k {
        "HF_HUB_CACHE" => Some(cache.clone()),
        "HF_HUB_OFFLINE" => Some("1".into()),
        _ => None,
    })
    .unwrap()
}

fn lay_out(cache: &Path, repo: &str, files: &[(&str, &Path)], symlinks: bool) -> PathBuf {
    hub_cache_entry(cache, repo, files, symlinks).unwrap()
}

/// A tiny GGUF file and a tiny model folder, written once per test.
struct Models {
    _tmp: tempfile::TempDir,
    gguf: PathBuf,
    folder: PathBuf,
}

fn models() -> Models {
    let tmp = tempfile::tempdir().unwrap();
    let gguf = tmp.path().join("tiny.gguf");
    write_gguf(&gguf, &TinyOptions::new(Arch::Qwen2), &[]).unwrap();
    let folder = tmp.path().join("folder");
    write_folder(&folder, &TinyOptions::new(Arch::Qwen3)).unwrap();
    Models {
        _tmp: tmp,
        gguf,
        folder,
    }
}

#[test]
fn ids_and_paths() {
    assert_eq!(
        id("Qwen/Qwen2.5-1.5B-Instruct"),
        HubId {
            repo: "Qwen/Qwen2.5-1.5B-Instruct".into(),
            file: None
        }
    );
    let g = id("Qwen/Qwen2.5-1.5B-Instruct-GGUF:qwen2.5-1.5b-instruct-q4_k_m.gguf");
    assert_eq!(g.repo, "Qwen/Qwen2.5-1.5B-Instruct-GGUF");
    assert_eq!(g.file.as_deref(), Some("qwen2.5-1.5b-instruct-q4_k_m.gguf"));
    assert_eq!(
        g.to_string(),
        "Qwen/Qwen2.5-1.5B-Instruct-GGUF:qwen2.5-1.5b-instruct-q4_k_m.gguf"
    );
    assert_eq!(id("o/r:sub/f.gguf").file.as_deref(), Some("sub/f.gguf"));
    // What can only be a path: a file name where the repository would be, more or fewer
    // components, absolute or dotted paths, names the hub refuses, files outside the repository.
    for path in [
        "models/qwen2.5-7b-instruct-q4_k_m.gguf",
        "models/m.safetensors",
        "models/Qwen/Qwen2.5-0.5B-Instruct",
        "Qwen2.5-0.5B-Instruct",
        "/abs/model",
        "./Qwen/x",
        "../Qwen/x",
        "~/Qwen",
        "a--b/c",
        "a/b..c",
        "-a/b",
        "a/b.",
        "a b/c",
        "o/r:",
        "o/r:../x.gguf",
        "o/r:/etc/passwd",
        "o/r:a//b",
    ] {
        assert_eq!(HubId::parse(path), None, "{path}");
    }
}

#[test]
fn the_cache_folder_follows_the_hub_s_variables() {
    let hub = |vars: &[(&str, &str)]| {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Hub::from_env(&|k| vars.get(k).cloned())
    };
    let home = [("HOME", "/h")];
    assert_eq!(
        hub(&home).unwrap().cache,
        Path::new("/h/.cache/huggingface/hub")
    );
    let xdg = [("HOME", "/h"), ("XDG_CACHE_HOME", "/x")];
    assert_eq!(hub(&xdg).unwrap().cache, Path::new("/x/huggingface/hub"));
    let hf_home = [("HOME", "/h"), ("XDG_CACHE_HOME", "/x"), ("HF_HOME", "/hf")];
    assert_eq!(hub(&hf_home).unwrap().cache, Path::new("/hf/hub"));
    let hub_cache = [("HF_HOME", "/hf"), ("HF_HUB_CACHE", "/c")];
    assert_eq!(hub(&hub_cache).unwrap().cache, Path::new("/c"));
    let e = hub(&[]).unwrap_err();
    assert!(e.contains("HF_HOME or HF_HUB_CACHE"), "{e}");

    let h = hub(&home).unwrap();
    assert!(!h.offline);
    assert_eq!(h.endpoint, "https://huggingface.co");
    for (v, off) in [
        ("1", true),
        ("TRUE", true),
        ("yes", true),
        ("0", false),
        ("", false),
    ] {
        assert_eq!(
            hub(&[("HOME", "/h"), ("HF_HUB_OFFLINE", v)])
                .unwrap()
                .offline,
            off,
            "{v:?}"
        );
    }
    let mirror = hub(&[("HOME", "/h"), ("HF_ENDPOINT", "http://127.0.0.1:9/")]).unwrap();
    assert_eq!(mirror.endpoint, "http://127.0.0.1:9");
    // The token never shows in Debug output.
    let with_token = hub(&[("HOME", "/h"), ("HF_TOKEN", "hf_secret")]).unwrap();
    assert!(!format!("{with_token:?}").contains("hf_secret"));
}

#[test]
fn a_gguf_repository_resolves_by_file_and_alone_when_it_holds_one() {
    let m = models();
    let cache = tempfile::tempdir().unwrap();
    let hub = offline(cache.path());
    let snapshot = lay_out(
        cache.path(),
        "tiny-org/Tiny-GGUF",
        &[("tiny-q8_0.gguf", &m.gguf), ("more/tiny-f32.gguf", &m.gguf)],
        true,
    );
    let path = hub
        .resolve(&id("tiny-org/Tiny-GGUF:tiny-q8_0.gguf"))
        .unwrap();
    assert_eq!(path, snapshot.join("tiny-q8_0.gguf"));
    assert!(path.symlink_metadata().unwrap().file_type().is_symlink());
    let files = ModelFiles::open(&path).unwrap();
    assert_eq!(files.format(), ModelFormat::Gguf);
    assert_eq!(files.config.arch, Arch::Qwen2);
    let nested = hub
        .resolve(&id("tiny-org/Tiny-GGUF:more/tiny-f32.gguf"))
        .unwrap();
    assert_eq!(nested, snapshot.join("more/tiny-f32.gguf"));
    ModelFiles::open(&nested).unwrap();

    // Two GGUF files and no name: an error listing both.
    let e = hub.resolve(&id("tiny-org/Tiny-GGUF")).unwrap_err();
    assert_eq!(
        e.to_string(),
        "model_path tiny-org/Tiny-GGUF: the repository holds 2 GGUF files; name one after a \
         colon (tiny-org/Tiny-GGUF:FILE): more/tiny-f32.gguf, tiny-q8_0.gguf"
    );

    // One: the id alone is enough.
    let one = lay_out(
        cache.path(),
        "tiny-org/One-GGUF",
        &[("one.gguf", &m.gguf)],
        true,
    );
    let path = hub.resolve(&id("tiny-org/One-GGUF")).unwrap();
    assert_eq!(path, one.join("one.gguf"));
    ModelFiles::open(&path).unwrap();
}

#[test]
fn a_safetensors_repository_resolves_to_its_snapshot_folder() {
    let m = models();
    let cache = tempfile::tempdir().unwrap();
    let hub = offline(cache.path());
    let files = folder_files(&m.folder).unwrap();
    assert!(files.iter().any(|(n, _)| n == "model.safetensors"));
    let refs: Vec<(&str, &Path)> = files
        .iter()
        .map(|(n, p)| (n.as_str(), p.as_path()))
        .collect();
    // Plain files, as a copied cache or a cache on a file system without symlinks has them.
    let snapshot = lay_out(cache.path(), "tiny-org/Tiny-Instruct", &refs, false);
    let path = hub.resolve(&id("tiny-org/Tiny-Instruct")).unwrap();
    assert_eq!(path, snapshot);
    let files = ModelFiles::open(&path).unwrap();
    assert_eq!(files.format(), ModelFormat::Safetensors);
    assert_eq!(files.config.arch, Arch::Qwen3);
    // Symlinked into blobs, as the hub lays it out.
    let snapshot = lay_out(cache.path(), "tiny-org/Tiny-Linked", &refs, true);
    let path = hub.resolve(&id("tiny-org/Tiny-Linked")).unwrap();
    assert_eq!(path, snapshot);
    assert_eq!(
        ModelFiles::open(&path).unwrap().format(),
        ModelFormat::Safetensors
    );
}

#[test]
fn offline_a_missing_model_is_an_error_naming_the_cache_path() {
    let m = models();
    let cache = tempfile::tempdir().unwrap();
    let hub = offline(cache.path());
    let e = hub.resolve(&id("Qwen/Qwen2.5-1.5B-Instruct")).unwrap_err();
    let refs = cache
        .path()
        .join("models--Qwen--Qwen2.5-1.5B-Instruct/refs/main");
    assert_eq!(
        e.to_string(),
        format!(
            "model_path Qwen/Qwen2.5-1.5B-Instruct: no such file or folder, and not in the \
             Hugging Face cache: no {}; HF_HUB_OFFLINE is set, so nothing is downloaded (unset it where the network allows, \
             or point model_path at a file or folder)",
            refs.display()
        )
    );
    // A file the snapshot does not hold: the path looked for.
    let snapshot = lay_out(cache.path(), "o/R-GGUF", &[("a.gguf", &m.gguf)], true);
    let e = hub.resolve(&id("o/R-GGUF:b.gguf")).unwrap_err().to_string();
    assert!(
        e.contains(&format!("no {}", snapshot.join("b.gguf").display())),
        "{e}"
    );
    // A snapshot with neither weights format.
    let empty = lay_out(cache.path(), "o/Empty", &[], true);
    std::fs::create_dir_all(&empty).unwrap();
    let e = hub.resolve(&id("o/Empty")).unwrap_err().to_string();
    assert!(
        e.contains("holds neither config.json nor a GGUF file"),
        "{e}"
    );
    // refs/main names a snapshot that is not there.
    std::fs::write(
        cache.path().join("models--o--Empty/refs/main"),
        "ffffffffffffffffffffffffffffffffffffffff",
    )
    .unwrap();
    let e = hub.resolve(&id("o/Empty")).unwrap_err().to_string();
    assert!(e.contains("snapshots/ffffffff"), "{e}");
    assert!(!e.contains('\n'));
}

#[test]
fn an_existing_path_wins_and_a_non_id_path_is_not_found() {
    let m = models();
    assert_eq!(super::hub::resolve(&m.gguf).unwrap(), m.gguf);
    let e = super::hub::resolve(Path::new("models/not-here.gguf")).unwrap_err();
    assert_eq!(e, LocalError::NotFound("models/not-here.gguf".into()));
}

#[test]
fn downloads_take_the_named_file_the_folder_s_files_or_the_only_gguf() {
    let list = |names: &[&str]| names.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let gguf_repo = list(&[
        ".gitattributes",
        "README.md",
        "a-q4_k_m.gguf",
        "a-q8_0.gguf",
    ]);
    assert_eq!(
        plan(&id("o/r:a-q8_0.gguf"), &gguf_repo).unwrap(),
        Plan {
            files: list(&["a-q8_0.gguf"]),
            index: None
        }
    );
    let e = plan(&id("o/r:a-q2_k.gguf"), &gguf_repo).unwrap_err();
    assert_eq!(
        e,
        "the repository has no file a-q2_k.gguf; its GGUF files: a-q4_k_m.gguf, a-q8_0.gguf"
    );
    let e = plan(&id("o/r"), &gguf_repo).unwrap_err();
    assert!(
        e.contains("2 GGUF files; name one after a colon (o/r:FILE)"),
        "{e}"
    );
    assert_eq!(
        plan(&id("o/r"), &list(&["README.md", "only.gguf"]))
            .unwrap()
            .files,
        list(&["only.gguf"])
    );
    let folder = list(&[
        "README.md",
        "config.json",
        "generation_config.json",
        "merges.txt",
        "model.safetensors",
        "onnx/model.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "vocab.json",
    ]);
    assert_eq!(
        plan(&id("o/r"), &folder).unwrap(),
        Plan {
            files: list(&[
                "config.json",
                "generation_config.json",
                "model.safetensors",
                "tokenizer.json",
                "tokenizer_config.json",
                "vocab.json",
            ]),
            index: None
        }
    );
    let sharded = list(&[
        "config.json",
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
        "model.safetensors.index.json",
        "tokenizer.json",
        "chat_template.jinja",
    ]);
    assert_eq!(
        plan(&id("o/r"), &sharded).unwrap(),
        Plan {
            files: list(&[
                "chat_template.jinja",
                "config.json",
                "model.safetensors.index.json",
                "tokenizer.json",
            ]),
            index: Some("model.safetensors.index.json".into())
        }
    );
    let e = plan(&id("o/r"), &list(&["config.json", "pytorch_model.bin"])).unwrap_err();
    assert_eq!(
        e,
        "the repository has config.json but no safetensors weights"
    );
    let e = plan(&id("o/r"), &list(&["README.md"])).unwrap_err();
    assert_eq!(
        e,
        "the repository holds neither config.json nor a GGUF file"
    );
}

#[test]
fn the_blob_name_is_the_linked_etag_else_the_etag() {
    use reqwest::header::{HeaderMap, HeaderValue};
    let mut h = HeaderMap::new();
    assert_eq!(etag(&h), None);
    h.insert("etag", HeaderValue::from_static("W/\"abc123\""));
    assert_eq!(etag(&h).as_deref(), Some("abc123"));
    h.insert("x-linked-etag", HeaderValue::from_static("\"deadbeef\""));
    assert_eq!(etag(&h).as_deref(), Some("deadbeef"));
    // Never a path out of blobs/.
    h.insert("x-linked-etag", HeaderValue::from_static("\"../x\""));
    assert_eq!(etag(&h), None);
}

/// A configuration's model is a path beside the file, unless nothing is there and it reads as
/// a Hugging Face id.
#[test]
fn a_config_model_path_is_read_from_the_file_folder_unless_it_is_an_id() {
    use super::hub::config_model_path;
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("models/qwen")).unwrap();
    let base = dir.path();
    assert_eq!(
        config_model_path(base, Path::new("models/qwen")),
        base.join("models/qwen")
    );
    assert_eq!(
        config_model_path(base, Path::new("Qwen/Qwen2.5-0.5B-Instruct")),
        Path::new("Qwen/Qwen2.5-0.5B-Instruct")
    );
    assert_eq!(
        config_model_path(base, Path::new("m.gguf")),
        base.join("m.gguf")
    );
    assert_eq!(
        config_model_path(base, Path::new("/abs/m.gguf")),
        Path::new("/abs/m.gguf")
    );
}
