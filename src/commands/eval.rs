//! `gavel eval`: its options, and the entry to [`gavel::eval`], which loads the configuration
//! itself (after its own usage checks, so a usage problem is reported before a configuration
//! one).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, ValueEnum};

use gavel::domain::prompt::JudgeMode;
use gavel::eval::{AttackOptions, CalibrateOptions, EvalFormat, EvalOptions, ScoreTarget};

use super::Common;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Text,
    Json,
    Html,
}

impl From<Format> for EvalFormat {
    fn from(f: Format) -> EvalFormat {
        match f {
            Format::Text => EvalFormat::Text,
            Format::Json => EvalFormat::Json,
            Format::Html => EvalFormat::Html,
        }
    }
}

#[derive(Args, Debug, Clone)]
pub struct EvalArgs {
    /// Judges to evaluate (give --judge more than once); default: the config's default judge.
    #[arg(long = "judge", env = "GAVEL_EVAL_JUDGES", value_delimiter = ',')]
    pub judges: Vec<String>,
    /// Rubrics to evaluate (give --rubric more than once), each a rubric file (a path with a
    /// `/` or ending in .toml) or the name of a shipped rubric or of one in the config's
    /// rubrics_dir; default: each group's own.
    #[arg(long = "rubric", env = "GAVEL_EVAL_RUBRICS", value_delimiter = ',')]
    pub rubrics: Vec<String>,
    /// Judging modes to evaluate (give --judge-mode more than once: listwise, pointwise,
    /// pairwise; the last two read token probabilities: a local judge's, or a remote judge's
    /// logprobs); default: each judge's configured mode.
    #[arg(
        long = "judge-mode",
        env = "GAVEL_EVAL_JUDGE_MODES",
        value_delimiter = ','
    )]
    pub modes: Vec<JudgeMode>,
    /// Orders each group is judged in: as given, reversed, then seeded shuffles. Two or more
    /// measure position bias.
    #[arg(long, env = "GAVEL_EVAL_ORDERS", default_value_t = 2)]
    pub orders: usize,
    /// What is ranked against the labels: `reward` (what training gets), or one component of
    /// it by name (`judge`, a verifier's name), e.g. the judge alone on a set whose verifier
    /// knows the truth.
    #[arg(long, env = "GAVEL_EVAL_SCORE", default_value = "reward", value_parser = ScoreTarget::parse)]
    pub score: ScoreTarget,
    /// Passed through to every request: gavel's own order averaging within one judging, 1
    /// to 16.
    #[arg(long, env = "GAVEL_EVAL_PERMUTATIONS")]
    pub permutations: Option<u32>,
    /// Groups judged at once [default: 4, local judges too: a local judge runs each group's
    /// prompts as one job on their shared prefix, so groups in flight together do not push
    /// each other's prompts out of its prefix cache].
    #[arg(long, env = "GAVEL_EVAL_CONCURRENCY")]
    pub concurrency: Option<usize>,
    /// Evaluate only the first N groups of each set.
    #[arg(long, env = "GAVEL_EVAL_LIMIT")]
    pub limit: Option<usize>,
    /// Terminal summary, one JSON document, or a self-contained HTML page [default: what -o's
    /// file name ends in (.html or .htm: html, .json: json), else text].
    #[arg(long, env = "GAVEL_EVAL_FORMAT", value_enum)]
    pub format: Option<Format>,
    /// Write the report here instead of standard output, in --format, else the format its name
    /// ends in. A one-line summary goes to stderr whatever the format.
    #[arg(short = 'o', long = "output", env = "GAVEL_EVAL_OUTPUT")]
    pub output: Option<PathBuf>,
    /// Also judge each group with its wrong trajectories' final answers rewritten by each
    /// attack (`--attacks` for every attack, `--attacks=NAME,NAME` to choose; the shipped ones
    /// are in attacks/) and report each attack's success rate, score shift and accuracy.
    #[arg(
        long,
        env = "GAVEL_EVAL_ATTACKS",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "",
        value_delimiter = ','
    )]
    pub attacks: Option<Vec<String>>,
    /// A folder of more attack files (`NAME.toml`: kind, description, template), added to the
    /// shipped ones (a file of the same name replaces a shipped attack).
    #[arg(long, env = "GAVEL_EVAL_ATTACKS_DIR")]
    pub attacks_dir: Option<PathBuf>,
    /// With --attacks: how many judgings run without asking; above it, gavel asks on a
    /// terminal and refuses elsewhere unless --yes.
    #[arg(long, env = "GAVEL_EVAL_CONFIRM_ABOVE", default_value_t = 2000)]
    pub confirm_above: u64,
    /// Run an attacked evaluation of any size without asking (for scripts).
    #[arg(long, env = "GAVEL_EVAL_YES")]
    pub yes: bool,
    /// Choose, per judge and mode whose verdicts carry a confidence (pointwise, pairwise), the
    /// threshold a cascade stage would use: the lowest such that, with probability ≥ 1 − δ, the
    /// accuracy of the groups it keeps is ≥ 1 − α (exact Clopper–Pearson bound, candidates
    /// scanned from the most confident down, each keeping enough labelled pairs that one of them
    /// may be wrong: 38 at α = δ = 0.1, never fewer than 30). Printed with its coverage and
    /// bound, and as a `thresholds = [...]` line for the cascade's table.
    #[arg(long, env = "GAVEL_EVAL_CALIBRATE")]
    pub calibrate: bool,
    /// With --calibrate: the error allowed in a stage's kept decisions (accuracy ≥ 1 − α), in
    /// (0, 1).
    #[arg(
        long,
        env = "GAVEL_EVAL_ALPHA",
        default_value_t = 0.1,
        requires = "calibrate"
    )]
    pub alpha: f64,
    /// With --calibrate: the chance allowed that the accuracy is below 1 − α anyway, in (0, 1).
    #[arg(
        long,
        env = "GAVEL_EVAL_DELTA",
        default_value_t = 0.1,
        requires = "calibrate"
    )]
    pub delta: f64,
    /// Labelled group files (.jsonl, one group per line; or .json, one group; `-` for standard
    /// input).
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
}

pub async fn run(common: &Common, args: EvalArgs) -> anyhow::Result<ExitCode> {
    let opts = EvalOptions {
        judges: args.judges,
        rubrics: args.rubrics,
        modes: args.modes,
        orders: args.orders,
        score: args.score,
        permutations: args.permutations,
        concurrency: args.concurrency,
        limit: args.limit,
        format: EvalFormat::choose(args.format.map(EvalFormat::from), args.output.as_deref()),
        output: args.output,
        files: args.files,
        attacks: args.attacks.map(|names| AttackOptions {
            names: names.into_iter().filter(|n| !n.is_empty()).collect(),
            dir: args.attacks_dir,
            yes: args.yes,
            confirm_above: args.confirm_above,
        }),
        calibrate: args.calibrate.then_some(CalibrateOptions {
            alpha: args.alpha,
            delta: args.delta,
        }),
    };
    Ok(super::exit(
        gavel::eval::run(&common.source(), &opts).await?,
    ))
}
