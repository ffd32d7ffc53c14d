//! `gavel migrate`: the pending Postgres schema migrations, applied and listed.

use std::process::ExitCode;

use super::Common;
use gavel::store::PgStore;

pub async fn run(common: Common) -> anyhow::Result<ExitCode> {
    let cfg = common.load_config()?;
    let Some(url) = &cfg.store.url else {
        anyhow::bail!(
            "no Postgres store configured ([store] url, --store-url or GAVEL_STORE_URL); \
             the embedded sled store needs no migrations"
        );
    };
    let report = PgStore::migrate(url.expose()).await?;
    for name in &report.applied {
        println!("applied {name}");
    }
    println!(
        "{}: schema version {} ({} migration(s) applied)",
        cfg.store.describe(),
        report.version,
        report.applied.len()
    );
    Ok(ExitCode::SUCCESS)
}
