//! The Postgres schema: numbered plain-SQL files in `migrations/`, compiled in, applied in order
//! at start-up and by `gavel migrate`. Each applied migration is recorded (version, name,
//! checksum) in `gavel_schema_migrations`, in the same transaction as its SQL, under an advisory
//! lock, so replicas starting at once apply each migration exactly once.

use sha2::{Digest, Sha256};
use tokio_postgres::Client;

use super::pg_pool::describe;
use super::StoreError;

/// One migration file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Migration {
    pub version: i32,
    /// The file name without `.sql`.
    pub name: &'static str,
    pub sql: &'static str,
}

/// Every migration, in version order. A new one is a new numbered file added here; an applied
/// one is never edited (the checksum check refuses a database migrated with other SQL).
pub const MIGRATIONS: &[Migration] = &[Migration {
    version: 1,
    name: "0001_verdicts_claims_log_jobs",
    sql: include_str!("../../migrations/0001_verdicts_claims_log_jobs.sql"),
}];

/// The schema version this gavel writes and reads.
pub fn latest_version() -> i32 {
    MIGRATIONS.last().map_or(0, |m| m.version)
}

/// Key of the advisory lock every migrating process takes (an arbitrary constant: "gavel" in
/// ASCII).
const MIGRATION_LOCK: i64 = 0x0067_6176_656c;

fn checksum(sql: &str) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(sql.as_bytes())))
}

/// What [`migrate`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigrationReport {
    /// The migrations this call applied (`0001_name`), in order.
    pub applied: Vec<String>,
    /// The database's schema version afterwards.
    pub version: i32,
}

/// Applies every pending migration in one transaction. Refuses a database migrated by a newer
/// gavel (a version this one does not know) or with an applied migration whose SQL differs.
pub(super) async fn migrate(
    client: &mut Client,
    location: &str,
) -> Result<MigrationReport, StoreError> {
    let db = |e: tokio_postgres::Error| StoreError::Schema {
        location: location.to_string(),
        message: format!("migrating: {}", describe(&e)),
    };
    let tx = client.transaction().await.map_err(db)?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await
        .map_err(db)?;
    // Only DDL when something is missing: a role without CREATE can open a migrated database.
    let known: bool = tx
        .query_one(
            "SELECT to_regclass('gavel_schema_migrations') IS NOT NULL",
            &[],
        )
        .await
        .map_err(db)?
        .get(0);
    if !known {
        tx.batch_execute(
            "CREATE TABLE gavel_schema_migrations (
                 version    integer PRIMARY KEY,
                 name       text NOT NULL,
                 checksum   text NOT NULL,
                 applied_at timestamptz NOT NULL DEFAULT now()
             )",
        )
        .await
        .map_err(db)?;
    }
    let rows = tx
        .query(
            "SELECT version, name, checksum FROM gavel_schema_migrations ORDER BY version",
            &[],
        )
        .await
        .map_err(db)?;
    let schema = |message: String| StoreError::Schema {
        location: location.to_string(),
        message,
    };
    let mut done = std::collections::BTreeSet::new();
    for row in &rows {
        let (version, name, sum): (i32, String, String) = (row.get(0), row.get(1), row.get(2));
        match MIGRATIONS.iter().find(|m| m.version == version) {
            None => {
                return Err(schema(format!(
                    "the database has schema version {version} ({name}), newer than this gavel \
                     knows (up to {}); run a gavel at least as new as the one that migrated it",
                    latest_version()
                )))
            }
            Some(m) if checksum(m.sql) != sum => {
                return Err(schema(format!(
                    "migration {version} ({name}) was applied with different SQL than this \
                     gavel's migrations/{}.sql",
                    m.name
                )))
            }
            Some(_) => {
                done.insert(version);
            }
        }
    }
    let mut applied = Vec::new();
    for m in MIGRATIONS.iter().filter(|m| !done.contains(&m.version)) {
        tx.batch_execute(m.sql).await.map_err(|e| {
            schema(format!(
                "migration {} ({}) failed: {}",
                m.version,
                m.name,
                describe(&e)
            ))
        })?;
        tx.execute(
            "INSERT INTO gavel_schema_migrations (version, name, checksum) VALUES ($1, $2, $3)",
            &[&m.version, &m.name, &checksum(m.sql)],
        )
        .await
        .map_err(db)?;
        applied.push(m.name.to_string());
    }
    tx.commit().await.map_err(db)?;
    Ok(MigrationReport {
        applied,
        version: latest_version(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrations_are_numbered_in_order_and_named_by_their_number() {
        for (i, m) in MIGRATIONS.iter().enumerate() {
            assert_eq!(m.version, i as i32 + 1, "{}", m.name);
            assert!(
                m.name.starts_with(&format!("{:04}_", m.version)),
                "{} should start with its number",
                m.name
            );
            assert!(!m.sql.trim().is_empty());
        }
        assert_eq!(latest_version(), MIGRATIONS.len() as i32);
    }

    #[test]
    fn every_file_in_migrations_is_listed() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/migrations");
        let mut files: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".sql"))
            .collect();
        files.sort();
        let listed: Vec<String> = MIGRATIONS
            .iter()
            .map(|m| format!("{}.sql", m.name))
            .collect();
        assert_eq!(files, listed);
    }
}
