//! `gavel diff`: the entry to [`gavel::diff`], which loads the configuration itself (after its
//! own usage checks, so a usage problem is reported before a configuration one).

use std::process::ExitCode;

use super::Common;
use gavel::diff::DiffArgs;

pub async fn run(common: &Common, args: &DiffArgs) -> anyhow::Result<ExitCode> {
    Ok(super::exit(
        gavel::diff::run(&common.source(), args).await?,
    ))
}
