//! `gavel train judge` from flags to a trained adapter: the groups ([`super::sources`]), the
//! examples and their features ([`super::featurize`]), the loop ([`super::fit`]), the
//! checkpoints (`checkpoint-STEP/`, with optimizer state for `--resume`) and `best/` (the
//! adapter with the best dev figure, with its `gavel_judge.json`).

use std::path::Path;

use serde_json::json;

use super::examples;
use super::features::BaseModel;
use super::featurize::{choices_tokens, Featurizer};
use super::fit::{self, Best, DevFigures, Fit, FitSettings, Measured, Split};
use super::head::VerdictHead;
use super::options::JudgeTrainOptions;
use super::sources;
use crate::domain::rng::Rng;
use crate::model::adapter::{base_record, JudgeRecord, LoraConfig, ADAPTER_CONFIG, JUDGE_RECORD};
use crate::model::{DeviceSpec, LocalError, ModelFiles, OpenDevice};
use crate::score::verdict_choices;
use crate::toolkit::progress::progress_bar;
use crate::train::checkpoint::{self, TrainerState};
use crate::train::run_log::MetricsFile;
use crate::train::TrainError;

/// Runs `gavel train judge` (on a blocking thread; `rt` runs the teacher's scoring).
pub fn run(args: &JudgeTrainOptions, rt: &tokio::runtime::Handle) -> Result<(), TrainError> {
    let lora = args.validate()?;
    let scorer = sources::scorer(args, rt)?;
    let sources = sources::gather(args, &scorer, rt)?;
    let modes = &args.modes;
    let (train_ex, train_truth) =
        examples::build(&scorer, &sources.train, modes, args.pairwise_opponents)?;
    let (dev_ex, dev_truth) =
        examples::build(&scorer, &sources.dev, modes, args.pairwise_opponents)?;
    if train_ex.is_empty() || dev_ex.is_empty() {
        return Err(TrainError::Config("no training or no dev examples".into()));
    }

    let device = DeviceSpec::parse(&args.device)
        .map_err(LocalError::from)?
        .open()?;
    let files = ModelFiles::open(&args.model)?;
    let layers = files.config.num_hidden_layers;
    let first = layers - args.layers.min(layers);
    let base = base_record(&files)?;
    let choices: Vec<Vec<Vec<String>>> = modes.iter().map(|&m| verdict_choices(m)).collect();
    let mut rng = Rng::new(args.seed);
    let choice_tokens = choices_tokens(&files, &choices)?;
    let head = VerdictHead::new(&files, first, &choice_tokens, &lora, &mut rng, &device)?;

    let started = std::time::Instant::now();
    let dir = (args.features.clone()).unwrap_or_else(|| args.output.join("features"));
    let mut featurizer = Featurizer {
        model: BaseModel::new(files, &device, first, args.reach, &choices)?,
        modes,
        base: &base.fingerprint,
        dir: &dir,
        quiet: args.quiet,
    };
    let train = featurizer.split(train_ex, train_truth, "train")?;
    let dev = featurizer.split(dev_ex, dev_truth, "dev")?;
    let features_s = started.elapsed().as_secs_f64();
    if !featurizer.model.opened() {
        eprintln!("train judge: every split's features were on disk; the base model's network was not opened");
    }
    drop(featurizer);

    let settings = settings(args, &train);
    let vars = head.lora_vars();
    let mut opt = fit::optimizer(vars.clone())?;
    std::fs::create_dir_all(&args.output).map_err(TrainError::file(&args.output))?;
    let base_p = fit::first_shares(&head, &dev, &settings, false)?;
    let base_dev = fit::dev_figures(&dev, &base_p, modes);
    // The head with fresh adapters (B = 0) is the base model at the verdict position: where it
    // is not, training would optimise another model than the one served.
    let head_p = fit::first_shares(&head, &dev, &settings, true)?;
    let drift = base_p
        .iter()
        .zip(&head_p)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f64::max);
    eprintln!("train judge: head vs served base model on dev, max |ΔP| = {drift:.2e}");
    let (mut start, mut best) = (0, Best::NONE);
    if args.resume {
        if let Some((step, dir)) = crate::train::run_dir::last_checkpoint(&args.output) {
            checkpoint::load_adapters(&dir, &vars)?;
            let (state, moments) = checkpoint::load_state(&dir)?;
            opt.load_state(&moments, state.adam_t)
                .map_err(|e| TrainError::checkpoint_file(&dir, e))?;
            start = step;
            best = read_best(&args.output);
        }
    }
    let total = fit::total_steps(train.examples.len(), &settings);
    eprintln!(
        "train judge: {} training and {} dev examples ({}), layers {first}..{layers}, {total} steps; \
         features {features_s:.0}s; base model on dev: {}",
        train.examples.len(),
        dev.examples.len(),
        modes.iter().map(|m| m.name()).collect::<Vec<_>>().join(", "),
        figures_line(&base_dev)
    );
    let mut metrics = MetricsFile::open(&args.output, start)?;
    let progress = progress_bar(total, start, "steps", !args.quiet);
    let adapted: Vec<usize> = (first..layers).collect();
    let record = |figures: &DevFigures, step: u64| JudgeRecord {
        reach: args.reach,
        modes: modes.iter().map(|m| m.name().to_string()).collect(),
        base: base.clone(),
        training: json!({
            "command": "gavel train judge",
            "train": args.train, "dev": args.dev, "teacher": args.teacher,
            "teacher_groups": args.teacher_groups,
            "train_groups": train.truths.len(), "train_examples": train.examples.len(),
            "dev_examples": dev.examples.len(), "layers": args.layers, "reach": args.reach,
            "balance_length": args.balance_length,
            "rank": args.rank,
            "alpha": args.alpha, "epochs": args.epochs, "batch_size": args.batch_size,
            "learning_rate": args.learning_rate, "seed": args.seed, "step": step,
            "dev_base_figures": base_dev, "dev_figures": figures,
        }),
    };
    let fit = Fit {
        head: &head,
        opt,
        train: &train,
        dev: &dev,
        settings: &settings,
        start,
        best,
    };
    fit.run(&mut metrics, &progress, |m: Measured<'_>| {
        let dir = checkpoint::checkpoint_dir(&args.output, m.step);
        let best_dir = args.output.join("best");
        let rec = record(m.figures, m.step);
        for d in [&dir].into_iter().chain(m.is_best.then_some(&best_dir)) {
            write_adapter(d, &vars, &lora, &args.model, &adapted, &rec)?;
        }
        let state = TrainerState {
            step: m.step,
            adam_t: m.opt.t,
            rng_state: 0,
            seed: args.seed,
        };
        checkpoint::save_state(&dir, &state, m.opt.state_tensors())?;
        write_best(&args.output, m.best)
    })?;
    progress.finish_and_clear();
    eprintln!(
        "train judge: best dev {:.4} (base {:.4}); adapter in {}",
        read_best(&args.output).mean_ranking,
        base_dev.mean_ranking,
        args.output.join("best").display()
    );
    Ok(())
}

