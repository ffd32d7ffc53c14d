//! `gavel diff`: scores every group under two rubrics (or two judges) and shows what changed.

use std::path::PathBuf;

use crate::cli::{CliError, Common};

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum DiffFormat {
    Text,
    Json,
}

#[derive(clap::Args, Debug, Clone)]
pub struct DiffArgs {
    /// The two rubrics to compare (give --rubric twice), or one rubric for both sides of a
    /// judge comparison.
    #[arg(long = "rubric", env = "GAVEL_DIFF_RUBRICS", value_delimiter = ',')]
    pub rubrics: Vec<String>,
    /// The two judges to compare (give --judge twice), or one judge for both sides of a rubric
    /// comparison.
    #[arg(long = "judge", env = "GAVEL_DIFF_JUDGES", value_delimiter = ',')]
    pub judges: Vec<String>,
    /// Terminal table or JSON on stdout.
    #[arg(long, env = "GAVEL_DIFF_FORMAT", value_enum, default_value_t = DiffFormat::Text)]
    pub format: DiffFormat,
    /// Also write a self-contained HTML report with plots here.
    #[arg(long, env = "GAVEL_DIFF_HTML")]
    pub html: Option<PathBuf>,
    /// Groups scored at once.
    #[arg(long, env = "GAVEL_DIFF_CONCURRENCY", default_value_t = 8)]
    pub concurrency: usize,
    /// Groups: a .jsonl file (one group per line) or a .json file (one group).
    pub file: PathBuf,
}

/// Returns the exit code (0 when every group was scored under both sides).
pub async fn run(_common: &Common, _args: &DiffArgs) -> Result<u8, CliError> {
    Err(CliError::Other("gavel diff is not available in this build yet".into()))
}
