//! The HTML report: one self-contained page (inline CSS, inline SVG drawn here, no script, no
//! external reference) with the summary, three plots and a collapsed table per group. Every text
//! from the input (labels, names, judge explanations, error messages) is escaped.

use std::fmt::Write;

use super::text::{num, rank, signed};
use super::{Compare, Comparison, GroupReport, Report};
use crate::html::{
    card, clip, count_axis, count_grid, esc, fmt_tick, kv_rows, legend, line, page_close,
    page_open, rect, svg_open, text, GRID, INK, MUTED,
};

const COLOR_A: &str = "#1c7ed6";
const COLOR_B: &str = "#e8590c";
const COLOR_SAME: &str = "#adb5bd";
const COLOR_TAU: &str = "#0c8599";
const COLOR_TAU_NEG: &str = "#c92a2a";
const COLOR_FAIL: &str = "#c92a2a";
/// Groups drawn one bar each in the τ plot; more become a histogram.
const MAX_TAU_ROWS: usize = 60;

fn side_kind(report: &Report) -> &'static str {
    match report.compare {
        Compare::Rubric => "rubric",
        Compare::Judge => "judge",
    }
}

/// The whole page.
pub fn render(report: &Report) -> String {
    let (a, b) = (&report.sides.a, &report.sides.b);
    let s = &report.summary;
    let kind = side_kind(report);
    let mut h = String::new();
    let title = format!("gavel diff: {kind} {} vs {}", a.label, b.label);
    page_open(&mut h, &title, "");
    let heading = match report.compare {
        Compare::Rubric => "Rubric diff",
        Compare::Judge => "Judge diff",
    };
    let _ = writeln!(
        h,
        "<h1>{heading}: <span class=\"a\">{}</span> <span style=\"color:{MUTED}\">vs</span> \
         <span class=\"b\">{}</span></h1>",
        esc(&a.label),
        esc(&b.label)
    );
    let shared = match report.compare {
        Compare::Rubric => a.judge.as_ref().map(|j| format!(" · both judged by {j}")),
        Compare::Judge => a
            .rubric
            .as_ref()
            .map(|r| format!(" · both under rubric {r}")),
    }
    .unwrap_or_default();
    let _ = writeln!(
        h,
        "<p class=\"sub\"><span class=\"sw a\"></span>A = {kind} {} · <span class=\"sw b\">\
         </span>B = {kind} {}{} · {} {} from {} · Δ = B − A</p>",
        esc(&a.label),
        esc(&b.label),
        esc(&shared),
        s.groups,
        if s.groups == 1 { "group" } else { "groups" },
        esc(&report.file)
    );

    // Headline numbers.
    h.push_str("<section class=\"cards\">\n");
    card(
        &mut h,
        &s.mean_kendall_tau_b
            .map_or("—".into(), |t| format!("{t:.3}")),
        "mean Kendall τ-b (1 = same order)",
        false,
    );
    card(
        &mut h,
        &num(s.mean_abs_delta),
        &format!("mean |Δ| · mean Δ {}", signed(s.mean_delta)),
        false,
    );
    card(
        &mut h,
        &format!("{} / {}", s.groups_with_rank_flips, s.groups_compared),
        "groups with a rank flip",
        false,
    );
    card(
        &mut h,
        &s.groups_failed.to_string(),
        "groups failed",
        s.groups_failed > 0,
    );
    h.push_str("</section>\n");

    // Plots.
    h.push_str("<section class=\"plots\">\n");
    let _ = writeln!(
        h,
        "<figure><h3>Reward distribution per side</h3>{}<figcaption>Every compared trajectory's \
         reward, 10 bins over [0, 1].</figcaption></figure>",
        distribution_svg(report)
    );
    let _ = writeln!(
        h,
        "<figure><h3>Per-trajectory Δ (B − A)</h3>{}<figcaption>Left of 0: B scores it lower; \
         right: higher.</figcaption></figure>",
        delta_svg(report)
    );
    h.push_str("</section>\n");
    let tau_caption = if report.groups.len() > MAX_TAU_ROWS {
        "Histogram of τ-b over the groups (too many to draw one bar each)."
    } else {
        "Kendall τ-b between the two orderings of each group: 1 = same order, 0 = unrelated, \
         −1 = reversed."
    };
    let _ = writeln!(
        h,
        "<figure class=\"wide\"><h3>Agreement per group</h3>{}<figcaption>{tau_caption}\
         </figcaption></figure>",
        tau_svg(report)
    );

    // Summary table and top movers.
    h.push_str("<section class=\"cols\">\n<div>\n<h2>Summary</h2>\n<div class=\"box\"><table class=\"kv\">\n");
    let pct = s
        .fraction_groups_with_rank_flips
        .map_or(String::new(), |f| format!(" ({:.0}%)", f * 100.0));
    let undefined = if s.groups_tau_undefined > 0 {
        format!(" ({} undefined)", s.groups_tau_undefined)
    } else {
        String::new()
    };
    let rows: Vec<(&str, String)> = vec![
        (
            "groups compared",
            format!("{} of {}", s.groups_compared, s.groups),
        ),
        ("groups failed", s.groups_failed.to_string()),
        ("trajectories compared", s.trajectories_compared.to_string()),
        ("mean |Δ|", num(s.mean_abs_delta)),
        ("mean Δ", signed(s.mean_delta)),
        (
            "mean τ-b",
            format!(
                "{}{undefined}",
                s.mean_kendall_tau_b
                    .map_or("—".into(), |t| format!("{t:.3}"))
            ),
        ),
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
            "cache hits A · B",
            format!("{} · {}", s.cache_hits.a, s.cache_hits.b),
        ),
    ];
    kv_rows(&mut h, &rows);
    for (name, side) in [("A", a), ("B", b)] {
        let mut what = format!("{kind} {}", side.label);
        if let Some(v) = &side.rubric_version {
            let _ = write!(what, " ({})", clip(v, 19));
        }
        if !side.judges_used.is_empty() {
            let _ = write!(what, " · {}", side.judges_used.join(", "));
        }
        let _ = writeln!(
            h,
            "<tr><td>side {name}</td><td class=\"lbl-cell\">{}</td></tr>",
            esc(&what)
        );
    }
    h.push_str("</table></div>\n</div>\n<div>\n<h2>Moved most</h2>\n<div class=\"box\"><table>\n");
    h.push_str(
        "<thead><tr><th>group</th><th>trajectory</th><th class=\"n\">A</th><th class=\"n\">B</th>\
         <th class=\"n\">Δ</th></tr></thead>\n<tbody>\n",
    );
    if s.top_movers.is_empty() {
        let why = if s.groups_compared == 0 {
            "No group was scored on both sides."
        } else {
            "No reward changed."
        };
        let _ = writeln!(h, "<tr><td colspan=\"5\" class=\"same\">{why}</td></tr>");
    }
    for m in &s.top_movers {
        let _ = writeln!(
            h,
            "<tr><td class=\"lbl-cell\">{}</td><td class=\"lbl-cell\">{}</td><td class=\"n\">{}</td>\
             <td class=\"n\">{}</td><td class=\"n {}\">{}</td></tr>",
            esc(&clip(&format!("[{}] {}", m.group, m.group_label), 60)),
            esc(&clip(&m.label, 60)),
            num(Some(m.reward_a)),
            num(Some(m.reward_b)),
            direction(m.delta),
            esc(&signed(Some(m.delta)))
        );
    }
    h.push_str("</tbody></table></div>\n</div>\n</section>\n");

    // Groups.
    let _ = writeln!(
        h,
        "<h2>Groups <span style=\"color:{MUTED};font-weight:400;font-size:13px\">click a group \
         to see its trajectories</span></h2>"
    );
    for g in &report.groups {
        group_section(&mut h, g);
    }
    page_close(
        &mut h,
        "Generated by <code>gavel diff</code>. Ranks: 1 = highest reward, ties share the \
         average rank. A rank flip is a pair of trajectories whose order strictly reverses.",
    );
    h
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

