//! The embedded verdict store: one sled database in a directory.

use std::path::{Path, PathBuf};

use async_trait::async_trait;

use super::{
    Claims, JobLedger, JobProgress, ScoringLog, StoreError, StoreStats, StoredVerdict, UnitChange,
    Verdicts,
};

/// Bumped when the record format changes; a store written by another version is refused at open
/// with a clear message instead of being misread.
pub const SLED_SCHEMA_VERSION: u32 = 1;
const SCHEMA_KEY: &[u8] = b"schema_version";

#[derive(Debug)]
pub struct SledStore {
    path: PathBuf,
    db: sled::Db,
    verdicts: sled::Tree,
    /// Batch-job progress: `JOB/offsets` → two big-endian u64, `JOB/done/UNIT` → empty.
    jobs: sled::Tree,
}

impl SledStore {
    /// An in-memory store that vanishes when dropped (for commands that never keep verdicts).
    pub fn temporary() -> Result<SledStore, StoreError> {
        let db = sled::Config::new()
            .temporary(true)
            .open()
            .map_err(|e| StoreError::Open {
                path: "(temporary)".into(),
                message: e.to_string(),
            })?;
        let verdicts = db.open_tree("verdicts").map_err(io)?;
        let jobs = db.open_tree("jobs").map_err(io)?;
        Ok(SledStore {
            path: PathBuf::from("(temporary)"),
            db,
            verdicts,
            jobs,
        })
    }

    /// Opens the store at `path`, or `None` when there is none: for commands that only read it,
    /// which must not leave an empty store behind.
    pub fn open_existing(path: &Path) -> Result<Option<SledStore>, StoreError> {
        if path.exists() {
            Self::open(path).map(Some)
        } else {
            Ok(None)
        }
    }

    pub fn open(path: &Path) -> Result<SledStore, StoreError> {
        let open_err = |message: String| StoreError::Open {
            path: path.display().to_string(),
            message,
        };
        let db = sled::open(path).map_err(|e| match e {
            sled::Error::Io(io) if is_lock_held(&io) => StoreError::InUse {
                path: path.display().to_string(),
            },
            other => open_err(other.to_string()),
        })?;
        let meta = db.open_tree("meta").map_err(|e| open_err(e.to_string()))?;
        match meta.get(SCHEMA_KEY).map_err(|e| open_err(e.to_string()))? {
            None => {
                meta.insert(SCHEMA_KEY, &SLED_SCHEMA_VERSION.to_be_bytes()[..])
                    .map_err(|e| open_err(e.to_string()))?;
            }
            Some(v) => {
                let found = <[u8; 4]>::try_from(v.as_ref())
                    .map(u32::from_be_bytes)
                    .unwrap_or(0);
                if found != SLED_SCHEMA_VERSION {
                    return Err(open_err(format!(
                        "schema version {found}, this gavel reads version {SLED_SCHEMA_VERSION}; \
                         use a new --store directory or `gavel cache clear` with the matching version"
                    )));
                }
            }
        }
        let verdicts = db
            .open_tree("verdicts")
            .map_err(|e| open_err(e.to_string()))?;
        let jobs = db.open_tree("jobs").map_err(|e| open_err(e.to_string()))?;
        Ok(SledStore {
            path: path.to_path_buf(),
            db,
            verdicts,
            jobs,
        })
    }
}

/// Whether sled failed to open because another process holds the store's lock. sled 0.34
/// reports that as `ErrorKind::Other` with its own message (config.rs, `try_lock`), so the
/// message is what tells it apart; `WouldBlock` is the lock call's own kind, should a later sled
/// pass it through.
fn is_lock_held(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::WouldBlock
        || e.to_string().starts_with("could not acquire lock on")
}

fn io(e: sled::Error) -> StoreError {
    StoreError::Io(e.to_string())
}

#[async_trait]
impl Verdicts for SledStore {
    async fn get(&self, key: &str) -> Result<Option<StoredVerdict>, StoreError> {
        let Some(bytes) = self.verdicts.get(key.as_bytes()).map_err(io)? else {
            return Ok(None);
        };
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| StoreError::Corrupt {
                key: key.to_string(),
                message: e.to_string(),
            })
    }

    async fn put(&self, key: &str, verdict: &StoredVerdict) -> Result<(), StoreError> {
        let bytes = serde_json::to_vec(verdict).expect("a verdict serialises");
        self.verdicts.insert(key.as_bytes(), bytes).map_err(io)?;
        Ok(())
    }

    async fn stats(&self) -> Result<StoreStats, StoreError> {
        Ok(StoreStats {
            backend: "sled",
            location: self.path.display().to_string(),
            verdicts: self.verdicts.len() as u64,
            size_on_disk_bytes: self.db.size_on_disk().map_err(io)?,
        })
    }

    async fn clear(&self) -> Result<u64, StoreError> {
        let n = self.verdicts.len() as u64;
        self.verdicts.clear().map_err(io)?;
        self.db.flush_async().await.map_err(io)?;
        Ok(n)
    }

    async fn flush(&self) -> Result<(), StoreError> {
        self.db.flush_async().await.map_err(io)?;
        Ok(())
    }
}

