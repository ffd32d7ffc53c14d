//! The plots of the diff page, as [`Plot`]s the page's template draws: the reward distribution
//! per side, each trajectory's Δ, and τ-b per group (a histogram when there are too many groups
//! for one bar each). The numbers are computed here; the markup is `kit.html.j2`'s.

use super::MAX_TAU_ROWS;
use crate::diff::text::signed;
use crate::diff::Report;
use crate::toolkit::html::{clip, count_axis, fmt_tick, Plot, GRID, INK, MUTED};

const COLOR_A: &str = "#1c7ed6";
const COLOR_B: &str = "#e8590c";
const COLOR_SAME: &str = "#adb5bd";
const COLOR_TAU: &str = "#0c8599";
const COLOR_TAU_NEG: &str = "#c92a2a";
const COLOR_FAIL: &str = "#c92a2a";

/// Says that a plot has nothing to show.
fn empty_note(p: &mut Plot, x: f64, y: f64) {
    p.text(x, y, "middle", MUTED, "no group was scored on both sides");
}

/// Every compared trajectory's reward on each side.
fn rewards_by_side(report: &Report) -> (Vec<f64>, Vec<f64>) {
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for c in report.groups.iter().filter_map(|g| g.comparison.as_ref()) {
        for t in &c.trajectories {
            if let (Some(x), Some(y)) = (t.reward_a, t.reward_b) {
                a.push(x);
                b.push(y);
            }
        }
    }
    (a, b)
}

/// (1) Overlaid per-side histograms of rewards: 10 bins over [0, 1], side by side per bin.
pub(super) fn distribution_svg(report: &Report) -> Plot {
    let (w, ht) = (520.0, 290.0);
    let (l, r, t, b) = (40.0, 12.0, 30.0, 40.0);
    let (ra, rb) = rewards_by_side(report);
    let bin = |v: f64| ((v.clamp(0.0, 1.0) * 10.0).floor() as usize).min(9);
    let (mut ca, mut cb) = ([0usize; 10], [0usize; 10]);
    ra.iter().for_each(|&v| ca[bin(v)] += 1);
    rb.iter().for_each(|&v| cb[bin(v)] += 1);
    let max = ca.iter().chain(&cb).copied().max().unwrap_or(0);
    let (top, step) = count_axis(max);
    let mut p = Plot::new(w, ht, "reward distribution per side");
    let (x0, x1, y0, y1) = (l, w - r, t, ht - b);
    p.count_grid(x0, x1, y0, y1, top, step);
    let bw = (x1 - x0) / 10.0;
    let yof = |c: usize| y1 - (y1 - y0) * c as f64 / top as f64;
    let (la, lb) = (&report.sides.a.label, &report.sides.b.label);
    for i in 0..10 {
        let bx = x0 + bw * i as f64;
        let range = format!(
            "[{:.1}, {:.1}{}",
            i as f64 / 10.0,
            (i + 1) as f64 / 10.0,
            if i == 9 { "]" } else { ")" }
        );
        for (k, (c, color, name)) in [(ca[i], COLOR_A, la), (cb[i], COLOR_B, lb)]
            .into_iter()
            .enumerate()
        {
            let tip = format!(
                "{}: {c} trajectories with reward in {range}",
                clip(name, 40)
            );
            let x = bx + bw * (0.1 + 0.4 * k as f64);
            p.bar(x, yof(c), bw * 0.38, y1 - yof(c), color, &tip);
        }
    }
    for i in 0..=10 {
        let x = x0 + bw * i as f64;
        p.line(x, y1, x, y1 + 4.0, MUTED);
        p.text(x, y1 + 16.0, "middle", MUTED, &fmt_tick(i as f64 / 10.0));
    }
    if ra.is_empty() {
        empty_note(&mut p, (x0 + x1) / 2.0, (y0 + y1) / 2.0);
    }
    p.text((x0 + x1) / 2.0, ht - 6.0, "middle", INK, "reward");
    p.text(4.0, 14.0, "start", INK, "trajectories");
    p.legend(
        x1,
        14.0,
        &[(COLOR_A, format!("A {la}")), (COLOR_B, format!("B {lb}"))],
    );
    p
}

/// Half-width of the delta axis: a round number at least the largest |delta|.
fn delta_range(max_abs: f64) -> f64 {
    if max_abs <= 0.0 {
        return 0.1;
    }
    for r in [0.05, 0.1, 0.2, 0.25, 0.5, 1.0] {
        if max_abs <= r + 1e-12 {
            return r;
        }
    }
    max_abs.ceil()
}

