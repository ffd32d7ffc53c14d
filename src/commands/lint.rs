//! `gavel lint`: its options, and the entry to [`gavel::lint`].

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use gavel::lint::LintOptions;

use super::Common;

#[derive(Args, Debug, Clone)]
pub struct LintArgs {
    /// Rubric files (*.toml) or directories of them (default: the config's `rubrics_dir`, else
    /// `rubrics`).
    pub paths: Vec<PathBuf>,
    /// A directory of judge templates to check too (NAME.system.jinja + NAME.user.jinja;
    /// default: the config's `prompts_dir`).
    #[arg(long, env = "GAVEL_PROMPTS_DIR")]
    pub prompts: Option<PathBuf>,
}

/// Lints with the rubric and template folders of `--config` when the command line names none;
/// exit status 0 when clean, 1 when problems were found (warnings alone do not fail).
pub fn run(common: &Common, args: LintArgs) -> anyhow::Result<ExitCode> {
    let opts = LintOptions {
        paths: args.paths,
        prompts: args.prompts,
    };
    // A configuration is read only when --config names one: lint checks files and calls no
    // judge, so it has no use for the judge settings of the environment.
    let opts = match &common.config {
        Some(_) => opts.with_config_dirs(&common.load_config()?),
        None => opts,
    };
    Ok(super::exit(gavel::lint::run(&opts)?))
}
