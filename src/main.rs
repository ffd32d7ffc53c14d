//! The `gavel` command line: serve | score | render | lint | diff | eval | rescore | select |
//! train | bench-device | bench-load | migrate | cache. This file parses the clap tree and dispatches; each subcommand's body is in
//! `commands/`.

mod commands;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use commands::{Common, ConfigArgs};

// mimalloc, as text-embeddings-inference ships: a cache hit is mostly short-lived allocations
// (request JSON, response JSON), and glibc malloc costs about a third more CPU per hit there.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// A reward service for RL of LLM agents: relative group judging, verifiable rewards, cached
/// verdicts.
#[derive(Parser)]
#[command(name = "gavel", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
#[allow(clippy::large_enum_variant)] // parsed once; boxing would only add noise
enum Command {
    /// Run the daemon (POST /v1/score_group and friends).
    Serve {
        #[command(flatten)]
        common: Common,
        #[command(flatten)]
        args: commands::serve::ServeArgs,
    },
    /// Score one group (a .json file) or many (a .jsonl file, one group per line); prints one
    /// JSON result per group.
    Score {
        #[command(flatten)]
        common: Common,
        #[command(flatten)]
        args: commands::score::ScoreArgs,
    },
    /// Print the exact judge messages and token counts for each group, without calling a judge.
    Render {
        #[command(flatten)]
        common: ConfigArgs,
        #[command(flatten)]
        args: commands::render::RenderArgs,
    },
    /// Check rubrics and judge templates: parse, render against a sample group, weights and
    /// policy references; one `file:line: problem` line each.
    Lint {
        #[command(flatten)]
        common: ConfigArgs,
        #[command(flatten)]
        args: commands::lint::LintArgs,
    },
    /// Score every group under two rubrics (or two judges) and report what changed.
    Diff {
        #[command(flatten)]
        common: Common,
        #[command(flatten)]
        args: commands::diff::DiffArgs,
    },
    /// Measure judges and rubrics against labelled groups: accuracy with bootstrap intervals,
    /// position and length bias, calibration, invalid verdicts.
    Eval {
        #[command(flatten)]
        common: Common,
        #[command(flatten)]
        args: commands::eval::EvalArgs,
    },
    /// Re-score logged groups into a JSONL file; resumable, shardable.
    Rescore {
        #[command(flatten)]
        common: Common,
        #[command(flatten)]
        args: commands::rescore::RescoreArgs,
    },
    /// Keep the best of each scored group (rescore output or bodies with rewards) as SFT chat
    /// lines for TRL's SFTTrainer.
    Select {
        #[command(flatten)]
        args: commands::select::SelectArgs,
    },
    /// Train a Qwen's LoRA adapters with GRPO on rewards from this scorer (`train toy` first).
    #[cfg(feature = "train")]
    Train {
        #[command(flatten)]
        args: commands::train::TrainArgs,
    },
    /// Time the local judge and the trainer on this machine's devices, on models of the real
    /// Qwen2.5 shapes with random weights (what benches/gpu.sh runs on a lent GPU).
    #[cfg(feature = "train")]
    BenchDevice {
        #[command(flatten)]
        args: commands::bench_device::BenchDeviceArgs,
    },
    /// Time the local judge under load through the daemon: distinct groups sent one after
    /// another, then many at once (what benches/judge_load.sh and benches/gpu.sh run).
    #[cfg(feature = "train")]
    BenchLoad {
        #[command(flatten)]
        args: commands::bench_load::BenchLoadArgs,
    },
    /// Apply pending Postgres schema migrations (`migrations/`) to the `[store] url` database and
    /// print what was applied; daemons also apply them at start-up.
    Migrate {
        #[command(flatten)]
        common: Common,
    },
    /// Inspect or empty the verdict store.
    Cache {
        #[command(flatten)]
        common: Common,
        #[command(subcommand)]
        action: commands::cache::CacheAction,
    },
}

fn init_logs(json: bool, default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    // Colour codes only on a terminal: piped logs stay plain text.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    if json {
        builder.json().init();
    } else {
        builder.init();
    }
}

/// Rust starts every program with SIGPIPE ignored, so a write to a closed pipe is an error and
/// `println!` panics on it: `gavel render … | head -1` ended in a panic message and exit 101.
/// A command line tool ends quietly there, as `cat` does, so every command but the daemon gets
/// the default action back. The daemon keeps it ignored: nothing a client does may end it.
#[cfg(unix)]
fn end_quietly_on_broken_pipe() {
    // SAFETY: setting a signal's disposition to SIG_DFL installs no handler and touches no
    // memory; it runs first thing in main, before any other thread exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

#[cfg(not(unix))]
fn end_quietly_on_broken_pipe() {}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if !matches!(cli.command, Command::Serve { .. }) {
        end_quietly_on_broken_pipe();
    }
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
        .block_on(run(cli))
}

async fn run(cli: Cli) -> ExitCode {
    // Long-running commands (the daemon, rescore, score) log progress at info; the rest only
    // warn. `score` draws a bar instead of its progress lines where stderr is a terminal.
    let result = match cli.command {
        Command::Serve { common, args } => {
            init_logs(common.log_json, "info");
            commands::serve::run(common, args).await
        }
        Command::Score { common, args } => {
            init_logs(common.log_json, "info");
            commands::score::run(common, args).await
        }
        Command::Render { common, args } => {
            init_logs(common.log_json, "warn");
            commands::render::run(Common::from(common), args).await
        }
        Command::Lint { common, args } => {
            init_logs(common.log_json, "warn");
            commands::lint::run(&Common::from(common), args)
        }
        Command::Diff { common, args } => {
            init_logs(common.log_json, "warn");
            commands::diff::run(&common, args).await
        }
        Command::Eval { common, args } => {
            init_logs(common.log_json, "warn");
            commands::eval::run(&common, args).await
        }
        Command::Rescore { common, args } => {
            init_logs(common.log_json, "info");
            commands::rescore::run(&common, args).await
        }
        Command::Select { args } => {
            init_logs(false, "warn");
            commands::select::run(args)
        }
        #[cfg(feature = "train")]
        Command::Train { args } => {
            init_logs(false, "warn");
            commands::train::run(args).await
        }
        #[cfg(feature = "train")]
        Command::BenchDevice { args } => {
            init_logs(false, "warn");
            commands::bench_device::run(args)
        }
        #[cfg(feature = "train")]
        Command::BenchLoad { args } => {
            init_logs(false, "warn");
            commands::bench_load::run(args)
        }
        Command::Migrate { common } => {
            init_logs(common.log_json, "warn");
            commands::migrate::run(common).await
        }
        Command::Cache { common, action } => {
            init_logs(common.log_json, "warn");
            commands::cache::run(common, action).await
        }
    };
    match result {
        Ok(code) => code,
        // Each cause once: errors that name their cause in their own message also keep it as
        // their source, and anyhow's `{:#}` would print it twice.
        Err(e) => {
            eprintln!("gavel: {}", gavel::domain::error_chain::with_causes(&*e));
            ExitCode::from(1)
        }
    }
}
