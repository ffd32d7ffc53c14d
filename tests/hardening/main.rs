//! Issue 16's regressions, each written to fail on the code before it: bounded work per
//! request (limits.rs), no path from a judge reply to a score it did not give (verdicts.rs),
//! auth that fails closed and groups scoped by caller (access.rs), and random request bodies
//! that never panic the daemon (fuzz.rs).

#[path = "../common/mod.rs"]
mod common;

mod access;
mod fuzz;
mod limits;
mod verdicts;

use std::time::Duration;

use common::{Gavel, MockJudge};
use gavel::config::Config;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The daemon over a fresh store in `dir`, with the mock as judge `mock` and `edit` applied.
async fn start(mock: &MockJudge, dir: &tempfile::TempDir, edit: impl FnOnce(&mut Config)) -> Gavel {
    let mut cfg = mock.config(&dir.path().join("store"));
    edit(&mut cfg);
    Gavel::start(cfg).await
}

/// Writes `bytes` on a fresh connection to the daemon, keeps the connection open, and reads
/// whatever comes back until the server closes it or `within` passes. Returns the text read and
/// whether the server closed the connection.
async fn raw_exchange(gavel: &Gavel, bytes: &[u8], within: Duration) -> (String, bool) {
    let addr = gavel.url.trim_start_matches("http://");
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(bytes).await.unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
            Err(_) => return (String::from_utf8_lossy(&got).into_owned(), false),
            Ok(Ok(0)) | Ok(Err(_)) => return (String::from_utf8_lossy(&got).into_owned(), true),
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
        }
    }
}
