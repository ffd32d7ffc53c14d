//! `gavel rescore`: logged groups in, re-scored JSONL out — resumable, shardable, and never
//! losing a group.
//!
//! Input lines are gavel request bodies, ART trajectory-group dumps (`{"trajectories": [...]}`
//! with ART's `messages_and_choices`), or one trajectory per line (`{"messages": [...],
//! "group_id": ...}`) grouped by `group_id`. Each group is a *unit*, named by a hash of its input
//! text. One writer appends results to the output (or the rejects file) and checkpoints, in one
//! atomic store write, the units finished and the byte length both files reached. After a crash
//! the same command truncates both files to the checkpoint and does the rest, so every group is
//! in the output exactly once.
//!
//! `units` reads the input into units and scores them; `ledger` owns the two files and their
//! checkpoints (and the crash recovery that keeps the exactly-once promise); `crash` is a
//! test-only hook that aborts the process at a named point of the ledger.

mod crash;
mod ledger;
mod units;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::json;

use crate::cli::{open_scorer, CliError, ConfigSource};
use crate::domain::rubric::RubricSet;
use crate::domain::secret::Secret;
use crate::domain::trajectory::content_hash;
use crate::score::Usage;
use crate::toolkit::exit::Exit;
use crate::toolkit::progress::{progress_bar, stderr_is_terminal};

use ledger::{Ledger, Sink};
use units::{in_shard, read_input, read_units, score_unit, Outcome, Unit};

/// How progress is shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProgressMode {
    /// A progress bar on a terminal, periodic log lines otherwise.
    Auto,
    Bar,
    Log,
    None,
}

/// `I/N`: this worker's share of the input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    pub index: u64,
    pub count: u64,
}

impl std::str::FromStr for Shard {
    type Err = String;
    fn from_str(s: &str) -> Result<Shard, String> {
        let (i, n) = s.split_once('/').ok_or("expected I/N, e.g. 0/4")?;
        let (index, count) = (i.trim().parse::<u64>(), n.trim().parse::<u64>());
        match (index, count) {
            (Ok(index), Ok(count)) if count > 0 && index < count => Ok(Shard { index, count }),
            _ => Err(format!("expected I/N with 0 <= I < N, got {s:?}")),
        }
    }
}

/// What `gavel rescore` reads, how it scores and where it writes (the command line's options
/// in `gavel`'s `commands/rescore.rs`).
#[derive(Debug, Clone)]
pub struct RescoreOptions {
    /// Logged groups, one JSON object per line (`-`: standard input), or `--from-log`.
    pub input: Option<PathBuf>,
    /// Read the groups from the scoring log of this Postgres store (`postgres://...`) instead
    /// of a file: every logged group (oldest first), narrowed by the `--log-*` filters.
    pub from_log: Option<Secret>,
    /// With --from-log: only groups scored with this rubric (by name).
    pub log_rubric: Option<String>,
    /// With --from-log: only groups scored at or after this time (e.g. 2025-06-01 or
    /// 2025-06-01T12:00:00Z).
    pub log_since: Option<String>,
    /// With --from-log: only groups scored before this time.
    pub log_until: Option<String>,
    /// With --from-log: at most this many groups (the oldest that match).
    pub log_limit: Option<u64>,
    /// Output file: one JSON line per input group.
    pub output: PathBuf,
    /// Score every group with this rubric instead of the one it names (a name, or a rubric
    /// file: see `RubricSet::resolve_arg`).
    pub rubric: Option<String>,
    /// Score every group with this judge instead of the one it names.
    pub judge: Option<String>,
    /// Groups scored at once (each judge's own rate limits still apply).
    pub concurrency: usize,
    /// Process only this deterministic share of the groups, `I/N` (0-based), so N workers can
    /// split one file; their outputs concatenate cleanly.
    pub shard: Option<Shard>,
    /// Where rejected groups go (default: OUTPUT with `.rejects.jsonl`).
    pub rejects: Option<PathBuf>,
    /// Try again the groups rejected for a judge failure.
    pub retry_rejects: bool,
    /// Progress display.
    pub progress: ProgressMode,
}

