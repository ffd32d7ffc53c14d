//! Downloading a model repository's files into the Hugging Face cache, as `huggingface_hub`
//! does: the file list and commit from `/api/models/ORG/NAME/revision/main`, each file from
//! `/ORG/NAME/resolve/COMMIT/FILE` into `blobs/ETAG` (checked against its SHA-256 when the hub
//! stores it in LFS, where the ETag is that hash), linked from `snapshots/COMMIT/FILE`, and
//! `refs/main` written last.
//!
//! Done with the reqwest client gavel already builds (rustls), on a thread of its own with a
//! one-thread runtime, so loading a model stays a plain blocking call wherever it is made.

use std::path::{Path, PathBuf};
use std::time::Duration;

use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use reqwest::header::{HeaderMap, AUTHORIZATION, ETAG, LOCATION};
use reqwest::{Client, Response, StatusCode, Url};
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::hub_cache::{several_ggufs_message, Hub, HubId};
use crate::domain::error_chain::with_causes;

/// Characters left as they are in a URL path segment.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Why a download did not happen.
#[derive(Debug)]
pub(super) enum FetchError {
    /// The repository was reached but cannot serve the id (no such file, several GGUFs, ...).
    Refused(String),
    /// The network, the hub or the disk failed.
    Failed(String),
}

impl From<String> for FetchError {
    fn from(why: String) -> FetchError {
        FetchError::Failed(why)
    }
}

/// Downloads what `id` needs into the cache (see the module docs).
pub(super) fn fetch(hub: &Hub, id: &HubId) -> Result<(), FetchError> {
    let (hub, id) = (hub.clone(), id.clone());
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        rt.block_on(Fetch::new(&hub, &id)?.run())
    })
    .join()
    .map_err(|_| FetchError::Failed("the download thread panicked".into()))?
}

/// The files to download, chosen from the repository's list.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Plan {
    pub files: Vec<String>,
    /// `model.safetensors.index.json`, whose shards are added once it is read.
    pub index: Option<String>,
}

/// Which files of a repository listing `siblings` a model needs: the named file; else a model
/// folder's configuration, tokenizer and template files and its safetensors weights; else the
/// only GGUF file.
pub(super) fn plan(id: &HubId, siblings: &[String]) -> Result<Plan, String> {
    let ggufs: Vec<String> = siblings
        .iter()
        .filter(|f| f.ends_with(".gguf"))
        .cloned()
        .collect();
    if let Some(file) = &id.file {
        if siblings.contains(file) {
            return Ok(Plan {
                files: vec![file.clone()],
                index: None,
            });
        }
        return Err(match ggufs.is_empty() {
            true => format!("the repository has no file {file}"),
            false => format!(
                "the repository has no file {file}; its GGUF files: {}",
                ggufs.join(", ")
            ),
        });
    }
    let has = |f: &str| siblings.iter().any(|s| s == f);
    if has("config.json") {
        let top = |ext: &'static str| {
            siblings
                .iter()
                .filter(move |f| !f.contains('/') && f.ends_with(ext))
                .cloned()
        };
        let mut files: Vec<String> = top(".json").chain(top(".jinja")).collect();
        let index = "model.safetensors.index.json";
        if !has(index) {
            let weights: Vec<String> = if has("model.safetensors") {
                vec!["model.safetensors".into()]
            } else {
                top(".safetensors").collect()
            };
            if weights.is_empty() {
                return Err("the repository has config.json but no safetensors weights".into());
            }
            files.extend(weights);
        }
        files.sort();
        return Ok(Plan {
            files,
            index: has(index).then(|| index.to_string()),
        });
    }
    match ggufs.as_slice() {
        [one] => Ok(Plan {
            files: vec![one.clone()],
            index: None,
        }),
        [] => Err("the repository holds neither config.json nor a GGUF file".into()),
        several => Err(several_ggufs_message(&id.repo, several)),
    }
}

/// The blob name of a file from the hub's headers: `X-Linked-Etag` (LFS files: their SHA-256)
/// or `ETag`, without quotes or a weak marker.
pub(super) fn etag(headers: &HeaderMap) -> Option<String> {
    let raw = headers
        .get("x-linked-etag")
        .or_else(|| headers.get(ETAG))?
        .to_str()
        .ok()?;
    let tag = raw.trim().trim_start_matches("W/").trim_matches('"');
    let safe = !tag.is_empty() && tag.chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
    safe.then(|| tag.to_string())
}

