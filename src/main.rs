//! The `gavel` command line: serve | score | render | lint | diff | eval | rescore | train |
//! migrate | cache.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::{Args, Parser, Subcommand, ValueEnum};

use gavel::cli::{open_scorer, Common};

// mimalloc, as text-embeddings-inference ships: a cache hit is mostly short-lived allocations
// (request JSON, response JSON), and glibc malloc costs about a third more CPU per hit there.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;
use gavel::config::Config;
use gavel::groupfile::GroupIn;
use gavel::score::{RubricRef, Scorer};
use gavel::server::{self, AppState};
use gavel::store::{PgStore, SledStore, VerdictStore};

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
        /// Address to listen on (overrides `[server] addr`; default 127.0.0.1:8080).
        #[arg(long, env = "GAVEL_ADDR")]
        addr: Option<String>,
    },
    /// Score one group (a .json file) or many (a .jsonl file, one group per line); prints one
    /// JSON result per group.
    Score {
        #[command(flatten)]
        common: Common,
        #[command(flatten)]
        overrides: Overrides,
        /// The group file.
        file: PathBuf,
    },
    /// Print the exact judge messages and token counts for each group, without calling a judge.
    Render {
        #[command(flatten)]
        common: Common,
        #[command(flatten)]
        overrides: Overrides,
        /// Output format.
        #[arg(long, env = "GAVEL_RENDER_FORMAT", value_enum, default_value_t = Format::Text)]
        format: Format,
        /// The group file.
        file: PathBuf,
    },
    /// Check rubrics and judge templates: parse, render against a sample group, weights and
    /// policy references; one `file:line: problem` line each.
    Lint {
        #[command(flatten)]
        common: Common,
        #[command(flatten)]
        args: gavel::lint::LintArgs,
    },
    /// Score every group under two rubrics (or two judges) and report what changed.
    Diff {
        #[command(flatten)]
        common: Common,
        #[command(flatten)]
        args: gavel::diff::DiffArgs,
    },
    /// Measure judges and rubrics against labelled groups: accuracy with bootstrap intervals,
    /// position and length bias, calibration, invalid verdicts.
    Eval {
        #[command(flatten)]
        common: Common,
        #[command(flatten)]
        args: gavel::eval::EvalArgs,
    },
    /// Re-score logged groups into a JSONL file; resumable, shardable.
    Rescore {
        #[command(flatten)]
        common: Common,
        #[command(flatten)]
        args: gavel::rescore::RescoreArgs,
    },
    /// Train a Qwen's LoRA adapters with GRPO on rewards from this scorer (`train toy` first).
    #[cfg(feature = "train")]
    Train {
        #[command(flatten)]
        args: gavel::train::cli::TrainArgs,
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
        action: CacheAction,
    },
}

#[derive(Args, Clone)]
struct Overrides {
    /// Use this rubric (a name from rubrics/ or the config's rubrics_dir) for every group.
    #[arg(long, env = "GAVEL_RUBRIC")]
    rubric: Option<String>,
    /// Use this judge (a name from the config) for every group.
    #[arg(long, env = "GAVEL_JUDGE")]
    judge: Option<String>,
}

#[derive(Clone, Copy, ValueEnum)]
enum Format {
    Text,
    Json,
}

#[derive(Subcommand)]
enum CacheAction {
    /// Print the number of verdicts and the size of the store.
    Stats,
    /// Remove every verdict.
    Clear,
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

fn load_config(common: &Common) -> anyhow::Result<Config> {
    Ok(common.load_config()?)
}

async fn build_scorer(cfg: &Config) -> anyhow::Result<Arc<Scorer>> {
    Ok(open_scorer(cfg).await?)
}

/// Installs the SIGTERM and SIGINT handlers now (before the daemon announces itself, so a
/// supervisor that stops it at once still gets a graceful shutdown) and returns the future that
/// resolves on either signal.
fn shutdown_signal() -> std::io::Result<impl std::future::Future<Output = ()> + Send + 'static> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {},
            _ = int.recv() => {},
        }
        tracing::info!("shutdown signal received; finishing in-flight requests");
    })
}

