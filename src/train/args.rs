//! The flags of `gavel train` and of its actions, and how they make a [`TrainConfig`].
//!
//! `gavel train [FLAGS]` takes every option of a run; each overrides the same key of
//! `--config train.toml`, so a flag's default is the file's value, else the built-in one (the
//! help says both). An action lists only the flags it reads: `train toy` its folder, steps and
//! seed; `train sample` the model, sampling and scoring; `train merge` the model and adapter.
//! Flags given to `gavel train` before the action still apply to it (`gavel train --config
//! C sample`), and the action's own win.

use std::fmt::Display;
use std::path::PathBuf;

use clap::{Args, Subcommand, ValueEnum};

use super::config::TrainConfig;
use super::filter::FilterConfig;
use super::grpo::{IsLevel, LossType, TisMode};
use super::optim::Schedule;
use super::TrainError;

/// A run flag's help: what it sets, then its default (train.toml's key, else `default`).
fn h(what: &str, key: &str, default: impl Display) -> String {
    format!(
        "{} [default: train.toml's `{key}`, else {default}]",
        what.trim_end_matches('.')
    )
}

/// As [`h`], for a key with no built-in value.
fn h_unset(what: &str, key: &str) -> String {
    format!(
        "{} [default: train.toml's `{key}`, else none]",
        what.trim_end_matches('.')
    )
}

/// A value enum's name as the command line spells it.
fn name<E: ValueEnum>(e: E) -> String {
    e.to_possible_value()
        .map_or_else(String::new, |v| v.get_name().to_string())
}

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
    Judge(super::judge::JudgeArgs),
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
        help = "Optimizer steps in all [default: the toy run's]"
    )]
    pub steps: Option<u64>,
    #[arg(
        long,
        env = "GAVEL_TRAIN_SEED",
        help = "Seed of the toy run [default: the toy run's]"
    )]
    pub seed: Option<u64>,
    /// No progress bar (metrics still go to metrics.jsonl).
    #[arg(long, env = "GAVEL_TRAIN_QUIET", default_value_t = false)]
    pub quiet: bool,
}

/// The training config, the base model and its device: what every action but `toy` reads.
#[derive(Args, Debug, Clone, Default)]
pub struct BaseFlags {
    /// The training config (TOML; see examples/train.toml); each flag overrides its key
    /// [default: none, the built-in values].
    #[arg(long, env = "GAVEL_TRAIN_CONFIG")]
    pub config: Option<PathBuf>,
    #[arg(long, env = "GAVEL_TRAIN_MODEL", help = h_unset("Base model: a model folder, a GGUF file, or a Hugging Face model id (ORG/NAME, or ORG/NAME-GGUF:FILE.gguf) found in the Hugging Face cache or downloaded into it.", "model"))]
    pub model: Option<PathBuf>,
    #[arg(long, env = "GAVEL_TRAIN_DEVICE", help = h("`cpu` or `cuda:N`.", "device", d().device))]
    pub device: Option<String>,
}

/// Where a sampling run's rewards come from.
#[derive(Args, Debug, Clone, Default)]
pub struct ScorerFlags {
    /// The scorer's gavel.toml (judges, rubrics, store), for in-process scoring [default: a
    /// judge from OPENAI_BASE_URL, OPENAI_API_KEY and GAVEL_JUDGE_MODEL, as `gavel score`].
    #[arg(long, env = "GAVEL_CONFIG")]
    pub scorer_config: Option<PathBuf>,
    /// Verdict store directory for in-process scoring [default: the scorer config's, else
    /// ./gavel-store].
    #[arg(long, env = "GAVEL_STORE")]
    pub store: Option<PathBuf>,
    #[arg(long, env = "GAVEL_SCORER_URL",
          help = h_unset("Score against a running daemon (its base URL) instead of in-process.", "scorer_url"))]
    pub scorer_url: Option<String>,
}

