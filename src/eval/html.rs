//! The HTML report of `gavel eval`, built with the same page kit as `gavel diff --html`
//! ([`crate::toolkit::html`]): headline cards, accuracy bars with their intervals per set × judge ×
//! rubric, the position and length figures, the comparisons, and the misranked groups with the
//! judge's explanations.

use super::choice::ScoreTarget;
use std::fmt::Write;

use super::calibration_report::NoThreshold;
use super::report::{EvalReport, SetResult};
use crate::domain::stats::tidy;
use crate::toolkit::html::{
    card, clip, esc, fmt_tick, legend, line, page_close, page_open, rect, svg_open, text, GRID,
    INK, MUTED,
};

const COLOR_ACC: &str = "#1c7ed6";
const COLOR_FIRST: &str = "#0c8599";
const COLOR_LATER: &str = "#e8590c";
const COLOR_LONGER: &str = "#7048e8";
const COLOR_SHORTER: &str = "#f08c00";
const COLOR_CHANCE: &str = "#c92a2a";
/// One colour per combination in the confidence plot.
const PALETTE: [&str; 6] = [
    COLOR_ACC,
    COLOR_LATER,
    COLOR_LONGER,
    COLOR_FIRST,
    COLOR_SHORTER,
    COLOR_CHANCE,
];

// Up to 18 columns: headings wrap, cells are tight and the page wider than the diff's, so every
// column shows at 1,300 px; narrower, the table scrolls in its box rather than being cut off.
const EXTRA_CSS: &str = r#"
main { max-width: 1320px; }
table.res { font-size: 13px; }
table.res td, table.res th { padding: 5px 7px; }
table.res td { white-space: nowrap; }
table.res th { white-space: normal; letter-spacing: 0; }
.box.scroll { overflow-x: auto; }
td.lbl-cell { white-space: normal; min-width: 4em; }
table.mis td { font-size: 13px; }
"#;

fn num(x: Option<f64>) -> String {
    x.map_or_else(|| "—".into(), |v| format!("{v:.3}"))
}

fn row_label(r: &SetResult) -> String {
    r.label()
}

/// One bar series: its name, its colour, and the figure it draws from a result.
type Series<'a> = (&'a str, &'a str, fn(&SetResult) -> Option<f64>);

/// Horizontal bars on a 0–1 axis, one row per result and one bar per series; `ci` draws the
/// interval whisker of the first series; a dashed line marks chance (0.5).
fn bars_svg(label: &str, results: &[SetResult], series: &[Series], ci: bool) -> String {
    let row_h = 10.0 + 12.0 * series.len() as f64;
    let (l, r, t, b) = (230.0, 48.0, 30.0, 34.0);
    let w = 760.0;
    let ht = t + b + row_h * results.len().max(1) as f64;
    let (x0, x1) = (l, w - r);
    let xof = |v: f64| x0 + (x1 - x0) * v.clamp(0.0, 1.0);
    let mut h = String::new();
    svg_open(&mut h, w, ht, label);
    for i in 0..=10 {
        let v = i as f64 / 10.0;
        line(
            &mut h,
            xof(v),
            t - 4.0,
            xof(v),
            ht - b,
            if i == 0 { MUTED } else { GRID },
            "",
        );
        text(&mut h, xof(v), ht - b + 16.0, "middle", MUTED, &fmt_tick(v));
    }
    line(
        &mut h,
        xof(0.5),
        t - 4.0,
        xof(0.5),
        ht - b,
        COLOR_CHANCE,
        " stroke-dasharray=\"4 3\"",
    );
    for (k, res) in results.iter().enumerate() {
        let y = t + row_h * k as f64;
        text(
            &mut h,
            x0 - 8.0,
            y + row_h / 2.0 + 4.0,
            "end",
            INK,
            &clip(&row_label(res), 36),
        );
        for (s, (name, color, get)) in series.iter().enumerate() {
            let by = y + 5.0 + 12.0 * s as f64;
            match get(res) {
                Some(v) => {
                    let tip = format!("{}: {name} {v:.3}", row_label(res));
                    rect(&mut h, x0, by, xof(v) - x0, 9.0, color, &tip);
                    text(
                        &mut h,
                        xof(v) + 4.0,
                        by + 8.5,
                        "start",
                        INK,
                        &format!("{v:.3}"),
                    );
                }
                None => text(&mut h, x0 + 4.0, by + 8.5, "start", MUTED, "—"),
            }
            if ci && s == 0 {
                if let Some([lo, hi]) = res.ci95 {
                    let yc = by + 4.5;
                    line(
                        &mut h,
                        xof(lo),
                        yc,
                        xof(hi),
                        yc,
                        INK,
                        " stroke-width=\"1.5\"",
                    );
                    line(&mut h, xof(lo), yc - 4.0, xof(lo), yc + 4.0, INK, "");
                    line(&mut h, xof(hi), yc - 4.0, xof(hi), yc + 4.0, INK, "");
                }
            }
        }
    }
    let entries: Vec<(&str, String)> = series
        .iter()
        .map(|(name, color, _)| (*color, name.to_string()))
        .chain(std::iter::once((COLOR_CHANCE, "chance 0.5".to_string())))
        .collect();
    legend(&mut h, x1, 14.0, &entries);
    h.push_str("</svg>");
    h
}

