//! `gavel train`: the entry to [`gavel::train::cli`], which reads its own `train.toml`.

use std::process::ExitCode;

use gavel::train::cli::TrainArgs;

pub async fn run(args: TrainArgs) -> anyhow::Result<ExitCode> {
    Ok(ExitCode::from(gavel::train::cli::run(args).await?))
}