fn group_section(h: &mut String, g: &GroupReport) {
    let label = esc(&format!("[{}] {}", g.index, g.label));
    let Some(c) = &g.comparison else {
        let sides: Vec<String> = g
            .errors
            .iter()
            .map(|e| format!("{}: {}", e.side.to_uppercase(), e.kind))
            .collect();
        let _ = writeln!(
            h,
            "<details class=\"failed\"><summary><span class=\"gl\">{label}</span>\
             <span class=\"chip bad\">failed on {}</span></summary>",
            esc(&sides.join(", "))
        );
        for e in &g.errors {
            let _ = writeln!(
                h,
                "<p class=\"err\">side {} · {}: {}</p>",
                e.side.to_uppercase(),
                esc(&e.kind),
                esc(&e.message)
            );
        }
        h.push_str("</details>\n");
        return;
    };
    let tau = c
        .kendall_tau_b
        .map_or("τ-b undefined".into(), |t| format!("τ-b {t:.3}"));
    let flips = match c.rank_flips {
        0 => "no rank flip".to_string(),
        1 => "1 rank flip".to_string(),
        n => format!("{n} rank flips"),
    };
    let flip_class = if c.rank_flips > 0 {
        "chip flip"
    } else {
        "chip"
    };
    let _ = writeln!(
        h,
        "<details><summary><span class=\"gl\">{label}</span><span class=\"chip\">{}</span>\
         <span class=\"{flip_class}\">{}</span><span class=\"chip\">mean |Δ| {}</span></summary>",
        esc(&tau),
        esc(&flips),
        num(c.mean_abs_delta)
    );
    group_table(h, c);
    h.push_str("</details>\n");
}

