//! The shared verdict store: Postgres, for many daemon replicas behind one Service. Verdicts,
//! claims (cross-replica single-flight), the append-only scoring log and batch-job progress live
//! in the tables that `migrations/` creates.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

mod encode;

use encode::{jsonb_for_pg, text_for_pg, verdict_for_pg, verdict_from_pg};

use super::config::StoreConfig;
use super::migrations::{self, MigrationReport};
use super::pg_pool::{describe, Pool};
use super::{
    Claim, Claims, JobLedger, JobProgress, LogFilter, LoggedGroup, ScoringLog, ScoringLogEntry,
    StoreError, StoreStats, StoredVerdict, UnitChange, Verdicts,
};

/// Connection and claim settings (`[store]`).
#[derive(Debug, Clone, PartialEq)]
pub struct PgOptions {
    /// Connections this process keeps at most.
    pub pool_size: usize,
    /// How long a claim outlives its holder's last renewal. The holder renews it every third of
    /// this while its judge call runs, so only a dead holder's claim expires.
    pub claim_ttl: Duration,
}

impl Default for PgOptions {
    fn default() -> Self {
        PgOptions::from(&StoreConfig::default())
    }
}

impl From<&StoreConfig> for PgOptions {
    fn from(c: &StoreConfig) -> Self {
        PgOptions {
            pool_size: c.pool_size,
            claim_ttl: Duration::from_secs_f64(c.claim_ttl_s),
        }
    }
}

/// First and longest wait between two looks at another replica's claim.
const POLL_FIRST: Duration = Duration::from_millis(20);
const POLL_MAX: Duration = Duration::from_millis(500);

#[derive(Debug)]
pub struct PgStore {
    pool: Arc<Pool>,
    options: PgOptions,
    /// This process, as written in claims and log rows: `host/pid/random`.
    replica: String,
    claims: AtomicU64,
}

fn db(e: tokio_postgres::Error) -> StoreError {
    StoreError::Io(format!("postgres: {}", describe(&e)))
}

fn corrupt(key: &str, e: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt {
        key: key.to_string(),
        message: e.to_string(),
    }
}

impl PgStore {
    /// Connects to `url` and applies any pending migration.
    pub async fn connect(url: &str, options: &PgOptions) -> Result<PgStore, StoreError> {
        let pool = Arc::new(Pool::new(url, options.pool_size)?);
        let report = {
            let mut conn = pool.get().await?;
            migrations::migrate(&mut conn, &pool.location).await?
        };
        for name in &report.applied {
            tracing::info!(store = %pool.location, migration = %name, "applied migration");
        }
        let store = PgStore {
            pool,
            options: options.clone(),
            replica: replica_id(),
            claims: AtomicU64::new(0),
        };
        // Claims left by processes that died long ago: nobody waits on them any more.
        store
            .pool
            .get()
            .await?
            .execute(
                "DELETE FROM gavel_claims WHERE expires_at < now() - interval '1 hour'",
                &[],
            )
            .await
            .map_err(db)?;
        Ok(store)
    }

    /// `gavel migrate`: applies pending migrations and reports them, without opening a store.
    pub async fn migrate(url: &str) -> Result<MigrationReport, StoreError> {
        let pool = Pool::new(url, 1)?;
        let mut conn = pool.get().await?;
        migrations::migrate(&mut conn, &pool.location).await
    }

    /// Where this store is, without a password.
    pub fn location(&self) -> &str {
        &self.pool.location
    }

    /// One attempt to claim `key`: `(verdict already stored, claimed by us)`.
    async fn try_claim(&self, key: &str, owner: &str) -> Result<(bool, bool), StoreError> {
        let ttl = self.options.claim_ttl.as_secs_f64();
        let row = self
            .pool
            .get()
            .await?
            .query_one(
                "WITH done AS (SELECT EXISTS (SELECT 1 FROM gavel_verdicts WHERE key = $1) AS d),
                      ins AS (
                          INSERT INTO gavel_claims (key, owner, expires_at)
                          SELECT $1, $2, now() + $3::float8 * interval '1 second'
                          WHERE NOT (SELECT d FROM done)
                          ON CONFLICT (key) DO UPDATE
                              SET owner = EXCLUDED.owner, expires_at = EXCLUDED.expires_at
                              WHERE gavel_claims.expires_at < now()
                          RETURNING 1)
                 SELECT (SELECT d FROM done), EXISTS (SELECT 1 FROM ins)",
                &[&key, &owner, &ttl],
            )
            .await
            .map_err(db)?;
        Ok((row.get(0), row.get(1)))
    }

    /// Runs `units_cte` (a `WITH` clause over `$1` = job and `$2` = units) and records the
    /// output files' lengths, in one statement.
    async fn set_offsets(
        &self,
        units_cte: &str,
        job: &str,
        units: &[String],
        (out, rej): (u64, u64),
    ) -> Result<(), StoreError> {
        let sql = format!(
            "{units_cte}
             INSERT INTO gavel_job_offsets (job, output_len, rejects_len) VALUES ($1, $3, $4)
             ON CONFLICT (job) DO UPDATE
                 SET output_len = EXCLUDED.output_len, rejects_len = EXCLUDED.rejects_len"
        );
        self.pool
            .get()
            .await?
            .execute(&sql, &[&job, &units, &to_i64(out), &to_i64(rej)])
            .await
            .map_err(db)?;
        Ok(())
    }

