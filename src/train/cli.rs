//! `gavel train`: flags over `train.toml` (a flag wins), `gavel train toy` (the toy run) and
//! `gavel train merge` (adapters folded into the base weights).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::{Args, Subcommand};

use super::checkpoint;
use super::config::TrainConfig;
use super::grpo::{IsLevel, LossType, TisMode};
use super::offline::read_scored;
use super::optim::Schedule;
use super::rollout::Policy;
use super::scoring::Rewarder;
use super::sft::Sft;
use super::tasks::read_tasks;
use super::toy;
use super::trainer::{Source, Trainer};
use super::TrainError;
use crate::cli::{open_scorer, Common};
use crate::rng::Rng;

#[derive(Subcommand, Debug, Clone)]
pub enum TrainAction {
    /// Train the tiny random model on the toy digit task (writes it, its tasks and the run's
    /// train.toml under --output-dir).
    Toy {
        /// Only write the toy model, tasks and train.toml; train nothing (the four-stage
        /// recipe starts from the untrained model with `--config DIR/train.toml`).
        #[arg(long, env = "GAVEL_TRAIN_TOY_NO_TRAIN", default_value_t = false)]
        no_train: bool,
    },
    /// Sample `--group-size` completions of every task with the model (and `--init-adapter`, if
    /// given), score each group, and write the scored groups for `gavel select` or `--offline`.
    Sample {
        /// Where the scored groups go (JSONL, one group per line).
        #[arg(long, env = "GAVEL_TRAIN_SAMPLE_OUT", value_name = "SCORED.jsonl")]
        out: PathBuf,
    },
    /// Write the base weights with the adapters of a checkpoint merged in (model folders only).
    Merge {
        /// The checkpoint directory (adapter_model.safetensors, adapter_config.json).
        #[arg(long, env = "GAVEL_TRAIN_ADAPTER")]
        adapter: PathBuf,
        /// Where the merged model folder is written.
        #[arg(long, env = "GAVEL_TRAIN_MERGED")]
        out: PathBuf,
    },
}