fn results_table(h: &mut String, report: &EvalReport) {
    h.push_str(
        "<div class=\"box scroll\"><table class=\"res\"><thead><tr><th>set</th><th>judge</th>\
         <th>rubric</th><th>mode</th><th class=\"n\">groups</th><th class=\"n\">valid</th>\
         <th class=\"n\">pairs</th><th class=\"n\">accuracy</th><th class=\"n\">95% interval</th>\
         <th class=\"n\">top-1</th><th class=\"n\">τ-b</th><th class=\"n\">flip rate</th>\
         <th class=\"n\">mean best</th><th class=\"n\">mean worst</th><th class=\"n\">invalid</th>\
         <th class=\"n\">judge calls</th><th class=\"n\">tokens in · out</th>\
         <th class=\"n\">s/group</th></tr></thead>\n<tbody>\n",
    );
    for r in &report.results {
        let ci = r
            .ci95
            .map_or_else(|| "—".into(), |[a, b]| format!("{a:.3}–{b:.3}"));
        let cells = [
            r.groups.to_string(),
            r.valid_groups.to_string(),
            r.pairs.to_string(),
            num(r.pairwise_accuracy),
            ci,
            num(r.top1_accuracy),
            num(r.kendall_tau),
            num(r.position.flip_rate),
            num(r.calibration.mean_best),
            num(r.calibration.mean_worst),
            r.invalid.to_string(),
            calls_cell(r.usage.judge_calls, r.usage.failed_calls),
            format!("{} · {}", r.usage.prompt_tokens, r.usage.completion_tokens),
            r.seconds_per_group
                .map_or_else(|| "—".into(), |s| format!("{s:.2}")),
        ];
        let _ = write!(
            h,
            "<tr><td class=\"lbl-cell\">{}</td><td class=\"lbl-cell\">{}</td>\
             <td class=\"lbl-cell\">{}</td><td>{}</td>",
            esc(&r.set),
            esc(&r.judge),
            esc(&r.rubric),
            esc(r.judge_mode.as_str())
        );
        for c in cells {
            let _ = write!(h, "<td class=\"n\">{}</td>", esc(&c));
        }
        h.push_str("</tr>\n");
    }
    h.push_str("</tbody></table></div>\n");
}

fn comparisons_table(h: &mut String, report: &EvalReport) {
    if report.comparisons.is_empty() {
        return;
    }
    h.push_str(
        "<h2>Comparisons</h2>\n<div class=\"box scroll\"><table class=\"res\"><thead><tr>\
         <th>set</th><th>A</th><th>B</th><th class=\"n\">groups</th><th class=\"n\">A</th>\
         <th class=\"n\">B</th><th class=\"n\">B − A</th><th class=\"n\">95% interval</th>\
         <th>verdict</th></tr></thead>\n<tbody>\n",
    );
    for c in &report.comparisons {
        let verdict = c.verdict_text();
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td class=\"lbl-cell\">{}</td><td class=\"lbl-cell\">{}</td>\
             <td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
             <td class=\"n\">{}</td><td class=\"n\">{}</td><td>{verdict}</td></tr>",
            esc(&c.set),
            esc(&c.a.label()),
            esc(&c.b.label()),
            c.groups,
            num(c.accuracy_a),
            num(c.accuracy_b),
            c.difference
                .map_or_else(|| "—".into(), |d| format!("{d:+.3}")),
            ci_text(c.ci95, true),
        );
    }
    h.push_str("</tbody></table></div>\n");
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

