//! `gavel eval`: measures a judge's rewards against labels.
//!
//! Labelled groups (a `/v1/score_group` body plus `labels`, and optional `id` and `set`) are
//! scored through the normal pipeline (config, judges, verdict cache, rate limits) under every
//! judge × rubric combination asked for, each in `--orders` orders (as given, reversed, then
//! seeded shuffles). The report ([`report`]) gives per set and overall: pairwise accuracy with a
//! bootstrap interval, top-1 accuracy, Kendall τ-b, position bias (flip rate; accuracy when the
//! better trajectory is shown first vs later), length bias, calibration, invalid verdicts
//! (counted, never scored), usage and time; with several combinations, paired comparisons.
//! Output: a terminal summary, one JSON document, or a self-contained HTML page.
//!
//! With `--attacks` ([`attacks`]), each group is also judged once per attack with its wrong
//! trajectories' final answers rewritten, and the report adds each attack's success rate, score
//! shift and accuracy under attack ([`attack_report`]).
//!
//! With `--calibrate` ([`calibration_report`], [`calibrate`]), the report adds, per set ×
//! combination whose verdicts carry a confidence, the threshold a cascade stage would use: the
//! lowest whose kept decisions are at least 1 − α accurate with probability 1 − δ.

mod attack_report;
mod attacks;
pub mod calibrate;
mod calibration_report;
mod cascade_report;
pub mod choice;
mod confidence;
mod html;
mod judged;
mod output;
pub mod report;
pub mod stats;
mod text;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use futures::StreamExt;
use serde_json::{Map, Value};

use crate::cli::{attach_store, build_scorer, CliError, ConfigSource};
use crate::config::Config;
use crate::domain::prompt::JudgeMode;
use crate::domain::rubric::{RubricArg, RubricSet};
use crate::domain::trajectory::{Role, Trajectory};
use crate::score::{ScoreRequest, Scorer};
use crate::toolkit::exit::Exit;
use crate::toolkit::groupfile::{
    check_permutations, label_of, override_judging, override_request, print_problems, read_checked,
    Extra, GroupIn, KeptAside,
};
use crate::toolkit::outcome::{group_outcome, FailedGroup, GroupOutcome};
use crate::toolkit::output_file::make_parent;
use crate::toolkit::progress::{progress_bar, stderr_is_terminal};
pub use attack_report::{AttackResult, AttackSummary};
pub use attacks::AttackOptions;
pub use calibration_report::{CalibrateOptions, CalibrationResult, NoThreshold};
use choice::ModeAsked;
pub use choice::ScoreTarget;

pub use judged::{Combo, GroupRun, Judging, LabelledGroup};
pub use report::{EvalReport, SetResult};

/// Most orders a group may be judged in.
pub const MAX_ORDERS: usize = 16;

/// How the report is written.
pub use crate::toolkit::output_file::ReportFormat as EvalFormat;
pub use output::summary_line;

/// What `gavel eval` measures and how it reports (the command line's `--judge`, `--rubric`,
/// `--judge-mode`... in `gavel`'s `commands/eval.rs`).
#[derive(Debug, Clone)]
pub struct EvalOptions {
    /// Judges to evaluate; none: the config's default judge.
    pub judges: Vec<String>,
    /// Rubrics to evaluate (names, or rubric files: see `RubricSet::resolve_arg`); none: each
    /// group's own.
    pub rubrics: Vec<String>,
    /// Judging modes to evaluate; none: each judge's configured mode.
    pub modes: Vec<JudgeMode>,
    /// Orders each group is judged in (1 to [`MAX_ORDERS`]).
    pub orders: usize,
    /// What is ranked against the labels.
    pub score: ScoreTarget,
    /// Passed through to every request.
    pub permutations: Option<u32>,
    /// Groups judged at once; none: 4, or 1 when every judge evaluated is local.
    pub concurrency: Option<usize>,
    /// Only the first N groups of each set.
    pub limit: Option<usize>,
    /// The report's format (the command line's `--format`, else the `-o` file's extension:
    /// `EvalFormat::choose`).
    pub format: EvalFormat,
    /// Where the report goes; none: standard output. A one-line summary goes to stderr
    /// whatever the format.
    pub output: Option<PathBuf>,
    /// Labelled group files.
    pub files: Vec<PathBuf>,
    /// `--attacks`: judge each group again under each attack.
    pub attacks: Option<AttackOptions>,
    /// `--calibrate`: choose each combination's cascade threshold at these risk levels.
    pub calibrate: Option<CalibrateOptions>,
}

