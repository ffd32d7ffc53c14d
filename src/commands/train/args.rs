//! The flags of `gavel train` and of its actions, and how they make a [`TrainConfig`].
//!
//! `gavel train [FLAGS]` takes every option of a run; each overrides the same key of
//! `--config train.toml`, so a flag's default is the file's value, else the built-in one (the
//! help says both). An action lists only the flags it reads: `train toy` its folder, steps and
//! seed; `train sample` the model, sampling and scoring; `train merge` the model and adapter.
//! Flags given to `gavel train` before the action still apply to it (`gavel train --config
//! C sample`), and the action's own win. Each option is declared once, in a [`flag_group!`]:
//! its flag, environment variable, help and the key it sets come from that one line.

use std::fmt::Display;
use std::path::PathBuf;

use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::{Args, Subcommand};
use gavel::cli::ConfigSource;
use gavel::train::config::TrainConfig;
use gavel::train::filter::FilterConfig;
use gavel::train::grpo::{IsLevel, LossType, TisMode};
use gavel::train::optim::Schedule;
use gavel::train::plan::{RunOptions, TrainPlan};
use gavel::train::run_dir::Resume;
use gavel::train::toy::{TOY_SEED, TOY_STEPS};
use gavel::train::TrainError;
use serde::de::DeserializeOwned;

/// A run flag's help: what it sets, then its default (train.toml's key, else `default`).
fn h(what: &str, key: &str, default: impl Display) -> String {
    format!(
        "{} [default: train.toml's `{key}`, else {default}]",
        what.trim_end_matches('.')
    )
}

/// A `train.toml` enum's name for `e` (serde's), as the command line spells it too.
pub(super) fn name<E: serde::Serialize>(e: E) -> String {
    match serde_json::to_value(e) {
        Ok(serde_json::Value::String(s)) => s,
        _ => String::new(),
    }
}

/// A flag whose value is one of a `train.toml` enum's `names` (serde's, listed in the help and
/// checked against serde's own list by a test), read as the file reads it.
pub(super) fn choice<E>(names: &'static [&'static str]) -> impl TypedValueParser<Value = E>
where
    E: DeserializeOwned + Clone + Send + Sync + 'static,
{
    PossibleValuesParser::new(names)
        .try_map(|s: String| serde_json::from_value::<E>(serde_json::Value::String(s)))
}

/// The names of the enums flags take (`--schedule`, `--loss-type`, ...).
pub(super) const SCHEDULES: &[&str] = &["constant", "linear", "cosine"];
pub(super) const LOSS_TYPES: &[&str] = &["grpo", "bnpo", "dr_grpo", "dapo"];
pub(super) const IS_LEVELS: &[&str] = &["token", "sequence"];
pub(super) const TIS_MODES: &[&str] = &["cap", "mask"];

fn d() -> TrainConfig {
    TrainConfig::default()
}

fn f() -> FilterConfig {
    FilterConfig::default()
}

fn targets() -> String {
    d().lora.target_modules.join(",")
}

#[derive(Subcommand, Debug, Clone)]
#[allow(clippy::large_enum_variant)] // parsed once; boxing would only add noise
pub enum TrainAction {
    /// Train the tiny random model on the toy digit task (writes it, its tasks and the run's
    /// train.toml under --output-dir).
    Toy(ToyArgs),
    /// Sample `--group-size` completions of every task with the model (and `--init-adapter`, if
    /// given), score each group, and write the scored groups for `gavel select` or `--offline`.
    Sample(SampleArgs),
    /// Write the base weights with the adapters of a checkpoint merged in (model folders only).
    Merge(MergeArgs),
    /// Train a local judge: LoRA on its verdict token (pointwise P(yes), pairwise P(1)) from
    /// labelled groups or a teacher judge's scores; writes an adapter for `[judges.NAME]
    /// adapter`.
    Judge(super::judge_args::JudgeArgs),
}

