//! What `gavel train` runs, as plain data: the binary's flags make a [`TrainPlan`] (each flag over
//! the same key of `train.toml`), and [`run`] carries it out: a training run (GRPO on sampled
//! tasks or scored groups, or SFT), the toy run, scored samples, adapters merged into the base
//! weights, or a local judge's adapter.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::checkpoint;
use super::config::{TrainConfig, TrainSource};
use super::judge::JudgeTrainOptions;
use super::offline::read_scored;
use super::rollout::PolicyModel;
use super::run_dir::{self, Resume};
use super::scoring::Rewarder;
use super::sft::Sft;
use super::tasks::read_tasks;
use super::toy;
use super::trainer::{Source, Trainer};
use super::TrainError;
use crate::cli::{open_scorer, ConfigSource};
use crate::domain::rng::Rng;

/// One `gavel train` invocation.
#[derive(Debug, Clone)]
pub enum TrainPlan {
    /// Train with `config`: its source decides GRPO on tasks, on scored groups, or SFT.
    Train {
        config: TrainConfig,
        /// Where sampled completions are scored (in-process), unless `config.scorer_url`.
        scorer: ConfigSource,
        run: RunOptions,
    },
    /// Write the toy model, its tasks and train.toml under `output_dir`, then train on them
    /// unless `no_train`.
    Toy {
        output_dir: PathBuf,
        /// Over the toy run's own steps and seed.
        steps: Option<u64>,
        seed: Option<u64>,
        no_train: bool,
        scorer: ConfigSource,
        run: RunOptions,
    },
    /// Sample and score every task of `config`'s tasks, written to `output`.
    Sample {
        config: TrainConfig,
        scorer: ConfigSource,
        output: PathBuf,
    },
    /// Fold `adapter` into `config`'s base model folder, written to `output`.
    Merge {
        config: TrainConfig,
        adapter: PathBuf,
        output: PathBuf,
    },
    /// Train a local judge's adapter.
    Judge(JudgeTrainOptions),
}

/// How a training run starts and reports. Its output folder must be empty (or new) unless it
/// resumes the run there or overwrites it ([`run_dir::prepare`]).
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Continue a run: from its folder's last checkpoint, or from a checkpoint folder.
    pub resume: Option<Resume>,
    /// Start again in a folder that holds a run, removing its metrics and checkpoints.
    pub overwrite: bool,
    /// No progress bar (metrics still go to metrics.jsonl).
    pub quiet: bool,
}

/// Runs `plan` (from a blocking thread: sampling and backward passes are CPU work).
pub async fn run(plan: TrainPlan) -> Result<(), TrainError> {
    let rt = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || run_blocking(plan, rt))
        .await
        .map_err(TrainError::Thread)?
}

fn run_blocking(plan: TrainPlan, rt: tokio::runtime::Handle) -> Result<(), TrainError> {
    match plan {
        TrainPlan::Judge(options) => super::judge::run(&options, &rt),
        TrainPlan::Merge {
            config,
            adapter,
            output,
        } => merge(&config, &adapter, &output),
        TrainPlan::Toy {
            output_dir,
            steps,
            seed,
            no_train,
            scorer,
            run,
        } => {
            let resume = match &run.resume {
                None => false,
                Some(Resume::Last) => true,
                Some(Resume::From(_)) => {
                    return Err(TrainError::Config(
                        "train toy --resume continues from the toy run's last checkpoint; it \
                         takes no folder"
                            .into(),
                    ))
                }
            };
            if resume && no_train {
                return Err(TrainError::Config(
                    "--resume continues the toy run; --no-train trains nothing".into(),
                ));
            }
            run_dir::prepare_toy(&output_dir, resume, run.overwrite)?;
            std::fs::create_dir_all(&output_dir).map_err(TrainError::file(&output_dir))?;
            let (model, tasks) = if resume {
                (
                    output_dir.join("toy-model"),
                    output_dir.join("toy-tasks.jsonl"),
                )
            } else {
                toy::write_toy(&output_dir)?
            };
            let mut t = toy::toy_config(model, tasks, output_dir.join("run"));
            t.steps = steps.unwrap_or(t.steps);
            t.seed = seed.unwrap_or(t.seed);
            let toml = output_dir.join("train.toml");
            toy::write_toy_config(&toml, &t)?;
            // The toy's folder was readied above: its run/ is new, or resumed from its last
            // checkpoint.
            let run = RunOptions {
                overwrite: false,
                ..run
            };
            if no_train {
                eprintln!(
                    "toy: wrote {}, {} and {}",
                    t.model.display(),
                    t.tasks.as_deref().unwrap_or(Path::new("")).display(),
                    toml.display()
                );
                return Ok(());
            }
            train_run(t, &scorer, &run, &rt)
        }
        TrainPlan::Sample {
            config,
            scorer,
            output,
        } => {
            let Ok(TrainSource::Tasks(tasks)) = config.source() else {
                return Err(TrainError::Config(
                    "train sample samples the tasks of --tasks (not --sft or --offline data)"
                        .into(),
                ));
            };
            config.validate_for_sampling()?;
            let mut trainer = online_trainer(config, &tasks, &scorer, &rt)?;
            let groups = super::sample::write_samples(&mut trainer, &output)?;
            eprintln!("{}: {groups} scored groups", output.display());
            Ok(())
        }
        TrainPlan::Train {
            config,
            scorer,
            run,
        } => train_run(config, &scorer, &run, &rt),
    }
}

