//! `gavel train judge` from flags to a trained adapter: the data, the features, the loop, the
//! checkpoints (`checkpoint-STEP/`, with optimizer state for `--resume`) and `best/` (the
//! adapter with the best dev figure, with its `gavel_judge.json`).

use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use serde_json::json;

use super::examples::{self, ExampleSource};
use super::feature_file::{self, FeatureKey};
use super::features::BaseModel;
use super::fit::{self, FitSettings, Split};
use super::head::VerdictHead;
use super::options::JudgeTrainOptions;
use crate::domain::prompt::JudgeMode;
use crate::domain::rng::Rng;
use crate::eval::Labels;
use crate::model::adapter::{base_record, JudgeRecord, LoraConfig, ADAPTER_CONFIG, JUDGE_RECORD};
use crate::model::{DeviceSpec, LocalError, ModelFiles, OpenDevice};
use crate::score::{verdict_choices, Scorer};
use crate::toolkit::groupfile::read_groups;
use crate::toolkit::progress::progress_bar;
use crate::train::checkpoint::{self, TrainerState};
use crate::train::run_log::MetricsFile;
use crate::train::scoring::ScoreFailure;
use crate::train::TrainError;

fn cfg_err(m: impl Into<String>) -> TrainError {
    TrainError::Config(m.into())
}