/// `gavel train toy`.
#[derive(Args, Debug, Clone, Default)]
pub struct ToyArgs {
    /// Only write the toy model, tasks and train.toml; train nothing (the four-stage recipe
    /// starts from the untrained model with `--config DIR/train.toml`).
    #[arg(long, env = "GAVEL_TRAIN_TOY_NO_TRAIN", default_value_t = false)]
    pub no_train: bool,
    #[arg(long, env = "GAVEL_TRAIN_OUTPUT_DIR",
          help = h("The toy model, its tasks, train.toml and the run (under run/) go here.",
                   "output_dir", d().output_dir.display()))]
    pub output_dir: Option<PathBuf>,
    #[arg(
        long,
        env = "GAVEL_TRAIN_STEPS",
        help = format!("Optimizer steps in all [default: {TOY_STEPS}, the toy run's]")
    )]
    pub steps: Option<u64>,
    #[arg(
        long,
        env = "GAVEL_TRAIN_SEED",
        help = format!("Seed of the toy run [default: {TOY_SEED}, the toy run's]")
    )]
    pub seed: Option<u64>,
    /// No progress bar (metrics still go to metrics.jsonl).
    #[arg(long, env = "GAVEL_TRAIN_QUIET", default_value_t = false)]
    pub quiet: bool,
    /// Continue the toy run in --output-dir from its last checkpoint (to more --steps, say)
    /// instead of refusing a folder that holds one.
    #[arg(
        long,
        env = "GAVEL_TRAIN_TOY_RESUME",
        default_value_t = false,
        conflicts_with = "overwrite"
    )]
    pub resume: bool,
    /// Write the toy again and train from the start in a --output-dir that holds a toy run,
    /// removing the old toy's files (its model, tasks, train.toml and run/).
    #[arg(long, env = "GAVEL_TRAIN_TOY_OVERWRITE", default_value_t = false)]
    pub overwrite: bool,
}