/// Runs the job: Done when nothing was rejected, else Failed.
pub async fn run(source: &ConfigSource, args: &RescoreOptions) -> Result<Exit, CliError> {
    let started = Instant::now();
    let cfg = source.load_config()?;
    let (text, file) = read_input(args).await?;
    let rejects_path = args.rejects.clone().unwrap_or_else(|| {
        let mut p = args.output.clone().into_os_string();
        p.push(".rejects.jsonl");
        PathBuf::from(p)
    });
    let rubric = match &args.rubric {
        None => None,
        Some(r) => {
            let set = RubricSet::load(cfg.rubrics_dir.as_deref())
                .map_err(crate::score::BuildError::from)?;
            match set.resolve_arg(r) {
                Ok(arg) => Some(arg),
                Err(e) => {
                    eprintln!("gavel rescore: --rubric: {e}");
                    return Ok(Exit::Refused);
                }
            }
        }
    };
    let units = read_units(&text, cfg.server.max_group_size, args, rubric.as_ref())?;
    let scorer = open_scorer(&cfg).await?;
    let job = content_hash(&(
        "rescore",
        match &args.input {
            // Standard input has no name that outlives the run: the job is named by what it
            // read, so piping the same lines again resumes, and other lines are another job.
            Some(p) if crate::toolkit::groupfile::is_stdin(p) => {
                format!("stdin {}", content_hash(&text))
            }
            Some(p) => job_path(p),
            None => format!(
                "log {file} {:?}",
                (
                    &args.log_rubric,
                    &args.log_since,
                    &args.log_until,
                    args.log_limit
                )
            ),
        },
        job_path(&args.output),
        &args.rubric,
        &args.judge,
        args.shard.map(|s| (s.index, s.count)),
    ));
    drop(text);
    let (mut ledger, done) = Ledger::open(
        scorer.store().clone(),
        job,
        &args.output,
        &rejects_path,
        args.retry_rejects,
    )
    .await?;
    let todo: Vec<&Unit> = units
        .iter()
        .filter(|u| in_shard(u, args.shard) && !done.contains(&u.key))
        .collect();
    let already = units.iter().filter(|u| in_shard(u, args.shard)).count() - todo.len();
    let total = todo.len() as u64;
    let bar = bar_or_log(args.progress, total, already);

    let mut stats = JobSummary::default();
    let mut last_log = Instant::now();
    let concurrency = args.concurrency.max(1);
    // Ctrl-C or SIGTERM ends the run between two appends: every finished group is on disk and
    // checkpointed, and the groups in flight are left for the next run of the same command.
    let mut stop = std::pin::pin!(stop_signal().map_err(|e| {
        CliError::Other(format!("cannot watch for Ctrl-C (SIGINT) or SIGTERM: {e}"))
    })?);
    let mut stopped_by = None;
    let mut results = futures::stream::iter(todo.iter().map(|u| {
        let scorer = scorer.clone();
        let file = file.clone();
        async move { (u.key.clone(), score_unit(&scorer, u, &file).await) }
    }))
    .buffer_unordered(concurrency);
    loop {
        let next = tokio::select! {
            biased;
            signal = &mut stop => {
                stopped_by = Some(signal);
                break;
            }
            next = results.next() => next,
        };
        let Some((key, outcome)) = next else { break };
        let (sink, line) = match outcome {
            Outcome::Scored(v, usage) => {
                stats.add(&usage);
                (Sink::Output, v)
            }
            Outcome::Rejected(v, usage) => {
                stats.add(&usage);
                stats.rejects += 1;
                (Sink::Rejects, v)
            }
        };
        ledger.append(sink, key, &line).await?;
        stats.groups += 1;
        if let Some(b) = &bar {
            b.inc(1);
        } else if args.progress != ProgressMode::None
            && last_log.elapsed() >= Duration::from_secs(10)
        {
            last_log = Instant::now();
            tracing::info!(
                done = stats.groups,
                total,
                rejects = stats.rejects,
                "rescore progress"
            );
        }
    }
    drop(results);
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    let summary = json!({
        "groups": stats.groups,
        "skipped_already_done": already,
        "cache_hits": stats.usage.cache_hits,
        "judge_calls": stats.usage.judge_calls,
        "prompt_tokens": stats.usage.prompt_tokens,
        "completion_tokens": stats.usage.completion_tokens,
        "failed_calls": stats.usage.failed_calls,
        "failed_prompt_tokens": stats.usage.failed_prompt_tokens,
        "failed_completion_tokens": stats.usage.failed_completion_tokens,
        "cost": stats.usage.cost,
        "rejects": stats.rejects,
        "rejects_file": rejects_path.display().to_string(),
        "wall_s": (started.elapsed().as_secs_f64() * 1000.0).round() / 1000.0,
    });
    eprintln!("rescore: {summary}");
    if let Some(signal) = stopped_by {
        scorer.store().flush().await?;
        let in_shard = already as u64 + total;
        let done = already as u64 + stats.groups;
        let rejected = match stats.rejects {
            0 => String::new(),
            n => format!(" ({n} of them rejected, in {})", rejects_path.display()),
        };
        eprintln!(
            "gavel rescore: stopped by {}: {done} of {in_shard} groups done{rejected}, in {}; \
             rerun the same command to resume with the other {}",
            signal_name(signal),
            args.output.display(),
            in_shard - done
        );
        return Ok(Exit::Interrupted(signal));
    }
    Ok(Exit::failed_if(stats.rejects > 0))
}

