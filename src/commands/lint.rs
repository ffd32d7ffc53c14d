//! `gavel lint`: the entry to [`gavel::lint`].

use std::process::ExitCode;

use gavel::cli::Common;
use gavel::lint::LintArgs;

/// Lints with the rubric and template folders of `--config` when the command line names none.
pub fn run(common: &Common, args: LintArgs) -> anyhow::Result<ExitCode> {
    // A configuration is read only when --config names one: lint checks files and calls no
    // judge, so it has no use for the judge settings of the environment.
    let args = match &common.config {
        Some(_) => args.with_config_dirs(&common.load_config()?),
        None => args,
    };
    Ok(ExitCode::from(gavel::lint::run(&args)?))
}