/// The eval fields of a line.
#[derive(Debug, Clone)]
pub struct Labels {
    pub labels: Vec<f64>,
    pub id: Option<String>,
    pub set: Option<String>,
}

impl Extra for Labels {
    fn take(obj: &mut Map<String, Value>) -> Result<Labels, String> {
        let id = match obj.remove("id") {
            None => None,
            Some(v) => Some(label_of(&v).ok_or("id: expected a string or a number")?),
        };
        let set = match obj.remove("set") {
            None => None,
            Some(Value::String(s)) if s == report::ALL_SETS => {
                return Err(format!(
                    "set: {:?} is the name of the figures pooled over every set",
                    report::ALL_SETS
                ))
            }
            Some(Value::String(s)) if !s.trim().is_empty() => Some(s),
            Some(_) => return Err("set: expected a non-empty string".into()),
        };
        let labels = match obj.remove("labels") {
            None | Some(Value::Null) => {
                return Err("labels: missing (one number per trajectory, higher is better)".into())
            }
            Some(Value::Array(a)) => a
                .iter()
                .enumerate()
                .map(|(i, v)| {
                    v.as_f64()
                        .filter(|x| x.is_finite())
                        .ok_or_else(|| format!("labels[{i}]: expected a number"))
                })
                .collect::<Result<Vec<f64>, String>>()?,
            Some(_) => return Err("labels: expected an array of numbers".into()),
        };
        // A line's other fields (a row written by `rescore` or a tool of the user's) are not
        // eval's: left aside, as `score` and `diff` leave them, a near miss of a request field
        // still refused.
        KeptAside::take(obj)?;
        Ok(Labels { labels, id, set })
    }

    fn check(&self, request: &ScoreRequest) -> Result<(), String> {
        let (l, t) = (self.labels.len(), request.trajectories.len());
        if l != t {
            return Err(format!(
                "labels: {l} label{} for {t} trajector{}",
                if l == 1 { "" } else { "s" },
                if t == 1 { "y" } else { "ies" }
            ));
        }
        if self.labels.windows(2).all(|w| w[0] == w[1]) {
            return Err("labels: all equal, so there is nothing to rank".into());
        }
        Ok(())
    }
}

/// Characters the agent wrote in a trajectory: assistant text and tool-call arguments.
pub fn agent_length(t: &Trajectory) -> usize {
    t.messages
        .iter()
        .filter(|m| m.role == Role::Assistant)
        .map(|m| {
            m.content.as_deref().map_or(0, |c| c.chars().count())
                + m.tool_calls
                    .iter()
                    .map(|c| c.arguments.chars().count())
                    .sum::<usize>()
        })
        .sum()
}

/// One combination as the requests get it (`None` = the request's own, or the judge's mode).
pub(crate) struct Variant {
    judge: Option<String>,
    rubric: Option<RubricArg>,
    mode: Option<JudgeMode>,
    combo: Combo,
}

/// The combinations: every judge × every rubric (`--rubric`, read) × every judging mode.
fn combos(args: &EvalOptions, rubrics: &[RubricArg], cfg: &Config) -> Vec<Variant> {
    fn each<T: Clone>(given: &[T]) -> Vec<Option<T>> {
        if given.is_empty() {
            vec![None]
        } else {
            given.iter().cloned().map(Some).collect()
        }
    }
    let default_judge = cfg.default_judge_name().unwrap_or("default").to_string();
    let mut out = Vec::new();
    for judge in each(&args.judges) {
        for rubric in each(rubrics) {
            for mode in each(&args.modes) {
                let name = judge.clone().unwrap_or_else(|| default_judge.clone());
                // The mode the judge will be asked in: the one asked for, else its config's.
                let asked = mode.or_else(|| cfg.judges.get(&name).and_then(|j| j.effective_mode()));
                let combo = Combo {
                    judge: name,
                    rubric: rubric
                        .as_ref()
                        .map_or_else(|| "as in file".into(), |r| r.given.clone()),
                    judge_mode: asked.map_or(ModeAsked::AsConfigured, ModeAsked::Mode),
                };
                out.push(Variant {
                    judge: judge.clone(),
                    rubric: rubric.clone(),
                    mode,
                    combo,
                });
            }
        }
    }
    out
}