async fn serve(common: Common, addr: Option<String>) -> anyhow::Result<()> {
    let mut cfg = load_config(&common)?;
    if let Some(addr) = addr {
        cfg.server.addr = addr;
    }
    let shutdown = shutdown_signal()?;
    let scorer = build_scorer(&cfg).await?;
    for j in scorer.judges() {
        match j.unconfigured_reason() {
            None => tracing::info!(judge = %j.info().name, model = %j.info().model, "judge ready"),
            Some(why) => tracing::warn!(judge = %j.info().name, "{why}"),
        }
    }
    let listener = tokio::net::TcpListener::bind(&cfg.server.addr)
        .await
        .with_context(|| format!("cannot listen on {}", cfg.server.addr))?;
    let local = listener.local_addr()?;
    server::check_exposure(local, &cfg.server).map_err(anyhow::Error::msg)?;
    tracing::info!(addr = %local, store = %cfg.store.describe(), "gavel listening");
    println!("gavel listening on http://{local}");
    let state = AppState::new(scorer, cfg.server.clone()).with_openrlhf(cfg.openrlhf.clone())?;
    server::serve(listener, state, shutdown).await?;
    tracing::info!("stopped");
    Ok(())
}

/// `gavel lint`, with the rubric and template folders of `--config` when the command line
/// names none.
fn lint(common: &Common, args: gavel::lint::LintArgs) -> anyhow::Result<ExitCode> {
    let args = match &common.config {
        Some(_) => args.with_config_dirs(&load_config(common)?),
        None => args,
    };
    Ok(ExitCode::from(gavel::lint::run(&args)?))
}

/// Reads a group file with the shared reader and applies `--rubric`/`--judge` to every group.
fn read_groups(
    path: &Path,
    max_group_size: usize,
    o: &Overrides,
) -> Result<Vec<GroupIn>, Vec<String>> {
    let mut groups = gavel::groupfile::read_groups::<()>(path, max_group_size)?;
    for g in &mut groups {
        if let Some(r) = &o.rubric {
            g.request.rubric = RubricRef::Named(r.clone());
        }
        if let Some(j) = &o.judge {
            g.request.judges = vec![j.clone()];
        }
    }
    Ok(groups)
}

fn report(problems: &[String]) -> ExitCode {
    for p in problems {
        eprintln!("{p}");
    }
    ExitCode::from(2)
}