    /// The guard for a claim we hold: renews it while alive, deletes it when dropped.
    fn hold(&self, key: &str, owner: String) -> Claim {
        let pool = self.pool.clone();
        let (k, o) = (key.to_string(), owner.clone());
        let ttl = self.options.claim_ttl;
        let renew = tokio::spawn(async move {
            loop {
                tokio::time::sleep(ttl / 3).await;
                let renewed = match pool.get().await {
                    Ok(c) => c
                        .execute(
                            "UPDATE gavel_claims SET expires_at = now() + $3::float8 * interval '1 second'
                             WHERE key = $1 AND owner = $2",
                            &[&k, &o, &ttl.as_secs_f64()],
                        )
                        .await
                        .map_err(db),
                    Err(e) => Err(e),
                };
                match renewed {
                    Ok(1) => {}
                    // Taken over (we were too slow to renew): the other holder goes on.
                    Ok(_) => break,
                    Err(e) => tracing::warn!(error = %e, "renewing a judge-call claim failed"),
                }
            }
        });
        let pool = self.pool.clone();
        let key = key.to_string();
        Claim::new(move || {
            renew.abort();
            // Dropped inside the runtime (the scorer's future); without one the row expires.
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                rt.spawn(async move {
                    let released = match pool.get().await {
                        Ok(c) => c
                            .execute(
                                "DELETE FROM gavel_claims WHERE key = $1 AND owner = $2",
                                &[&key, &owner],
                            )
                            .await
                            .map_err(db),
                        Err(e) => Err(e),
                    };
                    if let Err(e) = released {
                        tracing::warn!(error = %e, "releasing a judge-call claim failed; it expires");
                    }
                });
            }
        })
    }
}

/// `host/pid/random`: tells replicas apart in claims and log rows.
fn replica_id() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|h| h.trim().to_string())
        })
        .unwrap_or_else(|| "unknown-host".into());
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!("{host}/{}/{nanos:08x}", std::process::id())
}

fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

#[async_trait]
impl Verdicts for PgStore {
    async fn get(&self, key: &str) -> Result<Option<StoredVerdict>, StoreError> {
        let row = self
            .pool
            .get()
            .await?
            .query_opt("SELECT verdict FROM gavel_verdicts WHERE key = $1", &[&key])
            .await
            .map_err(db)?;
        match row {
            None => Ok(None),
            Some(r) => verdict_from_pg(r.get(0))
                .map(Some)
                .map_err(|e| corrupt(key, e)),
        }
    }

    async fn put(&self, key: &str, verdict: &StoredVerdict) -> Result<(), StoreError> {
        let v = verdict_for_pg(verdict);
        // The first verdict under a key stands: replicas that judged the same key at once (a
        // taken-over claim whose holder was merely slow) keep agreeing from now on.
        self.pool
            .get()
            .await?
            .execute(
                "INSERT INTO gavel_verdicts (key, verdict) VALUES ($1, $2)
                 ON CONFLICT (key) DO NOTHING",
                &[&key, &v],
            )
            .await
            .map_err(db)?;
        Ok(())
    }

    async fn stats(&self) -> Result<StoreStats, StoreError> {
        let row = self
            .pool
            .get()
            .await?
            .query_one(
                "SELECT (SELECT count(*) FROM gavel_verdicts),
                        pg_total_relation_size('gavel_verdicts')
                        + pg_total_relation_size('gavel_scoring_log')",
                &[],
            )
            .await
            .map_err(db)?;
        let (n, size): (i64, i64) = (row.get(0), row.get(1));
        Ok(StoreStats {
            backend: "postgres",
            location: self.pool.location.clone(),
            verdicts: n.max(0) as u64,
            size_on_disk_bytes: size.max(0) as u64,
        })
    }

    async fn clear(&self) -> Result<u64, StoreError> {
        let n = self
            .pool
            .get()
            .await?
            .execute("DELETE FROM gavel_verdicts", &[])
            .await
            .map_err(db)?;
        Ok(n)
    }

    async fn flush(&self) -> Result<(), StoreError> {
        // Every statement commits durably before it returns.
        Ok(())
    }

    async fn ping(&self) -> Result<(), StoreError> {
        self.pool
            .get()
            .await?
            .query_one("SELECT 1", &[])
            .await
            .map_err(db)?;
        Ok(())
    }
}