/// SIGINT's number: Ctrl-C.
const SIGINT: i32 = 2;
/// SIGTERM's number: a supervisor's stop.
const SIGTERM: i32 = 15;

fn signal_name(signal: i32) -> &'static str {
    match signal {
        SIGINT => "Ctrl-C (SIGINT)",
        _ => "SIGTERM",
    }
}

/// Watches for SIGINT and SIGTERM from now on; the future resolves with the first one's number.
#[cfg(unix)]
fn stop_signal() -> std::io::Result<impl std::future::Future<Output = i32>> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut int = signal(SignalKind::interrupt())?;
    let mut term = signal(SignalKind::terminate())?;
    Ok(async move {
        tokio::select! {
            _ = int.recv() => SIGINT,
            _ = term.recv() => SIGTERM,
        }
    })
}

#[cfg(not(unix))]
fn stop_signal() -> std::io::Result<impl std::future::Future<Output = i32>> {
    Ok(async {
        let _ = tokio::signal::ctrl_c().await;
        SIGINT
    })
}

/// How a file names the job it belongs to: its directory made absolute with links resolved, and
/// its own name as given. The file itself is never resolved, so the name is the same before the
/// output exists (the first run) and after (a resume); a relative `-o` and its absolute spelling
/// name one job.
fn job_path(p: &Path) -> String {
    let dir = match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let dir = std::fs::canonicalize(dir)
        .or_else(|_| std::path::absolute(dir))
        .unwrap_or_else(|_| dir.to_path_buf());
    match p.file_name() {
        Some(name) => dir.join(name),
        None => dir,
    }
    .display()
    .to_string()
}

#[derive(Default)]
struct JobSummary {
    groups: u64,
    rejects: u64,
    usage: Usage,
}

impl JobSummary {
    fn add(&mut self, u: &Usage) {
        self.usage.add(u);
    }
}

/// The bar `mode` asks for (on a terminal, for `auto`), or `None` for periodic log lines.
fn bar_or_log(mode: ProgressMode, total: u64, already: usize) -> Option<indicatif::ProgressBar> {
    let show = match mode {
        ProgressMode::Bar => true,
        ProgressMode::Auto => stderr_is_terminal(),
        ProgressMode::Log | ProgressMode::None => false,
    };
    if !show {
        if mode != ProgressMode::None {
            tracing::info!(total, already_done = already, "rescore starting");
        }
        return None;
    }
    Some(progress_bar(total, 0, "groups", true))
}

#[cfg(test)]
mod tests {
    use super::job_path;

    #[test]
    fn a_file_names_its_job_alike_before_and_after_it_exists() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out.jsonl");
        let before = job_path(&out);
        std::fs::write(&out, "{}\n").unwrap();
        assert_eq!(job_path(&out), before);
        // A relative spelling of the same file names the same job.
        let cwd = std::env::current_dir().unwrap();
        let rel = pathdiff(&out, &cwd);
        assert_eq!(job_path(&rel), before, "{}", rel.display());
    }

    /// `to` written relative to `from` (both absolute), with `..` as needed.
    fn pathdiff(to: &std::path::Path, from: &std::path::Path) -> std::path::PathBuf {
        let (to, from) = (
            std::fs::canonicalize(to.parent().unwrap())
                .unwrap()
                .join(to.file_name().unwrap()),
            std::fs::canonicalize(from).unwrap(),
        );
        let common = to
            .components()
            .zip(from.components())
            .take_while(|(a, b)| a == b)
            .count();
        let mut rel = std::path::PathBuf::new();
        for _ in from.components().skip(common) {
            rel.push("..");
        }
        rel.extend(to.components().skip(common));
        rel
    }
}