/// For combinations with a confidence: the accuracy–coverage curve (accuracy of the most
/// confident share of the pairs) as a plot, and the figures behind it.
fn confidence_section(h: &mut String, report: &EvalReport) {
    if report.confidence.is_empty() {
        return;
    }
    let _ = writeln!(
        h,
        "<h2>Confidence <span style=\"color:{MUTED};font-weight:400;font-size:13px\">accuracy of \
         the most confident share of the labelled pairs (a pair's confidence: the mean of its two \
         trajectories'); a judge whose confidence means something is more accurate on the left\
         </span></h2>"
    );
    // One polyline per combination over coverage 10 %–100 %, accuracy 0–1.
    let (w, ht, pad) = (520.0, 220.0, 32.0);
    let x = |c: f64| pad + (c - 0.1) / 0.9 * (w - 2.0 * pad);
    let y = |a: f64| ht - pad - a * (ht - 2.0 * pad);
    let _ = write!(
        h,
        "<figure class=\"wide\"><svg viewBox=\"0 0 {w} {ht}\" width=\"{w}\" height=\"{ht}\" \
         role=\"img\" aria-label=\"accuracy by coverage\">"
    );
    for a in [0.0, 0.5, 1.0] {
        let y0 = y(a);
        let _ = write!(
            h,
            "<line x1=\"{pad}\" x2=\"{}\" y1=\"{y0:.1}\" y2=\"{y0:.1}\" stroke=\"{MUTED}\" \
             stroke-width=\"0.5\"/><text x=\"4\" y=\"{:.1}\" font-size=\"10\" fill=\"{MUTED}\">{a:.1}</text>",
            w - pad,
            y0 + 3.0,
        );
    }
    for (i, c) in report.confidence.iter().enumerate() {
        let points: Vec<String> = c
            .coverage
            .iter()
            .map(|p| format!("{:.1},{:.1}", x(p.coverage), y(p.accuracy)))
            .collect();
        let color = PALETTE[i % PALETTE.len()];
        let _ = write!(
            h,
            "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"2\" points=\"{}\"><title>{}</title></polyline>",
            points.join(" "),
            esc(&c.label())
        );
    }
    let _ = writeln!(
        h,
        "</svg><figcaption>x: the most confident 10 % … 100 % of the pairs; y: their accuracy. \
         {}</figcaption></figure>",
        report
            .confidence
            .iter()
            .enumerate()
            .map(|(i, c)| format!(
                "<span style=\"color:{}\">■</span> {}",
                PALETTE[i % PALETTE.len()],
                esc(&c.label())
            ))
            .collect::<Vec<_>>()
            .join(" · ")
    );
    h.push_str(
        "<div class=\"box scroll\"><table class=\"res\"><thead><tr><th>set · judge · rubric</th>\
         <th class=\"n\">pairs</th><th class=\"n\">area</th><th class=\"n\">most confident 10%</th>\
         <th class=\"n\">50%</th><th class=\"n\">all</th><th>accuracy by decile, least sure first</th>\
         </tr></thead>\n<tbody>\n",
    );
    for c in &report.confidence {
        let at = |k: usize| c.coverage.get(k).map(|p| p.accuracy);
        let _ = writeln!(
            h,
            "<tr><td class=\"lbl-cell\">{}</td><td class=\"n\">{}</td><td class=\"n\">{:.3}</td>\
             <td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td></tr>",
            esc(&c.label()),
            c.pairs,
            c.area,
            num(at(0)),
            num(at(4)),
            num(at(9)),
            c.decile_accuracies()
        );
    }
    h.push_str("</tbody></table></div>\n");
}

/// With `--calibrate`: each combination's cascade threshold, what it keeps and its bound, and
/// the lines for a cascade's table.
fn calibration_section(h: &mut String, report: &EvalReport) {
    let Some(first) = report.calibration.first() else {
        return;
    };
    let _ = writeln!(
        h,
        "<h2>Calibration <span style=\"color:{MUTED};font-weight:400;font-size:13px\">the lowest \
         confidence threshold whose kept groups are at least {} accurate with probability at \
         least {} (Clopper–Pearson, scanned from the most confident down)</span></h2>",
        tidy(1.0 - first.alpha),
        tidy(1.0 - first.delta)
    );
    h.push_str(
        "<div class=\"box scroll\"><table class=\"res\"><thead><tr><th>set · judge · rubric</th>\
         <th class=\"n\">threshold</th><th class=\"n\">kept pairs</th>\
         <th class=\"n\">coverage</th><th class=\"n\">kept groups</th>\
         <th class=\"n\">accuracy</th><th class=\"n\">lower bound</th><th>note</th>\
         </tr></thead>\n<tbody>\n",
    );
    for c in &report.calibration {
        let note = match c.no_threshold {
            None => String::new(),
            Some(NoThreshold::NoConfidence) => "no confidence: cannot be calibrated".into(),
            Some(NoThreshold::TooFewPairs) => format!("fewer than {} pairs", c.min_pairs),
            Some(NoThreshold::BoundTooLow) => "can decide nothing at this α, δ".into(),
        };
        let _ = writeln!(
            h,
            "<tr><td class=\"lbl-cell\">{}</td><td class=\"n\">{}</td>\
             <td class=\"n\">{} / {}</td><td class=\"n\">{:.3}</td><td class=\"n\">{} / {}</td>\
             <td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td></tr>",
            esc(&c.label()),
            c.thresholds
                .first()
                .map_or_else(|| "none".into(), |t| t.to_string()),
            c.kept_pairs,
            c.pairs,
            c.coverage,
            c.kept_groups,
            c.groups,
            num(c.accuracy),
            num(c.lower_bound),
            esc(&note)
        );
    }
    h.push_str("</tbody></table></div>\n<pre>");
    for c in &report.calibration {
        let _ = writeln!(h, "{}", esc(&c.toml()));
    }
    h.push_str("</pre>\n");
}

