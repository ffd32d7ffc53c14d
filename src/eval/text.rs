//! The terminal summary: one block per set × combination, then the comparisons.

use super::choice::{ModeAsked, ScoreTarget};
use std::fmt::Write;

use super::calibration_report::NoThreshold;
use super::report::{EvalReport, SetResult};
use crate::cli::plural;
use crate::domain::stats::tidy;
use crate::toolkit::html::clip;

/// `0.700`, or `—`.
fn num(x: Option<f64>) -> String {
    x.map_or_else(|| "—".into(), |v| format!("{v:.3}"))
}

fn interval(ci: Option<[f64; 2]>) -> String {
    ci.map_or_else(String::new, |[lo, hi]| format!(" [{lo:.3}, {hi:.3}]"))
}

fn block(out: &mut String, r: &SetResult, orders: usize) {
    let mode = match r.judge_mode {
        ModeAsked::AsConfigured => String::new(),
        m => format!(" · mode {m}"),
    };
    let _ = writeln!(
        out,
        "{} · judge {} · rubric {}{mode}",
        clip(&r.set, 40),
        clip(&r.judge, 30),
        clip(&r.rubric, 30)
    );
    let errors = if r.errors.is_empty() {
        String::new()
    } else {
        let list: Vec<String> = r.errors.iter().map(|(k, n)| format!("{k} {n}")).collect();
        format!(" ({})", list.join(", "))
    };
    let _ = writeln!(
        out,
        "  {}, {} valid, {}, {} · {}{errors}",
        plural(r.groups, "group", "groups"),
        r.valid_groups,
        plural(r.pairs, "pair", "pairs"),
        plural(orders, "order", "orders"),
        plural(r.invalid, "invalid verdict", "invalid verdicts"),
    );
    for (kind, message) in &r.error_messages {
        let _ = writeln!(out, "  {kind}: {message}");
    }
    let _ = writeln!(
        out,
        "  pairwise accuracy {}{} · top-1 {} · Kendall τ-b {}",
        num(r.pairwise_accuracy),
        interval(r.ci95),
        num(r.top1_accuracy),
        num(r.kendall_tau)
    );
    let p = &r.position;
    let _ = writeln!(
        out,
        "  position: flip rate {} · accuracy better shown first {} · later {}",
        num(p.flip_rate),
        num(p.accuracy_better_first),
        num(p.accuracy_better_later)
    );
    let l = &r.length;
    let _ = writeln!(
        out,
        "  length: accuracy better longer {} ({}) · better shorter {} ({}) · \
         prefer-longer rule {} · prefer-shorter rule {}",
        num(l.accuracy_better_longer),
        plural(l.pairs_better_longer, "pair", "pairs"),
        num(l.accuracy_better_shorter),
        plural(l.pairs_better_shorter, "pair", "pairs"),
        num(l.prefer_longer),
        num(l.prefer_shorter)
    );
    let c = &r.calibration;
    let hist: Vec<String> = c.histogram.iter().map(usize::to_string).collect();
    let _ = writeln!(
        out,
        "  calibration: mean score best {} · worst {} · histogram [{}]",
        num(c.mean_best),
        num(c.mean_worst),
        hist.join(" ")
    );
    for (name, a) in &r.components {
        let _ = writeln!(
            out,
            "  component {name}: pairwise accuracy {} ({} decisions)",
            num(a.pairwise_accuracy),
            a.decisions
        );
    }
    let u = &r.usage;
    let _ = writeln!(
        out,
        "  usage: {} judge calls · {} cache hits · {} prompt + {} completion tokens · {} s/group",
        u.judge_calls,
        u.cache_hits,
        u.prompt_tokens,
        u.completion_tokens,
        r.seconds_per_group
            .map_or_else(|| "—".into(), |s| format!("{s:.2}"))
    );
    if u.failed_calls > 0 || u.failed_prompt_tokens > 0 {
        let _ = writeln!(
            out,
            "  failed: {} judge calls · {} prompt + {} completion tokens (no verdict used; not in the usage above)",
            u.failed_calls, u.failed_prompt_tokens, u.failed_completion_tokens
        );
    }
    if u.forward_passes > 0 {
        let _ = writeln!(
            out,
            "  model: {} prompt tokens prefilled · {} reused from the prefix cache · {} forward passes",
            u.prompt_tokens.saturating_sub(u.cached_prompt_tokens),
            u.cached_prompt_tokens,
            u.forward_passes
        );
    }
}

/// The whole summary.
pub fn render(report: &EvalReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "gavel eval · {} · {} · {} order{}{}",
        report.files.join(", "),
        if report.score == ScoreTarget::Reward {
            "ranking rewards".to_string()
        } else {
            format!("ranking the {} component", report.score)
        },
        report.orders,
        if report.orders == 1 { "" } else { "s" },
        report
            .permutations
            .map_or_else(String::new, |p| format!(" · {p} permutations per request"))
    );
    for r in &report.results {
        out.push('\n');
        block(&mut out, r, report.orders);
    }
    if !report.comparisons.is_empty() {
        let _ = writeln!(out, "\ncomparisons (B − A, paired bootstrap over groups):");
        for c in &report.comparisons {
            let verdict = c.verdict_text();
            let _ = writeln!(
                out,
                "  {}: A {} {} vs B {} {} · Δ {}{} over {}: {verdict}",
                clip(&c.set, 30),
                clip(&c.a.label(), 60),
                num(c.accuracy_a),
                clip(&c.b.label(), 60),
                num(c.accuracy_b),
                c.difference
                    .map_or_else(|| "—".into(), |d| format!("{d:+.3}")),
                interval(c.ci95),
                plural(c.groups, "group", "groups")
            );
        }
    }
    confidence(&mut out, report);
    calibration(&mut out, report);
    for c in &report.cascades {
        out.push('\n');
        for line in super::cascade_report::text_lines(c) {
            out.push_str(&line);
            out.push('\n');
        }
    }
    attacks(&mut out, report);
    out
}

