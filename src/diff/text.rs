//! The terminal table: one block per group, then the summary; every line within 100 columns.

use std::fmt::Write;

use super::{Compare, GroupReport, Report};
use crate::cli::plural;
use crate::toolkit::html::clip;

/// Widest line written.
pub const WIDTH: usize = 100;
/// Width of the trajectory column.
const LABEL: usize = 28;

/// `0.700`, or `—` for none.
pub fn num(x: Option<f64>) -> String {
    x.map_or_else(|| "—".into(), |v| format!("{v:.3}"))
}

/// `+0.500` / `-0.125`, or `—`.
pub fn signed(x: Option<f64>) -> String {
    x.map_or_else(
        || "—".into(),
        |v| {
            // No "-0.000" for a tiny negative.
            let v = if v.abs() < 5e-4 { 0.0 } else { v };
            format!("{v:+.3}")
        },
    )
}

/// `2`, `2.5`.
pub fn rank(x: Option<f64>) -> String {
    match x {
        None => "—".into(),
        Some(r) if r.fract() == 0.0 => format!("{r:.0}"),
        Some(r) => format!("{r}"),
    }
}

/// `τ-b 0.548`, or `τ-b undefined`.
pub fn tau(x: Option<f64>) -> String {
    x.map_or_else(|| "τ-b undefined".into(), |t| format!("τ-b {t:.3}"))
}

/// Right-aligns `s` in `w` columns (by characters).
fn right(s: &str, w: usize) -> String {
    let n = s.chars().count();
    format!("{}{s}", " ".repeat(w.saturating_sub(n)))
}

fn left(s: &str, w: usize) -> String {
    let n = s.chars().count();
    format!("{s}{}", " ".repeat(w.saturating_sub(n)))
}

/// `rubric "strict"` / `judge "fast"` with A or B.
fn side_name(report: &Report, s: usize) -> String {
    let side = if s == 0 {
        &report.sides.a
    } else {
        &report.sides.b
    };
    let what = match report.compare {
        Compare::Rubric => "rubric",
        Compare::Judge => "judge",
    };
    format!("{what} {}", clip(&side.label, 30))
}

fn group_block(out: &mut String, g: &GroupReport) {
    let head = clip(&format!("[{}] {}", g.index, g.label), 48);
    let Some(c) = &g.comparison else {
        let _ = writeln!(out, "{head} · FAILED");
        for e in &g.errors {
            let line = format!(
                "  side {}: {}: {}",
                e.side.to_uppercase(),
                e.kind,
                e.message
            );
            // Whole, not clipped: the message is often the fix ("set OPENAI_API_KEY ...").
            let _ = writeln!(out, "{line}");
        }
        return;
    };
    let _ = writeln!(
        out,
        "{head} · {} · {} · mean |Δ| {}",
        tau(c.kendall_tau_b),
        plural(c.rank_flips, "rank flip", "rank flips"),
        num(c.mean_abs_delta)
    );
    let _ = writeln!(
        out,
        "  {}{}{}{}   rank A → B",
        left("trajectory", LABEL),
        right("reward A", 10),
        right("reward B", 10),
        right("Δ B−A", 10),
    );
    let mover = c.moved_most.as_ref().map(|m| m.trajectory_id.as_str());
    for t in &c.trajectories {
        let ranks = format!("{} → {}", right(&rank(t.rank_a), 4), rank(t.rank_b));
        let mark = if Some(t.trajectory_id.as_str()) == mover {
            "  ◀ moved most"
        } else {
            ""
        };
        let line = format!(
            "  {}{}{}{}   {}{mark}",
            left(&clip(&t.label, LABEL - 2), LABEL),
            right(&num(t.reward_a), 10),
            right(&num(t.reward_b), 10),
            right(&signed(t.delta), 10),
            left(&ranks, 10),
        );
        let _ = writeln!(out, "{}", line.trim_end());
    }
}

