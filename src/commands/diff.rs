//! `gavel diff`: its options, and the entry to [`gavel::diff`], which loads the configuration
//! itself (after its own usage checks, so a usage problem is reported before a configuration
//! one).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, ValueEnum};

use gavel::diff::{DiffFormat, DiffOptions};

use super::Common;

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum Format {
    Text,
    Json,
}

#[derive(Args, Debug, Clone)]
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
    #[arg(long, env = "GAVEL_DIFF_FORMAT", value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// Also write a self-contained HTML report with plots here.
    #[arg(short = 'o', long = "output", alias = "html", env = "GAVEL_DIFF_HTML")]
    pub html: Option<PathBuf>,
    /// Groups scored at once (each under both sides at the same time).
    #[arg(long, env = "GAVEL_DIFF_CONCURRENCY", default_value_t = 8)]
    pub concurrency: usize,
    /// Groups: a .jsonl file (one group per line), a .json file (one group), or `-` for
    /// standard input.
    pub file: PathBuf,
}

pub async fn run(common: &Common, args: DiffArgs) -> anyhow::Result<ExitCode> {
    let opts = DiffOptions {
        rubrics: args.rubrics,
        judges: args.judges,
        format: match args.format {
            Format::Text => DiffFormat::Text,
            Format::Json => DiffFormat::Json,
        },
        html: args.html,
        concurrency: args.concurrency,
        file: args.file,
    };
    Ok(super::exit(
        gavel::diff::run(&common.source(), &opts).await?,
    ))
}
