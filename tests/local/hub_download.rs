//! Models by Hugging Face id that are not in the cache yet: downloaded from a mock hub on
//! 127.0.0.1 (`HF_ENDPOINT`) that answers as huggingface.co does — the revision's file list,
//! then each file behind a redirect, its SHA-256 in `X-Linked-Etag` — into a cache laid out as
//! the hub lays it out, then used offline; and a file whose bytes do not match its hash is
//! refused and left out of the cache.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use axum::extract::{Path as UrlPath, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::json;
use sha2::{Digest, Sha256};

use super::hub::{offline_hub, tiny_gguf};
use crate::common::cli::{run_within, CliSetup};

const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";

/// What the mock hub serves: one GGUF file of `tiny-org/Tiny-GGUF`, with the hash it claims.
struct MockHub {
    gguf: Vec<u8>,
    claimed_sha: String,
    requests: AtomicUsize,
}

async fn listing(
    State(h): State<Arc<MockHub>>,
    UrlPath((org, name)): UrlPath<(String, String)>,
) -> Response {
    h.requests.fetch_add(1, Ordering::SeqCst);
    if (org.as_str(), name.as_str()) != ("tiny-org", "Tiny-GGUF") {
        return StatusCode::NOT_FOUND.into_response();
    }
    Json(
        json!({"id": "tiny-org/Tiny-GGUF", "sha": COMMIT, "siblings": [
        {"rfilename": ".gitattributes"}, {"rfilename": "README.md"},
        {"rfilename": "tiny-q8_0.gguf"}]}),
    )
    .into_response()
}

/// The hub's answer for a file: a redirect to the file host, with the hash on this first answer.
async fn resolve(
    State(h): State<Arc<MockHub>>,
    UrlPath((_org, _name, commit, file)): UrlPath<(String, String, String, String)>,
) -> Response {
    h.requests.fetch_add(1, Ordering::SeqCst);
    if commit != COMMIT || file != "tiny-q8_0.gguf" {
        return StatusCode::NOT_FOUND.into_response();
    }
    let mut headers = HeaderMap::new();
    headers.insert(header::LOCATION, "/cdn/blob".parse().unwrap());
    headers.insert(
        "x-linked-etag",
        format!("\"{}\"", h.claimed_sha).parse().unwrap(),
    );
    (StatusCode::FOUND, headers).into_response()
}

async fn blob(State(h): State<Arc<MockHub>>) -> Vec<u8> {
    h.requests.fetch_add(1, Ordering::SeqCst);
    h.gguf.clone()
}

async fn start(hub: Arc<MockHub>) -> String {
    let app = Router::new()
        .route("/api/models/{org}/{name}/revision/main", get(listing))
        .route("/{org}/{name}/resolve/{commit}/{file}", get(resolve))
        .route("/cdn/blob", get(blob))
        .with_state(hub);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

fn score(s: &CliSetup, hf: &Path, endpoint: Option<&str>) -> tokio::process::Command {
    let group = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/groups/rag_answer.json");
    let mut c = s.command("score", &[&group.display().to_string()]);
    offline_hub(&mut c, hf);
    if let Some(e) = endpoint {
        c.env_remove("HF_HUB_OFFLINE").env("HF_ENDPOINT", e);
    }
    c
}

fn parse(stdout: &str) -> serde_json::Value {
    serde_json::from_str(stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

fn config() -> CliSetup {
    CliSetup::new(
        "default_judge = \"tiny\"\n[judges.tiny]\nbackend = \"local\"\n\
         model_path = \"tiny-org/Tiny-GGUF\"\ndeadline_s = 300\n",
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_by_id_downloads_into_the_cache_then_runs_offline() {
    let tmp = tempfile::tempdir().unwrap();
    let gguf = std::fs::read(tiny_gguf(&tmp.path().join("w.gguf"))).unwrap();
    let sha = hex::encode(Sha256::digest(&gguf));
    let hub = Arc::new(MockHub {
        gguf,
        claimed_sha: sha.clone(),
        requests: AtomicUsize::new(0),
    });
    let endpoint = start(hub.clone()).await;
    let hf = tmp.path().join("hf");
    let s = config();
    let limit = std::time::Duration::from_secs(300);

    // Offline and not cached: refused, naming where it looked; nothing asked of the hub.
    let out = run_within(score(&s, &hf, None), limit).await;
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(
        out.stderr.contains("models--tiny-org--Tiny-GGUF"),
        "{}",
        out.stderr
    );
    assert_eq!(hub.requests.load(Ordering::SeqCst), 0);

    // Online: the listing, the file's redirect and its bytes; the id alone names the one GGUF.
    let out = run_within(score(&s, &hf, Some(&endpoint)), limit).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(hub.requests.load(Ordering::SeqCst), 3);
    let repo = hf.join("hub/models--tiny-org--Tiny-GGUF");
    assert_eq!(
        std::fs::read_to_string(repo.join("refs/main")).unwrap(),
        COMMIT
    );
    let pointer = repo.join("snapshots").join(COMMIT).join("tiny-q8_0.gguf");
    assert_eq!(
        std::fs::read_link(&pointer).unwrap(),
        Path::new("../../blobs").join(&sha),
        "linked into blobs/ as the hub lays it out"
    );
    assert_eq!(std::fs::read(&pointer).unwrap(), hub.gguf);

    // Then offline, on a fresh verdict store so the model itself is asked again: the weights
    // come from the cache, the hub is not asked, and they give the same rewards.
    std::fs::remove_dir_all(&s.store).unwrap();
    let again = run_within(score(&s, &hf, None), limit).await;
    assert_eq!(again.code, Some(0), "{}", again.stderr);
    let (first, second) = (parse(&out.stdout), parse(&again.stdout));
    assert_eq!(second["usage"]["judge_calls"], 4, "{second}");
    assert_eq!(
        second["rewards"], first["rewards"],
        "the same verdict from the same weights"
    );
    assert_eq!(hub.requests.load(Ordering::SeqCst), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_download_that_does_not_match_its_hash_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let gguf = std::fs::read(tiny_gguf(&tmp.path().join("w.gguf"))).unwrap();
    let wrong = "ab".repeat(32);
    let hub = Arc::new(MockHub {
        gguf,
        claimed_sha: wrong.clone(),
        requests: AtomicUsize::new(0),
    });
    let endpoint = start(hub.clone()).await;
    let hf = tmp.path().join("hf");
    let out = run_within(
        score(&config(), &hf, Some(&endpoint)),
        std::time::Duration::from_secs(300),
    )
    .await;
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(
        out.stderr.contains(&format!("the hub says {wrong}")),
        "{}",
        out.stderr
    );
    let blobs = hf.join("hub/models--tiny-org--Tiny-GGUF/blobs");
    let left: Vec<_> = std::fs::read_dir(&blobs)
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "nothing kept: {left:?}");
    assert!(!hf
        .join("hub/models--tiny-org--Tiny-GGUF/refs/main")
        .exists());
}
