//! `gavel train judge`'s flags (each with its environment variable), and the options they make.

use std::path::PathBuf;

use clap::Args;

use gavel::domain::prompt::JudgeMode;
use gavel::model::adapter::Reach;
use gavel::train::judge::JudgeTrainOptions;

/// `gavel train judge`: LoRA training of a local judge's verdict.
#[derive(Args, Debug, Clone)]
pub struct JudgeArgs {
    /// The local judge's base model: a GGUF file, a model folder, or a Hugging Face model id.
    #[arg(long, env = "GAVEL_TRAIN_JUDGE_MODEL")]
    pub model: PathBuf,
    /// `cpu` or `cuda:N`. [default: cpu]
    #[arg(
        hide_default_value = true,
        long,
        env = "GAVEL_TRAIN_JUDGE_DEVICE",
        default_value = "cpu"
    )]
    pub device: String,
    /// Labelled group files to train on (`gavel eval`'s format: a group and its `labels`). [default: none]
    #[arg(long = "train", env = "GAVEL_TRAIN_JUDGE_TRAIN", value_delimiter = ',')]
    pub train: Vec<PathBuf>,
    /// Labelled group files that choose the best checkpoint (never trained on). [default: none]
    #[arg(long = "dev", env = "GAVEL_TRAIN_JUDGE_DEV", value_delimiter = ',')]
    pub dev: Vec<PathBuf>,
    /// Distil this judge (a name in --scorer-config): its scores of the --teacher-groups, from
    /// the verdict store where cached (else the teacher is asked), are soft targets. [default: none]
    #[arg(long, env = "GAVEL_TRAIN_JUDGE_TEACHER")]
    pub teacher: Option<String>,
    /// Group files (labels, if any, ignored) the teacher's scores are taken for; each group's
    /// first tenth (by position in the file, at least one group) goes to the dev split. [default: none]
    #[arg(long, env = "GAVEL_TRAIN_JUDGE_TEACHER_GROUPS", value_delimiter = ',')]
    pub teacher_groups: Vec<PathBuf>,
    /// gavel.toml: rubrics, templates and dedup the prompts are rendered with (the serving
    /// judge's), and the teacher judge and its store. [default: none]
    #[arg(long, env = "GAVEL_CONFIG")]
    pub scorer_config: Option<PathBuf>,
    /// Verdict store directory of the teacher's verdicts [default: the config's].
    #[arg(long, env = "GAVEL_STORE")]
    pub store: Option<PathBuf>,
    /// Modes to train (one adapter serves them all). [default: pointwise, pairwise]
    #[arg(hide_default_value = true, long = "mode", env = "GAVEL_TRAIN_JUDGE_MODES", value_delimiter = ',',
          default_values = ["pointwise", "pairwise"], value_parser = parse_mode)]
    pub modes: Vec<JudgeMode>,
    /// Adapt the top K layers (4: chosen by a sweep on the 0.5B, BENCHMARKS.md). [default: 4]
    #[arg(
        hide_default_value = true,
        long,
        env = "GAVEL_TRAIN_JUDGE_LAYERS",
        default_value_t = 4
    )]
    pub layers: usize,
    /// Which positions the adapter changes: `verdict` (the verdict position alone: the
    /// context's keys and values stay the base model's, so an epoch costs K layers at one
    /// position per example) or `all` (every position, as PEFT applies an adapter: an epoch
    /// runs K layers forward and backward over every token of every example). [default: verdict]
    #[arg(
        hide_default_value = true,
        long,
        env = "GAVEL_TRAIN_JUDGE_REACH",
        default_value = "verdict",
        value_parser = parse_reach
    )]
    pub reach: Reach,
    /// LoRA rank. [default: 8]
    #[arg(
        hide_default_value = true,
        long,
        env = "GAVEL_TRAIN_JUDGE_RANK",
        default_value_t = 8
    )]
    pub rank: usize,
    /// LoRA alpha (adapters scaled by alpha / rank). [default: 16.0]
    #[arg(
        hide_default_value = true,
        long,
        env = "GAVEL_TRAIN_JUDGE_ALPHA",
        default_value_t = 16.0
    )]
    pub alpha: f64,
    /// Passes over the training examples. [default: 3]
    #[arg(
        hide_default_value = true,
        long,
        env = "GAVEL_TRAIN_JUDGE_EPOCHS",
        default_value_t = 3
    )]
    pub epochs: u64,
    /// Examples per optimizer step. [default: 16]
    #[arg(
        hide_default_value = true,
        long,
        env = "GAVEL_TRAIN_JUDGE_BATCH_SIZE",
        default_value_t = 16
    )]
    pub batch_size: usize,
    /// Peak learning rate of AdamW (linear warmup over the first 5 % of steps, cosine after). [default: 2e-4]
    #[arg(
        hide_default_value = true,
        long,
        env = "GAVEL_TRAIN_JUDGE_LEARNING_RATE",
        default_value_t = 2e-4
    )]
    pub learning_rate: f64,
    /// Measure the dev split (and keep the best checkpoint) every N steps, and at the end. [default: 50]
    #[arg(
        hide_default_value = true,
        long,
        env = "GAVEL_TRAIN_JUDGE_EVAL_EVERY",
        default_value_t = 50
    )]
    pub eval_every: u64,
    /// Weigh the training examples so that those whose label favours the longer trajectory and
    /// those that favour the shorter count the same, per mode: where a set's wrong answers are
    /// mostly the longer ones, the adapter cannot learn length for quality. [default: off]
    #[arg(
        long,
        env = "GAVEL_TRAIN_JUDGE_BALANCE_LENGTH",
        default_value_t = false
    )]
    pub balance_length: bool,
    /// Use at most this many training groups (the first ones of the files). [default: none]
    #[arg(long, env = "GAVEL_TRAIN_JUDGE_MAX_GROUPS")]
    pub max_groups: Option<usize>,
    /// In groups of more than 8 distinct trajectories, the pairs asked (as the judge's
    /// pairwise_opponents). [default: 4]
    #[arg(
        hide_default_value = true,
        long,
        env = "GAVEL_TRAIN_JUDGE_PAIRWISE_OPPONENTS",
        default_value_t = 4
    )]
    pub pairwise_opponents: usize,
    /// Seed of the adapters' initialisation and the data order. [default: 0]
    #[arg(
        hide_default_value = true,
        long,
        env = "GAVEL_TRAIN_JUDGE_SEED",
        default_value_t = 0
    )]
    pub seed: u64,
    /// Where checkpoints, metrics.jsonl and the best adapter (best/) go. [default: judge-adapter]
    #[arg(
        hide_default_value = true,
        short = 'o',
        long = "output",
        env = "GAVEL_TRAIN_JUDGE_OUTPUT",
        default_value = "judge-adapter"
    )]
    pub output: PathBuf,
    /// Where the frozen model's features of each split are kept, and read back by a later run
    /// on the same data and base model (a resume, or other --learning-rate, --epochs, --rank,
    /// --seed...). [default: OUTPUT/features]
    #[arg(long, env = "GAVEL_TRAIN_JUDGE_FEATURES")]
    pub features: Option<PathBuf>,
    /// Continue from the last checkpoint in --output (the same flags).
    #[arg(long, env = "GAVEL_TRAIN_JUDGE_RESUME", default_value_t = false)]
    pub resume: bool,
    /// No progress bar.
    #[arg(long, env = "GAVEL_TRAIN_JUDGE_QUIET", default_value_t = false)]
    pub quiet: bool,
    /// `attacks`: add attacked copies of the training groups (their wrong answers rewritten by
    /// `gavel eval --attacks`'s attacks; labels kept), never of the dev groups. [default: none]
    #[arg(long, env = "GAVEL_TRAIN_JUDGE_AUGMENT", value_enum)]
    pub augment: Option<AugmentKind>,
    /// With --augment attacks: the attacks used, taken in turn across the groups. [default: every
    /// attack]
    #[arg(long, env = "GAVEL_TRAIN_JUDGE_AUGMENT_ATTACKS", value_delimiter = ',')]
    pub augment_attacks: Vec<String>,
    /// With --augment attacks: a folder of more attack files (as `gavel eval --attacks-dir`).
    /// [default: none]
    #[arg(long, env = "GAVEL_TRAIN_JUDGE_ATTACKS_DIR")]
    pub attacks_dir: Option<PathBuf>,
    /// With --augment attacks: attacked copies per training group. [default: 1]
    #[arg(
        hide_default_value = true,
        long,
        env = "GAVEL_TRAIN_JUDGE_AUGMENT_COPIES",
        default_value_t = 1,
        value_parser = clap::value_parser!(u64).range(1..=64)
    )]
    pub augment_copies: u64,
}