async fn score(common: Common, overrides: Overrides, file: PathBuf) -> anyhow::Result<ExitCode> {
    let cfg = load_config(&common)?;
    let groups = match read_groups(&file, cfg.server.max_group_size, &overrides) {
        Ok(g) => g,
        Err(problems) => return Ok(report(&problems)),
    };
    let scorer = build_scorer(&cfg).await?;
    let mut failed = 0usize;
    for g in groups {
        match scorer.score_group(&g.request).await {
            Ok(resp) => {
                let mut v = serde_json::to_value(&resp)?;
                if let (Some(l), Some(o)) = (g.line, v.as_object_mut()) {
                    o.insert("line".into(), l.into());
                }
                println!("{v}");
            }
            Err(e) => {
                failed += 1;
                let at = g.line.map_or(file.display().to_string(), |l| {
                    format!("{}:{l}", file.display())
                });
                eprintln!("{at}: {e}");
            }
        }
    }
    scorer.store().flush().await?;
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

async fn render(
    common: Common,
    overrides: Overrides,
    format: Format,
    file: PathBuf,
) -> anyhow::Result<ExitCode> {
    let cfg = load_config(&common)?;
    let groups = match read_groups(&file, cfg.server.max_group_size, &overrides) {
        Ok(g) => g,
        Err(problems) => return Ok(report(&problems)),
    };
    // Rendering needs no store; an in-memory sled keeps the scorer's shape without touching disk.
    let store: Arc<dyn VerdictStore> = Arc::new(SledStore::temporary()?);
    let scorer = Scorer::new(&cfg, store)?;
    for (n, g) in groups.iter().enumerate() {
        let at = g.line.map_or(file.display().to_string(), |l| {
            format!("{}:{l}", file.display())
        });
        let r = match scorer.render(&g.request) {
            Ok(r) => r,
            Err(e) => return Ok(report(&[format!("{at}: {e}")])),
        };
        match format {
            Format::Json => {
                let mut v = serde_json::to_value(&r)?;
                if let (Some(l), Some(o)) = (g.line, v.as_object_mut()) {
                    o.insert("line".into(), l.into());
                }
                println!("{v}");
            }
            Format::Text => {
                println!("=== group {} ({at}) ===", n + 1);
                for m in &r.messages {
                    println!("--- {} ---\n{}", m.role, m.content);
                }
                let pct = if r.prompt_tokens_without_dedup > 0 {
                    100.0 * r.tokens_saved_by_dedup as f64 / r.prompt_tokens_without_dedup as f64
                } else {
                    0.0
                };
                println!(
                    "--- tokens: {} (without dedup {}, saved {} = {pct:.0}%) · shared prefix {} messages · {} shared blocks · {} distinct trajectories",
                    r.prompt_tokens,
                    r.prompt_tokens_without_dedup,
                    r.tokens_saved_by_dedup,
                    r.shared_prefix_messages,
                    r.shared_blocks,
                    r.distinct_trajectories
                );
                println!(
                    "--- rubric {} {} · template {} {}",
                    r.rubric.name, r.rubric.version, r.template.name, r.template.version
                );
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn cache(common: Common, action: CacheAction) -> anyhow::Result<ExitCode> {
    let cfg = load_config(&common)?;
    let store = gavel::store::open(&cfg.store).await?;
    match action {
        CacheAction::Stats => println!("{}", serde_json::to_string(&store.stats().await?)?),
        CacheAction::Clear => {
            let n = store.clear().await?;
            println!("cleared {n} verdicts from {}", cfg.store.describe());
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn migrate(common: Common) -> anyhow::Result<ExitCode> {
    let cfg = load_config(&common)?;
    let Some(url) = &cfg.store.url else {
        anyhow::bail!(
            "no Postgres store configured ([store] url, --store-url or GAVEL_STORE_URL); \
             the embedded sled store needs no migrations"
        );
    };
    let report = PgStore::migrate(url.expose()).await?;
    for name in &report.applied {
        println!("applied {name}");
    }
    println!(
        "{}: schema version {} ({} migration(s) applied)",
        cfg.store.describe(),
        report.version,
        report.applied.len()
    );
    Ok(ExitCode::SUCCESS)
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve { common, addr } => {
            init_logs(common.log_json, "info");
            serve(common, addr).await.map(|()| ExitCode::SUCCESS)
        }
        Command::Score {
            common,
            overrides,
            file,
        } => {
            init_logs(common.log_json, "warn");
            score(common, overrides, file).await
        }
        Command::Render {
            common,
            overrides,
            format,
            file,
        } => {
            init_logs(common.log_json, "warn");
            render(common, overrides, format, file).await
        }
        Command::Lint { common, args } => {
            init_logs(common.log_json, "warn");
            lint(&common, args)
        }
        Command::Diff { common, args } => {
            init_logs(common.log_json, "warn");
            gavel::diff::run(&common, &args)
                .await
                .map(ExitCode::from)
                .map_err(Into::into)
        }
        Command::Eval { common, args } => {
            init_logs(common.log_json, "warn");
            gavel::eval::run(&common, &args)
                .await
                .map(ExitCode::from)
                .map_err(Into::into)
        }
        Command::Rescore { common, args } => {
            init_logs(common.log_json, "info");
            gavel::rescore::run(&common, &args)
                .await
                .map(ExitCode::from)
                .map_err(Into::into)
        }
        #[cfg(feature = "train")]
        Command::Train { args } => {
            init_logs(false, "warn");
            gavel::train::cli::run(args)
                .await
                .map(ExitCode::from)
                .map_err(Into::into)
        }
        Command::Migrate { common } => {
            init_logs(common.log_json, "warn");
            migrate(common).await
        }
        Command::Cache { common, action } => {
            init_logs(common.log_json, "warn");
            cache(common, action).await
        }
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("gavel: {e:#}");
            ExitCode::from(1)
        }
    }
}