#[async_trait]
impl JobLedger for SledStore {
    async fn job_progress(&self, job: &str) -> Result<JobProgress, StoreError> {
        let mut progress = JobProgress::default();
        if let Some(v) = self.jobs.get(format!("{job}/offsets")).map_err(io)? {
            let b: [u8; 16] = v.as_ref().try_into().map_err(|_| StoreError::Corrupt {
                key: format!("{job}/offsets"),
                message: "not 16 bytes".into(),
            })?;
            progress.offsets = Some((
                u64::from_be_bytes(b[..8].try_into().expect("8 bytes")),
                u64::from_be_bytes(b[8..].try_into().expect("8 bytes")),
            ));
        }
        let prefix = format!("{job}/done/");
        for kv in self.jobs.scan_prefix(prefix.as_bytes()) {
            let (k, _) = kv.map_err(io)?;
            progress
                .done
                .insert(String::from_utf8_lossy(&k[prefix.len()..]).into_owned());
        }
        Ok(progress)
    }

    async fn job_update(
        &self,
        job: &str,
        change: UnitChange,
        units: &[String],
        offsets: (u64, u64),
    ) -> Result<(), StoreError> {
        // One batch: the units and the offsets change together or not at all.
        let mut batch = sled::Batch::default();
        for u in units {
            let key = format!("{job}/done/{u}");
            match change {
                UnitChange::Finish => batch.insert(key.as_bytes(), &[][..]),
                UnitChange::Reopen => batch.remove(key.as_bytes()),
            }
        }
        batch.insert(
            format!("{job}/offsets").as_bytes(),
            &offset_bytes(offsets)[..],
        );
        self.jobs.apply_batch(batch).map_err(io)?;
        self.db.flush_async().await.map_err(io)?;
        Ok(())
    }
}

/// One process owns a sled store, so the scorer's in-process locks already single-flight.
impl Claims for SledStore {}

/// No scoring log: a sled store is one process's cache (the log is Postgres's, for replicas).
impl ScoringLog for SledStore {}

fn offset_bytes((a, b): (u64, u64)) -> [u8; 16] {
    let mut out = [0u8; 16];
    out[..8].copy_from_slice(&a.to_be_bytes());
    out[8..].copy_from_slice(&b.to_be_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::StoredScore;

    fn verdict(score: f64) -> StoredVerdict {
        StoredVerdict {
            scores: vec![StoredScore {
                id: "1".into(),
                score: Some(score),
                explanation: "ok".into(),
                items: vec![],
                confidence: None,
            }],
            prompt_tokens: 10,
            completion_tokens: 5,
            cached_prompt_tokens: 0,
            forward_passes: 0,
            calls: 1,
            counted_prompt_tokens: 9,
            counted_prompt_tokens_without_dedup: 20,
            model: "m".into(),
            created_unix: 1,
            retries: Default::default(),
            clamped_scores: 0,
        }
    }

    #[tokio::test]
    async fn verdicts_survive_reopen_and_clear_empties() {
        let dir = tempfile::tempdir().unwrap();
        {
            let s = SledStore::open(dir.path()).unwrap();
            s.put("k", &verdict(0.7)).await.unwrap();
            s.flush().await.unwrap();
        }
        let s = SledStore::open(dir.path()).unwrap();
        assert_eq!(s.get("k").await.unwrap(), Some(verdict(0.7)));
        assert_eq!(s.get("other").await.unwrap(), None);
        assert_eq!(s.stats().await.unwrap().verdicts, 1);
        assert_eq!(s.clear().await.unwrap(), 1);
        assert_eq!(s.get("k").await.unwrap(), None);
    }

    #[tokio::test]
    async fn job_progress_is_checkpointed_and_reopened() {
        let dir = tempfile::tempdir().unwrap();
        let s = SledStore::open(dir.path()).unwrap();
        assert_eq!(s.job_progress("j").await.unwrap(), JobProgress::default());
        s.job_update("j", UnitChange::Finish, &["a".into(), "b".into()], (120, 7))
            .await
            .unwrap();
        s.job_update("j", UnitChange::Finish, &["c".into()], (180, 7))
            .await
            .unwrap();
        s.job_update("other", UnitChange::Finish, &["a".into()], (1, 1))
            .await
            .unwrap();
        let p = s.job_progress("j").await.unwrap();
        assert_eq!(p.offsets, Some((180, 7)));
        assert_eq!(
            p.done.iter().map(String::as_str).collect::<Vec<_>>(),
            vec!["a", "b", "c"]
        );
        s.job_update("j", UnitChange::Reopen, &["b".into()], (180, 0))
            .await
            .unwrap();
        let p = s.job_progress("j").await.unwrap();
        assert_eq!(p.done.len(), 2);
        assert_eq!(p.offsets, Some((180, 0)));
    }

    #[tokio::test]
    async fn other_schema_version_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        {
            let db = sled::open(dir.path()).unwrap();
            db.open_tree("meta")
                .unwrap()
                .insert(SCHEMA_KEY, &99u32.to_be_bytes()[..])
                .unwrap();
            db.flush().unwrap();
        }
        let e = SledStore::open(dir.path()).unwrap_err().to_string();
        assert!(
            e.contains("schema version 99, this gavel reads version 1"),
            "{e}"
        );
    }
}