/// (2) Histogram of per-trajectory deltas: 21 bins centred on multiples of range/10.
pub(super) fn delta_svg(report: &Report) -> Plot {
    let (w, ht) = (520.0, 290.0);
    let (l, r, t, b) = (40.0, 12.0, 30.0, 40.0);
    let deltas: Vec<f64> = report
        .groups
        .iter()
        .filter_map(|g| g.comparison.as_ref())
        .flat_map(|c| c.trajectories.iter().filter_map(|t| t.delta))
        .collect();
    let range = delta_range(deltas.iter().fold(0.0, |m, d| f64::max(m, d.abs())));
    let bwv = range / 10.0;
    let mut counts = [0usize; 21];
    for d in &deltas {
        let k = (d / bwv).round().clamp(-10.0, 10.0) as i64;
        counts[(k + 10) as usize] += 1;
    }
    let (top, step) = count_axis(counts.iter().copied().max().unwrap_or(0));
    let mut p = Plot::new(w, ht, "histogram of reward deltas B minus A");
    let (x0, x1, y0, y1) = (l, w - r, t, ht - b);
    p.count_grid(x0, x1, y0, y1, top, step);
    let lo = -range - bwv / 2.0;
    let span = 2.0 * range + bwv;
    let xof = |v: f64| x0 + (x1 - x0) * (v - lo) / span;
    let yof = |c: usize| y1 - (y1 - y0) * c as f64 / top as f64;
    let px = (x1 - x0) * bwv / span;
    for (i, &c) in counts.iter().enumerate() {
        let k = i as i64 - 10;
        let centre = k as f64 * bwv;
        let color = match k.signum() {
            -1 => COLOR_A,
            1 => COLOR_B,
            _ => COLOR_SAME,
        };
        let tip = format!(
            "{c} trajectories with Δ ≈ {}",
            signed(Some(centre)).replace('-', "−")
        );
        p.bar(
            xof(centre) - px * 0.43,
            yof(c),
            px * 0.86,
            y1 - yof(c),
            color,
            &tip,
        );
    }
    p.styled_line([xof(0.0), y0 - 4.0, xof(0.0), y1], MUTED, Some("3 3"), None);
    for v in [-range, -range / 2.0, 0.0, range / 2.0, range] {
        let x = xof(v);
        p.line(x, y1, x, y1 + 4.0, MUTED);
        let label = if v > 0.0 {
            format!("+{}", fmt_tick(v))
        } else {
            fmt_tick(v)
        };
        p.text(x, y1 + 16.0, "middle", MUTED, &label);
    }
    if deltas.is_empty() {
        empty_note(&mut p, (x0 + x1) / 2.0, (y0 + y1) / 2.0);
    }
    p.text((x0 + x1) / 2.0, ht - 6.0, "middle", INK, "Δ reward (B − A)");
    p.text(4.0, 14.0, "start", INK, "trajectories");
    p.legend(
        x1,
        14.0,
        &[
            (COLOR_A, "B lower".to_string()),
            (COLOR_SAME, "same".to_string()),
            (COLOR_B, "B higher".to_string()),
        ],
    );
    p
}