/// A training run of `cfg`, from the source it names.
fn train_run(
    cfg: TrainConfig,
    scorer: &ConfigSource,
    run: &RunOptions,
    rt: &tokio::runtime::Handle,
) -> Result<(), TrainError> {
    cfg.validate()?;
    let source = cfg.source()?;
    let resume = run_dir::prepare(&cfg.output_dir, run.resume.as_ref(), run.overwrite)?;
    let resume = resume.as_deref();
    match source {
        TrainSource::Sft(_) => sft(cfg, resume, run.quiet),
        TrainSource::Offline(scored) => {
            let mut trainer = Trainer::with_source(cfg, |policy| {
                Ok(Source::Offline(read_scored(&scored, policy)?))
            })?;
            train(&mut trainer, resume, run.quiet, rt)
        }
        TrainSource::Tasks(tasks) => {
            let mut trainer = online_trainer(cfg, &tasks, scorer, rt)?;
            train(&mut trainer, resume, run.quiet, rt)
        }
    }
}

/// A trainer that samples the tasks of `tasks_path` and scores them with `scorer` (or the
/// daemon at `cfg.scorer_url`).
fn online_trainer(
    cfg: TrainConfig,
    tasks_path: &Path,
    scorer: &ConfigSource,
    rt: &tokio::runtime::Handle,
) -> Result<Trainer, TrainError> {
    let tasks = read_tasks(tasks_path)?;
    let rewarder = match &cfg.scorer_url {
        Some(url) => Rewarder::http(url),
        None => {
            let scfg = scorer.load_config()?;
            Rewarder::InProcess(rt.block_on(open_scorer(&scfg))?)
        }
    };
    let source = Source::Online {
        tasks,
        rewarder,
        rt: rt.clone(),
    };
    Trainer::new(cfg, source)
}

/// Resumes from `resume` if given, runs to the last step and flushes the verdict store.
fn train(
    trainer: &mut Trainer,
    resume: Option<&Path>,
    quiet: bool,
    rt: &tokio::runtime::Handle,
) -> Result<(), TrainError> {
    if let Some(dir) = resume {
        trainer.resume(dir)?;
    }
    let metrics = trainer.run(!quiet)?;
    // The policy's reward on the tasks drawn, not only on the groups trained on (dynamic sampling
    // sets tied ones aside).
    let rewards: Vec<(u64, f64)> = metrics
        .iter()
        .map(|m| (m.step, m.drawn_reward_mean))
        .collect();
    if let Some(line) = reward_line(&rewards) {
        println!(
            "{line}; adapters in {}",
            checkpoint::checkpoint_dir(&trainer.cfg.output_dir, trainer.step).display()
        );
    }
    if let Source::Online {
        rewarder: Rewarder::InProcess(s),
        ..
    } = &trainer.source
    {
        let s: &Arc<crate::score::Scorer> = s;
        rt.block_on(s.store().flush())?;
    }
    Ok(())
}

