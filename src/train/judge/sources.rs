//! Where `gavel train judge`'s groups come from: labelled group files (`--train`, `--dev`), a
//! teacher judge's scores of group files (`--teacher`, `--teacher-groups`), and attacked copies
//! of the labelled training groups (`--augment attacks`). Every line of every file is checked
//! before the base model is opened.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::examples::ExampleSource;
use super::options::JudgeTrainOptions;
use crate::eval::Labels;
use crate::score::Scorer;
use crate::toolkit::groupfile::{read_groups, Extra};
use crate::train::scoring::ScoreFailure;
use crate::train::TrainError;

/// The groups of each split.
pub struct Sources {
    pub train: Vec<ExampleSource>,
    pub dev: Vec<ExampleSource>,
}

/// The scorer the prompts are rendered with (and the teacher asked through): the configuration
/// of `--scorer-config` with the teacher as its only judge. The other judges (a local one, a
/// tuned one whose adapter this run writes) are not built.
pub fn scorer(
    args: &JudgeTrainOptions,
    rt: &tokio::runtime::Handle,
) -> Result<Arc<Scorer>, TrainError> {
    let common = crate::cli::ConfigSource {
        config: args.scorer_config.clone(),
        store: args.store.clone(),
        store_url: None,
    };
    let mut cfg = common
        .load_config()
        .map_err(|e| TrainError::Config(e.to_string()))?;
    cfg.judges
        .retain(|name, _| args.teacher.as_deref() == Some(name.as_str()));
    cfg.default_judge = args.teacher.clone();
    if args.teacher.is_some() {
        // The teacher's verdicts go to (and come from) the configured store.
        rt.block_on(crate::cli::open_scorer(&cfg))
    } else {
        crate::cli::build_scorer(&cfg).map(Arc::new)
    }
    .map_err(|e| TrainError::Config(e.to_string()))
}

/// Every split's groups: the labelled files, then the teacher's, the training split cut to
/// `--max-groups`, then its attacked copies.
pub fn gather(
    args: &JudgeTrainOptions,
    scorer: &Scorer,
    rt: &tokio::runtime::Handle,
) -> Result<Sources, TrainError> {
    let mut train = labelled(&args.train, scorer)?;
    let mut dev = labelled(&args.dev, scorer)?;
    if let Some(teacher) = &args.teacher {
        let taught = rt.block_on(taught(&args.teacher_groups, teacher, scorer))?;
        train.extend(taught.train);
        dev.extend(taught.dev);
    }
    if let Some(max) = args.max_groups {
        train.truncate(max);
    }
    if let Some(augment) = &args.augment {
        let before = train.len();
        train = super::augment::with_attacks(train, augment, scorer)?;
        eprintln!(
            "train judge: {} attacked copies added to {before} training groups",
            train.len() - before
        );
    }
    Ok(Sources { train, dev })
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

impl Extra for Unlabelled {
    fn take(obj: &mut serde_json::Map<String, serde_json::Value>) -> Result<Unlabelled, String> {
        for k in ["labels", "id", "set"] {
            obj.remove(k);
        }
        Ok(Unlabelled)
    }
}

/// The teacher's scores of the groups of `files` (from the verdict store where cached): the
/// first tenth of each file (at least one group) for dev, the rest for training.
async fn taught(files: &[PathBuf], teacher: &str, scorer: &Scorer) -> Result<Sources, TrainError> {
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
    Ok(Sources { train, dev })
}
