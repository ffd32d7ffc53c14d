//! Models named by Hugging Face id: `model_path = "Qwen/Qwen2.5-1.5B-Instruct"` (a safetensors
//! repository: its snapshot folder) or `"Qwen/Qwen2.5-1.5B-Instruct-GGUF:FILE.gguf"` (a GGUF
//! repository names its file after a colon; the id alone does when the snapshot holds one GGUF).
//!
//! Resolution goes through the standard Hugging Face cache, laid out as `huggingface_hub` lays
//! it out (`models--ORG--NAME/refs/main`, `snapshots/COMMIT/...`, `blobs/ETAG`), so a model
//! downloaded by Python tools is found here and the other way round:
//! - a local path that exists always wins over an id;
//! - a complete cached snapshot is used without touching the network (as `hf-hub` does);
//! - otherwise, unless `HF_HUB_OFFLINE` is set, the files are downloaded into the cache with the
//!   HTTP client gavel already has (reqwest), then used;
//! - offline, or when the download fails, the error names the cache path it looked in.
//!
//! Cache folder: `HF_HUB_CACHE`, else `HF_HOME/hub`, else `$XDG_CACHE_HOME/huggingface/hub`,
//! else `~/.cache/huggingface/hub` (the order `huggingface_hub` uses). `HF_ENDPOINT` and
//! `HF_TOKEN` (else the token file `huggingface-cli login` writes) are honoured for downloads.

use std::path::{Path, PathBuf};

use super::error::LocalError;
use super::files::weight_files;
use super::hub_cache::several_ggufs_message;
pub use super::hub_cache::{Hub, HubId};
use crate::domain::config_path::in_folder;

use super::hub_download as download;

impl Hub {
    /// The local path of `id`: from the cache, else downloaded into it (see the module docs).
    pub fn resolve(&self, id: &HubId) -> Result<PathBuf, LocalError> {
        let fail = |message: String| LocalError::Hub {
            id: id.to_string(),
            message,
        };
        let missing = match self.cached(id)? {
            Cached::Ready(path) => return Ok(path),
            Cached::Missing(why) => why,
        };
        if self.offline {
            return Err(fail(format!(
                "no such file or folder, and not in the Hugging Face cache: {missing}; \
                 HF_HUB_OFFLINE is set, so nothing is downloaded (unset it where the network allows, or point model_path at a file \
                 or folder)"
            )));
        }
        download::fetch(self, id).map_err(|e| match e {
            download::FetchError::Refused(why) => fail(why),
            download::FetchError::Failed(why) => fail(format!(
                "no such file or folder, and not in the Hugging Face cache ({missing}); the \
                 download failed: {why}"
            )),
        })?;
        match self.cached(id)? {
            Cached::Ready(path) => Ok(path),
            Cached::Missing(why) => Err(fail(format!("downloaded, but {why}"))),
        }
    }

    /// The snapshot `refs/main` names, if the cache has it.
    fn main_snapshot(&self, id: &HubId) -> Result<PathBuf, String> {
        let dir = self.repo_dir(id);
        let refs = dir.join("refs").join("main");
        let commit =
            std::fs::read_to_string(&refs).map_err(|_| format!("no {}", refs.display()))?;
        let snapshot = self.repo(id).pointer_path(commit.trim());
        if snapshot.is_dir() {
            Ok(snapshot)
        } else {
            Err(format!("no {}", snapshot.display()))
        }
    }

    /// What the cache holds of `id`.
    fn cached(&self, id: &HubId) -> Result<Cached, LocalError> {
        let snapshot = match self.main_snapshot(id) {
            Ok(s) => s,
            Err(why) => return Ok(Cached::Missing(why)),
        };
        if let Some(file) = &id.file {
            // `hf_hub::CacheRepo::get` would do, but reads `refs/main` untrimmed.
            let path = snapshot.join(file);
            return Ok(if path.is_file() {
                Cached::Ready(path)
            } else {
                Cached::Missing(format!("no {}", path.display()))
            });
        }
        if snapshot.join("config.json").is_file() {
            // A model folder; one missing a file is downloaded again where the network allows,
            // and offline it is opened as it is, so the loader names what is missing.
            let complete =
                snapshot.join("tokenizer.json").is_file() && weight_files(&snapshot).is_ok();
            return Ok(if complete || self.offline {
                Cached::Ready(snapshot)
            } else {
                Cached::Missing(format!("{} is incomplete", snapshot.display()))
            });
        }
        let ggufs = gguf_files(&snapshot);
        match ggufs.as_slice() {
            [one] => Ok(Cached::Ready(snapshot.join(one))),
            [] => Ok(Cached::Missing(format!(
                "{} holds neither config.json nor a GGUF file",
                snapshot.display()
            ))),
            several => Err(several_ggufs(id, several)),
        }
    }
}

enum Cached {
    Ready(PathBuf),
    /// Why not, naming the path looked for.
    Missing(String),
}

fn several_ggufs(id: &HubId, files: &[String]) -> LocalError {
    LocalError::Hub {
        id: id.to_string(),
        message: several_ggufs_message(&id.repo, files),
    }
}

/// The `*.gguf` files under `dir`, as paths relative to it, sorted.
fn gguf_files(dir: &Path) -> Vec<String> {
    fn walk(dir: &Path, prefix: &str, out: &mut Vec<String>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let rel = format!("{prefix}{name}");
            let path = e.path();
            if path.is_dir() {
                walk(&path, &format!("{rel}/"), out);
            } else if name.ends_with(".gguf") {
                out.push(rel);
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, "", &mut out);
    out.sort();
    out
}

/// `model_path` as a local path: itself when it exists, else the Hugging Face id it names,
/// resolved through the cache (from the environment's settings).
pub fn resolve(model_path: &Path) -> Result<PathBuf, LocalError> {
    if model_path.exists() {
        return Ok(model_path.to_path_buf());
    }
    let Some(id) = model_path.to_str().and_then(HubId::parse) else {
        return Err(LocalError::NotFound(model_path.to_path_buf()));
    };
    let hub = Hub::from_env(&|k| std::env::var(k).ok()).map_err(|message| LocalError::Hub {
        id: id.to_string(),
        message,
    })?;
    hub.resolve(&id)
}

/// A model written in a configuration file in the folder `base` (`model_path`, train.toml's
/// `model`): a relative path is read from `base` ([`in_folder`]), unless nothing is there and
/// the value reads as a Hugging Face id (`ORG/NAME`), which it then stays.
pub fn config_model_path(base: &Path, value: &Path) -> PathBuf {
    let joined = in_folder(base, value);
    if joined.exists() || value.to_str().and_then(HubId::parse).is_none() {
        joined
    } else {
        value.to_path_buf()
    }
}