/// Steps averaged at each end of a run for its reward line: one step's mean reward is noisy.
const REWARD_WINDOW: usize = 10;

/// `trained to step 400: mean reward 0.216 over steps 1–10, 0.854 over steps 391–400`: the mean
/// of the first and of the last ten steps run (`(step, mean reward of the groups drawn)` each), or of all of them
/// when there are no more than ten.
pub fn reward_line(rewards: &[(u64, f64)]) -> Option<String> {
    let last = rewards.last()?;
    let mean = |w: &[(u64, f64)]| w.iter().map(|r| r.1).sum::<f64>() / w.len() as f64;
    let span = |w: &[(u64, f64)]| match (w.first(), w.last()) {
        (Some(a), Some(b)) if a.0 == b.0 => format!("step {}", a.0),
        (Some(a), Some(b)) => format!("steps {}–{}", a.0, b.0),
        _ => String::new(),
    };
    let n = rewards.len();
    if n <= REWARD_WINDOW {
        return Some(format!(
            "trained to step {}: mean reward {:.3} over {}",
            last.0,
            mean(rewards),
            span(rewards)
        ));
    }
    let (head, tail) = (&rewards[..REWARD_WINDOW], &rewards[n - REWARD_WINDOW..]);
    Some(format!(
        "trained to step {}: mean reward {:.3} over {}, {:.3} over {}",
        last.0,
        mean(head),
        span(head),
        mean(tail),
        span(tail)
    ))
}

/// `--sft`: resumes from `resume` if given and runs to the last step.
fn sft(cfg: TrainConfig, resume: Option<&Path>, quiet: bool) -> Result<(), TrainError> {
    let mut s = Sft::new(cfg)?;
    if let Some(dir) = resume {
        s.trainer.resume(dir)?;
    }
    let metrics = s.run(!quiet)?;
    if let Some(last) = metrics.last() {
        println!(
            "trained to step {} (sft loss {:.4}); adapters in {}",
            last.step,
            last.loss,
            checkpoint::checkpoint_dir(&s.trainer.cfg.output_dir, s.trainer.step).display()
        );
    }
    Ok(())
}

/// Folds the adapters of `adapter` into the base model folder `cfg.model` (a folder, or a
/// Hugging Face id resolved to its snapshot folder), written to `out`.
pub fn merge(cfg: &TrainConfig, adapter: &Path, out: &Path) -> Result<(), TrainError> {
    let base = crate::model::hub::resolve(&cfg.model)?;
    if !base.is_dir() {
        return Err(TrainError::Config(format!(
            "{}: merge needs the base model as a folder (config.json + safetensors)",
            cfg.model.display()
        )));
    }
    let lora = checkpoint::read_adapter_config(adapter)?;
    let policy = PolicyModel::load(&base, &cfg.device, &lora, &mut Rng::new(0))?;
    checkpoint::load_adapters(adapter, &policy.model.lora_vars())?;
    std::fs::create_dir_all(out).map_err(TrainError::file(out))?;
    let tensors: std::collections::HashMap<String, candle_core::Tensor> =
        policy.model.merged_tensors()?.into_iter().collect();
    let file = out.join("model.safetensors");
    candle_core::safetensors::save(&tensors, &file)
        .map_err(|e| TrainError::checkpoint_file(&file, e))?;
    for name in [
        "config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "generation_config.json",
        "chat_template.jinja",
    ] {
        let src = base.join(name);
        if src.is_file() {
            std::fs::copy(&src, out.join(name)).map_err(TrainError::file(&src))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::reward_line;

    #[test]
    fn the_reward_line_averages_ten_steps_at_each_end() {
        let steps: Vec<(u64, f64)> = (1..=30).map(|s| (s, s as f64 / 100.0)).collect();
        assert_eq!(
            reward_line(&steps).unwrap(),
            "trained to step 30: mean reward 0.055 over steps 1–10, 0.255 over steps 21–30"
        );
        assert_eq!(
            reward_line(&steps[..2]).unwrap(),
            "trained to step 2: mean reward 0.015 over steps 1–2"
        );
        assert_eq!(
            reward_line(&steps[4..5]).unwrap(),
            "trained to step 5: mean reward 0.050 over step 5"
        );
        assert_eq!(reward_line(&[]), None);
    }
}