/// What `--augment` adds to the training groups.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum AugmentKind {
    /// Attacked copies (attacks/*.toml).
    Attacks,
}

fn parse_mode(s: &str) -> Result<JudgeMode, String> {
    match s.parse::<JudgeMode>()? {
        JudgeMode::Listwise => Err(
            "listwise is decoded, not read from a verdict token: train pointwise or pairwise"
                .into(),
        ),
        m => Ok(m),
    }
}

fn parse_reach(s: &str) -> Result<Reach, String> {
    match s {
        "verdict" => Ok(Reach::Verdict),
        "all" => Ok(Reach::All),
        _ => Err(format!("{s:?}: the reach is verdict or all")),
    }
}

/// The flags as the library's options: the same fields, without clap (the library takes plain
/// data; the flags, their environment variables and help are the binary's).
impl From<JudgeArgs> for JudgeTrainOptions {
    fn from(a: JudgeArgs) -> JudgeTrainOptions {
        JudgeTrainOptions {
            model: a.model,
            device: a.device,
            train: a.train,
            dev: a.dev,
            teacher: a.teacher,
            teacher_groups: a.teacher_groups,
            scorer_config: a.scorer_config,
            store: a.store,
            modes: a.modes,
            layers: a.layers,
            reach: a.reach,
            rank: a.rank,
            alpha: a.alpha,
            epochs: a.epochs,
            batch_size: a.batch_size,
            learning_rate: a.learning_rate,
            eval_every: a.eval_every,
            balance_length: a.balance_length,
            max_groups: a.max_groups,
            pairwise_opponents: a.pairwise_opponents,
            seed: a.seed,
            output: a.output,
            features: a.features,
            resume: a.resume,
            quiet: a.quiet,
            augment: a
                .augment
                .map(|AugmentKind::Attacks| gavel::train::judge::Augment {
                    attacks: a.augment_attacks,
                    dir: a.attacks_dir,
                    copies: a.augment_copies as usize,
                }),
        }
    }
}