/// Options of `gavel train`; each overrides the same key of `--config train.toml`. They are
/// global, so they may follow an action too (`gavel train toy --output-dir DIR`).
#[derive(Args, Debug, Clone, Default)]
pub struct TrainArgs {
    #[command(subcommand)]
    pub action: Option<TrainAction>,
    /// The training config (TOML; see examples/train.toml).
    #[arg(long, global = true, env = "GAVEL_TRAIN_CONFIG")]
    pub config: Option<PathBuf>,
    /// The scorer's gavel.toml (judges, rubrics, store), for in-process scoring.
    #[arg(long, global = true, env = "GAVEL_CONFIG")]
    pub scorer_config: Option<PathBuf>,
    /// Verdict store directory for in-process scoring.
    #[arg(long, global = true, env = "GAVEL_STORE")]
    pub store: Option<PathBuf>,
    /// Continue from this checkpoint directory.
    #[arg(long, global = true, env = "GAVEL_TRAIN_RESUME")]
    pub resume: Option<PathBuf>,
    /// No progress bar (metrics still go to metrics.jsonl).
    #[arg(
        long,
        global = true,
        env = "GAVEL_TRAIN_QUIET",
        default_value_t = false
    )]
    pub quiet: bool,
    /// Base model: a model folder, a GGUF file, or a Hugging Face model id (ORG/NAME, or
    /// ORG/NAME-GGUF:FILE.gguf) found in the Hugging Face cache or downloaded into it.
    #[arg(long, global = true, env = "GAVEL_TRAIN_MODEL")]
    pub model: Option<PathBuf>,
    /// `cpu` or `cuda:N`.
    #[arg(long, global = true, env = "GAVEL_TRAIN_DEVICE")]
    pub device: Option<String>,
    /// Prompts JSONL (messages + scoring fields per line).
    #[arg(long, global = true, env = "GAVEL_TRAIN_TASKS")]
    pub tasks: Option<PathBuf>,
    /// Train on these scored groups (`gavel rescore` output, or request bodies with their
    /// `rewards`) instead of sampling: no tasks, no scorer.
    #[arg(
        long,
        global = true,
        env = "GAVEL_TRAIN_OFFLINE",
        value_name = "SCORED.jsonl"
    )]
    pub offline: Option<PathBuf>,
    /// Supervised fine-tuning (LoRA SFT) on these chat examples (`{"messages": [...],
    /// "tools": [...]}` a line, e.g. `gavel select` output) instead of GRPO: the loss is the mean
    /// NLL of the assistant tokens. Excludes --tasks and --offline.
    #[arg(long, global = true, env = "GAVEL_TRAIN_SFT", value_name = "SFT.jsonl")]
    pub sft: Option<PathBuf>,
    /// Start from this adapter (a checkpoint folder with adapter_model.safetensors and
    /// adapter_config.json): its LoRA weights, a fresh optimizer and step 0. Rank, alpha and
    /// target modules must match the run's.
    #[arg(
        long,
        global = true,
        env = "GAVEL_TRAIN_INIT_ADAPTER",
        value_name = "CHECKPOINT"
    )]
    pub init_adapter: Option<PathBuf>,
    /// SFT: examples per optimizer step.
    #[arg(long, global = true, env = "GAVEL_TRAIN_SFT_BATCH_SIZE")]
    pub sft_batch_size: Option<usize>,
    /// SFT: padded tokens per forward/backward pass (examples of similar length share one).
    #[arg(long, global = true, env = "GAVEL_TRAIN_SFT_MICRO_BATCH_TOKENS")]
    pub sft_micro_batch_tokens: Option<usize>,
    /// Score against a running daemon (its base URL) instead of in-process.
    #[arg(long, global = true, env = "GAVEL_SCORER_URL")]
    pub scorer_url: Option<String>,
    /// Checkpoints and metrics.jsonl go here.
    #[arg(long, global = true, env = "GAVEL_TRAIN_OUTPUT_DIR")]
    pub output_dir: Option<PathBuf>,
    /// Optimizer steps in all.
    #[arg(long, global = true, env = "GAVEL_TRAIN_STEPS")]
    pub steps: Option<u64>,
    /// Prompts (groups) per step.
    #[arg(long, global = true, env = "GAVEL_TRAIN_PROMPTS_PER_STEP")]
    pub prompts_per_step: Option<usize>,
    /// Completions per prompt.
    #[arg(long, global = true, env = "GAVEL_TRAIN_GROUP_SIZE")]
    pub group_size: Option<usize>,
    /// Groups per forward/backward pass.
    #[arg(long, global = true, env = "GAVEL_TRAIN_MICRO_BATCH_GROUPS")]
    pub micro_batch_groups: Option<usize>,
    #[arg(long, global = true, env = "GAVEL_TRAIN_LEARNING_RATE")]
    pub learning_rate: Option<f64>,
    #[arg(long, global = true, env = "GAVEL_TRAIN_SCHEDULE", value_enum)]
    pub schedule: Option<Schedule>,
    #[arg(long, global = true, env = "GAVEL_TRAIN_WARMUP_STEPS")]
    pub warmup_steps: Option<u64>,
    /// Clip the global gradient norm (0 = off).
    #[arg(long, global = true, env = "GAVEL_TRAIN_MAX_GRAD_NORM")]
    pub max_grad_norm: Option<f64>,
    #[arg(long, global = true, env = "GAVEL_TRAIN_SEED")]
    pub seed: Option<u64>,
    /// Checkpoint every N steps (0 = at the end only).
    #[arg(long, global = true, env = "GAVEL_TRAIN_SAVE_EVERY")]
    pub save_every: Option<u64>,
    #[arg(long, global = true, env = "GAVEL_TRAIN_TEMPERATURE")]
    pub temperature: Option<f64>,
    #[arg(long, global = true, env = "GAVEL_TRAIN_TOP_P")]
    pub top_p: Option<f64>,
    #[arg(long, global = true, env = "GAVEL_TRAIN_MAX_TOKENS")]
    pub max_tokens: Option<usize>,
    /// A stop string (repeatable).
    #[arg(long, global = true, env = "GAVEL_TRAIN_STOP")]
    pub stop: Vec<String>,
    #[arg(long, global = true, env = "GAVEL_TRAIN_LORA_R")]
    pub lora_r: Option<usize>,
    #[arg(long, global = true, env = "GAVEL_TRAIN_LORA_ALPHA")]
    pub lora_alpha: Option<f64>,
    /// Comma-separated subset of q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj.
    #[arg(
        long,
        global = true,
        env = "GAVEL_TRAIN_LORA_TARGETS",
        value_delimiter = ','
    )]
    pub lora_targets: Option<Vec<String>>,
    #[arg(long, global = true, env = "GAVEL_TRAIN_USE_RSLORA")]
    pub use_rslora: Option<bool>,
    #[arg(long, global = true, env = "GAVEL_TRAIN_LOSS_TYPE", value_enum)]
    pub loss_type: Option<LossType>,
    #[arg(long, global = true, env = "GAVEL_TRAIN_IS_LEVEL", value_enum)]
    pub importance_sampling_level: Option<IsLevel>,
    #[arg(long, global = true, env = "GAVEL_TRAIN_EPSILON")]
    pub epsilon: Option<f64>,
    #[arg(long, global = true, env = "GAVEL_TRAIN_EPSILON_HIGH")]
    pub epsilon_high: Option<f64>,
    #[arg(long, global = true, env = "GAVEL_TRAIN_DELTA")]
    pub delta: Option<f64>,
    #[arg(long, global = true, env = "GAVEL_TRAIN_BETA")]
    pub beta: Option<f64>,
    #[arg(long, global = true, env = "GAVEL_TRAIN_TIS_CAP")]
    pub tis_cap: Option<f64>,
    #[arg(long, global = true, env = "GAVEL_TRAIN_TIS_MODE", value_enum)]
    pub tis_mode: Option<TisMode>,
    #[arg(long, global = true, env = "GAVEL_TRAIN_WEIGHT_DECAY")]
    pub weight_decay: Option<f64>,
    /// Difficulty filter: sample only tasks whose probed pass rate is in LO,HI (any
    /// `--filter-*` flag turns the filter on; the rest default as in `[filter]`).
    #[arg(
        long,
        global = true,
        env = "GAVEL_TRAIN_FILTER_PASS_RATE",
        value_delimiter = ',',
        value_name = "LO,HI"
    )]
    pub filter_pass_rate: Option<Vec<f64>>,
    /// Difficulty filter: completions sampled per task to estimate its pass rate.
    #[arg(long, global = true, env = "GAVEL_TRAIN_FILTER_PROBE_SAMPLES")]
    pub filter_probe_samples: Option<usize>,
    /// Difficulty filter: probe again every N steps (0 = only before the first step).
    #[arg(long, global = true, env = "GAVEL_TRAIN_FILTER_REPROBE_EVERY")]
    pub filter_reprobe_every: Option<u64>,
    /// Difficulty filter: a completion passes when its reward is at least this.
    #[arg(long, global = true, env = "GAVEL_TRAIN_FILTER_PASS_THRESHOLD")]
    pub filter_pass_threshold: Option<f64>,
}