/// Declares a group of flags, each in one place: its field (the flag `--field-name`), the value it
/// takes, the `train.toml` key it overrides (a path in the group's config), its environment
/// variable, and what it does; the help's default is the key's built-in value unless a last
/// argument says otherwise. A flag with no key (`config`, `store`, ...) is read by the action
/// itself and its help names its default. Generates the clap struct (every value optional: a
/// flag not given leaves the file's value), `overlay` (an action's flags over the run's), `any`
/// (whether one was given) and `apply` (the given flags over a config).
macro_rules! flag_group {
    (
        $(#[$smeta:meta])*
        pub struct $name:ident($target:ty, $prefix:literal) {
            $(
                $(#[$ameta:meta])*
                $field:ident: $ty:ty $(=> $($key:ident).+)?, $env:literal, $help:literal
                    $(, $default:expr)?;
            )*
        }
    ) => {
        $(#[$smeta])*
        #[derive(Args, Debug, Clone, Default)]
        pub struct $name {
            $(
                #[arg(long, env = $env,
                      help = flag_group!(@help $target, $prefix, $help; $($($key).+)?; $($default)?))]
                $(#[$ameta])*
                pub $field: Option<$ty>,
            )*
        }

        impl $name {
            /// Copies each flag `from` was given over this group's.
            #[allow(dead_code)] // groups only the run takes are never overlaid
            fn overlay(&mut self, from: &$name) {
                $(if from.$field.is_some() {
                    self.$field = from.$field.clone();
                })*
            }

            /// Whether any flag of the group was given.
            #[allow(dead_code)]
            fn any(&self) -> bool {
                false $(|| self.$field.is_some())*
            }

            /// Sets the key of every flag given.
            fn apply(&self, c: &mut $target) -> Result<(), TrainError> {
                let _ = &c;
                $($(if let Some(v) = &self.$field {
                    Slot::put(&mut c.$($key).+, v.clone(), stringify!($field))?;
                })?)*
                Ok(())
            }
        }
    };
    (@help $target:ty, $prefix:literal, $help:literal; ; ) => { $help };
    (@help $target:ty, $prefix:literal, $help:literal; $($key:ident).+; ) => {
        h($help, concat!($prefix, stringify!($($key).+)), <$target as Default>::default().$($key).+)
    };
    (@help $target:ty, $prefix:literal, $help:literal; $($key:ident).+; $default:expr) => {
        h($help, concat!($prefix, stringify!($($key).+)), $default)
    };
}

/// Where a flag's value goes: over the key's value, into an optional key, or (a list of numbers)
/// into a fixed-size key, refused with the flag's name when the count is wrong.
trait Slot<V> {
    fn put(&mut self, v: V, field: &str) -> Result<(), TrainError>;
}

impl<T> Slot<T> for T {
    fn put(&mut self, v: T, _: &str) -> Result<(), TrainError> {
        *self = v;
        Ok(())
    }
}

impl<T> Slot<T> for Option<T> {
    fn put(&mut self, v: T, _: &str) -> Result<(), TrainError> {
        *self = Some(v);
        Ok(())
    }
}

impl Slot<Vec<f64>> for [f64; 2] {
    fn put(&mut self, v: Vec<f64>, field: &str) -> Result<(), TrainError> {
        *self = <[f64; 2]>::try_from(v.as_slice()).map_err(|_| {
            TrainError::Config(format!(
                "--{}: expected LO,HI (two numbers), got {} values",
                field.replace('_', "-"),
                v.len()
            ))
        })?;
        Ok(())
    }
}

flag_group! {
    /// The training config, the base model and its device: what every action but `toy` reads.
    pub struct BaseFlags(TrainConfig, "") {
        config: PathBuf, "GAVEL_TRAIN_CONFIG",
            "The training config (TOML; see examples/train.toml); each flag overrides its key \
             [default: none, the built-in values]";
        model: PathBuf => model, "GAVEL_TRAIN_MODEL",
            "Base model: a model folder, a GGUF file, or a Hugging Face model id (ORG/NAME, or \
             ORG/NAME-GGUF:FILE.gguf) found in the Hugging Face cache or downloaded into it.",
            "none";
        device: String => device, "GAVEL_TRAIN_DEVICE", "`cpu` or `cuda:N`.";
    }
}

flag_group! {
    /// Where a sampling run's rewards come from.
    pub struct ScorerFlags(TrainConfig, "") {
        scorer_config: PathBuf, "GAVEL_CONFIG",
            "The scorer's gavel.toml (judges, rubrics, store), for in-process scoring [default: a \
             judge from OPENAI_BASE_URL, OPENAI_API_KEY and GAVEL_JUDGE_MODEL, as `gavel score`]";
        store: PathBuf, "GAVEL_STORE",
            "Verdict store directory for in-process scoring [default: the scorer config's, else \
             ./gavel-store]";
        scorer_url: String => scorer_url, "GAVEL_SCORER_URL",
            "Score against a running daemon (its base URL) instead of in-process.", "none";
    }
}

flag_group! {
    /// What sampling reads: the tasks, the adapter to start from, and how completions are drawn.
    pub struct SamplingFlags(TrainConfig, "") {
        tasks: PathBuf => tasks, "GAVEL_TRAIN_TASKS",
            "Prompts JSONL (messages + scoring fields per line).", "none";
        #[arg(value_name = "CHECKPOINT")]
        init_adapter: PathBuf => init_adapter, "GAVEL_TRAIN_INIT_ADAPTER",
            "Start from this adapter (a checkpoint folder with adapter_model.safetensors and \
             adapter_config.json): training takes its LoRA weights with a fresh optimizer at step \
             0, `train sample` samples with it. Rank, alpha and target modules must match the \
             run's.", "none";
        seed: u64 => seed, "GAVEL_TRAIN_SEED",
            "Seed of everything random (adapter init, sampling, data order).";
        prompts_per_step: usize => prompts_per_step, "GAVEL_TRAIN_PROMPTS_PER_STEP",
            "Prompts (groups) sampled at a time: one optimizer step's when training.";
        group_size: usize => group_size, "GAVEL_TRAIN_GROUP_SIZE", "Completions per prompt.";
        temperature: f64 => sampling.temperature, "GAVEL_TRAIN_TEMPERATURE",
            "Sampling temperature (0 = greedy).";
        top_p: f64 => sampling.top_p, "GAVEL_TRAIN_TOP_P",
            "Nucleus sampling: keep the most likely tokens up to this probability.";
        max_tokens: usize => sampling.max_tokens, "GAVEL_TRAIN_MAX_TOKENS",
            "Most tokens of one completion.";
        stop: Vec<String> => sampling.stop, "GAVEL_TRAIN_STOP", "A stop string (repeatable).",
            "none";
    }
}

flag_group! {
    /// The LoRA adapters' shape.
    pub struct LoraFlags(TrainConfig, "") {
        lora_r: usize => lora.r, "GAVEL_TRAIN_LORA_R", "LoRA rank r.";
        lora_alpha: f64 => lora.alpha, "GAVEL_TRAIN_LORA_ALPHA",
            "LoRA α: adapters are scaled by α/r (α/√r with --use-rslora).";
        #[arg(value_delimiter = ',')]
        lora_targets: Vec<String> => lora.target_modules, "GAVEL_TRAIN_LORA_TARGETS",
            "The projections that get adapters, comma-separated.", targets();
        #[arg(num_args = 0..=1, default_missing_value = "true", value_name = "BOOL")]
        use_rslora: bool => lora.use_rslora, "GAVEL_TRAIN_USE_RSLORA",
            "Scale adapters by α/√r (rank-stabilised LoRA); `--use-rslora false` turns off a \
             train.toml `true`.";
    }
}

flag_group! {
    /// What the run trains on instead of sampling `--tasks` (one of them at most).
    pub struct SourceFlags(TrainConfig, "") {
        #[arg(value_name = "SCORED.jsonl")]
        offline: PathBuf => offline, "GAVEL_TRAIN_OFFLINE",
            "Train on these scored groups (`gavel rescore` output, or request bodies with their \
             `rewards`) instead of sampling: no tasks, no scorer.", "none";
        #[arg(value_name = "SFT.jsonl")]
        sft: PathBuf => sft, "GAVEL_TRAIN_SFT",
            "Supervised fine-tuning (LoRA SFT) on these chat examples (`{\"messages\": [...], \
             \"tools\": [...]}` a line, e.g. `gavel select` output) instead of GRPO: the loss is \
             the mean NLL of the assistant tokens. Excludes --tasks and --offline.", "none";
    }
}

flag_group! {
    /// The optimisation: SFT's batches, steps, the learning rate and its schedule, GRPO's loss,
    /// AdamW.
    pub struct RunFlags(TrainConfig, "") {
        sft_batch_size: usize => sft_batch_size, "GAVEL_TRAIN_SFT_BATCH_SIZE",
            "SFT: examples per optimizer step.";
        sft_micro_batch_tokens: usize => sft_micro_batch_tokens,
            "GAVEL_TRAIN_SFT_MICRO_BATCH_TOKENS",
            "SFT: padded tokens per forward/backward pass (examples of similar length share \
             one).";
        output_dir: PathBuf => output_dir, "GAVEL_TRAIN_OUTPUT_DIR",
            "Checkpoints and metrics.jsonl go here.", d().output_dir.display();
        steps: u64 => steps, "GAVEL_TRAIN_STEPS", "Optimizer steps in all.";
        micro_batch_groups: usize => micro_batch_groups, "GAVEL_TRAIN_MICRO_BATCH_GROUPS",
            "Groups per forward/backward pass.";
        learning_rate: f64 => learning_rate, "GAVEL_TRAIN_LEARNING_RATE",
            "Peak learning rate of AdamW.";
        #[arg(value_parser = choice::<Schedule>(SCHEDULES))]
        schedule: Schedule => schedule, "GAVEL_TRAIN_SCHEDULE",
            "Learning-rate schedule after the warmup.", name(d().schedule);
        warmup_steps: u64 => warmup_steps, "GAVEL_TRAIN_WARMUP_STEPS",
            "Steps of linear warmup from 0.";
        max_grad_norm: f64 => max_grad_norm, "GAVEL_TRAIN_MAX_GRAD_NORM",
            "Clip the global gradient norm (0 = off).";
        save_every: u64 => save_every, "GAVEL_TRAIN_SAVE_EVERY",
            "Checkpoint every N steps (0 = at the end only).";
        #[arg(num_args = 0..=1, default_missing_value = "true", value_name = "BOOL")]
        shuffle_rewards: bool => shuffle_rewards, "GAVEL_TRAIN_SHUFFLE_REWARDS",
            "A control run: permute each group's rewards at random within the group (seeded) \
             before the loss, so they say nothing about which completion earned them.";
        dynamic_sampling_rounds: u32 => dynamic_sampling_rounds,
            "GAVEL_TRAIN_DYNAMIC_SAMPLING_ROUNDS",
            "Dynamic sampling (DAPO): draw prompts again for a step's groups whose rewards all \
             tie, up to N extra rounds a step (0 = off, at most 16).";
        #[arg(value_parser = choice::<LossType>(LOSS_TYPES))]
        loss_type: LossType => grpo.loss_type, "GAVEL_TRAIN_LOSS_TYPE",
            "How per-token losses are normalised (TRL's loss_type).", name(d().grpo.loss_type);
        #[arg(value_parser = choice::<IsLevel>(IS_LEVELS))]
        importance_sampling_level: IsLevel => grpo.importance_sampling_level,
            "GAVEL_TRAIN_IS_LEVEL",
            "Importance ratios per token, or one per sequence (GSPO).",
            name(d().grpo.importance_sampling_level);
        epsilon: f64 => grpo.epsilon, "GAVEL_TRAIN_EPSILON",
            "Lower clip ε: ratios below 1 − ε are clipped.";
        epsilon_high: f64 => grpo.epsilon_high, "GAVEL_TRAIN_EPSILON_HIGH",
            "Upper clip (DAPO's clip-higher): ratios above 1 + this are clipped.", "ε";
        delta: f64 => grpo.delta, "GAVEL_TRAIN_DELTA",
            "Two-sided clipping: the unclipped ratio is capped at δ (> 1 + ε_high).", "off";
        beta: f64 => grpo.beta, "GAVEL_TRAIN_BETA",
            "KL coefficient against the base model (0 skips the reference pass).";
        tis_cap: f64 => grpo.tis_cap, "GAVEL_TRAIN_TIS_CAP",
            "Truncated importance sampling against the sampler's log-probs: the cap.", "off";
        #[arg(value_parser = choice::<TisMode>(TIS_MODES))]
        tis_mode: TisMode => grpo.tis_mode, "GAVEL_TRAIN_TIS_MODE",
            "What a sampler ratio above --tis-cap does: cap it, or mask the token.",
            name(d().grpo.tis_mode);
        weight_decay: f64 => adamw.weight_decay, "GAVEL_TRAIN_WEIGHT_DECAY",
            "AdamW's decoupled weight decay.";
    }
}

flag_group! {
    /// `--filter-*`: the difficulty filter (`[filter]`); any of them turns it on.
    pub struct FilterFlags(FilterConfig, "filter.") {
        #[arg(value_delimiter = ',', value_name = "LO,HI")]
        filter_pass_rate: Vec<f64> => pass_rate, "GAVEL_TRAIN_FILTER_PASS_RATE",
            "Difficulty filter: sample only tasks whose surveyed pass rate is in LO,HI (any \
             `--filter-*` flag turns the filter on; the rest default as in `[filter]`).",
            format!("{},{}", f().pass_rate[0], f().pass_rate[1]);
        #[arg(alias = "filter-probe-samples")]
        filter_survey_samples: usize => survey_samples, "GAVEL_TRAIN_FILTER_SURVEY_SAMPLES",
            "Difficulty filter: completions sampled per task to estimate its pass rate.";
        #[arg(alias = "filter-reprobe-every")]
        filter_resurvey_every: u64 => resurvey_every, "GAVEL_TRAIN_FILTER_RESURVEY_EVERY",
            "Difficulty filter: survey again every N steps (0 = only before the first step).";
        filter_pass_threshold: f64 => pass_threshold, "GAVEL_TRAIN_FILTER_PASS_THRESHOLD",
            "Difficulty filter: a completion passes when its reward is at least this.";
    }
}

/// `gavel train sample`: what sampling reads (the model, its adapter, the tasks, sampling and
/// scoring).
#[derive(Args, Debug, Clone, Default)]
pub struct SampleArgs {
    /// Where the scored groups go (JSONL, one group per line).
    #[arg(
        short = 'o',
        long = "output",
        alias = "out",
        env = "GAVEL_TRAIN_SAMPLE_OUT",
        value_name = "SCORED.jsonl"
    )]
    pub output: PathBuf,
    #[command(flatten)]
    pub base: BaseFlags,
    #[command(flatten)]
    pub scorer: ScorerFlags,
    #[command(flatten)]
    pub sampling: SamplingFlags,
    #[command(flatten)]
    pub lora: LoraFlags,
}

