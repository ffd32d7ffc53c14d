//! The HTML report: one self-contained page with the summary, three plots and a collapsed table
//! per group, rendered from `templates/diff.html.j2` on the shared layout
//! ([`crate::toolkit::html`]).
//!
//! This file turns the [`Report`] into the page's context: every figure formatted as the text
//! report formats it, every label as it reads. The markup is the template's, and so is the
//! escaping of every text from the input (labels, names, judge explanations, error messages).
//! The plots are computed in `plots`.

mod plots;

use serde::Serialize;

use super::text::{num, rank, signed};
use super::{Compare, Comparison, GroupReport, Report};
use crate::toolkit::html::{clip, Card, Plot};

use plots::{delta_svg, distribution_svg, tau_svg};

const TEMPLATE: &str = include_str!("../templates/diff.html.j2");

/// Groups drawn one bar each in the τ plot; more become a histogram.
const MAX_TAU_ROWS: usize = 60;

/// The page's context: what `diff.html.j2` shows, in the order it shows it.
#[derive(Serialize)]
struct Page {
    title: String,
    /// `Rubric diff` or `Judge diff`.
    heading: &'static str,
    /// What differs between the sides: `rubric` or `judge`.
    kind: &'static str,
    a: String,
    b: String,
    /// ` · both judged by J` / ` · both under rubric R`, or nothing.
    shared: String,
    groups: usize,
    file: String,
    cards: Vec<Card>,
    distribution: Plot,
    delta: Plot,
    tau: Plot,
    /// Whether the τ plot is a histogram (too many groups for a bar each).
    tau_histogram: bool,
    summary: Vec<(&'static str, String)>,
    /// `side A` / `side B` and what each side was.
    sides: Vec<(&'static str, String)>,
    /// Why the movers table is empty, when it is.
    no_movers: Option<&'static str>,
    movers: Vec<MoverRow>,
    group_sections: Vec<GroupSection>,
}

#[derive(Serialize)]
struct MoverRow {
    group: String,
    label: String,
    a: String,
    b: String,
    direction: &'static str,
    delta: String,
}

/// One group: failed (its errors) or compared (its trajectories).
#[derive(Serialize)]
struct GroupSection {
    label: String,
    failed: Option<Failed>,
    compared: Option<Compared>,
}

#[derive(Serialize)]
struct Failed {
    /// `B: judge_unavailable`, one per failed side.
    sides: String,
    errors: Vec<ErrorLine>,
}

#[derive(Serialize)]
struct ErrorLine {
    side: String,
    kind: String,
    message: String,
}

#[derive(Serialize)]
struct Compared {
    tau: String,
    flips: String,
    flipped: bool,
    mean_abs_delta: String,
    rows: Vec<TrajectoryRow>,
    why: Option<Why>,
}

#[derive(Serialize)]
struct TrajectoryRow {
    mover: bool,
    label: String,
    reward_a: Option<RewardCell>,
    reward_b: Option<RewardCell>,
    direction: &'static str,
    delta: String,
    rank_a: String,
    rank_b: String,
    moved: Option<RankMove>,
}

/// A reward and its bar's width in percent of the cell.
#[derive(Serialize)]
struct RewardCell {
    value: String,
    width: String,
}

/// `▲2` when the trajectory rose two places from A to B, `▼1` when it fell one.
#[derive(Serialize)]
struct RankMove {
    class: &'static str,
    arrow: &'static str,
    places: String,
}

/// Why the trajectory that moved most moved: each side's explanation.
#[derive(Serialize)]
struct Why {
    label: String,
    delta: String,
    a: String,
    b: String,
}

fn side_kind(report: &Report) -> &'static str {
    match report.compare {
        Compare::Rubric => "rubric",
        Compare::Judge => "judge",
    }
}

/// The whole page; an error is a bug in the template or this context.
pub fn render(report: &Report) -> Result<String, minijinja::Error> {
    crate::toolkit::html::render("diff.html.j2", TEMPLATE, &page(report))
}

fn page(report: &Report) -> Page {
    let (a, b) = (&report.sides.a, &report.sides.b);
    let s = &report.summary;
    let kind = side_kind(report);
    let shared = match report.compare {
        Compare::Rubric => a.judge.as_ref().map(|j| format!(" · both judged by {j}")),
        Compare::Judge => a
            .rubric
            .as_ref()
            .map(|r| format!(" · both under rubric {r}")),
    }
    .unwrap_or_default();
    let mean_tau = s
        .mean_kendall_tau_b
        .map_or("—".into(), |t| format!("{t:.3}"));
    let cards = vec![
        Card::new(mean_tau.clone(), "mean Kendall τ-b (1 = same order)", false),
        Card::new(
            num(s.mean_abs_delta),
            format!("mean |Δ| · mean Δ {}", signed(s.mean_delta)),
            false,
        ),
        Card::new(
            format!("{} / {}", s.groups_with_rank_flips, s.groups_compared),
            "groups with a rank flip",
            false,
        ),
        Card::new(
            s.groups_failed.to_string(),
            if s.groups_failed == 1 {
                "group failed"
            } else {
                "groups failed"
            },
            s.groups_failed > 0,
        ),
    ];
    let pct = s
        .fraction_groups_with_rank_flips
        .map_or(String::new(), |f| format!(" ({:.0}%)", f * 100.0));
    let undefined = if s.groups_tau_undefined > 0 {
        format!(" ({} undefined)", s.groups_tau_undefined)
    } else {
        String::new()
    };
    let summary = vec![
        (
            "groups compared",
            format!("{} of {}", s.groups_compared, s.groups),
        ),
        ("groups failed", s.groups_failed.to_string()),
        ("trajectories compared", s.trajectories_compared.to_string()),
        ("mean |Δ|", num(s.mean_abs_delta)),
        ("mean Δ", signed(s.mean_delta)),
        ("mean τ-b", format!("{mean_tau}{undefined}")),
        (
            "groups with rank flips",
            format!("{} of {}{pct}", s.groups_with_rank_flips, s.groups_compared),
        ),
        ("flipped pairs", s.rank_flips.to_string()),
        (
            "judge calls A · B",
            format!("{} · {}", s.judge_calls.a, s.judge_calls.b),
        ),
        (
            "failed calls A · B",
            format!("{} · {}", s.failed_calls.a, s.failed_calls.b),
        ),
        (
            "cache hits A · B",
            format!("{} · {}", s.cache_hits.a, s.cache_hits.b),
        ),
    ];
    let sides = [("A", a), ("B", b)]
        .into_iter()
        .map(|(name, side)| {
            let mut what = format!("{kind} {}", side.label);
            if let Some(v) = &side.rubric_version {
                what += &format!(" ({})", clip(v, 19));
            }
            if !side.judges_used.is_empty() {
                what += &format!(" · {}", side.judges_used.join(", "));
            }
            (name, what)
        })
        .collect();
    let no_movers = s
        .top_movers
        .is_empty()
        .then_some(if s.groups_compared == 0 {
            "No group was scored on both sides."
        } else {
            "No reward changed."
        });
    let movers = s
        .top_movers
        .iter()
        .map(|m| MoverRow {
            group: clip(&format!("[{}] {}", m.group, m.group_label), 60),
            label: clip(&m.label, 60),
            a: num(Some(m.reward_a)),
            b: num(Some(m.reward_b)),
            direction: direction(m.delta),
            delta: signed(Some(m.delta)),
        })
        .collect();
    Page {
        title: format!("gavel diff: {kind} {} vs {}", a.label, b.label),
        heading: match report.compare {
            Compare::Rubric => "Rubric diff",
            Compare::Judge => "Judge diff",
        },
        kind,
        a: a.label.clone(),
        b: b.label.clone(),
        shared,
        groups: s.groups,
        file: report.file.clone(),
        cards,
        distribution: distribution_svg(report),
        delta: delta_svg(report),
        tau: tau_svg(report),
        tau_histogram: report.groups.len() > MAX_TAU_ROWS,
        summary,
        sides,
        no_movers,
        movers,
        group_sections: report.groups.iter().map(group_section).collect(),
    }
}

/// CSS class for a delta's direction.
fn direction(d: f64) -> &'static str {
    if d > 5e-4 {
        "up"
    } else if d < -5e-4 {
        "down"
    } else {
        "same"
    }
}

