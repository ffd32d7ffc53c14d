//! `gavel train`: flags over `train.toml` (a flag wins; see [`super::args`]), `gavel train toy`
//! (the toy run), `gavel train sample` (scored samples) and `gavel train merge` (adapters folded
//! into the base weights).

use std::path::Path;
use std::sync::Arc;

pub use super::args::{MergeArgs, SampleArgs, ToyArgs, TrainAction, TrainArgs};
use super::checkpoint;
use super::config::{TrainConfig, TrainSource};
use super::offline::read_scored;
use super::rollout::PolicyModel;
use super::scoring::Rewarder;
use super::sft::Sft;
use super::tasks::read_tasks;
use super::toy;
use super::trainer::{Source, Trainer};
use super::TrainError;
use crate::cli::{open_scorer, ConfigSource};
use crate::domain::rng::Rng;

/// Runs `gavel train` (from a blocking thread: sampling and backward passes are CPU work).
pub async fn run(args: TrainArgs) -> Result<(), TrainError> {
    let rt = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || run_blocking(args, rt))
        .await
        .map_err(TrainError::Thread)?
}

fn run_blocking(args: TrainArgs, rt: tokio::runtime::Handle) -> Result<(), TrainError> {
    if let Some(TrainAction::Judge(j)) = &args.action {
        return super::judge::run(j, &rt);
    }
    let mut cfg = args.config()?;
    let args = args.effective();
    match &args.action {
        Some(TrainAction::Merge(m)) => return merge(&cfg, &m.adapter, &m.output),
        Some(TrainAction::Toy(ToyArgs { no_train, .. })) => {
            std::fs::create_dir_all(&cfg.output_dir).map_err(TrainError::file(&cfg.output_dir))?;
            let (model, tasks) = toy::write_toy(&cfg.output_dir)?;
            let mut t = toy::toy_config(model, tasks, cfg.output_dir.join("run"));
            if args.run.steps.is_some() {
                t.steps = cfg.steps;
            }
            if args.sampling.seed.is_some() {
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
                return Ok(());
            }
            cfg = t;
        }
        Some(TrainAction::Sample(_)) if !matches!(cfg.source(), Ok(TrainSource::Tasks(_))) => {
            return Err(TrainError::Config(
                "train sample samples the tasks of --tasks (not --sft or --offline data)".into(),
            ));
        }
        Some(TrainAction::Sample(_)) | None => {}
        Some(TrainAction::Judge(j)) => return super::judge::run(j, &rt),
    }
    match args.action {
        Some(TrainAction::Sample(_)) => cfg.validate_for_sampling()?,
        _ => cfg.validate()?,
    }
    let tasks_path = match cfg.source()? {
        TrainSource::Sft(_) => return sft(cfg, &args),
        TrainSource::Offline(scored) => {
            let mut trainer = Trainer::with_source(cfg, |policy| {
                Ok(Source::Offline(read_scored(&scored, policy)?))
            })?;
            return train(&mut trainer, &args, &rt);
        }
        TrainSource::Tasks(path) => path,
    };
    let tasks = read_tasks(&tasks_path)?;
    let rewarder = match &cfg.scorer_url {
        Some(url) => Rewarder::http(url),
        None => {
            let common = ConfigSource {
                config: args.scorer.scorer_config.clone(),
                store: args.scorer.store.clone(),
                store_url: None,
            };
            let scfg = common.load_config()?;
            Rewarder::InProcess(rt.block_on(open_scorer(&scfg))?)
        }
    };
    let source = Source::Online {
        tasks,
        rewarder,
        rt: rt.clone(),
    };
    let mut trainer = Trainer::new(cfg, source)?;
    if let Some(TrainAction::Sample(s)) = &args.action {
        let groups = super::sample::write_samples(&mut trainer, &s.output)?;
        eprintln!("{}: {groups} scored groups", s.output.display());
        return Ok(());
    }
    train(&mut trainer, &args, &rt)
}

/// Resumes if asked, runs to the last step and flushes the verdict store.
fn train(
    trainer: &mut Trainer,
    args: &TrainArgs,
    rt: &tokio::runtime::Handle,
) -> Result<(), TrainError> {
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
        rt.block_on(s.store().flush())?;
    }
    Ok(())
}

/// `--sft`: resumes if asked and runs to the last step.
fn sft(cfg: TrainConfig, args: &TrainArgs) -> Result<(), TrainError> {
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
