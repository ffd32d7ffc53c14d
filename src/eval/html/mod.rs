//! The HTML report of `gavel eval`, rendered from `templates/eval.html.j2` on the same layout
//! as `gavel diff --html` ([`crate::toolkit::html`]): headline cards, accuracy bars with their
//! intervals per set × judge × rubric, the position and length figures, the comparisons, and
//! the misranked groups with the judge's explanations.
//!
//! This file turns the [`EvalReport`] into the page's context, every figure formatted as the
//! page shows it; the markup and the escaping of every text from the input are the template's.
//! The plots are computed in `plots`.

mod plots;

use serde::Serialize;

use crate::domain::stats::tidy;
use crate::eval::calibration_report::NoThreshold;
use crate::eval::choice::ScoreTarget;
use crate::eval::report::{EvalReport, SetResult, ALL_SETS};
use crate::toolkit::html::{Card, Plot, MUTED};
use plots::{Series, COLOR_ACC, COLOR_FIRST, COLOR_LATER, COLOR_LONGER, COLOR_SHORTER, PALETTE};

const TEMPLATE: &str = include_str!("../templates/eval.html.j2");

/// The page's context: what `eval.html.j2` shows, in the order it shows it. A section that
/// the run has nothing for is `None` (or empty) and left out.
#[derive(Serialize)]
struct Page {
    title: String,
    files: String,
    /// `ranking rewards` or `ranking the X component`.
    ranking: String,
    orders: usize,
    permutations: Option<u32>,
    cards: Vec<Card>,
    accuracy: Plot,
    position: Plot,
    length: Plot,
    results: Vec<ResultRow>,
    comparisons: Vec<ComparisonRow>,
    confidence: Option<ConfidenceSection>,
    calibration: Option<CalibrationSection>,
    /// The cascades' lines, as the text report has them.
    cascades: Vec<String>,
    attacks: Option<AttacksSection>,
    misranked: Vec<MisrankedGroup>,
}

#[derive(Serialize)]
struct ResultRow {
    set: String,
    judge: String,
    rubric: String,
    mode: &'static str,
    groups: usize,
    valid: usize,
    pairs: usize,
    accuracy: String,
    ci: String,
    top1: String,
    tau: String,
    flip_rate: String,
    mean_best: String,
    mean_worst: String,
    invalid: usize,
    calls: String,
    tokens: String,
    seconds: String,
}

#[derive(Serialize)]
struct ComparisonRow {
    set: String,
    a: String,
    b: String,
    groups: usize,
    accuracy_a: String,
    accuracy_b: String,
    difference: String,
    ci: String,
    verdict: &'static str,
}

