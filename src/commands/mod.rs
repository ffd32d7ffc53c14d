//! One module per subcommand, each with the `run` that `main.rs` dispatches to. This is the
//! binary's glue: it loads the configuration, calls the library and turns the outcome into an
//! exit code, so `anyhow` may appear here and nowhere in the library. Commands with a body of
//! their own in the library (`lint`, `diff`, `eval`, `rescore`, `train`, `bench-device`, `bench-load`) get a
//! thin entry here; `select` reads and writes its files here around the pure `gavel::toolkit::select`;
//! `serve`, `score`, `render`, `migrate` and `cache` are short enough to live here whole.

#[cfg(feature = "train")]
pub mod bench_device;
#[cfg(feature = "train")]
pub mod bench_load;
pub mod cache;
pub mod diff;
pub mod eval;
pub mod lint;
pub mod migrate;
pub mod render;
pub mod rescore;
pub mod score;
pub mod select;
pub mod serve;
#[cfg(feature = "train")]
pub mod train;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;

use gavel::cli::{CliError, ConfigSource};
use gavel::config::{Config, Secret};
use gavel::domain::prompt::JudgeMode;
use gavel::score::{ScoreRequest, Scorer};
use gavel::toolkit::exit::Exit;
use gavel::toolkit::groupfile::{
    check_permutations, override_judging, override_request, print_problems, read_checked, GroupIn,
    KeptAside,
};

/// `--config` and `--log-json`: the options of a command that reads gavel.toml but keeps no
/// verdicts (`render`, `lint`), so its help lists no store options.
#[derive(Args, Clone, Debug, Default)]
pub struct ConfigArgs {
    /// Configuration file (TOML). Without one, a judge named `default` is built from
    /// OPENAI_BASE_URL, OPENAI_API_KEY and GAVEL_JUDGE_MODEL.
    #[arg(long, env = "GAVEL_CONFIG", global = true)]
    pub config: Option<PathBuf>,
    /// Write logs as JSON lines instead of text.
    #[arg(long, env = "GAVEL_LOG_JSON", default_value_t = false, global = true)]
    pub log_json: bool,
}

impl From<ConfigArgs> for Common {
    fn from(a: ConfigArgs) -> Common {
        Common {
            config: a.config,
            store: None,
            store_url: None,
            log_json: a.log_json,
        }
    }
}

/// [`ConfigArgs`] and the verdict store's options: what a command that keeps verdicts takes.
#[derive(Args, Clone, Debug, Default)]
pub struct Common {
    /// Configuration file (TOML). Without one, a judge named `default` is built from
    /// OPENAI_BASE_URL, OPENAI_API_KEY and GAVEL_JUDGE_MODEL.
    #[arg(long, env = "GAVEL_CONFIG", global = true)]
    pub config: Option<PathBuf>,
    /// Directory of the verdict store (overrides `[store] path`; default ./gavel-store).
    #[arg(long, env = "GAVEL_STORE", global = true)]
    pub store: Option<PathBuf>,
    /// A shared Postgres verdict store, `postgres://user:password@host/db` (overrides
    /// `[store] url`; when set, `--store` is not used).
    #[arg(long, env = "GAVEL_STORE_URL", global = true, hide_env_values = true)]
    pub store_url: Option<Secret>,
    /// Write logs as JSON lines instead of text.
    #[arg(long, env = "GAVEL_LOG_JSON", default_value_t = false, global = true)]
    pub log_json: bool,
}

impl Common {
    /// Where the library reads the configuration from.
    pub fn source(&self) -> ConfigSource {
        ConfigSource {
            config: self.config.clone(),
            store: self.store.clone(),
            store_url: self.store_url.clone(),
        }
    }

    /// The configuration file (or the environment), with `--store` applied.
    pub fn load_config(&self) -> Result<Config, CliError> {
        self.source().load_config()
    }
}