fn set<T: Clone>(slot: &mut T, v: &Option<T>) {
    if let Some(v) = v {
        *slot = v.clone();
    }
}

impl TrainArgs {
    /// The config file (or defaults) with every given flag applied.
    pub fn config(&self) -> Result<TrainConfig, TrainError> {
        let mut c = match &self.config {
            Some(p) => TrainConfig::from_file(p)?,
            None => TrainConfig::default(),
        };
        set(&mut c.model, &self.model);
        set(&mut c.device, &self.device);
        if self.tasks.is_some() {
            c.tasks = self.tasks.clone();
        }
        if self.offline.is_some() {
            c.offline = self.offline.clone();
            c.tasks = None;
            c.sft = None;
        }
        if self.sft.is_some() {
            if self.tasks.is_some() || self.offline.is_some() {
                return Err(TrainError::Config(
                    "--sft excludes --tasks and --offline: SFT trains on chat examples, GRPO on \
                     prompts or scored groups; give one"
                        .into(),
                ));
            }
            c.sft = self.sft.clone();
            c.tasks = None;
            c.offline = None;
        }
        if self.init_adapter.is_some() {
            c.init_adapter = self.init_adapter.clone();
        }
        set(&mut c.sft_batch_size, &self.sft_batch_size);
        set(&mut c.sft_micro_batch_tokens, &self.sft_micro_batch_tokens);
        if self.scorer_url.is_some() {
            c.scorer_url = self.scorer_url.clone();
        }
        set(&mut c.output_dir, &self.output_dir);
        set(&mut c.steps, &self.steps);
        set(&mut c.prompts_per_step, &self.prompts_per_step);
        set(&mut c.group_size, &self.group_size);
        set(&mut c.micro_batch_groups, &self.micro_batch_groups);
        set(&mut c.learning_rate, &self.learning_rate);
        set(&mut c.schedule, &self.schedule);
        set(&mut c.warmup_steps, &self.warmup_steps);
        set(&mut c.max_grad_norm, &self.max_grad_norm);
        set(&mut c.seed, &self.seed);
        set(&mut c.save_every, &self.save_every);
        set(&mut c.sampling.temperature, &self.temperature);
        set(&mut c.sampling.top_p, &self.top_p);
        set(&mut c.sampling.max_tokens, &self.max_tokens);
        if !self.stop.is_empty() {
            c.sampling.stop = self.stop.clone();
        }
        set(&mut c.lora.r, &self.lora_r);
        set(&mut c.lora.alpha, &self.lora_alpha);
        set(&mut c.lora.target_modules, &self.lora_targets);
        set(&mut c.lora.use_rslora, &self.use_rslora);
        set(&mut c.grpo.loss_type, &self.loss_type);
        set(
            &mut c.grpo.importance_sampling_level,
            &self.importance_sampling_level,
        );
        set(&mut c.grpo.epsilon, &self.epsilon);
        if self.epsilon_high.is_some() {
            c.grpo.epsilon_high = self.epsilon_high;
        }
        if self.delta.is_some() {
            c.grpo.delta = self.delta;
        }
        set(&mut c.grpo.beta, &self.beta);
        if self.tis_cap.is_some() {
            c.grpo.tis_cap = self.tis_cap;
        }
        set(&mut c.grpo.tis_mode, &self.tis_mode);
        set(&mut c.adamw.weight_decay, &self.weight_decay);
        self.apply_filter_flags(&mut c)?;
        Ok(c)
    }
}

