//! `[store]`: where verdicts are kept (embedded sled, or a shared Postgres). The store owns its
//! section; `crate::config` only composes it with the others.

use std::path::PathBuf;

use serde::Deserialize;

use crate::domain::seconds::MAX_SECONDS;
use crate::domain::secret::{redact_url, Secret};

/// `[store]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StoreConfig {
    /// Directory of the embedded sled verdict store (used when `url` is unset).
    pub path: PathBuf,
    /// A shared Postgres store, `postgres://user:password@host:5432/db`: verdicts, cross-replica
    /// single-flight and the scoring log for many replicas. Redacted in logs; prefer passing it
    /// as `GAVEL_STORE_URL` from a secret over writing a password here.
    #[serde(deserialize_with = "secret_url")]
    pub url: Option<Secret>,
    /// Postgres connections one process keeps at most.
    pub pool_size: usize,
    /// Seconds a judge-call claim outlives its holder's last renewal (renewed every third of
    /// it): how long a replica that died mid-call delays others asking for the same verdict.
    pub claim_ttl_s: f64,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            path: PathBuf::from("gavel-store"),
            url: None,
            pool_size: 16,
            claim_ttl_s: 30.0,
        }
    }
}

impl StoreConfig {
    /// Where verdicts go, for logs: the Postgres URL without its password, or the sled path.
    pub fn describe(&self) -> String {
        match &self.url {
            Some(u) => redact_url(u.expose()),
            None => self.path.display().to_string(),
        }
    }

    /// Checks the store settings (also after `--store-url` replaced the file's).
    pub fn validate(&self) -> Result<(), String> {
        if let Some(u) = &self.url {
            let u = u.expose();
            if !(u.starts_with("postgres://") || u.starts_with("postgresql://")) {
                return Err(format!(
                    "[store] url {:?} is not a postgres:// or postgresql:// URL",
                    redact_url(u)
                ));
            }
        }
        if self.pool_size == 0 {
            return Err("[store] pool_size must be > 0".into());
        }
        if !(self.claim_ttl_s.is_finite() && (0.5..=MAX_SECONDS).contains(&self.claim_ttl_s)) {
            return Err("[store] claim_ttl_s must be at least 0.5 and at most 30 days".into());
        }
        Ok(())
    }
}

fn secret_url<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Secret>, D::Error> {
    Ok(Option::<String>::deserialize(d)?
        .filter(|u| !u.is_empty())
        .map(Secret::new))
}
