//! `gavel rescore`: the entry to [`gavel::rescore`], which loads the configuration itself
//! (`benches/rescore_rate` drives it the same way, without the binary).

use std::process::ExitCode;

use gavel::cli::Common;
use gavel::rescore::RescoreArgs;

pub async fn run(common: &Common, args: &RescoreArgs) -> anyhow::Result<ExitCode> {
    Ok(ExitCode::from(gavel::rescore::run(common, args).await?))
}