impl TrainArgs {
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

/// Runs `gavel train` (from a blocking thread: sampling and backward passes are CPU work).
pub async fn run(args: TrainArgs) -> Result<u8, TrainError> {
    let rt = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || run_blocking(args, rt))
        .await
        .map_err(|e| TrainError::Io(format!("the training thread failed: {e}")))?
}

fn run_blocking(args: TrainArgs, rt: tokio::runtime::Handle) -> Result<u8, TrainError> {
    let mut cfg = args.config()?;
    match &args.action {
        Some(TrainAction::Merge { adapter, out }) => return merge(&cfg, adapter, out).map(|()| 0),
        Some(TrainAction::Toy { no_train }) => {
            std::fs::create_dir_all(&cfg.output_dir)
                .map_err(|e| TrainError::Io(format!("{}: {e}", cfg.output_dir.display())))?;
            let (model, tasks) = toy::write_toy(&cfg.output_dir)?;
            let mut t = toy::toy_config(model, tasks, cfg.output_dir.join("run"));
            if args.steps.is_some() {
                t.steps = cfg.steps;
            }
            if args.seed.is_some() {
                t.seed = cfg.seed;
            }
            let toml = cfg.output_dir.join("train.toml");
            toy::write_toy_config(&toml, &t)?;
            if *no_train {
                eprintln!(
                    "toy: wrote {}, {} and {}",
                    t.model.display(),
                    t.tasks.as_deref().unwrap_or(Path::new("")).display(),
                    toml.display()
                );
                return Ok(0);
            }
            cfg = t;
        }
        Some(TrainAction::Sample { .. })
            if cfg.sft.is_some() || cfg.offline.is_some() || cfg.tasks.is_none() =>
        {
            return Err(TrainError::Config(
                "train sample samples the tasks of --tasks (not --sft or --offline data)".into(),
            ));
        }
        Some(TrainAction::Sample { .. }) | None => {}
    }
    cfg.validate()?;
    if cfg.sft.is_some() {
        return sft(cfg, &args);
    }
    if let Some(scored) = cfg.offline.clone() {
        let mut trainer = Trainer::new(cfg, Source::Offline(Vec::new()))?;
        trainer.source = Source::Offline(read_scored(&scored, &trainer.policy)?);
        return train(&mut trainer, &args, &rt);
    }
    let tasks_path = cfg.tasks.clone().expect("validated");
    let tasks = read_tasks(&tasks_path)?;
    let rewarder = match &cfg.scorer_url {
        Some(url) => Rewarder::http(url),
        None => {
            let common = Common {
                config: args.scorer_config.clone(),
                store: args.store.clone(),
                store_url: None,
                log_json: false,
            };
            let scfg = common
                .load_config()
                .map_err(|e| TrainError::Config(e.to_string()))?;
            Rewarder::InProcess(
                rt.block_on(open_scorer(&scfg))
                    .map_err(|e| TrainError::Config(e.to_string()))?,
            )
        }
    };
    let source = Source::Online {
        tasks,
        rewarder,
        rt: rt.clone(),
    };
    let mut trainer = Trainer::new(cfg, source)?;
    if let Some(TrainAction::Sample { out }) = &args.action {
        let groups = super::sample::write_samples(&mut trainer, out)?;
        eprintln!("{}: {groups} scored groups", out.display());
        return Ok(0);
    }
    train(&mut trainer, &args, &rt)
}