/// `gavel train merge`: the adapters of `--adapter` folded into the base model (a model folder,
/// config.json + safetensors).
#[derive(Args, Debug, Clone, Default)]
pub struct MergeArgs {
    /// The checkpoint directory (adapter_model.safetensors, adapter_config.json).
    #[arg(long, env = "GAVEL_TRAIN_ADAPTER")]
    pub adapter: PathBuf,
    /// Where the merged model folder is written.
    #[arg(
        short = 'o',
        long = "output",
        alias = "out",
        env = "GAVEL_TRAIN_MERGED"
    )]
    pub output: PathBuf,
    #[command(flatten)]
    pub base: BaseFlags,
}

/// Options of `gavel train`; each overrides the same key of `--config train.toml`. Given before
/// an action they apply to it too.
#[derive(Args, Debug, Clone, Default)]
pub struct TrainArgs {
    #[command(subcommand)]
    pub action: Option<TrainAction>,
    #[command(flatten)]
    pub base: BaseFlags,
    #[command(flatten)]
    pub scorer: ScorerFlags,
    #[command(flatten)]
    pub sampling: SamplingFlags,
    #[command(flatten)]
    pub lora: LoraFlags,
    /// Continue the run in --output-dir from its last checkpoint, or from this checkpoint
    /// folder [default: start at step 0, in an empty or new --output-dir].
    #[arg(
        long,
        env = "GAVEL_TRAIN_RESUME",
        num_args = 0..=1,
        value_name = "CHECKPOINT",
        conflicts_with = "overwrite"
    )]
    pub resume: Option<Option<PathBuf>>,
    /// Start at step 0 in an --output-dir that holds a run, removing its metrics.jsonl and
    /// checkpoints (other files stay) [default: such a folder is refused].
    #[arg(long, env = "GAVEL_TRAIN_OVERWRITE", default_value_t = false)]
    pub overwrite: bool,
    /// No progress bar (metrics still go to metrics.jsonl).
    #[arg(long, env = "GAVEL_TRAIN_QUIET", default_value_t = false)]
    pub quiet: bool,
    #[command(flatten)]
    pub source: SourceFlags,
    #[command(flatten)]
    pub run: RunFlags,
    #[command(flatten)]
    pub filter: FilterFlags,
}