fn reward_cell(x: Option<f64>, side: &str) -> String {
    match x {
        None => "<td class=\"n\">—</td>".into(),
        Some(v) => format!(
            "<td><div class=\"rwc\"><span class=\"v\">{v:.3}</span><span class=\"track\">\
             <span class=\"bar {side}\" style=\"width:{:.1}%\"></span></span></div></td>",
            (v.clamp(0.0, 1.0) * 100.0)
        ),
    }
}

/// `▲2` when the trajectory rose two places from A to B, `▼1` when it fell one.
fn rank_move(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if (a - b).abs() > 1e-9 => {
            let (class, arrow) = if b < a {
                ("up", "▲")
            } else {
                ("down", "▼")
            };
            format!(
                "<span class=\"mv {class}\" title=\"places moved\">{arrow}{}</span>",
                rank(Some((a - b).abs()))
            )
        }
        _ => "<span class=\"mv\"></span>".into(),
    }
}

fn group_table(h: &mut String, c: &Comparison) {
    h.push_str(
        "<table class=\"traj\"><colgroup><col class=\"t\"><col class=\"r\"><col class=\"r\">\
         <col class=\"d\"><col class=\"k\"></colgroup><thead><tr><th>trajectory</th>\
         <th>reward A</th><th>reward B</th><th class=\"n\">Δ B − A</th>\
         <th class=\"n\">rank A → B</th></tr></thead>\n<tbody>\n",
    );
    let mover = c.moved_most.as_ref().map(|m| m.trajectory_id.as_str());
    for t in &c.trajectories {
        let is_mover = Some(t.trajectory_id.as_str()) == mover;
        let tag = if is_mover {
            "<span class=\"tag\">moved most</span>"
        } else {
            ""
        };
        let class = t.delta.map_or("same", direction);
        let _ = writeln!(
            h,
            "<tr{}><td class=\"lbl-cell\">{}{tag}</td>{}{}<td class=\"n {class}\">{}</td>\
             <td class=\"n\">{} → {}{}</td></tr>",
            if is_mover { " class=\"mover\"" } else { "" },
            esc(&t.label),
            reward_cell(t.reward_a, "a"),
            reward_cell(t.reward_b, "b"),
            esc(&signed(t.delta)),
            rank(t.rank_a),
            rank(t.rank_b),
            rank_move(t.rank_a, t.rank_b)
        );
    }
    h.push_str("</tbody></table>\n");
    if let Some(m) = &c.moved_most {
        if !(m.explanation_a.is_empty() && m.explanation_b.is_empty()) {
            let _ = writeln!(
                h,
                "<div class=\"why\"><b>Why {} moved ({}):</b>\
                 <p><span class=\"sw a\"></span><b class=\"a\">A</b> {}</p>\
                 <p><span class=\"sw b\"></span><b class=\"b\">B</b> {}</p></div>",
                esc(&m.label),
                esc(&signed(Some(m.delta))),
                esc(&m.explanation_a),
                esc(&m.explanation_b)
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Plots

/// Says that a plot has nothing to show.
fn empty_note(h: &mut String, x: f64, y: f64) {
    text(
        h,
        x,
        y,
        "middle",
        MUTED,
        "no group was scored on both sides",
    );
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
fn distribution_svg(report: &Report) -> String {
    let (w, ht) = (520.0, 290.0);
    let (l, r, t, b) = (40.0, 12.0, 30.0, 40.0);
    let (ra, rb) = rewards_by_side(report);
    let bin = |v: f64| ((v.clamp(0.0, 1.0) * 10.0).floor() as usize).min(9);
    let (mut ca, mut cb) = ([0usize; 10], [0usize; 10]);
    ra.iter().for_each(|&v| ca[bin(v)] += 1);
    rb.iter().for_each(|&v| cb[bin(v)] += 1);
    let max = ca.iter().chain(&cb).copied().max().unwrap_or(0);
    let (top, step) = count_axis(max);
    let mut h = String::new();
    svg_open(&mut h, w, ht, "reward distribution per side");
    let (x0, x1, y0, y1) = (l, w - r, t, ht - b);
    count_grid(&mut h, x0, x1, y0, y1, top, step);
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
            rect(&mut h, x, yof(c), bw * 0.38, y1 - yof(c), color, &tip);
        }
    }
    for i in 0..=10 {
        let x = x0 + bw * i as f64;
        line(&mut h, x, y1, x, y1 + 4.0, MUTED, "");
        text(
            &mut h,
            x,
            y1 + 16.0,
            "middle",
            MUTED,
            &fmt_tick(i as f64 / 10.0),
        );
    }
    if ra.is_empty() {
        empty_note(&mut h, (x0 + x1) / 2.0, (y0 + y1) / 2.0);
    }
    text(&mut h, (x0 + x1) / 2.0, ht - 6.0, "middle", INK, "reward");
    text(&mut h, 4.0, 14.0, "start", INK, "trajectories");
    legend(
        &mut h,
        x1,
        14.0,
        &[(COLOR_A, format!("A {la}")), (COLOR_B, format!("B {lb}"))],
    );
    h.push_str("</svg>");
    h
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
fn delta_svg(report: &Report) -> String {
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
    let mut h = String::new();
    svg_open(&mut h, w, ht, "histogram of reward deltas B minus A");
    let (x0, x1, y0, y1) = (l, w - r, t, ht - b);
    count_grid(&mut h, x0, x1, y0, y1, top, step);
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
        rect(
            &mut h,
            xof(centre) - px * 0.43,
            yof(c),
            px * 0.86,
            y1 - yof(c),
            color,
            &tip,
        );
    }
    line(
        &mut h,
        xof(0.0),
        y0 - 4.0,
        xof(0.0),
        y1,
        MUTED,
        " stroke-dasharray=\"3 3\"",
    );
    for v in [-range, -range / 2.0, 0.0, range / 2.0, range] {
        let x = xof(v);
        line(&mut h, x, y1, x, y1 + 4.0, MUTED, "");
        let label = if v > 0.0 {
            format!("+{}", fmt_tick(v))
        } else {
            fmt_tick(v)
        };
        text(&mut h, x, y1 + 16.0, "middle", MUTED, &label);
    }
    if deltas.is_empty() {
        empty_note(&mut h, (x0 + x1) / 2.0, (y0 + y1) / 2.0);
    }
    text(
        &mut h,
        (x0 + x1) / 2.0,
        ht - 6.0,
        "middle",
        INK,
        "Δ reward (B − A)",
    );
    text(&mut h, 4.0, 14.0, "start", INK, "trajectories");
    legend(
        &mut h,
        x1,
        14.0,
        &[
            (COLOR_A, "B lower".to_string()),
            (COLOR_SAME, "same".to_string()),
            (COLOR_B, "B higher".to_string()),
        ],
    );
    h.push_str("</svg>");
    h
}

/// (3) Kendall τ-b per group: one bar per group with its label on the axis, or a histogram
/// when there are many groups.
fn tau_svg(report: &Report) -> String {
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
    let mut h = String::new();
    svg_open(&mut h, w, ht, "Kendall tau-b per group");
    for v in [-1.0, -0.5, 0.0, 0.5, 1.0] {
        let x = xof(v);
        let stroke = if v == 0.0 { MUTED } else { GRID };
        line(&mut h, x, y0, x, y1, stroke, "");
        text(&mut h, x, y1 + 16.0, "middle", MUTED, &fmt_tick(v));
    }
    text(
        &mut h,
        (x0 + x1) / 2.0,
        ht - 6.0,
        "middle",
        INK,
        "Kendall τ-b (A order vs B order)",
    );
    for (i, g) in report.groups.iter().enumerate() {
        let yc = y0 + row * (i as f64 + 0.5);
        let full = format!("[{}] {}", g.index, g.label);
        let _ = write!(h, "<g><title>{}</title>", esc(&full));
        text(&mut h, x0 - 10.0, yc + 4.0, "end", INK, &clip(&full, 34));
        h.push_str("</g>");
        match &g.comparison {
            None => {
                let kinds: Vec<&str> = g.errors.iter().map(|e| e.kind.as_str()).collect();
                text(
                    &mut h,
                    xof(0.0) + 6.0,
                    yc + 4.0,
                    "start",
                    COLOR_FAIL,
                    &format!("failed: {}", kinds.join(", ")),
                );
            }
            Some(c) => match c.kendall_tau_b {
                None => text(
                    &mut h,
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
                    rect(
                        &mut h,
                        xa.min(xb),
                        yc - row * 0.3,
                        bar_w,
                        row * 0.6,
                        color,
                        &tip,
                    );
                    let (tx, anchor) = if tau < 0.0 {
                        (xb - 6.0, "end")
                    } else {
                        (xb + 6.0, "start")
                    };
                    text(&mut h, tx, yc + 4.0, anchor, INK, &format!("{tau:.3}"));
                }
            },
        }
    }
    if let Some(m) = report.summary.mean_kendall_tau_b {
        let x = xof(m);
        line(
            &mut h,
            x,
            y0 - 6.0,
            x,
            y1,
            INK,
            " stroke-dasharray=\"4 3\" stroke-width=\"1.2\"",
        );
        text(&mut h, x, y0 - 10.0, "middle", INK, &format!("mean {m:.3}"));
    }
    h.push_str("</svg>");
    h
}

/// τ-b of many groups: 20 bins over [−1, 1].
fn tau_histogram_svg(report: &Report) -> String {
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
    let mut h = String::new();
    svg_open(&mut h, w, ht, "histogram of Kendall tau-b over groups");
    let (x0, x1, y0, y1) = (l, w - r, t, ht - b);
    count_grid(&mut h, x0, x1, y0, y1, top, step);
    let bw = (x1 - x0) / 20.0;
    let yof = |c: usize| y1 - (y1 - y0) * c as f64 / top as f64;
    for (i, &c) in counts.iter().enumerate() {
        let lo = -1.0 + i as f64 / 10.0;
        let color = if lo < 0.0 { COLOR_TAU_NEG } else { COLOR_TAU };
        let tip = format!("{c} groups with τ-b in [{lo:.1}, {:.1})", lo + 0.1);
        rect(
            &mut h,
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
        line(&mut h, x, y1, x, y1 + 4.0, MUTED, "");
        text(&mut h, x, y1 + 16.0, "middle", MUTED, &fmt_tick(v));
    }
    text(
        &mut h,
        (x0 + x1) / 2.0,
        ht - 6.0,
        "middle",
        INK,
        "Kendall τ-b",
    );
    text(&mut h, 4.0, 14.0, "start", INK, "groups");
    text(
        &mut h,
        x1,
        14.0,
        "end",
        MUTED,
        &format!("{undefined} undefined · {failed} failed, not drawn"),
    );
    h.push_str("</svg>");
    h
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
