//! Verdict stores: every judge verdict, kept under a key that covers everything that decided it.
//!
//! The scorer sees only the [`VerdictStore`] trait, so the shared Postgres store
//! ([`PgStore`], many replicas on one database) stands beside the embedded sled one.

pub mod claim;
pub mod config;
pub mod migrations;
mod pg_pool;
mod pg_tls;
pub mod postgres;
pub mod sled_store;

use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use crate::domain::secret::redact_url;
pub use claim::Claim;
pub use migrations::MigrationReport;
pub use postgres::{PgOptions, PgStore};
pub use sled_store::SledStore;

pub use config::StoreConfig;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("verdict store at {path}: {message}")]
    Open { path: String, message: String },
    /// sled allows one process per store: another gavel (a daemon, a rescore) has it open.
    #[error(
        "the store at {path} is in use by another gavel process; stop it or use \
         --store/--store-url"
    )]
    InUse { path: String },
    #[error("verdict store: {0}")]
    Io(String),
    #[error("verdict store: corrupt record under {key}: {message}")]
    Corrupt { key: String, message: String },
    /// The database's schema is not one this gavel can use.
    #[error("verdict store at {location}: {message}")]
    Schema { location: String, message: String },
    /// The store cannot do this at all (e.g. the sled store keeps no scoring log).
    #[error("{0}")]
    Unsupported(String),
}

/// One trajectory's verdict, by the id the judge saw in the prompt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredScore {
    pub id: String,
    pub score: Option<f64>,
    pub explanation: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub items: Vec<(String, bool)>,
    /// A probability verdict's confidence in [0, 1] (`score::confidence`); none for a listwise
    /// one (and for probability verdicts stored before it was kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confidence: Option<f64>,
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
    /// Forward passes a local judge's model ran for this verdict.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub forward_passes: u64,
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
    /// Scores the judge gave outside its scale, clamped to 0 or 1.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub clamped_scores: u32,
}

fn is_zero_u32(n: &u32) -> bool {
    *n == 0
}

/// Seconds since the Unix epoch now: a verdict's `created_unix` (0 on a clock before 1970).
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
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

/// One scored group, as the scoring log keeps it (see `migrations/` for the columns).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScoringLogEntry {
    /// `sha256:` of `request`.
    pub request_hash: String,
    /// The canonical request body; scoring it again reproduces the group.
    pub request: Value,
    pub rubric_name: String,
    pub rubric_version: String,
    pub template_name: Option<String>,
    pub template_version: Option<String>,
    pub judges: Value,
    pub rewards: Value,
    pub scores: Value,
    pub usage: Value,
    pub error: Option<Value>,
    pub latency_ms: f64,
}

/// A scoring-log row read back, with where and when it was written.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LoggedGroup {
    pub id: i64,
    /// RFC 3339, UTC.
    pub scored_at: String,
    pub replica: String,
    pub entry: ScoringLogEntry,
}

/// Which scoring-log rows to read (all conditions must hold), oldest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogFilter {
    /// Rows scored with this rubric (by name).
    pub rubric: Option<String>,
    /// Rows scored at or after this time (anything Postgres reads as a `timestamptz`).
    pub since: Option<String>,
    /// Rows scored before this time.
    pub until: Option<String>,
    /// At most this many rows.
    pub limit: Option<u64>,
}

/// Whether a job ledger update finishes its units or opens them again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnitChange {
    /// The units are finished (accepted or rejected): a checkpoint.
    Finish,
    /// The units are unfinished again (`gavel rescore --retry-rejects`).
    Reopen,
}

/// The verdicts themselves: a key-value cache that survives restarts.
#[async_trait]
pub trait Verdicts: Send + Sync {
    async fn get(&self, key: &str) -> Result<Option<StoredVerdict>, StoreError>;
    async fn put(&self, key: &str, verdict: &StoredVerdict) -> Result<(), StoreError>;
    async fn stats(&self) -> Result<StoreStats, StoreError>;
    /// Removes every verdict; returns how many there were.
    async fn clear(&self) -> Result<u64, StoreError>;
    /// Makes every write so far durable.
    async fn flush(&self) -> Result<(), StoreError>;

    /// Whether the store answers (for /readyz).
    async fn ping(&self) -> Result<(), StoreError> {
        Ok(())
    }
}

/// Single-flight across processes sharing this store.
#[async_trait]
pub trait Claims: Send + Sync {
    /// Returns once the caller may ask the judge for `key` (holding the claim until the returned
    /// guard drops), or once another process has stored the verdict (the guard is then empty);
    /// the caller looks the verdict up again either way. A claim whose holder died expires, so a
    /// dead process blocks no one for long. The default suits a store one process owns, where
    /// the scorer's in-process locks already single-flight.
    async fn claim(&self, _key: &str) -> Result<Claim, StoreError> {
        Ok(Claim::empty())
    }
}

/// Where resumable batch jobs (`gavel rescore`) stand, kept beside the verdicts so that a job's
/// progress and the verdicts it produced survive together.
#[async_trait]
pub trait JobLedger: Send + Sync {
    /// A job's progress.
    async fn job_progress(&self, job: &str) -> Result<JobProgress, StoreError>;

    /// Records, atomically and durably, that `units` are finished (or unfinished again) and
    /// that the output files now end at `offsets`.
    async fn job_update(
        &self,
        job: &str,
        change: UnitChange,
        units: &[String],
        offsets: (u64, u64),
    ) -> Result<(), StoreError>;
}

/// The scoring log: every scored group, for many replicas' audit and for `rescore --from-log`.
#[async_trait]
pub trait ScoringLog: Send + Sync {
    /// Whether [`ScoringLog::log_scored`] keeps anything, so the scorer only builds log
    /// entries for a store that keeps them.
    fn keeps_scoring_log(&self) -> bool {
        false
    }

    /// Appends one scored group to the scoring log. The default keeps nothing: a store one
    /// process owns is its cache, and the log is for many replicas' audit (use Postgres).
    async fn log_scored(&self, _entry: &ScoringLogEntry) -> Result<(), StoreError> {
        Ok(())
    }

    /// Reads the scoring log, oldest first.
    async fn read_scoring_log(&self, _filter: &LogFilter) -> Result<Vec<LoggedGroup>, StoreError> {
        Err(StoreError::Unsupported(
            "this verdict store keeps no scoring log (a Postgres store does: [store] url)".into(),
        ))
    }
}

/// A verdict store: everything the scorer, the daemon and `rescore` keep, split by concern.
/// The scorer holds an `Arc<dyn VerdictStore>`; any type with the four parts is one.
pub trait VerdictStore: Verdicts + Claims + JobLedger + ScoringLog + std::fmt::Debug {}

impl<T: Verdicts + Claims + JobLedger + ScoringLog + std::fmt::Debug> VerdictStore for T {}

/// Opens the configured store: Postgres when `[store] url` is set (applying pending
/// migrations), else sled at `[store] path`.
pub async fn open(cfg: &StoreConfig) -> Result<Arc<dyn VerdictStore>, StoreError> {
    Ok(match &cfg.url {
        Some(url) => Arc::new(PgStore::connect(url.expose(), &PgOptions::from(cfg)).await?),
        None => Arc::new(SledStore::open(&cfg.path)?),
    })
}