/// Groups judged at once when `--concurrency` is not given, local judges or remote. A local
/// judge runs each group's prompts as one job on its shared prefix, so groups in flight together
/// no longer push each other's prompts out of its prefix cache (BENCHMARKS.md, "Local judge under
/// load").
const DEFAULT_CONCURRENCY: usize = 4;

/// The request for one group (its trajectories as labelled, or an attacked copy), combination
/// and order.
fn order_request(
    g: &GroupIn<Labels>,
    trajectories: &[Trajectory],
    v: &Variant,
    permutations: Option<u32>,
    order: &[usize],
) -> ScoreRequest {
    let mut r = g.request.clone();
    override_request(&mut r, v.rubric.as_ref(), v.judge.as_deref());
    override_judging(&mut r, v.mode, permutations);
    r.trajectories = order.iter().map(|&i| trajectories[i].clone()).collect();
    r
}

fn usage_error(m: &str) -> Result<Exit, CliError> {
    eprintln!("gavel eval: {m}");
    Ok(Exit::Refused)
}

/// Done when every judging gave a verdict, Failed when some did not (they are counted in the
/// report, never scored), Refused for a usage or file problem (nothing judged).
pub async fn run(source: &ConfigSource, args: &EvalOptions) -> Result<Exit, CliError> {
    if args.orders == 0 || args.orders > MAX_ORDERS {
        return usage_error(&format!("--orders must be 1 to {MAX_ORDERS}"));
    }
    if let Some(Err(e)) = args.permutations.map(|p| check_permutations(p.into())) {
        return usage_error(&format!("--permutations: {e}"));
    }
    if args.concurrency == Some(0) {
        return usage_error("--concurrency must be at least 1");
    }
    if let Some(c) = args.calibrate {
        // Either at 0 or 1 asks for certainty or for nothing: no threshold means anything.
        for (name, v) in [("--alpha", c.alpha), ("--delta", c.delta)] {
            if !(v > 0.0 && v < 1.0) {
                return usage_error(&format!(
                    "{name} must be between 0 and 1 (exclusive), got {v}"
                ));
            }
        }
    }
    let cfg = source.load_config()?;
    let rubric_set =
        RubricSet::load(cfg.rubrics_dir.as_deref()).map_err(crate::score::BuildError::from)?;
    let mut rubrics = Vec::with_capacity(args.rubrics.len());
    for r in &args.rubrics {
        match rubric_set.resolve_arg(r) {
            Ok(arg) => rubrics.push(arg),
            Err(e) => return usage_error(&format!("--rubric: {e}")),
        }
    }
    for j in &args.judges {
        if !cfg.judges.contains_key(j) {
            return usage_error(&format!("--judge: {}", cfg.unknown_judge(j)));
        }
    }
    let combos = combos(args, &rubrics, &cfg);
    let concurrency = args.concurrency.unwrap_or(DEFAULT_CONCURRENCY);

    // Read every file and check every line before any judge is called.
    let scorer = build_scorer(&cfg)?;
    let mut problems = Vec::new();
    let mut read: Vec<(String, GroupIn<Labels>)> = Vec::new();
    for file in &args.files {
        let checked = read_checked::<Labels>(file, &scorer, |g| {
            let as_given: Vec<usize> = (0..g.request.trajectories.len()).collect();
            combos
                .iter()
                .map(|v| order_request(g, &g.request.trajectories, v, args.permutations, &as_given))
                .collect()
        });
        match checked {
            Ok(gs) => {
                let name = file.display().to_string();
                read.extend(gs.into_iter().map(|g| (name.clone(), g)));
            }
            Err(p) => problems.extend(p),
        }
    }
    if !problems.is_empty() {
        return Ok(print_problems(&problems));
    }
    if let Some(path) = &args.output {
        make_parent(path).map_err(CliError::Io)?;
    }

    // Sets: the line's `set`, else the file's stem; `--limit` per set.
    let mut groups: Vec<(LabelledGroup, GroupIn<Labels>)> = Vec::new();
    let mut per_set: std::collections::BTreeMap<String, usize> = Default::default();
    for (file, g) in read {
        let stem = std::path::Path::new(&file)
            .file_stem()
            .map_or_else(|| file.clone(), |s| s.to_string_lossy().into_owned());
        let set = g.extra.set.clone().unwrap_or(stem);
        let n = per_set.entry(set.clone()).or_default();
        if args.limit.is_some_and(|l| *n >= l) {
            continue;
        }
        *n += 1;
        let at = g.at.clone();
        let id = g
            .extra
            .id
            .clone()
            .or_else(|| g.group_id.clone())
            .unwrap_or_else(|| at.clone());
        let lg = LabelledGroup {
            at,
            id,
            set,
            labels: g.extra.labels.clone(),
            lengths: g.request.trajectories.iter().map(agent_length).collect(),
            answers: g
                .request
                .trajectories
                .iter()
                .map(|t| t.final_answer().unwrap_or("").to_string())
                .collect(),
        };
        groups.push((lg, g));
    }

    let attacked = match &args.attacks {
        None => attacks::Attacked::none(),
        Some(opts) => {
            let gs: Vec<&GroupIn<Labels>> = groups.iter().map(|(_, g)| g).collect();
            let prepared = attacks::prepare(opts, &scorer, &combos, &gs);
            let attacked = match prepared {
                Ok(a) => a,
                Err(m) => return usage_error(&m),
            };
            if !agree_to_attacks(&scorer, &cfg, args, opts, &combos, &groups, &attacked)? {
                return Ok(Exit::Refused);
            }
            attacked
        }
    };
    let scorer: Arc<Scorer> = attach_store(scorer, &cfg).await?;
    let mut runs = judge_all(&scorer, args, concurrency, &combos, &groups, &attacked).await;
    scorer.store().flush().await?;
    if let ScoreTarget::Component(name) = &args.score {
        for j in runs.iter_mut().flat_map(|r| &mut r.judgings) {
            rank_by_component(&mut j.outcome, name);
        }
    }
    let labelled: Vec<LabelledGroup> = groups.into_iter().map(|(l, _)| l).collect();
    let combo_list: Vec<Combo> = combos.into_iter().map(|v| v.combo).collect();
    let mut report = report::build(
        args.files.iter().map(|f| f.display().to_string()).collect(),
        &args.score,
        args.orders,
        args.permutations,
        &combo_list,
        &labelled,
        &runs,
        &attacked.attacks,
        args.calibrate,
    );
    // Cascades: the configuration says their stages, cheapest first.
    for (c, combo) in combo_list.iter().enumerate() {
        let Some(cascade) = cfg.judges.get(&combo.judge).and_then(|j| j.as_cascade()) else {
            continue;
        };
        let mut sets: Vec<&str> = Vec::new();
        for g in &labelled {
            if !sets.contains(&g.set.as_str()) {
                sets.push(&g.set);
            }
        }
        for set in sets {
            let mine: Vec<&GroupRun> = runs
                .iter()
                .filter(|r| r.combo == c && r.attack.is_none() && labelled[r.group].set == set)
                .collect();
            report.cascades.push(cascade_report::cascade_result(
                set,
                combo,
                &cascade.stages,
                &labelled,
                &mine,
            ));
        }
    }
    output::write_report(&report, args.format, args.output.as_deref())?;
    let invalid = runs
        .iter()
        .flat_map(|r| &r.judgings)
        .filter(|j| match &j.outcome {
            Ok(resp) => resp.rewards.iter().any(Option::is_none),
            Err(_) => true,
        })
        .count();
    Ok(Exit::failed_if(invalid > 0))
}

