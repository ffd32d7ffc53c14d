//! `gavel select`: best-of-N selection for SFT. Reads scored groups with [`gavel::toolkit::scored`],
//! chooses with [`gavel::toolkit::select`], writes the chat lines to `-o` in one rename (a failure
//! leaves no output, or the old one, never half a file) and prints the summary on stderr.
//! A bad line is one `FILE:LINE: problem` line on stderr and exit status 2, as for `score`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;

use gavel::toolkit::scored::{read_scored_with, ScoredError};
use gavel::toolkit::select::{select, sft_line, turns, Decision, Options, SelectSummary};

#[derive(Args)]
pub struct SelectArgs {
    /// Scored groups: `gavel rescore` output (its `input` file is read for the trajectories),
    /// or request bodies with `rewards` added — what `gavel train --offline` reads.
    scored: PathBuf,
    /// Where to write the SFT lines (JSONL, one chat per kept trajectory).
    #[arg(short, long, env = "GAVEL_SELECT_OUTPUT")]
    output: PathBuf,
    /// Keep each group's best (the top `--top`). The one selection rule so far, and the
    /// default; written out so that the command reads as the recipe does.
    #[arg(long, env = "GAVEL_SELECT_BEST_OF", default_value_t = true)]
    best_of: bool,
    /// How many of each group to keep (the best K).
    #[arg(long, env = "GAVEL_SELECT_TOP", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..))]
    top: u32,
    /// Keep only trajectories whose reward is at least this; a group whose best is below it
    /// is dropped. Default: no minimum.
    #[arg(long, env = "GAVEL_SELECT_MIN_REWARD", allow_negative_numbers = true)]
    min_reward: Option<f64>,
    /// Drop a group unless its K-th best beats its (K+1)-th by at least this (null rewards
    /// are not counted); a tie for the last kept place fails any margin above 0.
    #[arg(long, env = "GAVEL_SELECT_MIN_MARGIN", default_value_t = 0.0)]
    min_margin: f64,
}

pub fn run(args: SelectArgs) -> anyhow::Result<ExitCode> {
    let opts = Options {
        top: args.top as usize,
        min_reward: args.min_reward,
        min_margin: args.min_margin,
    };
    opts.check()?;
    let mut summary = SelectSummary::default();
    let read = read_scored_with(&args.scored, |g| {
        let t: Vec<usize> = g.trajectories.iter().map(turns).collect();
        let d = select(&g.rewards, &t, &opts);
        summary.add(&g.rewards, &d);
        let lines: Vec<String> = match &d {
            Decision::Kept(picks) => picks.iter().map(|p| sft_line(&g, p).to_string()).collect(),
            _ => Vec::new(),
        };
        Ok(lines)
    });
    let lines = match read {
        Ok(l) => l,
        Err(e @ (ScoredError::Line { .. } | ScoredError::Read { .. })) => {
            eprintln!("{e}");
            return Ok(ExitCode::from(2));
        }
    };
    write_atomically(&args.output, lines.iter().flatten())?;
    eprintln!("{summary}");
    Ok(ExitCode::SUCCESS)
}

/// Writes the lines whole or not at all (see [`gavel::toolkit::output_file`]).
fn write_atomically<'a>(
    path: &Path,
    lines: impl Iterator<Item = &'a String>,
) -> anyhow::Result<()> {
    gavel::toolkit::output_file::write_lines(path, lines)
        .with_context(|| format!("{}: cannot write", path.display()))
}
