//! The plots of the eval page, as [`Plot`]s the page's template draws: accuracy bars with
//! their intervals per set × judge × rubric (also the position and length figures), and the
//! accuracy–coverage curves of judges with a confidence. The numbers are computed here; the
//! markup is `kit.html.j2`'s.

use super::super::confidence::ConfidenceResult;
use super::super::report::SetResult;
use crate::toolkit::html::{clip, fmt_tick, Plot, GRID, INK, MUTED};

pub(super) const COLOR_ACC: &str = "#1c7ed6";
pub(super) const COLOR_FIRST: &str = "#0c8599";
pub(super) const COLOR_LATER: &str = "#e8590c";
pub(super) const COLOR_LONGER: &str = "#7048e8";
pub(super) const COLOR_SHORTER: &str = "#f08c00";
const COLOR_CHANCE: &str = "#c92a2a";
/// One colour per combination in the confidence plot.
pub(super) const PALETTE: [&str; 6] = [
    COLOR_ACC,
    COLOR_LATER,
    COLOR_LONGER,
    COLOR_FIRST,
    COLOR_SHORTER,
    COLOR_CHANCE,
];

/// One bar series: its name, its colour, and the figure it draws from a result.
pub(super) type Series<'a> = (&'a str, &'static str, fn(&SetResult) -> Option<f64>);

/// Horizontal bars on a 0–1 axis, one row per result and one bar per series; `ci` draws the
/// interval whisker of the first series; a dashed line marks chance (0.5).
pub(super) fn bars(label: &str, results: &[SetResult], series: &[Series], ci: bool) -> Plot {
    let row_h = 10.0 + 12.0 * series.len() as f64;
    let (l, r, t, b) = (230.0, 48.0, 30.0, 34.0);
    let w = 760.0;
    let ht = t + b + row_h * results.len().max(1) as f64;
    let (x0, x1) = (l, w - r);
    let xof = |v: f64| x0 + (x1 - x0) * v.clamp(0.0, 1.0);
    let mut p = Plot::new(w, ht, label);
    for i in 0..=10 {
        let v = i as f64 / 10.0;
        let stroke = if i == 0 { MUTED } else { GRID };
        p.line(xof(v), t - 4.0, xof(v), ht - b, stroke);
        p.text(xof(v), ht - b + 16.0, "middle", MUTED, &fmt_tick(v));
    }
    p.styled_line(
        [xof(0.5), t - 4.0, xof(0.5), ht - b],
        COLOR_CHANCE,
        Some("4 3"),
        None,
    );
    for (k, res) in results.iter().enumerate() {
        let y = t + row_h * k as f64;
        let label = res.label();
        p.text(
            x0 - 8.0,
            y + row_h / 2.0 + 4.0,
            "end",
            INK,
            &clip(&label, 36),
        );
        for (s, (name, color, get)) in series.iter().enumerate() {
            let by = y + 5.0 + 12.0 * s as f64;
            match get(res) {
                Some(v) => {
                    let tip = format!("{label}: {name} {v:.3}");
                    p.bar(x0, by, xof(v) - x0, 9.0, color, &tip);
                    p.text(xof(v) + 4.0, by + 8.5, "start", INK, &format!("{v:.3}"));
                }
                None => p.text(x0 + 4.0, by + 8.5, "start", MUTED, "—"),
            }
            if ci && s == 0 {
                if let Some([lo, hi]) = res.ci95 {
                    let yc = by + 4.5;
                    p.styled_line([xof(lo), yc, xof(hi), yc], INK, None, Some(1.5));
                    p.line(xof(lo), yc - 4.0, xof(lo), yc + 4.0, INK);
                    p.line(xof(hi), yc - 4.0, xof(hi), yc + 4.0, INK);
                }
            }
        }
    }
    let entries: Vec<(&'static str, String)> = series
        .iter()
        .map(|(name, color, _)| (*color, name.to_string()))
        .chain(std::iter::once((COLOR_CHANCE, "chance 0.5".to_string())))
        .collect();
    p.legend(x1, 14.0, &entries);
    p
}

/// One polyline per combination over coverage 10 %–100 %, accuracy 0–1, coloured from
/// [`PALETTE`] in order.
pub(super) fn coverage(results: &[ConfidenceResult]) -> Plot {
    let (w, ht, pad) = (520.0, 220.0, 32.0);
    let x = |c: f64| pad + (c - 0.1) / 0.9 * (w - 2.0 * pad);
    let y = |a: f64| ht - pad - a * (ht - 2.0 * pad);
    let mut p = Plot::new(w, ht, "accuracy by coverage");
    // Its texts set their own size.
    p.font_size = None;
    for a in [0.0, 0.5, 1.0] {
        let y0 = y(a);
        p.styled_line([pad, y0, w - pad, y0], MUTED, None, Some(0.5));
        p.sized_text(4.0, y0 + 3.0, MUTED, 10, &format!("{a:.1}"));
    }
    for (i, c) in results.iter().enumerate() {
        let points = c
            .coverage
            .iter()
            .map(|q| [x(q.coverage), y(q.accuracy)])
            .collect();
        p.polyline(points, PALETTE[i % PALETTE.len()], &c.label());
    }
    p
}