/// With `--attacks`: the worst attack per set × combination as cards, then every attack's
/// figures.
fn attacks_section(h: &mut String, report: &EvalReport) {
    if report.attacks.is_empty() {
        return;
    }
    let _ = writeln!(
        h,
        "<h2>Attacks <span style=\"color:{MUTED};font-weight:400;font-size:13px\">the wrong \
         trajectories' final answers rewritten; success: an attacked answer now scores above the \
         best one, per pair and order, where it did not clean</span></h2>"
    );
    h.push_str("<section class=\"cards\">\n");
    for s in report.attack_summary.iter().take(6) {
        let bad = s.success_rate.is_some_and(|r| r > 0.05);
        card(
            h,
            &num(s.success_rate),
            &format!("worst attack ({}) · {}", s.worst_attack, s.label()),
            bad,
        );
    }
    h.push_str("</section>\n");
    h.push_str(
        "<div class=\"box scroll\"><table class=\"res\"><thead><tr><th>set · judge · rubric</th>\
         <th>attack</th><th>kind</th><th class=\"n\">groups</th><th class=\"n\">success</th>\
         <th class=\"n\">95% interval</th><th class=\"n\">score shift</th>\
         <th class=\"n\">95% interval</th><th class=\"n\">accuracy clean</th>\
         <th class=\"n\">attacked</th><th class=\"n\">invalid</th></tr></thead>\n<tbody>\n",
    );
    for a in &report.attacks {
        let _ = writeln!(
            h,
            "<tr><td class=\"lbl-cell\">{}</td><td>{}</td><td>{}</td><td class=\"n\">{}</td>\
             <td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
             <td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
             <td class=\"n\">{}</td></tr>",
            esc(&a.label()),
            esc(&a.attack),
            esc(&a.kind),
            a.groups,
            num(a.success_rate),
            ci_text(a.success_ci95, false),
            a.score_shift
                .map_or_else(|| "—".into(), |d| format!("{d:+.3}")),
            ci_text(a.score_shift_ci95, true),
            num(a.accuracy_clean),
            num(a.accuracy_attacked),
            a.invalid
        );
    }
    h.push_str("</tbody></table></div>\n");
}

fn misranked_section(h: &mut String, report: &EvalReport) {
    let _ = writeln!(
        h,
        "<h2>Misranked groups <span style=\"color:{MUTED};font-weight:400;font-size:13px\">\
         a wrongly ordered pair in the order as given; click to see the judge's explanations\
         </span></h2>"
    );
    let mut any = false;
    for r in report
        .results
        .iter()
        .filter(|r| r.set != super::report::ALL_SETS)
    {
        for m in &r.misranked {
            any = true;
            let _ = writeln!(
                h,
                "<details><summary><span class=\"gl\">{}</span><span class=\"chip\">{}</span>\
                 <span class=\"chip bad\">accuracy {:.2}</span></summary>",
                esc(&format!("{} ({})", m.id, m.at)),
                esc(&r.label()),
                m.accuracy
            );
            h.push_str(
                "<table class=\"mis\"><thead><tr><th class=\"n\">label</th>\
                 <th class=\"n\">scores by order</th><th>final answer</th><th>explanation</th>\
                 </tr></thead>\n<tbody>\n",
            );
            for t in &m.trajectories {
                let scores: Vec<String> = t.scores.iter().map(|s| format!("{s:.3}")).collect();
                let _ = writeln!(
                    h,
                    "<tr><td class=\"n\">{}</td><td class=\"n\">{}</td>\
                     <td class=\"lbl-cell\">{}</td><td class=\"lbl-cell\">{}</td></tr>",
                    t.label,
                    esc(&scores.join(" · ")),
                    esc(&t.answer),
                    esc(&t.explanation)
                );
            }
            h.push_str("</tbody></table></details>\n");
        }
    }
    if !any {
        h.push_str("<p class=\"sub\">No group was misranked.</p>\n");
    }
}