struct Fetch<'a> {
    hub: &'a Hub,
    id: &'a HubId,
    client: Client,
    repo_dir: PathBuf,
}

impl<'a> Fetch<'a> {
    fn new(hub: &'a Hub, id: &'a HubId) -> Result<Fetch<'a>, String> {
        let client = Client::builder()
            .user_agent(concat!("gavel/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(Duration::from_secs(30))
            .read_timeout(Duration::from_secs(120))
            // Redirects are followed by hand: the hub's own headers (commit, ETag) are on its
            // first answer, and the token must not travel to the file host.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| e.to_string())?;
        Ok(Fetch {
            hub,
            id,
            client,
            repo_dir: hub.repo_dir(id),
        })
    }

    async fn run(&self) -> Result<(), FetchError> {
        let (commit, siblings) = self.listing().await?;
        let plan = plan(self.id, &siblings).map_err(FetchError::Refused)?;
        let snapshot = self.repo_dir.join("snapshots").join(&commit);
        let mut files = plan.files;
        if let Some(index) = plan.index {
            self.file(&commit, &snapshot, &index).await?;
            files.extend(shards(&snapshot.join(&index))?);
        }
        for f in &files {
            self.file(&commit, &snapshot, f).await?;
        }
        hf_hub::Cache::new(self.hub.cache.clone())
            .model(self.id.repo.clone())
            .create_ref(&commit)
            .map_err(|e| format!("{}: {e}", self.repo_dir.join("refs").display()).into())
    }

    /// A GET that follows redirects by hand; the hub's first answer's headers and the last one.
    async fn get(&self, url: &str) -> Result<(HeaderMap, Response), String> {
        let mut url = Url::parse(url).map_err(|e| format!("{url}: {e}"))?;
        let hub_host = Url::parse(&self.hub.endpoint)
            .ok()
            .and_then(|u| u.host_str().map(str::to_string));
        let mut first: Option<HeaderMap> = None;
        for _ in 0..10 {
            let mut req = self.client.get(url.clone());
            if let Some(t) = &self.hub.token {
                if url.host_str().map(str::to_string) == hub_host {
                    req = req.header(AUTHORIZATION, format!("Bearer {}", t.expose()));
                }
            }
            let resp = req
                .send()
                .await
                .map_err(|e| format!("{url}: {}", with_causes(&e)))?;
            let headers = first.get_or_insert_with(|| resp.headers().clone()).clone();
            if !resp.status().is_redirection() {
                return Ok((headers, resp));
            }
            let location = resp
                .headers()
                .get(LOCATION)
                .and_then(|l| l.to_str().ok())
                .ok_or_else(|| format!("{url}: a redirect without a Location"))?;
            url = url.join(location).map_err(|e| format!("{url}: {e}"))?;
        }
        Err(format!("{url}: more than 10 redirects"))
    }

    /// The commit `main` names and the repository's files.
    async fn listing(&self) -> Result<(String, Vec<String>), String> {
        let url = format!(
            "{}/api/models/{}/revision/main",
            self.hub.endpoint, self.id.repo
        );
        let (_, resp) = self.get(&url).await?;
        match resp.status() {
            s if s.is_success() => {}
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN | StatusCode::NOT_FOUND => {
                return Err(format!(
                    "{url}: {} (no such model, or a private or gated one: set HF_TOKEN)",
                    resp.status()
                ))
            }
            s => return Err(format!("{url}: {s}")),
        }
        let info: Value = resp
            .json()
            .await
            .map_err(|e| format!("{url}: {}", with_causes(&e)))?;
        let commit = info["sha"]
            .as_str()
            .filter(|c| !c.is_empty() && c.chars().all(|c| c.is_ascii_hexdigit()))
            .ok_or_else(|| format!("{url}: no commit (`sha`) in the answer"))?;
        let siblings = info["siblings"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s["rfilename"].as_str().map(str::to_string))
            .collect();
        Ok((commit.to_string(), siblings))
    }

    /// Downloads `file` of `commit` into its blob and links it from the snapshot, unless the
    /// snapshot has it already.
    async fn file(&self, commit: &str, snapshot: &Path, file: &str) -> Result<(), String> {
        let pointer = snapshot.join(file);
        if pointer.is_file() {
            return Ok(());
        }
        let path: Vec<String> = file
            .split('/')
            .map(|s| utf8_percent_encode(s, SEGMENT).to_string())
            .collect();
        let url = format!(
            "{}/{}/resolve/{commit}/{}",
            self.hub.endpoint,
            self.id.repo,
            path.join("/")
        );
        let (headers, mut resp) = self.get(&url).await?;
        if !resp.status().is_success() {
            return Err(format!("{url}: {}", resp.status()));
        }
        let tag = etag(&headers).ok_or_else(|| format!("{url}: no ETag in the answer"))?;
        let blobs = self.repo_dir.join("blobs");
        let blob = blobs.join(&tag);
        if !blob.is_file() {
            std::fs::create_dir_all(&blobs).map_err(|e| format!("{}: {e}", blobs.display()))?;
            let part = blobs.join(format!("{tag}.{}.incomplete", std::process::id()));
            let io = |e: std::io::Error| format!("{}: {e}", part.display());
            let mut out = std::fs::File::create(&part).map_err(io)?;
            // On stderr, drawn only on a terminal.
            let bar = indicatif::ProgressBar::new(resp.content_length().unwrap_or(0));
            if let Ok(style) = indicatif::ProgressStyle::with_template(
                "{bar:40} {bytes}/{total_bytes} · {bytes_per_sec} · ETA {eta} {msg}",
            ) {
                bar.set_style(style);
            }
            bar.set_message(file.to_string());
            tracing::info!(model = %self.id, file, "downloading into the Hugging Face cache");
            let mut hash = Sha256::new();
            while let Some(chunk) = resp
                .chunk()
                .await
                .map_err(|e| format!("{url}: {}", with_causes(&e)))?
            {
                hash.update(&chunk);
                std::io::Write::write_all(&mut out, &chunk).map_err(io)?;
                bar.inc(chunk.len() as u64);
            }
            bar.finish_and_clear();
            out.sync_all().map_err(io)?;
            let got = hex::encode(hash.finalize());
            // An LFS file's ETag is its SHA-256; other files' is a git hash, not checked here.
            if tag.len() == 64 && tag.chars().all(|c| c.is_ascii_hexdigit()) && got != tag {
                let _ = std::fs::remove_file(&part);
                return Err(format!("{url}: SHA-256 {got}, the hub says {tag}"));
            }
            std::fs::rename(&part, &blob).map_err(io)?;
        }
        link(&blob, &pointer, file)
    }
}

/// The shard files a safetensors index lists.
fn shards(index: &Path) -> Result<Vec<String>, String> {
    let text = std::fs::read_to_string(index).map_err(|e| format!("{}: {e}", index.display()))?;
    let json: Value =
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", index.display()))?;
    let mut files: Vec<String> = json["weight_map"]
        .as_object()
        .ok_or_else(|| format!("{}: no weight_map object", index.display()))?
        .values()
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect();
    files.sort();
    files.dedup();
    Ok(files)
}

/// `pointer` (the snapshot's `file`) made to refer to `blob`: a relative symlink, as the hub
/// lays it out, or a copy where symlinks are not available.
fn link(blob: &Path, pointer: &Path, file: &str) -> Result<(), String> {
    let io = |e: std::io::Error| format!("{}: {e}", pointer.display());
    if let Some(dir) = pointer.parent() {
        std::fs::create_dir_all(dir).map_err(io)?;
    }
    #[cfg(unix)]
    {
        // snapshots/COMMIT/a/b.gguf -> ../../../blobs/ETAG
        let up = "../".repeat(2 + file.matches('/').count());
        let name = blob.file_name().unwrap_or_default().to_string_lossy();
        std::os::unix::fs::symlink(format!("{up}blobs/{name}"), pointer).map_err(io)
    }
    #[cfg(not(unix))]
    {
        let _ = file;
        std::fs::copy(blob, pointer).map(|_| ()).map_err(io)
    }
}