/// Copies each field the action was given over the run's.
macro_rules! overlay {
    ($from:expr => $to:expr; $($f:ident),* $(,)?) => {
        $(if $from.$f.is_some() {
            $to.$f = $from.$f.clone();
        })*
    };
}

impl TrainArgs {
    /// What this invocation runs: the action, with the config file (or defaults) under every
    /// flag given.
    pub fn plan(self) -> Result<TrainPlan, TrainError> {
        let a = self.effective();
        let scorer = ConfigSource {
            config: a.scorer.scorer_config.clone(),
            store: a.scorer.store.clone(),
            store_url: None,
        };
        let run = RunOptions {
            resume: a.resume.clone().map(|r| match r {
                Some(dir) => Resume::From(dir),
                None => Resume::Last,
            }),
            overwrite: a.overwrite,
            quiet: a.quiet,
        };
        Ok(match a.action.clone() {
            Some(TrainAction::Judge(j)) => TrainPlan::Judge(j.into()),
            Some(TrainAction::Merge(m)) => TrainPlan::Merge {
                config: self.config()?,
                adapter: m.adapter,
                output: m.output,
            },
            Some(TrainAction::Sample(s)) => TrainPlan::Sample {
                config: self.config()?,
                scorer,
                output: s.output,
            },
            Some(TrainAction::Toy(t)) => TrainPlan::Toy {
                output_dir: self.config()?.output_dir,
                steps: a.run.steps,
                seed: a.sampling.seed,
                no_train: t.no_train,
                scorer,
                run,
            },
            None => TrainPlan::Train {
                config: self.config()?,
                scorer,
                run,
            },
        })
    }

