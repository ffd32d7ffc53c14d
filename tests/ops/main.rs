//! Operations: the OpenAPI document, bearer-token auth, request ids, `/readyz`, `/metrics`,
//! secrets kept out of logs, and the Kubernetes manifests. One test binary, one module each.

#[path = "../common/mod.rs"]
mod common;

mod access;
mod k8s;
mod logs;
mod metrics;
mod openapi;
mod readiness;

use common::{Gavel, MockJudge};
use gavel::config::Config;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The daemon over a fresh store in `dir`, with the mock as judge `mock` and `edit` applied.
async fn start(mock: &MockJudge, dir: &tempfile::TempDir, edit: impl FnOnce(&mut Config)) -> Gavel {
    let mut cfg = mock.config(&dir.path().join("store"));
    edit(&mut cfg);
    Gavel::start(cfg).await
}