/// What sampling reads: the tasks, the adapter to start from, and how completions are drawn.
#[derive(Args, Debug, Clone, Default)]
pub struct SamplingFlags {
    #[arg(long, env = "GAVEL_TRAIN_TASKS", help = h_unset("Prompts JSONL (messages + scoring fields per line).", "tasks"))]
    pub tasks: Option<PathBuf>,
    #[arg(long, env = "GAVEL_TRAIN_INIT_ADAPTER", value_name = "CHECKPOINT",
          help = h_unset("Start from this adapter (a checkpoint folder with \
                          adapter_model.safetensors and adapter_config.json): training takes its \
                          LoRA weights with a fresh optimizer at step 0, `train sample` samples \
                          with it. Rank, alpha and target modules must match the run's.",
                         "init_adapter"))]
    pub init_adapter: Option<PathBuf>,
    #[arg(long, env = "GAVEL_TRAIN_SEED",
          help = h("Seed of everything random (adapter init, sampling, data order).", "seed", d().seed))]
    pub seed: Option<u64>,
    #[arg(long, env = "GAVEL_TRAIN_PROMPTS_PER_STEP",
          help = h("Prompts (groups) sampled at a time: one optimizer step's when training.", "prompts_per_step", d().prompts_per_step))]
    pub prompts_per_step: Option<usize>,
    #[arg(long, env = "GAVEL_TRAIN_GROUP_SIZE",
          help = h("Completions per prompt.", "group_size", d().group_size))]
    pub group_size: Option<usize>,
    #[arg(long, env = "GAVEL_TRAIN_TEMPERATURE",
          help = h("Sampling temperature (0 = greedy).", "sampling.temperature", d().sampling.temperature))]
    pub temperature: Option<f64>,
    #[arg(long, env = "GAVEL_TRAIN_TOP_P",
          help = h("Nucleus sampling: keep the most likely tokens up to this probability.", "sampling.top_p", d().sampling.top_p))]
    pub top_p: Option<f64>,
    #[arg(long, env = "GAVEL_TRAIN_MAX_TOKENS",
          help = h("Most tokens of one completion.", "sampling.max_tokens", d().sampling.max_tokens))]
    pub max_tokens: Option<usize>,
    #[arg(long, env = "GAVEL_TRAIN_STOP",
          help = h("A stop string (repeatable).", "sampling.stop", "none"))]
    pub stop: Vec<String>,
}