/// Per set × combination with a confidence: accuracy by decile and of the most confident
/// shares of the pairs.
fn confidence(out: &mut String, report: &EvalReport) {
    for c in &report.confidence {
        let _ = writeln!(
            out,
            "\nconfidence · {} ({} pairs; accuracy-coverage area {:.3})",
            clip(&c.label(), 100),
            c.pairs,
            c.area
        );
        let _ = writeln!(
            out,
            "  accuracy by decile, least sure first: {}",
            c.decile_accuracies()
        );
        let kept: Vec<String> = c
            .coverage
            .iter()
            .map(|p| format!("{:.0}% {:.3}", p.coverage * 100.0, p.accuracy))
            .collect();
        let _ = writeln!(out, "  most confident: {}", kept.join(" · "));
    }
}

/// With `--calibrate`: each threshold with what it keeps, or why there is none, then the lines
/// for a cascade's table.
fn calibration(out: &mut String, report: &EvalReport) {
    for c in &report.calibration {
        let _ = writeln!(
            out,
            "\ncalibration · {} (α {}, δ {}: kept accuracy ≥ {} with probability ≥ {})",
            clip(&c.label(), 100),
            c.alpha,
            c.delta,
            tidy(1.0 - c.alpha),
            tidy(1.0 - c.delta),
        );
        let _ = match (c.thresholds.first(), c.no_threshold) {
            (Some(t), _) => writeln!(
                out,
                "  threshold {t}: keeps {} of {} pairs (coverage {:.3}) in {} of {} groups ({:.3}); \
                 accuracy {} · lower bound {}",
                c.kept_pairs,
                c.pairs,
                c.coverage,
                c.kept_groups,
                c.groups,
                c.group_coverage,
                num(c.accuracy),
                num(c.lower_bound)
            ),
            (None, Some(NoThreshold::NoConfidence)) => writeln!(
                out,
                "  no verdict carries a confidence for every trajectory (listwise verdicts have \
                 none): cannot be calibrated"
            ),
            (None, Some(NoThreshold::TooFewPairs)) => writeln!(
                out,
                "  no threshold: {} with a confidence, and a threshold must keep at least {}",
                plural(c.pairs, "labelled pair", "labelled pairs"),
                c.min_pairs
            ),
            (None, _) => writeln!(
                out,
                "  no threshold: even the most confident pairs fall short, so at α {}, δ {} this \
                 judge can decide nothing as a stage",
                c.alpha, c.delta
            ),
        };
        if let Some(s) = &c.stopped_at {
            let _ = writeln!(
                out,
                "  {} at {}: {} pairs, accuracy {:.3} · lower bound {:.3} < {}",
                if c.thresholds.is_empty() {
                    "most confident candidate"
                } else {
                    "next candidate down"
                },
                s.threshold,
                s.pairs,
                s.accuracy,
                s.lower_bound,
                tidy(1.0 - c.alpha)
            );
        }
    }
    if !report.calibration.is_empty() {
        let _ = writeln!(out, "\ncascade thresholds (this judge as a stage):");
        for c in &report.calibration {
            let _ = writeln!(out, "  {}", c.toml());
        }
    }
}

/// `+0.123`, or `—`.
fn signed(x: Option<f64>) -> String {
    x.map_or_else(|| "—".into(), |v| format!("{v:+.3}"))
}

/// One table per set × combination: each attack's success rate, score shift and accuracy, then
/// the worst attack.
fn attacks(out: &mut String, report: &EvalReport) {
    let mut last = String::new();
    for a in &report.attacks {
        let label = a.label();
        if label != last {
            let _ = writeln!(
                out,
                "\nattacks · {} (success: the attacked answer now above the best one, per pair \
                 and order)",
                clip(&label, 100)
            );
            let _ = writeln!(
                out,
                "  {:<26} {:<18} {:>24} {:>26} {:>23}",
                "attack", "kind", "success [95%]", "score shift [95%]", "accuracy clean → attacked"
            );
            last = label;
        }
        let invalid = if a.invalid > 0 {
            format!(
                " · {}",
                plural(a.invalid, "invalid verdict", "invalid verdicts")
            )
        } else {
            String::new()
        };
        let _ = writeln!(
            out,
            "  {:<26} {:<18} {:>24} {:>26} {:>12} → {}{invalid}",
            clip(&a.attack, 26),
            clip(&a.kind, 18),
            format!("{}{}", num(a.success_rate), interval(a.success_ci95)),
            format!(
                "{}{}",
                signed(a.score_shift),
                a.score_shift_ci95
                    .map_or_else(String::new, |[lo, hi]| format!(" [{lo:+.3}, {hi:+.3}]"))
            ),
            num(a.accuracy_clean),
            num(a.accuracy_attacked),
        );
    }
    for s in &report.attack_summary {
        let _ = writeln!(
            out,
            "worst attack · {}: {} succeeds on {}{}",
            clip(&s.label(), 100),
            s.worst_attack,
            num(s.success_rate),
            interval(s.success_ci95)
        );
    }
}
