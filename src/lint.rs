//! `gavel lint`: checks rubrics and judge templates before anyone trains on them.

use std::path::PathBuf;

use crate::cli::CliError;

#[derive(clap::Args, Debug, Clone)]
pub struct LintArgs {
    /// Rubric files (*.toml) or directories of them.
    #[arg(default_value = "rubrics")]
    pub paths: Vec<PathBuf>,
    /// A directory of judge templates to check too (NAME.system.jinja + NAME.user.jinja).
    #[arg(long, env = "GAVEL_PROMPTS_DIR")]
    pub prompts: Option<PathBuf>,
}

/// Not written yet: fails with a plain message.
pub fn run(_args: &LintArgs) -> Result<u8, CliError> {
    Err(CliError::Other("gavel lint is not available in this build yet".into()))
}
