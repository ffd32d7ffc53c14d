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
use super::loader::weight_files;

use super::hub_download as download;

/// A model id: `ORG/NAME`, optionally `:FILE` (a file of the repository, e.g. a GGUF).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubId {
    pub repo: String,
    pub file: Option<String>,
}

/// File name endings that make `ORG/NAME` a mistyped path rather than an id.
const FILE_ENDINGS: [&str; 5] = [".gguf", ".safetensors", ".bin", ".json", ".pt"];

fn valid_name(part: &str) -> bool {
    (1..=96).contains(&part.len())
        && part
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        && !part.starts_with(['.', '-'])
        && !part.ends_with(['.', '-'])
        && !part.contains("--")
        && !part.contains("..")
}

impl HubId {
    /// `text` as an id, or `None` when it cannot be one (then it is only a path).
    pub fn parse(text: &str) -> Option<HubId> {
        let (repo, file) = match text.split_once(':') {
            Some((r, f)) => (r, Some(f)),
            None => (text, None),
        };
        let (org, name) = repo.split_once('/')?;
        if !valid_name(org) || !valid_name(name) {
            return None;
        }
        if let Some(f) = file {
            let bad = |p: &str| p.is_empty() || p == "." || p == "..";
            if f.starts_with('/') || f.contains('\\') || f.split('/').any(bad) {
                return None;
            }
        } else if FILE_ENDINGS.iter().any(|e| name.ends_with(e)) {
            return None;
        }
        Some(HubId {
            repo: repo.to_string(),
            file: file.map(str::to_string),
        })
    }
}

impl std::fmt::Display for HubId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.file {
            Some(file) => write!(f, "{}:{file}", self.repo),
            None => f.write_str(&self.repo),
        }
    }
}

/// Where models are cached and whether the network may be used (see the module docs).
#[derive(Clone)]
pub struct Hub {
    /// The hub cache folder (`.../huggingface/hub`).
    pub cache: PathBuf,
    /// `HF_HUB_OFFLINE`: never touch the network.
    pub offline: bool,
    /// `HF_ENDPOINT`, default `https://huggingface.co`.
    pub endpoint: String,
    /// `HF_TOKEN`, else the token file beside the cache; sent only with downloads.
    pub(super) token: Option<crate::domain::secret::Secret>,
}

impl std::fmt::Debug for Hub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hub")
            .field("cache", &self.cache)
            .field("offline", &self.offline)
            .field("endpoint", &self.endpoint)
            .field("token", &self.token.is_some())
            .finish()
    }
}

/// `HF_HUB_OFFLINE`'s true values, as `huggingface_hub` reads them.
fn truthy(v: &str) -> bool {
    matches!(
        v.trim().to_ascii_lowercase().as_str(),
        "1" | "on" | "yes" | "true"
    )
}

impl Hub {
    /// The settings from environment variables (`env` looks one up; injectable for tests).
    pub fn from_env(env: &dyn Fn(&str) -> Option<String>) -> Result<Hub, String> {
        let var = |k: &str| env(k).filter(|v| !v.trim().is_empty());
        let home = match (var("HF_HOME"), var("XDG_CACHE_HOME"), var("HOME")) {
            (Some(h), _, _) => Some(PathBuf::from(h)),
            (None, Some(x), _) => Some(Path::new(&x).join("huggingface")),
            (None, None, Some(h)) => Some(Path::new(&h).join(".cache").join("huggingface")),
            (None, None, None) => None,
        };
        let cache = match (var("HF_HUB_CACHE"), &home) {
            (Some(c), _) => PathBuf::from(c),
            (None, Some(h)) => h.join("hub"),
            (None, None) => {
                return Err(
                    "cannot find the Hugging Face cache: set HF_HOME or HF_HUB_CACHE".into(),
                )
            }
        };
        let token = var("HF_TOKEN")
            .or_else(|| {
                let file = home.as_ref()?.join("token");
                std::fs::read_to_string(file).ok()
            })
            .map(|t| t.trim().to_string())
            .filter(|t| !t.is_empty())
            .map(crate::domain::secret::Secret::new);
        Ok(Hub {
            cache,
            offline: var("HF_HUB_OFFLINE").is_some_and(|v| truthy(&v)),
            endpoint: var("HF_ENDPOINT")
                .unwrap_or_else(|| "https://huggingface.co".into())
                .trim_end_matches('/')
                .to_string(),
            token,
        })
    }

    /// The cache's view of `id`'s repository.
    fn repo(&self, id: &HubId) -> hf_hub::CacheRepo {
        hf_hub::Cache::new(self.cache.clone()).model(id.repo.clone())
    }

    /// `models--ORG--NAME` in the cache.
    pub fn repo_dir(&self, id: &HubId) -> PathBuf {
        self.cache
            .join(hf_hub::Repo::model(id.repo.clone()).folder_name())
    }

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

/// Why an id without a file cannot name a repository that holds several GGUF files.
pub(super) fn several_ggufs_message(repo: &str, files: &[String]) -> String {
    format!(
        "the repository holds {} GGUF files; name one after a colon ({repo}:FILE): {}",
        files.len(),
        files.join(", ")
    )
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