/// The LoRA adapters' shape.
#[derive(Args, Debug, Clone, Default)]
pub struct LoraFlags {
    #[arg(long, env = "GAVEL_TRAIN_LORA_R", help = h("LoRA rank r.", "lora.r", d().lora.r))]
    pub lora_r: Option<usize>,
    #[arg(long, env = "GAVEL_TRAIN_LORA_ALPHA",
          help = h("LoRA α: adapters are scaled by α/r (α/√r with --use-rslora).", "lora.alpha", d().lora.alpha))]
    pub lora_alpha: Option<f64>,
    #[arg(long, env = "GAVEL_TRAIN_LORA_TARGETS", value_delimiter = ',',
          help = h("The projections that get adapters, comma-separated.", "lora.target_modules", targets()))]
    pub lora_targets: Option<Vec<String>>,
    #[arg(long, env = "GAVEL_TRAIN_USE_RSLORA", num_args = 0..=1, default_missing_value = "true",
          value_name = "BOOL",
          help = h("Scale adapters by α/√r (rank-stabilised LoRA); `--use-rslora false` turns off a train.toml `true`.",
                   "lora.use_rslora", d().lora.use_rslora))]
    pub use_rslora: Option<bool>,
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
    /// Continue from this checkpoint directory [default: start at step 0].
    #[arg(long, env = "GAVEL_TRAIN_RESUME")]
    pub resume: Option<PathBuf>,
    /// No progress bar (metrics still go to metrics.jsonl).
    #[arg(long, env = "GAVEL_TRAIN_QUIET", default_value_t = false)]
    pub quiet: bool,
    #[arg(long, env = "GAVEL_TRAIN_OFFLINE", value_name = "SCORED.jsonl",
          help = h_unset("Train on these scored groups (`gavel rescore` output, or request bodies \
                          with their `rewards`) instead of sampling: no tasks, no scorer.", "offline"))]
    pub offline: Option<PathBuf>,
    #[arg(long, env = "GAVEL_TRAIN_SFT", value_name = "SFT.jsonl",
          help = h_unset("Supervised fine-tuning (LoRA SFT) on these chat examples (`{\"messages\": \
                          [...], \"tools\": [...]}` a line, e.g. `gavel select` output) instead of \
                          GRPO: the loss is the mean NLL of the assistant tokens. Excludes --tasks \
                          and --offline.", "sft"))]
    pub sft: Option<PathBuf>,
    #[arg(long, env = "GAVEL_TRAIN_SFT_BATCH_SIZE",
          help = h("SFT: examples per optimizer step.", "sft_batch_size", d().sft_batch_size))]
    pub sft_batch_size: Option<usize>,
    #[arg(long, env = "GAVEL_TRAIN_SFT_MICRO_BATCH_TOKENS",
          help = h("SFT: padded tokens per forward/backward pass (examples of similar length \
                    share one).", "sft_micro_batch_tokens", d().sft_micro_batch_tokens))]
    pub sft_micro_batch_tokens: Option<usize>,
    #[arg(long, env = "GAVEL_TRAIN_OUTPUT_DIR",
          help = h("Checkpoints and metrics.jsonl go here.", "output_dir", d().output_dir.display()))]
    pub output_dir: Option<PathBuf>,
    #[arg(long, env = "GAVEL_TRAIN_STEPS", help = h("Optimizer steps in all.", "steps", d().steps))]
    pub steps: Option<u64>,
    #[arg(long, env = "GAVEL_TRAIN_MICRO_BATCH_GROUPS",
          help = h("Groups per forward/backward pass.", "micro_batch_groups", d().micro_batch_groups))]
    pub micro_batch_groups: Option<usize>,
    #[arg(long, env = "GAVEL_TRAIN_LEARNING_RATE",
          help = h("Peak learning rate of AdamW.", "learning_rate", d().learning_rate))]
    pub learning_rate: Option<f64>,
    #[arg(long, env = "GAVEL_TRAIN_SCHEDULE", value_enum,
          help = h("Learning-rate schedule after the warmup.", "schedule", name(d().schedule)))]
    pub schedule: Option<Schedule>,
    #[arg(long, env = "GAVEL_TRAIN_WARMUP_STEPS",
          help = h("Steps of linear warmup from 0.", "warmup_steps", d().warmup_steps))]
    pub warmup_steps: Option<u64>,
    #[arg(long, env = "GAVEL_TRAIN_MAX_GRAD_NORM",
          help = h("Clip the global gradient norm (0 = off).", "max_grad_norm", d().max_grad_norm))]
    pub max_grad_norm: Option<f64>,
    #[arg(long, env = "GAVEL_TRAIN_SAVE_EVERY",
          help = h("Checkpoint every N steps (0 = at the end only).", "save_every", d().save_every))]
    pub save_every: Option<u64>,
    #[arg(long, env = "GAVEL_TRAIN_SHUFFLE_REWARDS", num_args = 0..=1, default_missing_value = "true",
          value_name = "BOOL",
          help = h("A control run: permute each group's rewards at random within the group (seeded) \
                    before the loss, so they say nothing about which completion earned them.",
                   "shuffle_rewards", d().shuffle_rewards))]
    pub shuffle_rewards: Option<bool>,
    #[arg(long, env = "GAVEL_TRAIN_LOSS_TYPE", value_enum,
          help = h("How per-token losses are normalised (TRL's loss_type).", "grpo.loss_type", name(d().grpo.loss_type)))]
    pub loss_type: Option<LossType>,
    #[arg(long, env = "GAVEL_TRAIN_IS_LEVEL", value_enum,
          help = h("Importance ratios per token, or one per sequence (GSPO).", "grpo.importance_sampling_level",
                   name(d().grpo.importance_sampling_level)))]
    pub importance_sampling_level: Option<IsLevel>,
    #[arg(long, env = "GAVEL_TRAIN_EPSILON",
          help = h("Lower clip ε: ratios below 1 − ε are clipped.", "grpo.epsilon", d().grpo.epsilon))]
    pub epsilon: Option<f64>,
    #[arg(long, env = "GAVEL_TRAIN_EPSILON_HIGH",
          help = h("Upper clip (DAPO's clip-higher): ratios above 1 + this are clipped.", "grpo.epsilon_high", "ε"))]
    pub epsilon_high: Option<f64>,
    #[arg(long, env = "GAVEL_TRAIN_DELTA",
          help = h("Two-sided clipping: the unclipped ratio is capped at δ (> 1 + ε_high).", "grpo.delta", "off"))]
    pub delta: Option<f64>,
    #[arg(long, env = "GAVEL_TRAIN_BETA",
          help = h("KL coefficient against the base model (0 skips the reference pass).", "grpo.beta", d().grpo.beta))]
    pub beta: Option<f64>,
    #[arg(long, env = "GAVEL_TRAIN_TIS_CAP",
          help = h("Truncated importance sampling against the sampler's log-probs: the cap.", "grpo.tis_cap", "off"))]
    pub tis_cap: Option<f64>,
    #[arg(long, env = "GAVEL_TRAIN_TIS_MODE", value_enum,
          help = h("What a sampler ratio above --tis-cap does: cap it, or mask the token.", "grpo.tis_mode", name(d().grpo.tis_mode)))]
    pub tis_mode: Option<TisMode>,
    #[arg(long, env = "GAVEL_TRAIN_WEIGHT_DECAY",
          help = h("AdamW's decoupled weight decay.", "adamw.weight_decay", d().adamw.weight_decay))]
    pub weight_decay: Option<f64>,
    #[arg(long, env = "GAVEL_TRAIN_FILTER_PASS_RATE", value_delimiter = ',', value_name = "LO,HI",
          help = h("Difficulty filter: sample only tasks whose probed pass rate is in LO,HI (any \
                    `--filter-*` flag turns the filter on; the rest default as in `[filter]`).",
                   "filter.pass_rate", format!("{},{}", f().pass_rate[0], f().pass_rate[1])))]
    pub filter_pass_rate: Option<Vec<f64>>,
    #[arg(long, env = "GAVEL_TRAIN_FILTER_PROBE_SAMPLES",
          help = h("Difficulty filter: completions sampled per task to estimate its pass rate.",
                   "filter.probe_samples", f().probe_samples))]
    pub filter_probe_samples: Option<usize>,
    #[arg(long, env = "GAVEL_TRAIN_FILTER_REPROBE_EVERY",
          help = h("Difficulty filter: probe again every N steps (0 = only before the first step).",
                   "filter.reprobe_every", f().reprobe_every))]
    pub filter_reprobe_every: Option<u64>,
    #[arg(long, env = "GAVEL_TRAIN_FILTER_PASS_THRESHOLD",
          help = h("Difficulty filter: a completion passes when its reward is at least this.",
                   "filter.pass_threshold", f().pass_threshold))]
    pub filter_pass_threshold: Option<f64>,
}