/// Replaces a judging's rewards by one component's values; a response without that component
/// becomes an invalid judging (`no_component`), never a score.
fn rank_by_component(outcome: &mut GroupOutcome, name: &str) {
    let Ok(resp) = outcome else { return };
    let values: Option<Vec<Option<f64>>> = resp
        .scores
        .iter()
        .map(|s| s.components.get(name).copied())
        .collect();
    match values {
        Some(v) if v.len() == resp.rewards.len() => resp.rewards = v,
        _ => {
            let known: Vec<&str> = resp
                .scores
                .first()
                .map(|s| s.components.keys().map(String::as_str).collect())
                .unwrap_or_default();
            let message = format!(
                "no component {name:?} (the rewards have: {})",
                known.join(", ")
            );
            *outcome = Err(FailedGroup::new(
                "no_component",
                message,
                resp.usage.clone(),
            ));
        }
    }
}

/// Judges every group under every combination in every order, at most `concurrency` groups at
/// once (the orders of one group one after another), with a progress bar on a terminal.
async fn judge_all(
    scorer: &Scorer,
    args: &EvalOptions,
    concurrency: usize,
    combos: &[Variant],
    groups: &[(LabelledGroup, GroupIn<Labels>)],
    attacked: &attacks::Attacked,
) -> Vec<GroupRun> {
    // Group by group, each under every combination before the next, each attacked copy right
    // after its clean group: local judges that share a model (a base and its tuned judges) then
    // find the group's prompts in its prefix cache.
    let plans = plan_judgings(args, combos.len(), groups, attacked.attacks.len());
    let total: u64 = plans.iter().map(|(_, _, _, o)| o.len() as u64).sum();
    let bar = progress_bar(total, 0, "judgings", stderr_is_terminal());
    let bar = &bar;
    let runs = futures::stream::iter(plans)
        .map(|(c, gi, attack, orders)| async move {
            let v = &combos[c];
            let g = &groups[gi].1;
            let trajectories = attacked.of(g, gi, c, attack);
            let mut judgings = Vec::with_capacity(orders.len());
            for order in orders {
                let req = order_request(g, trajectories, v, args.permutations, &order);
                let t0 = Instant::now();
                let out = group_outcome(scorer.score_group(&req).await);
                let seconds = t0.elapsed().as_secs_f64();
                bar.inc(1);
                judgings.push(Judging {
                    order,
                    outcome: out,
                    seconds,
                });
            }
            GroupRun {
                group: gi,
                combo: c,
                attack,
                judgings,
            }
        })
        .buffered(concurrency)
        .collect()
        .await;
    bar.finish_and_clear();
    runs
}

