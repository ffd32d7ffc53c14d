//! The names of `model::hub`: a model id (`ORG/NAME[:FILE]`) and where the Hugging Face cache
//! is and whether the network may be used, read from the environment. Apart from resolution
//! (`hub.rs`) and downloading (`hub_download.rs`), which both build on these.

use std::path::{Path, PathBuf};

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
    pub(super) fn repo(&self, id: &HubId) -> hf_hub::CacheRepo {
        hf_hub::Cache::new(self.cache.clone()).model(id.repo.clone())
    }

    /// `models--ORG--NAME` in the cache.
    pub fn repo_dir(&self, id: &HubId) -> PathBuf {
        self.cache
            .join(hf_hub::Repo::model(id.repo.clone()).folder_name())
    }
}

/// Why an id without a file cannot name a repository that holds several GGUF files.
pub(super) fn several_ggufs_message(repo: &str, files: &[String]) -> String {
    format!(
        "the repository holds {} GGUF files; name one after a colon ({repo}:FILE): {}",
        files.len(),
        files.join(", ")
    )
}
