//! `gavel eval`: the entry to [`gavel::eval`], which loads the configuration itself (after its
//! own usage checks, so a usage problem is reported before a configuration one).

use std::process::ExitCode;

use gavel::cli::Common;
use gavel::eval::EvalArgs;

pub async fn run(common: &Common, args: &EvalArgs) -> anyhow::Result<ExitCode> {
    Ok(ExitCode::from(gavel::eval::run(common, args).await?))
}