/// Copies each field the action was given over the run's.
macro_rules! overlay {
    ($from:expr => $to:expr; $($f:ident),* $(,)?) => {
        $(if $from.$f.is_some() {
            $to.$f = $from.$f.clone();
        })*
    };
}

fn set<T: Clone>(slot: &mut T, v: &Option<T>) {
    if let Some(v) = v {
        *slot = v.clone();
    }
}

impl BaseFlags {
    fn overlay(&mut self, from: &BaseFlags) {
        overlay!(from => self; config, model, device);
    }
}

impl ScorerFlags {
    fn overlay(&mut self, from: &ScorerFlags) {
        overlay!(from => self; scorer_config, store, scorer_url);
    }
}

impl SamplingFlags {
    fn overlay(&mut self, from: &SamplingFlags) {
        overlay!(from => self; tasks, init_adapter, seed, prompts_per_step, group_size,
            temperature, top_p, max_tokens);
        if !from.stop.is_empty() {
            self.stop = from.stop.clone();
        }
    }
}

impl LoraFlags {
    fn overlay(&mut self, from: &LoraFlags) {
        overlay!(from => self; lora_r, lora_alpha, lora_targets, use_rslora);
    }
}

impl TrainArgs {
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
                overlay!(t => a; output_dir, steps);
                overlay!(t => a.sampling; seed);
                a.quiet |= t.quiet;
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
        set(&mut c.model, &a.base.model);
        set(&mut c.device, &a.base.device);
        if a.sampling.tasks.is_some() {
            c.tasks = a.sampling.tasks.clone();
        }
        if a.offline.is_some() {
            c.offline = a.offline.clone();
            c.tasks = None;
            c.sft = None;
        }
        if a.sft.is_some() {
            if a.sampling.tasks.is_some() || a.offline.is_some() {
                return Err(TrainError::Config(
                    "--sft excludes --tasks and --offline: SFT trains on chat examples, GRPO on \
                     prompts or scored groups; give one"
                        .into(),
                ));
            }
            c.sft = a.sft.clone();
            c.tasks = None;
            c.offline = None;
        }
        if a.sampling.init_adapter.is_some() {
            c.init_adapter = a.sampling.init_adapter.clone();
        }
        set(&mut c.sft_batch_size, &a.sft_batch_size);
        set(&mut c.sft_micro_batch_tokens, &a.sft_micro_batch_tokens);
        if a.scorer.scorer_url.is_some() {
            c.scorer_url = a.scorer.scorer_url.clone();
        }
        set(&mut c.output_dir, &a.output_dir);
        set(&mut c.steps, &a.steps);
        set(&mut c.prompts_per_step, &a.sampling.prompts_per_step);
        set(&mut c.group_size, &a.sampling.group_size);
        set(&mut c.micro_batch_groups, &a.micro_batch_groups);
        set(&mut c.learning_rate, &a.learning_rate);
        set(&mut c.schedule, &a.schedule);
        set(&mut c.warmup_steps, &a.warmup_steps);
        set(&mut c.max_grad_norm, &a.max_grad_norm);
        set(&mut c.seed, &a.sampling.seed);
        set(&mut c.save_every, &a.save_every);
        set(&mut c.shuffle_rewards, &a.shuffle_rewards);
        set(&mut c.sampling.temperature, &a.sampling.temperature);
        set(&mut c.sampling.top_p, &a.sampling.top_p);
        set(&mut c.sampling.max_tokens, &a.sampling.max_tokens);
        if !a.sampling.stop.is_empty() {
            c.sampling.stop = a.sampling.stop.clone();
        }
        set(&mut c.lora.r, &a.lora.lora_r);
        set(&mut c.lora.alpha, &a.lora.lora_alpha);
        set(&mut c.lora.target_modules, &a.lora.lora_targets);
        set(&mut c.lora.use_rslora, &a.lora.use_rslora);
        set(&mut c.grpo.loss_type, &a.loss_type);
        set(
            &mut c.grpo.importance_sampling_level,
            &a.importance_sampling_level,
        );
        set(&mut c.grpo.epsilon, &a.epsilon);
        if a.epsilon_high.is_some() {
            c.grpo.epsilon_high = a.epsilon_high;
        }
        if a.delta.is_some() {
            c.grpo.delta = a.delta;
        }
        set(&mut c.grpo.beta, &a.beta);
        if a.tis_cap.is_some() {
            c.grpo.tis_cap = a.tis_cap;
        }
        set(&mut c.grpo.tis_mode, &a.tis_mode);
        set(&mut c.adamw.weight_decay, &a.weight_decay);
        a.apply_filter_flags(&mut c)?;
        Ok(c)
    }

    /// `--filter-*`: any of them turns the difficulty filter on.
    fn apply_filter_flags(&self, c: &mut TrainConfig) -> Result<(), TrainError> {
        let given = self.filter_pass_rate.is_some()
            || self.filter_probe_samples.is_some()
            || self.filter_reprobe_every.is_some()
            || self.filter_pass_threshold.is_some();
        if !given {
            return Ok(());
        }
        let f = c.filter.get_or_insert_with(Default::default);
        if let Some(band) = &self.filter_pass_rate {
            f.pass_rate = <[f64; 2]>::try_from(band.as_slice()).map_err(|_| {
                TrainError::Config(format!(
                    "--filter-pass-rate: expected LO,HI (two numbers), got {} values",
                    band.len()
                ))
            })?;
        }
        set(&mut f.probe_samples, &self.filter_probe_samples);
        set(&mut f.reprobe_every, &self.filter_reprobe_every);
        set(&mut f.pass_threshold, &self.filter_pass_threshold);
        Ok(())
    }
}