/// The exit status of a tool's run: 0 done, 1 ran and reported failures, 2 refused (a usage or
/// input problem; nothing was scored), 128 + N stopped by signal N (130 for Ctrl-C).
pub fn exit(e: Exit) -> ExitCode {
    ExitCode::from(match e {
        Exit::Done => 0,
        Exit::Failed => 1,
        Exit::Refused => 2,
        Exit::Interrupted(signal) => u8::try_from(128 + signal).unwrap_or(1),
    })
}

/// What `score` and `render` set on every group, over what its line asks for: `--rubric`,
/// `--judge`, and the judging options `eval` has too (`--judge-mode`, `--permutations`, read
/// and bounded alike), so a line is rendered and scored the way `eval` would judge it.
#[derive(Args, Clone)]
pub struct Overrides {
    /// Use this rubric for every group: a rubric file (a path with a `/` or ending in .toml,
    /// read from the current directory) or the name of a shipped rubric or of one in the
    /// config's rubrics_dir.
    #[arg(long, env = "GAVEL_RUBRIC")]
    rubric: Option<String>,
    /// Use this judge (a name from the config) for every group.
    #[arg(long, env = "GAVEL_JUDGE")]
    judge: Option<String>,
    /// Judging mode for every group (listwise, pointwise, pairwise; the last two read token
    /// probabilities: a local judge's, or a remote judge's logprobs); replaces a line's own
    /// `judge_mode` [default: the line's, else each judge's configured mode].
    #[arg(long = "judge-mode", env = "GAVEL_JUDGE_MODE")]
    judge_mode: Option<JudgeMode>,
    /// Orders each group is judged in and averaged over, 1 to 16 (as given, then seeded
    /// shuffles: gavel's position-bias control); replaces a line's own `permutations`
    /// [default: the line's, else the rubric's, else 1].
    #[arg(long, env = "GAVEL_PERMUTATIONS")]
    permutations: Option<u64>,
}

/// Reads a group file with the shared reader, applies the [`Overrides`] to every group and
/// checks every group's request with `scorer` (see [`read_checked`]). A line's fields beyond
/// the request (a labelled eval row's `id`, `labels`, `set`) are kept aside ([`KeptAside`]),
/// not refused. A bad `--rubric`, `--judge` or `--permutations` is one usage line, `gavel CMD:
/// --rubric: ...`, not the same problem on every line. `Err` is [`Exit::Refused`], after the
/// problems are printed: nothing is judged.
fn read_overridden(
    cmd: &str,
    path: &Path,
    scorer: &Scorer,
    o: &Overrides,
) -> Result<Vec<GroupIn<KeptAside>>, Exit> {
    let mut usage = Vec::new();
    let mut rubric = None;
    if let Some(r) = &o.rubric {
        match scorer.rubrics().resolve_arg(r) {
            Ok(arg) => rubric = Some(arg),
            Err(e) => usage.push(format!("gavel {cmd}: --rubric: {e}")),
        }
    }
    if let Some(j) = &o.judge {
        if let Err(e) = scorer.check_judge_name(j) {
            usage.push(format!("gavel {cmd}: --judge: {e}"));
        }
    }
    let mut permutations = None;
    if let Some(k) = o.permutations {
        match check_permutations(k) {
            Ok(p) => permutations = Some(p),
            Err(e) => usage.push(format!("gavel {cmd}: --permutations: {e}")),
        }
    }
    if !usage.is_empty() {
        return Err(print_problems(&usage));
    }
    let apply = |r: &mut ScoreRequest| {
        override_request(r, rubric.as_ref(), o.judge.as_deref());
        override_judging(r, o.judge_mode, permutations);
    };
    let mut groups = read_checked::<KeptAside>(path, scorer, |g| {
        let mut r = g.request.clone();
        apply(&mut r);
        vec![r]
    })
    .map_err(|p| print_problems(&p))?;
    for g in &mut groups {
        apply(&mut g.request);
    }
    Ok(groups)
}
