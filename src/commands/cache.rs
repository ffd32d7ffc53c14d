//! `gavel cache stats|clear`: the verdict store, inspected or emptied.

use std::process::ExitCode;

use clap::Subcommand;

use gavel::cli::Common;

#[derive(Subcommand)]
pub enum CacheAction {
    /// Print the number of verdicts and the size of the store.
    Stats,
    /// Remove every verdict.
    Clear,
}

pub async fn run(common: Common, action: CacheAction) -> anyhow::Result<ExitCode> {
    let cfg = common.load_config()?;
    let store = gavel::store::open(&cfg.store).await?;
    match action {
        CacheAction::Stats => println!("{}", serde_json::to_string(&store.stats().await?)?),
        CacheAction::Clear => {
            let n = store.clear().await?;
            println!("cleared {n} verdicts from {}", cfg.store.describe());
        }
    }
    Ok(ExitCode::SUCCESS)
}
