//! What the command-line tools share: where the configuration comes from ([`ConfigSource`]; the
//! binary's `commands/` parses the options into it), loading it, and opening the scorer. The
//! tools with a body in the library (`lint`, `diff`, `eval`, `rescore`, `train`) use it too;
//! they return a [`CliError`] whose message is one plain line.

use std::path::PathBuf;
use std::sync::Arc;

use crate::config::{Config, ConfigError, Secret};
use crate::score::{BuildError, Scorer};
use crate::store::StoreError;

/// Where a command's configuration comes from: the file (else the environment), and the verdict
/// store the command line names instead of the file's.
#[derive(Clone, Debug, Default)]
pub struct ConfigSource {
    /// gavel.toml; without one, a judge named `default` from OPENAI_BASE_URL, OPENAI_API_KEY
    /// and GAVEL_JUDGE_MODEL.
    pub config: Option<PathBuf>,
    /// Overrides `[store] path`.
    pub store: Option<PathBuf>,
    /// Overrides `[store] url` (a shared Postgres store); empty is unset.
    pub store_url: Option<Secret>,
}

#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Build(#[from] BuildError),
    #[error("{0}")]
    Io(String),
    /// Any other one-line failure.
    #[error("{0}")]
    Other(String),
}

impl ConfigSource {
    /// The configuration file (or the environment), with `--store` applied.
    pub fn load_config(&self) -> Result<Config, CliError> {
        let mut cfg = match &self.config {
            Some(path) => Config::from_file(path)?,
            None => Config::from_env(&|k| std::env::var(k).ok())?,
        };
        if let Some(store) = &self.store {
            cfg.store.path = store.clone();
        }
        if let Some(url) = self.store_url.as_ref().filter(|u| !u.expose().is_empty()) {
            cfg.store.url = Some(url.clone());
            cfg.store.validate().map_err(CliError::Other)?;
        }
        Ok(cfg)
    }
}

/// A scorer over the configured store (Postgres when `[store] url` is set, else sled).
pub async fn open_scorer(cfg: &Config) -> Result<Arc<Scorer>, CliError> {
    attach_store(build_scorer(cfg)?, cfg).await
}

/// The configuration's scorer over a throw-away in-memory store: enough to check requests
/// ([`Scorer::check`]) and render prompts. A command that scores then calls [`attach_store`],
/// so input that fails its checks never opens (or creates) the verdict store. A judge that
/// cannot be built (a local model or adapter that is not there) is named with the
/// configuration file it comes from.
pub fn build_scorer(cfg: &Config) -> Result<Scorer, CliError> {
    let scratch: Arc<dyn crate::store::VerdictStore> =
        Arc::new(crate::store::SledStore::temporary()?);
    Scorer::new(cfg.scorer_parts(), scratch).map_err(|e| match (&cfg.file, e) {
        (Some(file), BuildError::Judge(j)) => CliError::Other(format!("{}: {j}", file.display())),
        (_, e) => e.into(),
    })
}

/// `scorer` over the configured store, opened now.
/// Every judge's capabilities are checked here, once ([`Scorer::check_judges`]).
pub async fn attach_store(scorer: Scorer, cfg: &Config) -> Result<Arc<Scorer>, CliError> {
    let store = crate::store::open(&cfg.store).await?;
    let scorer = scorer.with_store(store);
    scorer.check_judges().await;
    Ok(Arc::new(scorer))
}

/// "1 group", "2 groups": a count and the noun that agrees with it, for report lines.
pub fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}
