//! `gavel score`: one JSON result per group on stdout (or in the `-o` file), one
//! `FILE[:LINE]: error` line per failed group on stderr (exit 1); a file problem is exit 2 with
//! nothing scored. Progress goes to stderr while it works, never to the output.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Args;

use gavel::cli::{attach_store, build_scorer, plural};
use gavel::score::Usage;
use gavel::toolkit::output_file::LineSink;
use gavel::toolkit::progress::{progress_bar, stderr_is_terminal};

use super::Common;

use super::{read_overridden, Overrides};

/// Without a terminal, a progress line at most this often: often enough that a job's log shows
/// a slow judge is still working, rarely enough that a fast one does not flood it.
const LOG_EVERY: Duration = Duration::from_secs(10);

#[derive(Args)]
pub struct ScoreArgs {
    #[command(flatten)]
    overrides: Overrides,
    /// Write the results here (one JSON line per group; missing folders are made) instead of
    /// standard output, whole once every group is done, and a one-line summary to stderr.
    #[arg(short = 'o', long = "output", env = "GAVEL_SCORE_OUTPUT")]
    output: Option<PathBuf>,
    /// The group file (`-`: standard input). Each line is a `/v1/score_group` body; fields
    /// beyond it (a labelled eval row's `id`, `labels`, `set`) are echoed as `input_meta`, not
    /// refused.
    file: PathBuf,
}

pub async fn run(common: Common, args: ScoreArgs) -> anyhow::Result<ExitCode> {
    let cfg = common.load_config()?;
    let scorer = build_scorer(&cfg)?;
    let groups = match read_overridden("score", &args.file, &scorer, &args.overrides) {
        Ok(g) => g,
        Err(e) => return Ok(super::exit(e)),
    };
    // Only now, with every group checked, is the store opened (or created).
    let scorer = attach_store(scorer, &cfg).await?;
    let total = groups.len();
    // A bar on a terminal, ticking on its own so that one slow group (a local judge's minute)
    // still shows the run is alive; a job's log gets log lines instead.
    let show_bar = stderr_is_terminal();
    let bar = progress_bar(total as u64, 0, "groups", show_bar);
    if show_bar {
        bar.enable_steady_tick(Duration::from_millis(250));
    } else {
        tracing::info!(groups = total, file = %args.file.display(), "score starting");
    }
    let mut out = LineSink::new(args.output.as_deref());
    let mut usage = Usage::default();
    let mut failed = 0usize;
    let mut last_log = Instant::now();
    for g in groups {
        bar.set_message(g.at.clone());
        match scorer.score_group(&g.request).await {
            Ok(resp) => {
                usage.add(&resp.usage);
                let mut v = serde_json::to_value(&resp)?;
                if let Some(o) = v.as_object_mut() {
                    if let Some(l) = g.line {
                        o.insert("line".into(), l.into());
                    }
                    if !g.extra.0.is_empty() {
                        o.insert("input_meta".into(), g.extra.0.into());
                    }
                }
                bar.suspend(|| out.push(v.to_string()));
            }
            Err(e) => {
                failed += 1;
                usage.add_failed(e.spent());
                bar.suspend(|| eprintln!("{}: {e}", g.at));
            }
        }
        bar.inc(1);
        if !show_bar && last_log.elapsed() >= LOG_EVERY {
            last_log = Instant::now();
            tracing::info!(done = bar.position(), total, failed, "score progress");
        }
    }
    bar.finish_and_clear();
    scorer.store().flush().await?;
    let scored = out.count();
    if let Some(path) = out.finish().map_err(anyhow::Error::msg)? {
        eprintln!("{}", summary_line(scored, failed, &usage, &path));
    }
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// `gavel score: 3 groups scored, 1 failed · 7 judge calls, 2 cache hits · 1234 prompt + 210
/// completion tokens · wrote PATH`: how the run went, for a run whose results are in a file.
fn summary_line(scored: usize, failed: usize, u: &Usage, path: &std::path::Path) -> String {
    let mut line = format!("gavel score: {} scored", plural(scored, "group", "groups"));
    if failed > 0 {
        line.push_str(&format!(", {failed} failed"));
    }
    line.push_str(&format!(
        " · {}, {} · {} prompt + {} completion tokens",
        plural(u.judge_calls as usize, "judge call", "judge calls"),
        plural(u.cache_hits as usize, "cache hit", "cache hits"),
        u.prompt_tokens,
        u.completion_tokens,
    ));
    if u.failed_calls > 0 {
        line.push_str(&format!(
            " · {}",
            plural(u.failed_calls as usize, "failed call", "failed calls")
        ));
    }
    line.push_str(&format!(" · wrote {}", path.display()));
    line
}