/// The whole page.
pub fn render(report: &EvalReport) -> String {
    let mut h = String::new();
    let files = report.files.join(", ");
    page_open(&mut h, &format!("gavel eval: {files}"), EXTRA_CSS);
    let _ = writeln!(h, "<h1>Judge quality</h1>");
    let _ = writeln!(
        h,
        "<p class=\"sub\">{} · {} · each group judged in {} order{}{}</p>",
        esc(&files),
        if report.score == ScoreTarget::Reward {
            "ranking rewards".to_string()
        } else {
            format!("ranking the {} component", esc(report.score.as_str()))
        },
        report.orders,
        if report.orders == 1 { "" } else { "s" },
        report
            .permutations
            .map_or_else(String::new, |p| format!(" · {p} permutations per request"))
    );
    h.push_str("<section class=\"cards\">\n");
    let headline: Vec<&SetResult> = {
        let pooled: Vec<&SetResult> = report
            .results
            .iter()
            .filter(|r| r.set == super::report::ALL_SETS)
            .collect();
        if pooled.is_empty() {
            report.results.iter().collect()
        } else {
            pooled
        }
    };
    for r in headline.iter().take(4) {
        card(
            &mut h,
            &num(r.pairwise_accuracy),
            &format!("pairwise accuracy · {}", r.label()),
            false,
        );
    }
    let invalid: usize = headline.iter().map(|r| r.invalid).sum();
    card(
        &mut h,
        &invalid.to_string(),
        "invalid verdicts",
        invalid > 0,
    );
    h.push_str("</section>\n");

    let _ = writeln!(
        h,
        "<figure class=\"wide\"><h3>Pairwise accuracy</h3>{}<figcaption>Share of (better, worse) \
         pairs ordered right over every order (a tie counts half), with its 95% bootstrap \
         interval over groups.</figcaption></figure>",
        bars_svg(
            "pairwise accuracy",
            &report.results,
            &[("accuracy", COLOR_ACC, |r| r.pairwise_accuracy)],
            true
        )
    );
    let _ =
        writeln!(
        h,
        "<figure class=\"wide\"><h3>Position bias</h3>{}<figcaption>Accuracy on the pairs where \
         the better trajectory was shown first, and where it was shown later. An unbiased judge \
         has both equal.</figcaption></figure>",
        bars_svg(
            "position bias",
            &report.results,
            &[
                ("better shown first", COLOR_FIRST, |r| r.position.accuracy_better_first),
                ("better shown later", COLOR_LATER, |r| r.position.accuracy_better_later),
                ("flip rate", MUTED, |r| r.position.flip_rate),
            ],
            false
        )
    );
    let _ = writeln!(
        h,
        "<figure class=\"wide\"><h3>Length bias</h3>{}<figcaption>Accuracy on the pairs whose \
         better trajectory is the longer one, and the shorter one; \"prefer longer\" is how often \
         the trivial rule would be right on the same pairs.</figcaption></figure>",
        bars_svg(
            "length bias",
            &report.results,
            &[
                ("better is longer", COLOR_LONGER, |r| r
                    .length
                    .accuracy_better_longer),
                ("better is shorter", COLOR_SHORTER, |r| r
                    .length
                    .accuracy_better_shorter),
                ("rule: prefer longer", MUTED, |r| r.length.prefer_longer),
            ],
            false
        )
    );
    h.push_str("<h2>Results</h2>\n");
    results_table(&mut h, report);
    comparisons_table(&mut h, report);
    confidence_section(&mut h, report);
    calibration_section(&mut h, report);
    if !report.cascades.is_empty() {
        h.push_str("<h2>Cascades</h2>\n<pre>");
        for c in &report.cascades {
            for line in super::cascade_report::text_lines(c) {
                let _ = writeln!(h, "{}", esc(&line));
            }
        }
        h.push_str("</pre>\n");
    }
    attacks_section(&mut h, report);
    misranked_section(&mut h, report);
    page_close(
        &mut h,
        "Generated by <code>gavel eval</code>. Invalid verdicts (judge errors, null rewards) are \
         counted, never scored; their groups are left out of every figure.",
    );
    h
}

/// Judge calls, with the failed ones beside them when there were any.
fn calls_cell(calls: u64, failed: u64) -> String {
    if failed == 0 {
        calls.to_string()
    } else {
        format!("{calls} (+{failed} failed)")
    }
}