    /// The run's flags with the action's own applied over them (an action's flag wins over the
    /// same flag given to `gavel train` before it).
    pub fn effective(&self) -> TrainArgs {
        let mut a = self.clone();
        match &self.action {
            None | Some(TrainAction::Judge(_)) => {}
            Some(TrainAction::Sample(s)) => {
                a.base.overlay(&s.base);
                a.scorer.overlay(&s.scorer);
                a.sampling.overlay(&s.sampling);
                a.lora.overlay(&s.lora);
            }
            Some(TrainAction::Merge(m)) => a.base.overlay(&m.base),
            Some(TrainAction::Toy(t)) => {
                overlay!(t => a.run; output_dir, steps);
                overlay!(t => a.sampling; seed);
                a.quiet |= t.quiet;
                a.overwrite |= t.overwrite;
                if t.resume {
                    a.resume = Some(None);
                }
            }
        }
        a
    }

    /// The config file (or defaults) with every given flag applied.
    pub fn config(&self) -> Result<TrainConfig, TrainError> {
        let a = self.effective();
        let mut c = match &a.base.config {
            Some(p) => TrainConfig::from_file(p)?,
            None => TrainConfig::default(),
        };
        a.base.apply(&mut c)?;
        a.scorer.apply(&mut c)?;
        a.sampling.apply(&mut c)?;
        a.lora.apply(&mut c)?;
        a.source.apply(&mut c)?;
        a.run.apply(&mut c)?;
        // One source of training examples: `--offline` replaces the file's tasks and SFT,
        // `--sft` the file's tasks and offline groups, and refuses the other flags.
        if a.source.offline.is_some() {
            c.tasks = None;
            c.sft = None;
        }
        if a.source.sft.is_some() {
            if a.sampling.tasks.is_some() || a.source.offline.is_some() {
                return Err(TrainError::Config(
                    "--sft excludes --tasks and --offline: SFT trains on chat examples, GRPO on \
                     prompts or scored groups; give one"
                        .into(),
                ));
            }
            c.tasks = None;
            c.offline = None;
        }
        if a.filter.any() {
            a.filter
                .apply(c.filter.get_or_insert_with(Default::default))?;
        }
        Ok(c)
    }
}
