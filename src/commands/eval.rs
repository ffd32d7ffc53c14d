//! `gavel eval`: the entry to [`gavel::eval`], which loads the configuration itself (after its
//! own usage checks, so a usage problem is reported before a configuration one).

use std::process::ExitCode;

use super::Common;
use gavel::eval::EvalArgs;

pub async fn run(common: &Common, args: &EvalArgs) -> anyhow::Result<ExitCode> {
    Ok(super::exit(gavel::eval::run(&common.source(), args).await?))
}