/// The whole text report.
pub fn render(report: &Report) -> String {
    let mut out = String::new();
    let s = &report.summary;
    let title = format!(
        "gavel diff · A = {} · B = {}",
        side_name(report, 0),
        side_name(report, 1),
    );
    let _ = writeln!(out, "{}", clip(&title, WIDTH));
    let shared = match report.compare {
        Compare::Rubric => report.sides.a.judge.as_ref().map(|j| format!("judge {j}")),
        Compare::Judge => report
            .sides
            .a
            .rubric
            .as_ref()
            .map(|r| format!("rubric {r}")),
    };
    let mut sub = format!("{} in {}", plural(s.groups, "group", "groups"), report.file);
    if let Some(shared) = shared {
        let _ = write!(sub, " · both sides: {shared}");
    }
    let _ = writeln!(out, "{}", clip(&sub, WIDTH));
    for g in &report.groups {
        out.push('\n');
        group_block(&mut out, g);
    }
    out.push('\n');
    let failed = if s.groups_failed > 0 {
        format!(", {} failed", s.groups_failed)
    } else {
        String::new()
    };
    let _ = writeln!(
        out,
        "summary: {} of {} compared{failed}, {}",
        s.groups_compared,
        plural(s.groups, "group", "groups"),
        plural(s.trajectories_compared, "trajectory", "trajectories")
    );
    let undefined = if s.groups_tau_undefined > 0 {
        format!(" ({} undefined)", s.groups_tau_undefined)
    } else {
        String::new()
    };
    let flips = match s.fraction_groups_with_rank_flips {
        Some(f) => format!(
            "rank flips in {} of {} ({:.0}%)",
            s.groups_with_rank_flips,
            plural(s.groups_compared, "group", "groups"),
            f * 100.0
        ),
        None => "no group compared".into(),
    };
    let _ = writeln!(
        out,
        "  mean |Δ| {} · mean Δ {} · mean {}{undefined}",
        num(s.mean_abs_delta),
        signed(s.mean_delta),
        tau(s.mean_kendall_tau_b)
    );
    let _ = writeln!(out, "  {flips} · {} flipped pairs", s.rank_flips);
    let _ = writeln!(
        out,
        "  judge calls A {} · B {} · failed calls A {} · B {} · cache hits A {} · B {}",
        s.judge_calls.a,
        s.judge_calls.b,
        s.failed_calls.a,
        s.failed_calls.b,
        s.cache_hits.a,
        s.cache_hits.b
    );
    if !s.top_movers.is_empty() {
        let _ = writeln!(out, "  moved most:");
        for m in &s.top_movers {
            let who = clip(
                &format!("[{}] {} / {}", m.group, m.group_label, m.label),
                56,
            );
            let _ = writeln!(
                out,
                "    {}{}  ({} → {})",
                left(&who, 58),
                right(&signed(Some(m.delta)), 7),
                num(Some(m.reward_a)),
                num(Some(m.reward_b))
            );
        }
    }
    out
}

/// The one line `gavel diff` says on stderr whatever the format: `gavel diff: 3 of 3 groups
/// compared · mean |Δ| 0.125 · mean τ-b 0.774 · 1 flipped pair · wrote report.html`.
pub fn summary_line(report: &Report, written: &[&std::path::PathBuf]) -> String {
    let s = &report.summary;
    let failed = if s.groups_failed > 0 {
        format!(", {} failed", s.groups_failed)
    } else {
        String::new()
    };
    let mut line = format!(
        "gavel diff: {} of {} compared{failed} · mean |Δ| {} · mean {} · {}",
        s.groups_compared,
        plural(s.groups, "group", "groups"),
        num(s.mean_abs_delta),
        tau(s.mean_kendall_tau_b),
        plural(s.rank_flips, "flipped pair", "flipped pairs"),
    );
    for p in written {
        let _ = write!(line, " · wrote {}", p.display());
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers() {
        assert_eq!(signed(Some(0.5)), "+0.500");
        assert_eq!(signed(Some(-1e-9)), "+0.000");
        assert_eq!(signed(None), "—");
        assert_eq!(rank(Some(2.0)), "2");
        assert_eq!(rank(Some(2.5)), "2.5");
        assert_eq!(tau(None), "τ-b undefined");
        assert_eq!(tau(Some(0.54772)), "τ-b 0.548");
    }
}
