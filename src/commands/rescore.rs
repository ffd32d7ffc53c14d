//! `gavel rescore`: its options, and the entry to [`gavel::rescore`].

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, ValueEnum};

use gavel::config::Secret;
use gavel::rescore::{ProgressMode, RescoreOptions, Shard};

use super::Common;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Progress {
    /// A progress bar on a terminal, periodic log lines otherwise.
    Auto,
    Bar,
    Log,
    None,
}

#[derive(Args, Debug, Clone)]
pub struct RescoreArgs {
    /// Logged groups, one JSON object per line (`-`: standard input), or `--from-log`.
    #[arg(required_unless_present = "from_log", conflicts_with = "from_log")]
    pub input: Option<PathBuf>,
    /// Read the groups from the scoring log of this Postgres store (`postgres://...`) instead
    /// of a file: every logged group (oldest first), narrowed by the `--log-*` filters.
    #[arg(long, env = "GAVEL_RESCORE_FROM_LOG", hide_env_values = true)]
    pub from_log: Option<Secret>,
    /// With --from-log: only groups scored with this rubric (by name).
    #[arg(long, env = "GAVEL_RESCORE_LOG_RUBRIC")]
    pub log_rubric: Option<String>,
    /// With --from-log: only groups scored at or after this time (e.g. 2025-06-01 or
    /// 2025-06-01T12:00:00Z).
    #[arg(long, env = "GAVEL_RESCORE_LOG_SINCE")]
    pub log_since: Option<String>,
    /// With --from-log: only groups scored before this time.
    #[arg(long, env = "GAVEL_RESCORE_LOG_UNTIL")]
    pub log_until: Option<String>,
    /// With --from-log: at most this many groups (the oldest that match).
    #[arg(long, env = "GAVEL_RESCORE_LOG_LIMIT")]
    pub log_limit: Option<u64>,
    /// Output file: one JSON line per input group.
    #[arg(short = 'o', long, env = "GAVEL_RESCORE_OUTPUT")]
    pub output: PathBuf,
    /// Score every group with this rubric instead of the one it names: a rubric file (a path
    /// with a `/` or ending in .toml) or the name of a shipped rubric or of one in the config's
    /// rubrics_dir.
    #[arg(long, env = "GAVEL_RUBRIC")]
    pub rubric: Option<String>,
    /// Score every group with this judge instead of the one it names.
    #[arg(long, env = "GAVEL_JUDGE")]
    pub judge: Option<String>,
    /// Groups scored at once (each judge's own rate limits still apply).
    #[arg(long, env = "GAVEL_RESCORE_CONCURRENCY", default_value_t = 8)]
    pub concurrency: usize,
    /// Process only this deterministic share of the groups, `I/N` (0-based), so N workers can
    /// split one file; their outputs concatenate cleanly.
    #[arg(long, env = "GAVEL_RESCORE_SHARD")]
    pub shard: Option<Shard>,
    /// Where rejected groups go (default: OUTPUT with `.rejects.jsonl`).
    #[arg(long, env = "GAVEL_RESCORE_REJECTS")]
    pub rejects: Option<PathBuf>,
    /// Try again the groups rejected for a judge failure.
    #[arg(long, env = "GAVEL_RESCORE_RETRY_REJECTS", default_value_t = false)]
    pub retry_rejects: bool,
    /// Progress display.
    #[arg(long, env = "GAVEL_RESCORE_PROGRESS", value_enum, default_value_t = Progress::Auto)]
    pub progress: Progress,
}

pub async fn run(common: &Common, args: RescoreArgs) -> anyhow::Result<ExitCode> {
    let opts = RescoreOptions {
        input: args.input,
        from_log: args.from_log,
        log_rubric: args.log_rubric,
        log_since: args.log_since,
        log_until: args.log_until,
        log_limit: args.log_limit,
        output: args.output,
        rubric: args.rubric,
        judge: args.judge,
        concurrency: args.concurrency,
        shard: args.shard,
        rejects: args.rejects,
        retry_rejects: args.retry_rejects,
        progress: match args.progress {
            Progress::Auto => ProgressMode::Auto,
            Progress::Bar => ProgressMode::Bar,
            Progress::Log => ProgressMode::Log,
            Progress::None => ProgressMode::None,
        },
    };
    Ok(super::exit(
        gavel::rescore::run(&common.source(), &opts).await?,
    ))
}