/// Every judging to run, as (combination, group, attack, orders), in the order they run.
type Plan = (usize, usize, Option<usize>, Vec<Vec<usize>>);

fn plan_judgings(
    args: &EvalOptions,
    combos: usize,
    groups: &[(LabelledGroup, GroupIn<Labels>)],
    attacks: usize,
) -> Vec<Plan> {
    groups
        .iter()
        .enumerate()
        .flat_map(|(gi, (lg, g))| {
            let seed = format!("eval/{}/{}", lg.set, lg.id);
            let orders = stats::eval_orders(g.request.trajectories.len(), args.orders, &seed);
            (0..combos).flat_map(move |c| {
                let orders = orders.clone();
                std::iter::once(None)
                    .chain((0..attacks).map(Some))
                    .map(move |a| (c, gi, a, orders.clone()))
            })
        })
        .collect()
}

/// Says the size of an attacked run and asks before a large one ([`attacks::agree_to_size`]).
fn agree_to_attacks(
    scorer: &Scorer,
    cfg: &Config,
    args: &EvalOptions,
    opts: &AttackOptions,
    combos: &[Variant],
    groups: &[(LabelledGroup, GroupIn<Labels>)],
    attacked: &attacks::Attacked,
) -> Result<bool, CliError> {
    let plans = plan_judgings(args, combos.len(), groups, attacked.attacks.len());
    let judgings: u64 = plans.iter().map(|p| p.3.len() as u64).sum();
    let clean: u64 = plans
        .iter()
        .filter(|p| p.2.is_none())
        .map(|p| p.3.len() as u64)
        .sum();
    let tokens: u64 = plans
        .iter()
        .map(|(c, gi, a, orders)| {
            let g = &groups[*gi].1;
            let trajectories = attacked.of(g, *gi, *c, *a);
            let as_given: Vec<usize> = (0..trajectories.len()).collect();
            let req = order_request(g, trajectories, &combos[*c], args.permutations, &as_given);
            attacks::prompt_tokens(scorer, &req) * orders.len() as u64
        })
        .sum();
    let remote = combos.iter().any(|v| {
        cfg.judges
            .get(&v.combo.judge)
            .is_some_and(|j| j.backend() != crate::judge::Backend::Local)
    });
    attacks::agree_to_size(opts, judgings, clean, tokens, remote)
}
