//! `gavel rescore`: the entry to [`gavel::rescore`], which loads the configuration itself
//! (`benches/rescore_rate` drives it the same way, without the binary).

use std::process::ExitCode;

use super::Common;
use gavel::rescore::RescoreArgs;

pub async fn run(common: &Common, args: &RescoreArgs) -> anyhow::Result<ExitCode> {
    Ok(super::exit(
        gavel::rescore::run(&common.source(), args).await?,
    ))
}