/// (3) Kendall τ-b per group: one bar per group with its label on the axis, or a histogram
/// when there are many groups.
pub(super) fn tau_svg(report: &Report) -> Plot {
    if report.groups.len() > MAX_TAU_ROWS {
        return tau_histogram_svg(report);
    }
    let row = 24.0;
    let (l, r, t, b) = (230.0, 70.0, 28.0, 40.0);
    let w = 1060.0;
    let n = report.groups.len().max(1) as f64;
    let ht = t + row * n + b;
    let (x0, x1, y0, y1) = (l, w - r, t, t + row * n);
    let xof = |v: f64| x0 + (x1 - x0) * (v + 1.0) / 2.0;
    let mut p = Plot::new(w, ht, "Kendall tau-b per group");
    for v in [-1.0, -0.5, 0.0, 0.5, 1.0] {
        let x = xof(v);
        let stroke = if v == 0.0 { MUTED } else { GRID };
        p.line(x, y0, x, y1, stroke);
        p.text(x, y1 + 16.0, "middle", MUTED, &fmt_tick(v));
    }
    p.text(
        (x0 + x1) / 2.0,
        ht - 6.0,
        "middle",
        INK,
        "Kendall τ-b (A order vs B order)",
    );
    for (i, g) in report.groups.iter().enumerate() {
        let yc = y0 + row * (i as f64 + 0.5);
        let full = format!("[{}] {}", g.index, g.label);
        p.titled_text((x0 - 10.0, yc + 4.0), "end", INK, &full, &clip(&full, 34));
        match &g.comparison {
            None => {
                let kinds: Vec<&str> = g.errors.iter().map(|e| e.kind.as_str()).collect();
                p.text(
                    xof(0.0) + 6.0,
                    yc + 4.0,
                    "start",
                    COLOR_FAIL,
                    &format!("failed: {}", kinds.join(", ")),
                );
            }
            Some(c) => match c.kendall_tau_b {
                None => p.text(
                    xof(0.0) + 6.0,
                    yc + 4.0,
                    "start",
                    MUTED,
                    "undefined (every reward tied on one side)",
                ),
                Some(tau) => {
                    let (xa, xb) = (xof(0.0), xof(tau));
                    let color = if tau < 0.0 { COLOR_TAU_NEG } else { COLOR_TAU };
                    let tip = format!(
                        "{}: τ-b {tau:.3}, {} rank flips of {} pairs",
                        clip(&g.label, 60),
                        c.rank_flips,
                        c.pairs
                    );
                    let bar_w = (xb - xa).abs().max(2.0);
                    p.bar(xa.min(xb), yc - row * 0.3, bar_w, row * 0.6, color, &tip);
                    let (tx, anchor) = if tau < 0.0 {
                        (xb - 6.0, "end")
                    } else {
                        (xb + 6.0, "start")
                    };
                    p.text(tx, yc + 4.0, anchor, INK, &format!("{tau:.3}"));
                }
            },
        }
    }
    if let Some(m) = report.summary.mean_kendall_tau_b {
        let x = xof(m);
        p.styled_line([x, y0 - 6.0, x, y1], INK, Some("4 3"), Some(1.2));
        p.text(x, y0 - 10.0, "middle", INK, &format!("mean {m:.3}"));
    }
    p
}

/// τ-b of many groups: 20 bins over [−1, 1].
fn tau_histogram_svg(report: &Report) -> Plot {
    let (w, ht) = (1060.0, 300.0);
    let (l, r, t, b) = (44.0, 16.0, 30.0, 40.0);
    let mut counts = [0usize; 20];
    let (mut undefined, mut failed) = (0, 0);
    for g in &report.groups {
        match g.comparison.as_ref().map(|c| c.kendall_tau_b) {
            None => failed += 1,
            Some(None) => undefined += 1,
            Some(Some(tau)) => counts[(((tau + 1.0) * 10.0).floor() as usize).min(19)] += 1,
        }
    }
    let (top, step) = count_axis(counts.iter().copied().max().unwrap_or(0));
    let mut p = Plot::new(w, ht, "histogram of Kendall tau-b over groups");
    let (x0, x1, y0, y1) = (l, w - r, t, ht - b);
    p.count_grid(x0, x1, y0, y1, top, step);
    let bw = (x1 - x0) / 20.0;
    let yof = |c: usize| y1 - (y1 - y0) * c as f64 / top as f64;
    for (i, &c) in counts.iter().enumerate() {
        let lo = -1.0 + i as f64 / 10.0;
        let color = if lo < 0.0 { COLOR_TAU_NEG } else { COLOR_TAU };
        let tip = format!("{c} groups with τ-b in [{lo:.1}, {:.1})", lo + 0.1);
        p.bar(
            x0 + bw * (i as f64 + 0.08),
            yof(c),
            bw * 0.84,
            y1 - yof(c),
            color,
            &tip,
        );
    }
    for i in 0..=10 {
        let v = -1.0 + i as f64 * 0.2;
        let x = x0 + (x1 - x0) * i as f64 / 10.0;
        p.line(x, y1, x, y1 + 4.0, MUTED);
        p.text(x, y1 + 16.0, "middle", MUTED, &fmt_tick(v));
    }
    p.text((x0 + x1) / 2.0, ht - 6.0, "middle", INK, "Kendall τ-b");
    p.text(4.0, 14.0, "start", INK, "groups");
    p.text(
        x1,
        14.0,
        "end",
        MUTED,
        &format!("{undefined} undefined · {failed} failed, not drawn"),
    );
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delta_axes_are_round() {
        assert_eq!(delta_range(0.0), 0.1);
        assert_eq!(delta_range(0.5), 0.5);
        assert_eq!(delta_range(0.3), 0.5);
        assert_eq!(delta_range(0.04), 0.05);
    }
}