/// The loop's settings; says on stderr, per file and mode, which side the training labels
/// favour by length, and whether `--balance-length` weighs them equal.
fn settings(args: &JudgeTrainOptions, train: &Split) -> FitSettings {
    for (file, mode, longer, shorter) in examples::length_sides(&train.examples, &train.truths) {
        eprintln!(
            "train judge: {file}: {} training labels favour the longer trajectory in {longer} \
             examples, the shorter in {shorter}{}",
            mode.name(),
            if args.balance_length {
                " (weighed equal: --balance-length)"
            } else {
                ""
            }
        );
    }
    FitSettings {
        class_weights: examples::class_weights(&train.examples, &args.modes),
        example_weights: if args.balance_length {
            examples::length_weights(&train.examples, &train.truths)
        } else {
            Vec::new()
        },
        modes: args.modes.clone(),
        epochs: args.epochs,
        batch_size: args.batch_size,
        learning_rate: args.learning_rate,
        eval_every: args.eval_every,
        seed: args.seed,
    }
}

fn figures_line(f: &DevFigures) -> String {
    let line = |ranking: &[(String, f64)]| {
        ranking
            .iter()
            .map(|(m, a)| format!("{m} {a:.4}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut out = line(&f.ranking);
    for (file, ranking) in &f.by_file {
        out += &format!("; {file}: {}", line(ranking));
    }
    out
}

/// Writes the adapters of `vars` as a PEFT adapter for the layers `layers`, with `record`.
fn write_adapter(
    dir: &Path,
    vars: &[(String, candle_core::Var)],
    lora: &LoraConfig,
    base: &Path,
    layers: &[usize],
    record: &JudgeRecord,
) -> Result<(), TrainError> {
    checkpoint::save_adapters(dir, vars, lora, base)?;
    let mut cfg = checkpoint::adapter_config(lora, base);
    cfg["layers_to_transform"] = json!(layers);
    let path = dir.join(ADAPTER_CONFIG);
    std::fs::write(&path, serde_json::to_string_pretty(&cfg).expect("json"))
        .map_err(TrainError::file(&path))?;
    let path = dir.join(JUDGE_RECORD);
    std::fs::write(&path, serde_json::to_string_pretty(record).expect("json"))
        .map_err(TrainError::file(&path))
}

const BEST_FILE: &str = "best_dev.json";

fn write_best(out: &Path, best: Best) -> Result<(), TrainError> {
    let path = out.join(BEST_FILE);
    std::fs::write(&path, serde_json::to_string(&best).expect("json"))
        .map_err(TrainError::file(&path))
}

/// The best dev figures so far ([`Best::NONE`] before the first).
fn read_best(out: &Path) -> Best {
    std::fs::read_to_string(out.join(BEST_FILE))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(Best::NONE)
}