fn group_section(g: &GroupReport) -> GroupSection {
    let label = format!("[{}] {}", g.index, g.label);
    let Some(c) = &g.comparison else {
        let sides: Vec<String> = g
            .errors
            .iter()
            .map(|e| format!("{}: {}", e.side.to_uppercase(), e.kind))
            .collect();
        let errors = g
            .errors
            .iter()
            .map(|e| ErrorLine {
                side: e.side.to_uppercase(),
                kind: e.kind.clone(),
                message: e.message.clone(),
            })
            .collect();
        return GroupSection {
            label,
            failed: Some(Failed {
                sides: sides.join(", "),
                errors,
            }),
            compared: None,
        };
    };
    GroupSection {
        label,
        failed: None,
        compared: Some(compared(c)),
    }
}

fn compared(c: &Comparison) -> Compared {
    let flips = match c.rank_flips {
        0 => "no rank flip".to_string(),
        1 => "1 rank flip".to_string(),
        n => format!("{n} rank flips"),
    };
    let mover = c.moved_most.as_ref().map(|m| m.trajectory_id.as_str());
    let rows = c
        .trajectories
        .iter()
        .map(|t| TrajectoryRow {
            mover: Some(t.trajectory_id.as_str()) == mover,
            label: t.label.clone(),
            reward_a: t.reward_a.map(reward_cell),
            reward_b: t.reward_b.map(reward_cell),
            direction: t.delta.map_or("same", direction),
            delta: signed(t.delta),
            rank_a: rank(t.rank_a),
            rank_b: rank(t.rank_b),
            moved: rank_move(t.rank_a, t.rank_b),
        })
        .collect();
    let why = c
        .moved_most
        .as_ref()
        .filter(|m| !(m.explanation_a.is_empty() && m.explanation_b.is_empty()))
        .map(|m| Why {
            label: m.label.clone(),
            delta: signed(Some(m.delta)),
            a: m.explanation_a.clone(),
            b: m.explanation_b.clone(),
        });
    Compared {
        tau: c
            .kendall_tau_b
            .map_or("τ-b undefined".into(), |t| format!("τ-b {t:.3}")),
        flips,
        flipped: c.rank_flips > 0,
        mean_abs_delta: num(c.mean_abs_delta),
        rows,
        why,
    }
}

fn reward_cell(v: f64) -> RewardCell {
    RewardCell {
        value: format!("{v:.3}"),
        width: format!("{:.1}", v.clamp(0.0, 1.0) * 100.0),
    }
}

fn rank_move(a: Option<f64>, b: Option<f64>) -> Option<RankMove> {
    match (a, b) {
        (Some(a), Some(b)) if (a - b).abs() > 1e-9 => {
            let (class, arrow) = if b < a {
                ("up", "▲")
            } else {
                ("down", "▼")
            };
            Some(RankMove {
                class,
                arrow,
                places: rank(Some((a - b).abs())),
            })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests;
