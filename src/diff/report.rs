//! The report `gavel diff` prints: per-group comparisons of the two sides and the summary,
//! built from each group's two scoring outcomes.

use std::collections::BTreeSet;
use std::path::Path;

use serde::Serialize;

use super::{Compare, GroupIn, KeptAside, SideSpec};
use crate::domain::stats;
use crate::score::{ScoreResponse, Usage};
use crate::toolkit::outcome::GroupOutcome;

/// What a side is and what it cost.
#[derive(Debug, Clone, Serialize)]
pub struct SideReport {
    /// How the side is called in tables and plots: its rubric or judge name.
    pub label: String,
    /// The rubric every group was scored with; `null` = each request's own.
    pub rubric: Option<String>,
    /// Its content version, when a rubric was named.
    pub rubric_version: Option<String>,
    /// The judge every group was scored with; `null` = each request's own, else the default.
    pub judge: Option<String>,
    /// Judges (name and model) that scored on this side.
    pub judges_used: Vec<String>,
    pub usage: SideUsage,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct SideUsage {
    pub judge_calls: u64,
    pub cache_hits: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// Calls that gave no verdict used (a judge that failed), and their tokens.
    pub failed_calls: u64,
    pub failed_prompt_tokens: u64,
    pub failed_completion_tokens: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost: Option<f64>,
}

impl SideUsage {
    fn add(&mut self, u: &Usage) {
        self.judge_calls += u.judge_calls;
        self.cache_hits += u.cache_hits;
        self.prompt_tokens += u.prompt_tokens;
        self.completion_tokens += u.completion_tokens;
        self.failed_calls += u.failed_calls;
        self.failed_prompt_tokens += u.failed_prompt_tokens;
        self.failed_completion_tokens += u.failed_completion_tokens;
        if let Some(c) = u.cost {
            self.cost = Some(self.cost.unwrap_or(0.0) + c);
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Sides {
    pub a: SideReport,
    pub b: SideReport,
}

/// `{"a": .., "b": ..}`.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct PerSide<T> {
    pub a: T,
    pub b: T,
}

#[derive(Debug, Clone, Serialize)]
pub struct TrajectoryRow {
    pub trajectory_id: String,
    pub label: String,
    pub reward_a: Option<f64>,
    pub reward_b: Option<f64>,
    /// B − A; `null` when either reward is null.
    pub delta: Option<f64>,
    /// Rank among the trajectories with both rewards, 1 = highest, ties share the average.
    pub rank_a: Option<f64>,
    pub rank_b: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Mover {
    pub trajectory_id: String,
    pub label: String,
    pub reward_a: f64,
    pub reward_b: f64,
    pub delta: f64,
    pub rank_a: f64,
    pub rank_b: f64,
    /// What each side's judge said about it.
    pub explanation_a: String,
    pub explanation_b: String,
}

/// The comparison of a group scored on both sides.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    pub trajectories: Vec<TrajectoryRow>,
    /// Trajectories with a reward on both sides (the rest are left out of the statistics).
    pub compared: usize,
    /// Trajectory pairs compared.
    pub pairs: usize,
    /// Pairs whose order strictly reverses.
    pub rank_flips: usize,
    /// Kendall's τ-b between the two reward vectors; `null` when one side is all ties.
    pub kendall_tau_b: Option<f64>,
    pub mean_abs_delta: Option<f64>,
    pub mean_delta: Option<f64>,
    /// The trajectory with the largest |delta|; `null` when nothing moved.
    pub moved_most: Option<Mover>,
}

#[derive(Debug, Clone, Serialize)]
pub struct GroupError {
    /// `a` or `b`.
    pub side: &'static str,
    /// The error type (`judge_unavailable`, `judge_timeout`, `invalid_request`, ...).
    #[serde(rename = "type")]
    pub kind: String,
    pub message: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct GroupReport {
    pub index: usize,
    pub line: Option<usize>,
    pub group_id: Option<String>,
    pub label: String,
    /// `ok` or `failed`.
    pub status: &'static str,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<GroupError>,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub comparison: Option<Comparison>,
    pub usage: PerSide<SideUsage>,
}

#[derive(Debug, Clone, Serialize)]
pub struct TopMover {
    pub group: usize,
    pub group_label: String,
    pub trajectory_id: String,
    pub label: String,
    pub reward_a: f64,
    pub reward_b: f64,
    pub delta: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct DiffSummary {
    pub groups: usize,
    pub groups_compared: usize,
    pub groups_failed: usize,
    pub trajectories_compared: usize,
    /// Over every compared trajectory of every compared group.
    pub mean_abs_delta: Option<f64>,
    pub mean_delta: Option<f64>,
    /// Over the groups where τ-b is defined.
    pub mean_kendall_tau_b: Option<f64>,
    pub groups_tau_undefined: usize,
    pub rank_flips: usize,
    pub groups_with_rank_flips: usize,
    pub fraction_groups_with_rank_flips: Option<f64>,
    /// The largest |delta| across all groups, biggest first (at most 5).
    pub top_movers: Vec<TopMover>,
    pub judge_calls: PerSide<u64>,
    /// Calls that gave no verdict used (a judge that failed), apart from `judge_calls`.
    pub failed_calls: PerSide<u64>,
    pub cache_hits: PerSide<u64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub file: String,
    pub compare: Compare,
    pub sides: Sides,
    pub groups: Vec<GroupReport>,
    pub summary: DiffSummary,
}

impl Report {
    pub fn failed(&self) -> usize {
        self.summary.groups_failed
    }
}

/// Compares one group's two responses.
pub fn compare_group(labels: &[String], a: &ScoreResponse, b: &ScoreResponse) -> Comparison {
    let n = a.rewards.len().min(b.rewards.len());
    let both: Vec<usize> = (0..n)
        .filter(|&i| a.rewards[i].is_some() && b.rewards[i].is_some())
        .collect();
    let ra: Vec<f64> = both.iter().filter_map(|&i| a.rewards[i]).collect();
    let rb: Vec<f64> = both.iter().filter_map(|&i| b.rewards[i]).collect();
    let deltas: Vec<f64> = ra.iter().zip(&rb).map(|(x, y)| y - x).collect();
    let (rank_a, rank_b) = (stats::average_ranks(&ra), stats::average_ranks(&rb));
    let counts = stats::pair_counts(&ra, &rb);
    let id = |i: usize| (i + 1).to_string();
    let label = |i: usize| labels.get(i).cloned().unwrap_or_else(|| id(i));
    let trajectories = (0..n)
        .map(|i| {
            let k = both.iter().position(|&j| j == i);
            TrajectoryRow {
                trajectory_id: id(i),
                label: label(i),
                reward_a: a.rewards[i],
                reward_b: b.rewards[i],
                delta: k.map(|k| stats::tidy(deltas[k])),
                rank_a: k.map(|k| rank_a[k]),
                rank_b: k.map(|k| rank_b[k]),
            }
        })
        .collect();
    let explanation = |r: &ScoreResponse, i: usize| {
        r.scores
            .get(i)
            .map(|s| s.explanation.clone())
            .unwrap_or_default()
    };
    let moved_most = stats::moved_most(&deltas).map(|k| {
        let i = both[k];
        Mover {
            trajectory_id: id(i),
            label: label(i),
            reward_a: ra[k],
            reward_b: rb[k],
            delta: stats::tidy(deltas[k]),
            rank_a: rank_a[k],
            rank_b: rank_b[k],
            explanation_a: explanation(a, i),
            explanation_b: explanation(b, i),
        }
    });
    Comparison {
        trajectories,
        compared: both.len(),
        pairs: counts.pairs,
        rank_flips: counts.discordant,
        kendall_tau_b: stats::kendall_tau_b(&ra, &rb).map(stats::tidy),
        mean_abs_delta: stats::mean(deltas.iter().map(|d| d.abs())).map(stats::tidy),
        mean_delta: stats::mean(deltas.iter().copied()).map(stats::tidy),
        moved_most,
    }
}

fn summarise(groups: &[GroupReport]) -> DiffSummary {
    let compared: Vec<&Comparison> = groups
        .iter()
        .filter_map(|g| g.comparison.as_ref())
        .collect();
    let deltas: Vec<f64> = compared
        .iter()
        .flat_map(|c| c.trajectories.iter().filter_map(|t| t.delta))
        .collect();
    let taus: Vec<f64> = compared.iter().filter_map(|c| c.kendall_tau_b).collect();
    let with_flips = compared.iter().filter(|c| c.rank_flips > 0).count();
    let mut top_movers: Vec<TopMover> = groups
        .iter()
        .filter_map(|g| g.comparison.as_ref().map(|c| (g, c)))
        .flat_map(|(g, c)| {
            c.trajectories.iter().filter_map(move |t| {
                let d = t.delta?;
                (d != 0.0).then(|| TopMover {
                    group: g.index,
                    group_label: g.label.clone(),
                    trajectory_id: t.trajectory_id.clone(),
                    label: t.label.clone(),
                    reward_a: t.reward_a.unwrap_or_default(),
                    reward_b: t.reward_b.unwrap_or_default(),
                    delta: d,
                })
            })
        })
        .collect();
    // Biggest |delta| first; stable, so file order breaks ties.
    top_movers.sort_by(|x, y| y.delta.abs().total_cmp(&x.delta.abs()));
    top_movers.truncate(5);
    let mut judge_calls = PerSide::default();
    let mut failed_calls = PerSide::default();
    let mut cache_hits = PerSide::default();
    for g in groups {
        judge_calls.a += g.usage.a.judge_calls;
        judge_calls.b += g.usage.b.judge_calls;
        failed_calls.a += g.usage.a.failed_calls;
        failed_calls.b += g.usage.b.failed_calls;
        cache_hits.a += g.usage.a.cache_hits;
        cache_hits.b += g.usage.b.cache_hits;
    }
    DiffSummary {
        groups: groups.len(),
        groups_compared: compared.len(),
        groups_failed: groups.len() - compared.len(),
        trajectories_compared: deltas.len(),
        mean_abs_delta: stats::mean(deltas.iter().map(|d| d.abs())).map(stats::tidy),
        mean_delta: stats::mean(deltas.iter().copied()).map(stats::tidy),
        mean_kendall_tau_b: stats::mean(taus.iter().copied()).map(stats::tidy),
        groups_tau_undefined: compared.len() - taus.len(),
        rank_flips: compared.iter().map(|c| c.rank_flips).sum(),
        groups_with_rank_flips: with_flips,
        fraction_groups_with_rank_flips: (!compared.is_empty())
            .then(|| stats::tidy(with_flips as f64 / compared.len() as f64)),
        top_movers,
        judge_calls,
        failed_calls,
        cache_hits,
    }
}

/// Builds the report from each group's two outcomes; `rubric_versions`: each side's `--rubric`
/// version, when it names one.
pub fn build_report(
    file: &Path,
    compare: Compare,
    specs: &[SideSpec; 2],
    rubric_versions: &[Option<String>; 2],
    groups: &[GroupIn<KeptAside>],
    outcomes: &[[GroupOutcome; 2]],
) -> Report {
    let mut usage = [SideUsage::default(), SideUsage::default()];
    let mut judges_used = [BTreeSet::new(), BTreeSet::new()];
    let mut reports = Vec::with_capacity(groups.len());
    for (g, out) in groups.iter().zip(outcomes) {
        let mut group_usage = [SideUsage::default(), SideUsage::default()];
        let mut errors = Vec::new();
        for (s, o) in out.iter().enumerate() {
            match o {
                Ok(resp) => {
                    group_usage[s].add(&resp.usage);
                    usage[s].add(&resp.usage);
                    for j in &resp.judges {
                        judges_used[s].insert(format!("{} ({})", j.name, j.model));
                    }
                }
                Err(failed) => {
                    group_usage[s].add(&failed.usage);
                    usage[s].add(&failed.usage);
                    errors.push(GroupError {
                        side: ["a", "b"][s],
                        kind: failed.kind.clone(),
                        message: failed.message.clone(),
                    })
                }
            }
        }
        let comparison = match out {
            [Ok(a), Ok(b)] => Some(compare_group(&g.trajectory_labels, a, b)),
            _ => None,
        };
        let [ua, ub] = group_usage;
        reports.push(GroupReport {
            index: g.index,
            line: g.line,
            group_id: g.group_id.clone(),
            label: g.label.clone(),
            status: if comparison.is_some() { "ok" } else { "failed" },
            errors,
            comparison,
            usage: PerSide { a: ua, b: ub },
        });
    }
    let summary = summarise(&reports);
    let side = |s: usize| {
        let spec = &specs[s];
        let label = match compare {
            Compare::Rubric => spec.rubric.clone(),
            Compare::Judge => spec.judge.clone(),
        }
        .unwrap_or_default();
        SideReport {
            label,
            rubric: spec.rubric.clone(),
            rubric_version: rubric_versions[s].clone(),
            judge: spec.judge.clone(),
            judges_used: judges_used[s].iter().cloned().collect(),
            usage: usage[s].clone(),
        }
    };
    Report {
        file: file.display().to_string(),
        compare,
        sides: Sides {
            a: side(0),
            b: side(1),
        },
        groups: reports,
        summary,
    }
}