#[derive(Serialize)]
struct ConfidenceSection {
    plot: Plot,
    /// Each curve's colour and label, for the caption.
    legend: Vec<(&'static str, String)>,
    rows: Vec<ConfidenceRow>,
}

#[derive(Serialize)]
struct ConfidenceRow {
    label: String,
    pairs: usize,
    area: String,
    top10: String,
    top50: String,
    all: String,
    deciles: String,
}

#[derive(Serialize)]
struct CalibrationSection {
    /// The accuracy the kept groups must reach, and with what probability.
    accuracy: String,
    probability: String,
    rows: Vec<CalibrationRow>,
    /// One line for a cascade's table per combination.
    toml: Vec<String>,
}

#[derive(Serialize)]
struct CalibrationRow {
    label: String,
    threshold: String,
    kept_pairs: usize,
    pairs: usize,
    coverage: String,
    kept_groups: usize,
    groups: usize,
    accuracy: String,
    lower_bound: String,
    note: String,
}

#[derive(Serialize)]
struct AttacksSection {
    cards: Vec<Card>,
    rows: Vec<AttackRow>,
}

#[derive(Serialize)]
struct AttackRow {
    label: String,
    attack: String,
    kind: String,
    groups: usize,
    success: String,
    success_ci: String,
    shift: String,
    shift_ci: String,
    accuracy_clean: String,
    accuracy_attacked: String,
    invalid: usize,
}

#[derive(Serialize)]
struct MisrankedGroup {
    /// `id (where)`.
    title: String,
    /// The set × judge × rubric it was misranked under.
    under: String,
    accuracy: String,
    rows: Vec<MisrankedRow>,
}

#[derive(Serialize)]
struct MisrankedRow {
    label: String,
    scores: String,
    answer: String,
    explanation: String,
}

fn num(x: Option<f64>) -> String {
    x.map_or_else(|| "—".into(), |v| format!("{v:.3}"))
}

/// `+0.125`, or `—`.
fn signed(x: Option<f64>) -> String {
    x.map_or_else(|| "—".into(), |d| format!("{d:+.3}"))
}

/// `0.123 – 0.456` (signed when `sign`), or `—`.
fn ci_text(ci: Option<[f64; 2]>, sign: bool) -> String {
    ci.map_or_else(
        || "—".into(),
        |[a, b]| {
            if sign {
                format!("{a:+.3} – {b:+.3}")
            } else {
                format!("{a:.3} – {b:.3}")
            }
        },
    )
}

/// Judge calls, with the failed ones beside them when there were any.
fn calls_cell(calls: u64, failed: u64) -> String {
    if failed == 0 {
        calls.to_string()
    } else {
        format!("{calls} (+{failed} failed)")
    }
}

/// The whole page; an error is a bug in the template or this context.
pub fn render(report: &EvalReport) -> Result<String, minijinja::Error> {
    crate::toolkit::html::render("eval.html.j2", TEMPLATE, &page(report))
}

fn page(report: &EvalReport) -> Page {
    let files = report.files.join(", ");
    // The headline: the pooled results when there are several sets, else every result.
    let pooled: Vec<&SetResult> = report
        .results
        .iter()
        .filter(|r| r.set == ALL_SETS)
        .collect();
    let headline = if pooled.is_empty() {
        report.results.iter().collect()
    } else {
        pooled
    };
    let mut cards: Vec<Card> = headline
        .iter()
        .take(4)
        .map(|r| {
            Card::new(
                num(r.pairwise_accuracy),
                format!("pairwise accuracy · {}", r.label()),
                false,
            )
        })
        .collect();
    let invalid: usize = headline.iter().map(|r| r.invalid).sum();
    cards.push(Card::new(
        invalid.to_string(),
        "invalid verdicts",
        invalid > 0,
    ));
    let position: [Series; 3] = [
        ("better shown first", COLOR_FIRST, |r| {
            r.position.accuracy_better_first
        }),
        ("better shown later", COLOR_LATER, |r| {
            r.position.accuracy_better_later
        }),
        ("flip rate", MUTED, |r| r.position.flip_rate),
    ];
    let length: [Series; 3] = [
        ("better is longer", COLOR_LONGER, |r| {
            r.length.accuracy_better_longer
        }),
        ("better is shorter", COLOR_SHORTER, |r| {
            r.length.accuracy_better_shorter
        }),
        ("rule: prefer longer", MUTED, |r| r.length.prefer_longer),
    ];
    Page {
        title: format!("gavel eval: {files}"),
        ranking: if report.score == ScoreTarget::Reward {
            "ranking rewards".to_string()
        } else {
            format!("ranking the {} component", report.score.as_str())
        },
        files,
        orders: report.orders,
        permutations: report.permutations,
        cards,
        accuracy: plots::bars(
            "pairwise accuracy",
            &report.results,
            &[("accuracy", COLOR_ACC, |r| r.pairwise_accuracy)],
            true,
        ),
        position: plots::bars("position bias", &report.results, &position, false),
        length: plots::bars("length bias", &report.results, &length, false),
        results: report.results.iter().map(result_row).collect(),
        comparisons: comparison_rows(report),
        confidence: confidence_section(report),
        calibration: calibration_section(report),
        cascades: report
            .cascades
            .iter()
            .flat_map(crate::eval::cascade_report::text_lines)
            .collect(),
        attacks: attacks_section(report),
        misranked: misranked(report),
    }
}

fn result_row(r: &SetResult) -> ResultRow {
    ResultRow {
        set: r.set.clone(),
        judge: r.judge.clone(),
        rubric: r.rubric.clone(),
        mode: r.judge_mode.as_str(),
        groups: r.groups,
        valid: r.valid_groups,
        pairs: r.pairs,
        accuracy: num(r.pairwise_accuracy),
        ci: r
            .ci95
            .map_or_else(|| "—".into(), |[a, b]| format!("{a:.3}–{b:.3}")),
        top1: num(r.top1_accuracy),
        tau: num(r.kendall_tau),
        flip_rate: num(r.position.flip_rate),
        mean_best: num(r.calibration.mean_best),
        mean_worst: num(r.calibration.mean_worst),
        invalid: r.invalid,
        calls: calls_cell(r.usage.judge_calls, r.usage.failed_calls),
        tokens: format!("{} · {}", r.usage.prompt_tokens, r.usage.completion_tokens),
        seconds: r
            .seconds_per_group
            .map_or_else(|| "—".into(), |s| format!("{s:.2}")),
    }
}

fn comparison_rows(report: &EvalReport) -> Vec<ComparisonRow> {
    report
        .comparisons
        .iter()
        .map(|c| ComparisonRow {
            set: c.set.clone(),
            a: c.a.label(),
            b: c.b.label(),
            groups: c.groups,
            accuracy_a: num(c.accuracy_a),
            accuracy_b: num(c.accuracy_b),
            difference: signed(c.difference),
            ci: ci_text(c.ci95, true),
            verdict: c.verdict_text(),
        })
        .collect()
}

/// For combinations with a confidence: the accuracy–coverage curve (accuracy of the most
/// confident share of the pairs) as a plot, and the figures behind it.
fn confidence_section(report: &EvalReport) -> Option<ConfidenceSection> {
    if report.confidence.is_empty() {
        return None;
    }
    let legend = report
        .confidence
        .iter()
        .enumerate()
        .map(|(i, c)| (PALETTE[i % PALETTE.len()], c.label()))
        .collect();
    let rows = report
        .confidence
        .iter()
        .map(|c| {
            let at = |k: usize| c.coverage.get(k).map(|p| p.accuracy);
            ConfidenceRow {
                label: c.label(),
                pairs: c.pairs,
                area: format!("{:.3}", c.area),
                top10: num(at(0)),
                top50: num(at(4)),
                all: num(at(9)),
                deciles: c.decile_accuracies(),
            }
        })
        .collect();
    Some(ConfidenceSection {
        plot: plots::coverage(&report.confidence),
        legend,
        rows,
    })
}

/// With `--calibrate`: each combination's cascade threshold, what it keeps and its bound, and
/// the lines for a cascade's table.
fn calibration_section(report: &EvalReport) -> Option<CalibrationSection> {
    let first = report.calibration.first()?;
    let rows = report
        .calibration
        .iter()
        .map(|c| CalibrationRow {
            label: c.label(),
            threshold: c
                .thresholds
                .first()
                .map_or_else(|| "none".into(), |t| t.to_string()),
            kept_pairs: c.kept_pairs,
            pairs: c.pairs,
            coverage: format!("{:.3}", c.coverage),
            kept_groups: c.kept_groups,
            groups: c.groups,
            accuracy: num(c.accuracy),
            lower_bound: num(c.lower_bound),
            note: match c.no_threshold {
                None => String::new(),
                Some(NoThreshold::NoConfidence) => "no confidence: cannot be calibrated".into(),
                Some(NoThreshold::TooFewPairs) => format!("fewer than {} pairs", c.min_pairs),
                Some(NoThreshold::BoundTooLow) => "can decide nothing at this α, δ".into(),
            },
        })
        .collect();
    Some(CalibrationSection {
        accuracy: tidy(1.0 - first.alpha).to_string(),
        probability: tidy(1.0 - first.delta).to_string(),
        rows,
        toml: report.calibration.iter().map(|c| c.toml()).collect(),
    })
}

/// With `--attacks`: the worst attack per set × combination as cards (at most six), then every
/// attack's figures.
fn attacks_section(report: &EvalReport) -> Option<AttacksSection> {
    if report.attacks.is_empty() {
        return None;
    }
    let cards = report
        .attack_summary
        .iter()
        .take(6)
        .map(|s| {
            Card::new(
                num(s.success_rate),
                format!("worst attack ({}) · {}", s.worst_attack, s.label()),
                s.success_rate.is_some_and(|r| r > 0.05),
            )
        })
        .collect();
    let rows = report
        .attacks
        .iter()
        .map(|a| AttackRow {
            label: a.label(),
            attack: a.attack.clone(),
            kind: a.kind.clone(),
            groups: a.groups,
            success: num(a.success_rate),
            success_ci: ci_text(a.success_ci95, false),
            shift: signed(a.score_shift),
            shift_ci: ci_text(a.score_shift_ci95, true),
            accuracy_clean: num(a.accuracy_clean),
            accuracy_attacked: num(a.accuracy_attacked),
            invalid: a.invalid,
        })
        .collect();
    Some(AttacksSection { cards, rows })
}

/// Every misranked group of each set (the pooled results repeat them, so they are left out).
fn misranked(report: &EvalReport) -> Vec<MisrankedGroup> {
    report
        .results
        .iter()
        .filter(|r| r.set != ALL_SETS)
        .flat_map(|r| {
            r.misranked.iter().map(|m| MisrankedGroup {
                title: format!("{} ({})", m.id, m.at),
                under: r.label(),
                accuracy: format!("{:.2}", m.accuracy),
                rows: m
                    .trajectories
                    .iter()
                    .map(|t| MisrankedRow {
                        label: t.label.to_string(),
                        scores: t
                            .scores
                            .iter()
                            .map(|s| format!("{s:.3}"))
                            .collect::<Vec<_>>()
                            .join(" · "),
                        answer: t.answer.clone(),
                        explanation: t.explanation.clone(),
                    })
                    .collect(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests;