/// Resumes if asked, runs to the last step and flushes the verdict store.
fn train(
    trainer: &mut Trainer,
    args: &TrainArgs,
    rt: &tokio::runtime::Handle,
) -> Result<u8, TrainError> {
    if let Some(dir) = &args.resume {
        trainer.resume(dir)?;
    }
    let metrics = trainer.run(!args.quiet)?;
    if let Some(last) = metrics.last() {
        println!(
            "trained to step {} (reward {:.3}); adapters in {}",
            last.step,
            last.reward_mean,
            checkpoint::checkpoint_dir(&trainer.cfg.output_dir, trainer.step).display()
        );
    }
    if let Source::Online {
        rewarder: Rewarder::InProcess(s),
        ..
    } = &trainer.source
    {
        let s: &Arc<crate::score::Scorer> = s;
        rt.block_on(s.store().flush())
            .map_err(|e| TrainError::Io(e.to_string()))?;
    }
    Ok(0)
}

/// `--sft`: resumes if asked and runs to the last step.
fn sft(cfg: TrainConfig, args: &TrainArgs) -> Result<u8, TrainError> {
    let mut s = Sft::new(cfg)?;
    if let Some(dir) = &args.resume {
        s.trainer.resume(dir)?;
    }
    let metrics = s.run(!args.quiet)?;
    if let Some(last) = metrics.last() {
        println!(
            "trained to step {} (sft loss {:.4}); adapters in {}",
            last.step,
            last.loss,
            checkpoint::checkpoint_dir(&s.trainer.cfg.output_dir, s.trainer.step).display()
        );
    }
    Ok(0)
}

/// Folds the adapters of `adapter` into the base model folder `cfg.model` (a folder, or a
/// Hugging Face id resolved to its snapshot folder), written to `out`.
pub fn merge(cfg: &TrainConfig, adapter: &Path, out: &Path) -> Result<(), TrainError> {
    let base =
        crate::model::hub::resolve(&cfg.model).map_err(|e| TrainError::Model(e.to_string()))?;
    if !base.is_dir() {
        return Err(TrainError::Config(format!(
            "{}: merge needs the base model as a folder (config.json + safetensors)",
            cfg.model.display()
        )));
    }
    let lora = checkpoint::read_adapter_config(adapter)?;
    let policy = Policy::load(&base, &cfg.device, &lora, &mut Rng::new(0))?;
    checkpoint::load_adapters(adapter, &policy.model.lora_vars())?;
    std::fs::create_dir_all(out).map_err(|e| TrainError::Io(format!("{}: {e}", out.display())))?;
    let tensors: std::collections::HashMap<String, candle_core::Tensor> =
        policy.model.merged_tensors()?.into_iter().collect();
    let file = out.join("model.safetensors");
    candle_core::safetensors::save(&tensors, &file)
        .map_err(|e| TrainError::Io(format!("{}: {e}", file.display())))?;
    for name in [
        "config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "generation_config.json",
        "chat_template.jinja",
    ] {
        let src = base.join(name);
        if src.is_file() {
            std::fs::copy(&src, out.join(name))
                .map_err(|e| TrainError::Io(format!("{}: {e}", src.display())))?;
        }
    }
    Ok(())
}
