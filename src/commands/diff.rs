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
    Html,
}

impl From<Format> for DiffFormat {
    fn from(f: Format) -> DiffFormat {
        match f {
            Format::Text => DiffFormat::Text,
            Format::Json => DiffFormat::Json,
            Format::Html => DiffFormat::Html,
        }
    }
}

#[derive(Args, Debug, Clone)]
pub struct DiffArgs {
    /// The two rubrics to compare (give --rubric twice), or one rubric for both sides of a
    /// judge comparison; each a rubric file (a path with a `/` or ending in .toml) or the name
    /// of a shipped rubric or of one in the config's rubrics_dir.
    #[arg(long = "rubric", env = "GAVEL_DIFF_RUBRICS", value_delimiter = ',')]
    pub rubrics: Vec<String>,
    /// The two judges to compare (give --judge twice), or one judge for both sides of a rubric
    /// comparison.
    #[arg(long = "judge", env = "GAVEL_DIFF_JUDGES", value_delimiter = ',')]
    pub judges: Vec<String>,
    /// Terminal table, one JSON document, or a self-contained HTML page with plots [default:
    /// what -o's file name ends in (.html or .htm: html, .json: json), else text].
    #[arg(long, env = "GAVEL_DIFF_FORMAT", value_enum)]
    pub format: Option<Format>,
    /// Write the report here instead of standard output, in --format, else the format its name
    /// ends in. A one-line summary goes to stderr whatever the format.
    #[arg(short = 'o', long = "output", env = "GAVEL_DIFF_OUTPUT")]
    pub output: Option<PathBuf>,
    /// The old spelling: also write the HTML page here, the report still on standard output.
    #[arg(long, env = "GAVEL_DIFF_HTML", hide = true)]
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
        format: DiffFormat::choose(args.format.map(DiffFormat::from), args.output.as_deref()),
        output: args.output,
        html: args.html,
        concurrency: args.concurrency,
        file: args.file,
    };
    Ok(super::exit(
        gavel::diff::run(&common.source(), &opts).await?,
    ))
}