#[async_trait]
impl JobLedger for PgStore {
    async fn job_progress(&self, job: &str) -> Result<JobProgress, StoreError> {
        let conn = self.pool.get().await?;
        let mut progress = JobProgress::default();
        for row in conn
            .query("SELECT unit FROM gavel_job_units WHERE job = $1", &[&job])
            .await
            .map_err(db)?
        {
            progress.done.insert(row.get(0));
        }
        if let Some(r) = conn
            .query_opt(
                "SELECT output_len, rejects_len FROM gavel_job_offsets WHERE job = $1",
                &[&job],
            )
            .await
            .map_err(db)?
        {
            let (a, b): (i64, i64) = (r.get(0), r.get(1));
            progress.offsets = Some((a.max(0) as u64, b.max(0) as u64));
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
        // One statement, so atomic without a transaction a cancelled caller could leave open.
        let units_cte = match change {
            UnitChange::Finish => {
                "WITH done AS (
                     INSERT INTO gavel_job_units (job, unit)
                     SELECT $1, u FROM unnest($2::text[]) AS u
                     ON CONFLICT DO NOTHING)"
            }
            UnitChange::Reopen => {
                "WITH reopened AS (
                     DELETE FROM gavel_job_units WHERE job = $1 AND unit = ANY($2::text[]))"
            }
        };
        self.set_offsets(units_cte, job, units, offsets).await
    }
}

#[async_trait]
impl Claims for PgStore {
    async fn claim(&self, key: &str) -> Result<Claim, StoreError> {
        let owner = format!(
            "{}/{}",
            self.replica,
            self.claims.fetch_add(1, Ordering::Relaxed)
        );
        let mut wait = POLL_FIRST;
        let mut waited = false;
        loop {
            let (outcome, claim) = match self.try_claim(key, &owner).await? {
                (true, _) => ("verdict_stored", Claim::empty()),
                (false, true) if waited => ("claimed_after_wait", self.hold(key, owner)),
                (false, true) => ("claimed", self.hold(key, owner)),
                (false, false) => {
                    waited = true;
                    tokio::time::sleep(wait).await;
                    wait = (wait * 3 / 2).min(POLL_MAX);
                    continue;
                }
            };
            metrics::counter!("gavel_store_claims_total", "outcome" => outcome).increment(1);
            return Ok(claim);
        }
    }
}

#[async_trait]
impl ScoringLog for PgStore {
    fn keeps_scoring_log(&self) -> bool {
        true
    }

    async fn log_scored(&self, e: &ScoringLogEntry) -> Result<(), StoreError> {
        let [judges, rewards, scores, usage] =
            [&e.judges, &e.rewards, &e.scores, &e.usage].map(jsonb_for_pg);
        let error = e.error.as_ref().map(jsonb_for_pg);
        self.pool
            .get()
            .await?
            .execute(
                "INSERT INTO gavel_scoring_log (request_hash, rubric_name, rubric_version,
                     template_name, template_version, judges, rewards, scores, usage, error,
                     latency_ms, replica, request)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)",
                &[
                    &text_for_pg(&e.request_hash),
                    &text_for_pg(&e.rubric_name),
                    &text_for_pg(&e.rubric_version),
                    &e.template_name.as_deref().map(text_for_pg),
                    &e.template_version.as_deref().map(text_for_pg),
                    &*judges,
                    &*rewards,
                    &*scores,
                    &*usage,
                    &error.as_deref(),
                    &e.latency_ms,
                    &self.replica,
                    // `json`, kept as written: it holds a NUL as the escape `\u0000`.
                    &e.request,
                ],
            )
            .await
            .map_err(db)?;
        Ok(())
    }

    async fn read_scoring_log(&self, f: &LogFilter) -> Result<Vec<LoggedGroup>, StoreError> {
        let limit = f.limit.map(to_i64);
        // A rubric name with a NUL was logged with U+FFFD in its place.
        let rubric = f.rubric.as_deref().map(text_for_pg);
        let rows = self
            .pool
            .get()
            .await?
            .query(
                "SELECT id, to_char(scored_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"'),
                        replica, request_hash, request, rubric_name, rubric_version,
                        template_name, template_version, judges, rewards, scores, usage, error,
                        latency_ms
                 FROM gavel_scoring_log
                 WHERE ($1::text IS NULL OR rubric_name = $1)
                   AND ($2::text IS NULL OR scored_at >= $2::text::timestamptz)
                   AND ($3::text IS NULL OR scored_at < $3::text::timestamptz)
                 ORDER BY id
                 LIMIT $4",
                &[&rubric, &f.since, &f.until, &limit],
            )
            .await
            .map_err(|e| StoreError::Io(format!("reading the scoring log: {}", describe(&e))))?;
        Ok(rows
            .iter()
            .map(|r| LoggedGroup {
                id: r.get(0),
                scored_at: r.get(1),
                replica: r.get(2),
                entry: ScoringLogEntry {
                    request_hash: r.get(3),
                    request: r.get(4),
                    rubric_name: r.get(5),
                    rubric_version: r.get(6),
                    template_name: r.get(7),
                    template_version: r.get(8),
                    judges: r.get(9),
                    rewards: r.get(10),
                    scores: r.get(11),
                    usage: r.get(12),
                    error: r.get(13),
                    latency_ms: r.get(14),
                },
            })
            .collect())
    }
}
