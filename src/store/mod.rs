//! Verdict stores: every judge verdict, kept under a key that covers everything that decided it.
//!
//! The scorer sees only the [`VerdictStore`] trait, so a shared store can stand beside the
//! embedded sled one.

pub mod sled_store;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

pub use sled_store::SledStore;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("verdict store at {path}: {message}")]
    Open { path: String, message: String },
    #[error("verdict store: {0}")]
    Io(String),
    #[error("verdict store: corrupt record under {key}: {message}")]
    Corrupt { key: String, message: String },
}

/// One trajectory's verdict, by the id the judge saw in the prompt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredScore {
    pub id: String,
    pub score: Option<f64>,
    pub explanation: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub items: Vec<(String, bool)>,
}

/// A verdict as stored: the parsed scores plus what it cost.
fn is_zero(n: &u64) -> bool {
    *n == 0
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredVerdict {
    pub scores: Vec<StoredScore>,
    /// Tokens the judge reported for the call(s) that produced this verdict.
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// Of `prompt_tokens`, those a local judge reused from a cached prefix.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cached_prompt_tokens: u64,
    /// Judge calls made (2 when a structural re-ask was needed).
    pub calls: u32,
    /// Our own count of the deduplicated prompt, and of the same prompt without dedup.
    pub counted_prompt_tokens: u64,
    pub counted_prompt_tokens_without_dedup: u64,
    pub model: String,
    pub created_unix: u64,
    /// Retries by cause that producing this verdict took.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub retries: std::collections::BTreeMap<String, u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StoreStats {
    pub backend: &'static str,
    pub location: String,
    pub verdicts: u64,
    pub size_on_disk_bytes: u64,
}

/// Where a resumable batch job (`gavel rescore`) stands: the units it finished and how far its
/// output files reached when it last checkpointed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobProgress {
    /// Finished units (accepted or rejected).
    pub done: std::collections::BTreeSet<String>,
    /// Byte lengths of the output and rejects files at the last checkpoint; `None` when the job
    /// has never checkpointed.
    pub offsets: Option<(u64, u64)>,
}

#[async_trait]
pub trait VerdictStore: Send + Sync + std::fmt::Debug {
    async fn get(&self, key: &str) -> Result<Option<StoredVerdict>, StoreError>;
    async fn put(&self, key: &str, verdict: &StoredVerdict) -> Result<(), StoreError>;
    async fn stats(&self) -> Result<StoreStats, StoreError>;
    /// Removes every verdict; returns how many there were.
    async fn clear(&self) -> Result<u64, StoreError>;
    /// Makes every write so far durable.
    async fn flush(&self) -> Result<(), StoreError>;
    /// A job's progress.
    async fn job_progress(&self, job: &str) -> Result<JobProgress, StoreError>;
    /// Records, atomically and durably, that `units` are finished and the output files now end at
    /// `offsets`.
    async fn job_checkpoint(
        &self,
        job: &str,
        units: &[String],
        offsets: (u64, u64),
    ) -> Result<(), StoreError>;
    /// Marks `units` unfinished again (for `--retry-rejects`), with the new file offsets.
    async fn job_reopen(
        &self,
        job: &str,
        units: &[String],
        offsets: (u64, u64),
    ) -> Result<(), StoreError>;
}
