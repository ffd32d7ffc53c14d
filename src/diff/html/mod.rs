//! The HTML report: one self-contained page (inline CSS, inline SVG drawn here, no script, no
//! external reference) with the summary, three plots and a collapsed table per group. Every text
//! from the input (labels, names, judge explanations, error messages) is escaped.
//!
//! This file is the page: headline cards, summary and movers tables, one section per group.
//! The plots are drawn in `plots`.

mod plots;

use std::fmt::Write;

use super::text::{num, rank, signed};
use super::{Compare, Comparison, GroupReport, Report};
use crate::toolkit::html::{card, clip, esc, kv_rows, page_close, page_open, MUTED};

use plots::{delta_svg, distribution_svg, tau_svg};

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
        if s.groups_failed == 1 {
            "group failed"
        } else {
            "groups failed"
        },
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

    // The summary table and top movers.
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
            "failed calls A · B",
            format!("{} · {}", s.failed_calls.a, s.failed_calls.b),
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