/// Runs `gavel train judge` (on a blocking thread; `rt` runs the teacher's scoring).
pub fn run(args: &JudgeTrainOptions, rt: &tokio::runtime::Handle) -> Result<(), TrainError> {
    if args.train.is_empty() && args.teacher.is_none() {
        return Err(cfg_err(
            "train judge needs --train FILE (labelled groups) or --teacher NAME",
        ));
    }
    if args.teacher.is_some() == args.teacher_groups.is_empty() {
        return Err(cfg_err("--teacher and --teacher-groups go together"));
    }
    if args.dev.is_empty() && args.teacher.is_none() {
        return Err(cfg_err(
            "train judge needs --dev FILE: the best checkpoint is chosen on it",
        ));
    }
    if args.layers == 0 || args.batch_size == 0 || args.epochs == 0 {
        return Err(cfg_err(
            "--layers, --batch-size and --epochs must be at least 1",
        ));
    }
    let lora = LoraConfig {
        r: args.rank,
        alpha: args.alpha,
        ..LoraConfig::default()
    };
    lora.validate().map_err(cfg_err)?;
    let common = crate::cli::ConfigSource {
        config: args.scorer_config.clone(),
        store: args.store.clone(),
        store_url: None,
    };
    let mut cfg = common.load_config().map_err(|e| cfg_err(e.to_string()))?;
    // Only the teacher is asked anything: the other judges (a local one, a tuned one whose
    // adapter this run writes) are not built.
    cfg.judges
        .retain(|name, _| args.teacher.as_deref() == Some(name.as_str()));
    cfg.default_judge = args.teacher.clone();
    let scorer = if args.teacher.is_some() {
        rt.block_on(crate::cli::open_scorer(&cfg))
    } else {
        crate::cli::build_scorer(&cfg).map(std::sync::Arc::new)
    }
    .map_err(|e| cfg_err(e.to_string()))?;

    let (mut train_src, mut dev_src) = (
        labelled(&args.train, &scorer)?,
        labelled(&args.dev, &scorer)?,
    );
    if let Some(teacher) = &args.teacher {
        let (t, d) = rt.block_on(taught(&args.teacher_groups, teacher, &scorer))?;
        train_src.extend(t);
        dev_src.extend(d);
    }
    if let Some(max) = args.max_groups {
        train_src.truncate(max);
    }
    if let Some(augment) = &args.augment {
        let before = train_src.len();
        train_src = super::augment::with_attacks(train_src, augment, &scorer)?;
        eprintln!(
            "train judge: {} attacked copies added to {before} training groups",
            train_src.len() - before
        );
    }
    let modes = args.modes.clone();
    let (train_ex, train_truth) =
        examples::build(&scorer, &train_src, &modes, args.pairwise_opponents)?;
    let (dev_ex, dev_truth) = examples::build(&scorer, &dev_src, &modes, args.pairwise_opponents)?;
    if train_ex.is_empty() || dev_ex.is_empty() {
        return Err(cfg_err("no training or no dev examples"));
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
    let head = VerdictHead::new(
        &files,
        first,
        &choices_tokens(&files, &choices)?,
        &lora,
        &mut rng,
        &device,
    )?;
    let mut model = BaseModel::new(files, &device, first, args.reach, &choices)?;

    let started = std::time::Instant::now();
    let dir = (args.features.clone()).unwrap_or_else(|| args.output.join("features"));
    let fp = base.fingerprint.as_str();
    let train = featurize(
        &mut model,
        train_ex,
        train_truth,
        &modes,
        fp,
        &dir,
        args.quiet,
        "train",
    )?;
    let dev = featurize(
        &mut model, dev_ex, dev_truth, &modes, fp, &dir, args.quiet, "dev",
    )?;
    let features_s = started.elapsed().as_secs_f64();
    if !model.opened() {
        eprintln!("train judge: every split's features were on disk; the base model's network was not opened");
    }
    drop(model);

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
    let settings = FitSettings {
        class_weights: examples::class_weights(&train.examples, &modes),
        example_weights: if args.balance_length {
            examples::length_weights(&train.examples, &train.truths)
        } else {
            Vec::new()
        },
        modes: modes.clone(),
        epochs: args.epochs,
        batch_size: args.batch_size,
        learning_rate: args.learning_rate,
        eval_every: args.eval_every,
        seed: args.seed,
    };
    let vars = head.lora_vars();
    let mut opt = fit::optimizer(vars.clone())?;
    std::fs::create_dir_all(&args.output).map_err(TrainError::file(&args.output))?;
    let base_p = fit::first_shares(&head, &dev, &settings, false)?;
    let base_dev = fit::dev_figures(&dev, &base_p, &modes);
    // The head with fresh adapters (B = 0) is the base model at the verdict position: where it
    // is not, training would optimise another model than the one served.
    let head_p = fit::first_shares(&head, &dev, &settings, true)?;
    let drift = base_p
        .iter()
        .zip(&head_p)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f64::max);
    eprintln!("train judge: head vs served base model on dev, max |ΔP| = {drift:.2e}");
    let mut start = 0;
    let mut best = fit::Best::NONE;
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
    let mode_names: Vec<String> = modes.iter().map(|m| m.name().to_string()).collect();
    let record = |figures: &fit::DevFigures, step: u64| JudgeRecord {
        reach: args.reach,
        modes: mode_names.clone(),
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
    fit::fit(
        &head,
        &mut opt,
        &train,
        &dev,
        &settings,
        start,
        best,
        &mut metrics,
        &progress,
        |step, is_best, figures, best, opt| {
            let dir = checkpoint::checkpoint_dir(&args.output, step);
            let best_dir = args.output.join("best");
            let targets = if is_best {
                vec![&dir, &best_dir]
            } else {
                vec![&dir]
            };
            let rec = record(figures, step);
            for d in targets {
                write_adapter(d, &vars, &lora, &args.model, &adapted, &rec)?;
            }
            let state = TrainerState {
                step,
                adam_t: opt.t,
                rng_state: 0,
                seed: args.seed,
            };
            checkpoint::save_state(&dir, &state, opt.state_tensors())?;
            write_best(&args.output, best)
        },
    )?;
    progress.finish_and_clear();
    eprintln!(
        "train judge: best dev {:.4} (base {:.4}); adapter in {}",
        read_best(&args.output).mean_ranking,
        base_dev.mean_ranking,
        args.output.join("best").display()
    );
    Ok(())
}

fn figures_line(f: &fit::DevFigures) -> String {
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

/// How dev figures name a group file: its file name.
fn file_name(path: &Path) -> String {
    path.file_name().map_or_else(
        || path.display().to_string(),
        |f| f.to_string_lossy().into_owned(),
    )
}

/// The labelled groups of `files`, every line checked before anything runs.
fn labelled(files: &[PathBuf], scorer: &Scorer) -> Result<Vec<ExampleSource>, TrainError> {
    let mut out = Vec::new();
    for path in files {
        let groups = read_groups::<Labels>(path, scorer.max_group_size())
            .map_err(|problems| TrainError::Input(problems.join("\n")))?;
        let file = file_name(path);
        out.extend(groups.into_iter().map(|g| ExampleSource {
            at: g.at,
            file: file.clone(),
            per_trajectory: g.extra.labels,
            request: g.request,
            soft: false,
        }));
    }
    Ok(out)
}

/// A teacher's group file may be an eval file: its `labels`, `id` and `set` are not read.
struct Unlabelled;

impl crate::toolkit::groupfile::Extra for Unlabelled {
    fn take(obj: &mut serde_json::Map<String, serde_json::Value>) -> Result<Unlabelled, String> {
        for k in ["labels", "id", "set"] {
            obj.remove(k);
        }
        Ok(Unlabelled)
    }
}

/// The teacher's scores of the groups of `files` (from the verdict store where cached): the
/// first tenth of each file (at least one group) for dev, the rest for training.
async fn taught(
    files: &[PathBuf],
    teacher: &str,
    scorer: &Scorer,
) -> Result<(Vec<ExampleSource>, Vec<ExampleSource>), TrainError> {
    let (mut train, mut dev) = (Vec::new(), Vec::new());
    for path in files {
        let groups = read_groups::<Unlabelled>(path, scorer.max_group_size())
            .map_err(|problems| TrainError::Input(problems.join("\n")))?;
        let n_dev = groups.len().div_ceil(10);
        for (k, g) in groups.into_iter().enumerate() {
            let mut request = g.request.clone();
            request.judges = vec![teacher.to_string()];
            let resp = scorer.score_group(&request).await.map_err(|e| {
                ScoreFailure::Scorer(e).at(Some(&format!("{}: teacher {teacher:?}", g.at)))
            })?;
            let scores = resp
                .scores
                .iter()
                .map(|s| s.components.get("judge").copied().flatten())
                .collect::<Option<Vec<f64>>>()
                .ok_or_else(|| {
                    let teacher = teacher.to_string();
                    ScoreFailure::NoTeacherScore { teacher }.at(Some(&g.at))
                })?;
            let src = ExampleSource {
                at: g.at,
                file: file_name(path),
                request: g.request,
                per_trajectory: scores,
                soft: true,
            };
            if k < n_dev {
                dev.push(src);
            } else {
                train.push(src);
            }
        }
    }
    Ok((train, dev))
}

fn choices_tokens(
    files: &ModelFiles,
    choices: &[Vec<Vec<String>>],
) -> Result<Vec<Vec<Vec<u32>>>, TrainError> {
    choices
        .iter()
        .map(|c| Ok(files.tokenizer.choice_tokens(c, files.config.vocab_size)?))
        .collect()
}

/// The features of every example, group by group and mode within a group: read from the
/// split's file in `dir` where an earlier run kept them, else computed and kept there.
#[allow(clippy::too_many_arguments)]
fn featurize(
    model: &mut BaseModel,
    examples: Vec<examples::Example>,
    truths: Vec<examples::GroupTruth>,
    modes: &[JudgeMode],
    base: &str,
    dir: &Path,
    quiet: bool,
    what: &str,
) -> Result<Split, TrainError> {
    // A group's prompts in one mode share the template and the group's context: their common
    // prefix is long (prompts of different modes share only the chat template's start), so it
    // is prefilled and kept once per group and mode: one chunk.
    let mut chunks: Vec<Vec<(Vec<u32>, usize)>> = Vec::new();
    let mut chunk_of = Vec::with_capacity(examples.len());
    for (i, e) in examples.iter().enumerate() {
        let prev = i.checked_sub(1).map(|p| &examples[p]);
        if prev.is_none_or(|p| p.group != e.group || p.mode != e.mode) {
            chunks.push(Vec::new());
        }
        let mi = modes.iter().position(|&m| m == e.mode).unwrap_or(0);
        chunks
            .last_mut()
            .expect("pushed")
            .push((model.tokens(&e.messages)?, mi));
        chunk_of.push(chunks.len() - 1);
    }
    let device = model.device_kind();
    let key = FeatureKey {
        base,
        device: &device,
        first: model.first,
        reach: model.reach,
        choices: &model.choices,
        chunks: &chunks,
    };
    let path = key.path(dir, what);
    let layers = model.files().config.num_hidden_layers - model.first;
    if let Some(features) = feature_file::load(&path, examples.len(), layers, model.reach)? {
        eprintln!("train judge: {what} features read from {}", path.display());
        return Ok(Split {
            examples,
            features,
            truths,
        });
    }
    let bar = progress_bar(
        chunks.len() as u64,
        0,
        &format!("{what} groups × modes"),
        !quiet,
    );
    // Without a terminal (a job's log) the bar draws nothing, and this pass can take an hour:
    // a line every twentieth of it instead.
    let log_every = if quiet || std::io::stderr().is_terminal() {
        usize::MAX
    } else {
        chunks.len().div_ceil(20).max(1)
    };
    let started = std::time::Instant::now();
    let mut features = Vec::with_capacity(examples.len());
    for (done, chunk) in (1..).zip(&chunks) {
        features.extend(model.group(chunk)?);
        bar.inc(1);
        if done % log_every == 0 || (done == chunks.len() && log_every != usize::MAX) {
            let s = started.elapsed().as_secs_f64();
            let left = s / done as f64 * (chunks.len() - done) as f64;
            eprintln!(
                "train judge: {what} features, {done} of {} groups × modes in {s:.0} s, \
                 about {left:.0} s left",
                chunks.len()
            );
        }
    }
    bar.finish_and_clear();
    feature_file::save(&path, &features, &chunk_of)?;
    Ok(Split {
        examples,
        features,
        truths,
    })
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

fn write_best(out: &Path, best: fit::Best) -> Result<(), TrainError> {
    let path = out.join(BEST_FILE);
    std::fs::write(&path, serde_json::to_string(&best).expect("json"))
        .map_err(TrainError::file(&path))
}

/// The best dev figures so far ([`fit::Best::NONE`] before the first).
fn read_best(out: &Path) -> fit::Best {
    std::fs::read_to_string(out.join(BEST_FILE))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(fit::Best::NONE)
}
