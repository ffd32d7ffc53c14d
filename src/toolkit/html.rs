//! The HTML kit shared by the reports of `gavel diff` and `gavel eval`: one self-contained page
//! (inline CSS, inline SVG drawn here, no script, no external reference), headline cards,
//! key-value tables and the SVG primitives of their plots. Every text from the input is escaped
//! with [`esc`] by the caller or by the primitive that writes it.

use std::fmt::Write;

pub const INK: &str = "#212529";
pub const MUTED: &str = "#6c757d";
pub const GRID: &str = "#e9ecef";

/// Escapes text for HTML element content and attribute values.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Printable text of at most `max` characters: control characters become spaces, and a longer
/// text ends in `…`.
pub fn clip(s: &str, max: usize) -> String {
    let clean: String = s
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if clean.chars().count() <= max {
        clean
    } else {
        let mut out: String = clean.chars().take(max.saturating_sub(1)).collect();
        out.push('…');
        out
    }
}

pub const BASE_CSS: &str = r#"
:root { --a: #1c7ed6; --b: #e8590c; --ink: #212529; --muted: #6c757d; --line: #dee2e6; }
* { box-sizing: border-box; }
body { margin: 0; background: #f8f9fa; color: var(--ink);
  font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
main { max-width: 1120px; margin: 0 auto; padding: 28px 24px 48px; }
h1 { font-size: 24px; margin: 0 0 4px; font-weight: 650; }
h2 { font-size: 17px; margin: 32px 0 10px; font-weight: 600; }
.sub { color: var(--muted); margin: 0; overflow-wrap: anywhere; }
.a { color: var(--a); } .b { color: var(--b); }
.sw { display: inline-block; width: 10px; height: 10px; border-radius: 2px; margin-right: 4px; }
.sw.a { background: var(--a); } .sw.b { background: var(--b); }
.cards { display: grid; grid-template-columns: repeat(auto-fit, minmax(180px, 1fr)); gap: 12px;
  margin: 20px 0 8px; }
.card { background: #fff; border: 1px solid var(--line); border-radius: 8px; padding: 12px 16px; }
.card .big { font-size: 26px; font-weight: 650; font-variant-numeric: tabular-nums; }
.card .lbl { color: var(--muted); font-size: 13px; }
.card.bad .big { color: #c92a2a; }
.plots { display: grid; grid-template-columns: 1fr 1fr; gap: 16px; }
@media (max-width: 860px) { .plots { grid-template-columns: 1fr; } }
figure { margin: 0; background: #fff; border: 1px solid var(--line); border-radius: 8px;
  padding: 12px 14px 10px; }
figure.wide { margin-top: 16px; }
figcaption { color: var(--muted); font-size: 13px; margin-top: 4px; }
figure h3 { font-size: 14px; margin: 0 0 6px; font-weight: 600; }
svg { display: block; width: 100%; height: auto; }
svg text { font-family: inherit; paint-order: stroke; stroke: #fff; stroke-width: 3px;
  stroke-linejoin: round; }
.cols { display: grid; grid-template-columns: minmax(0, 2fr) minmax(0, 3fr); gap: 16px; }
@media (max-width: 860px) { .cols { grid-template-columns: 1fr; } }
table { border-collapse: collapse; background: #fff; width: 100%; }
th, td { padding: 5px 10px; border-bottom: 1px solid var(--line); text-align: left;
  vertical-align: top; }
th { font-weight: 600; color: var(--muted); font-size: 12px; text-transform: uppercase;
  letter-spacing: .03em; }
td.n, th.n { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
table.kv td:first-child { color: var(--muted); white-space: nowrap; width: 1%; }
.box { background: #fff; border: 1px solid var(--line); border-radius: 8px; overflow: hidden; }
details { background: #fff; border: 1px solid var(--line); border-radius: 8px; margin: 8px 0; }
details[open] { box-shadow: 0 1px 3px rgba(0,0,0,.06); }
summary { cursor: pointer; padding: 10px 14px; display: flex; flex-wrap: wrap; gap: 6px 10px;
  align-items: center; }
summary .gl { font-weight: 600; overflow-wrap: anywhere; margin-right: auto; }
.chip { background: #f1f3f5; border-radius: 10px; padding: 1px 9px; font-size: 12.5px;
  font-variant-numeric: tabular-nums; white-space: nowrap; }
.chip.flip { background: #fff4e6; color: #d9480f; }
.chip.bad { background: #ffe3e3; color: #c92a2a; }
details table { border-top: 1px solid var(--line); }
table.traj { table-layout: fixed; }
table.traj col.t { width: 32%; } table.traj col.r { width: 19%; }
table.traj col.d { width: 13%; } table.traj col.k { width: 17%; }
.rwc { display: flex; align-items: center; gap: 8px; }
.rwc .v { width: 3.2em; text-align: right; flex: none; }
.track { flex: 1; height: 8px; background: #f1f3f5; border-radius: 4px; overflow: hidden; }
.track .bar { display: block; height: 100%; border-radius: 4px; }
.track .bar.a { background: var(--a); } .track .bar.b { background: var(--b); }
.mv { font-size: 11.5px; margin-left: 6px; display: inline-block; width: 2.6em; text-align: left; }
.mv.up { color: #2b8a3e; } .mv.down { color: #c92a2a; }
td.up { color: var(--b); } td.down { color: var(--a); } td.same { color: var(--muted); }
tr.mover td { background: #fff9db; }
.tag { font-size: 11px; background: #ffe066; border-radius: 8px; padding: 0 6px; margin-left: 6px;
  white-space: nowrap; }
.lbl-cell { overflow-wrap: anywhere; }
.why { padding: 8px 14px 12px; color: #343a40; }
.why p { margin: 4px 0; overflow-wrap: anywhere; }
.err { padding: 4px 14px 12px; color: #c92a2a; margin: 0; overflow-wrap: anywhere; }
footer { color: var(--muted); font-size: 12px; margin-top: 32px; }
"#;

/// Opens the page: doctype, head with the title and [`BASE_CSS`] plus `extra_css`, `<main>`.
pub fn page_open(h: &mut String, title: &str, extra_css: &str) {
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{}</title>\n<style>{BASE_CSS}{extra_css}</style>\n</head>\n<body>\n<main>\n",
        esc(title)
    );
}

/// Closes the page after a footer (`footer_html` is markup, written as is).
pub fn page_close(h: &mut String, footer_html: &str) {
    let _ = write!(
        h,
        "<footer>{footer_html}</footer>\n</main>\n</body>\n</html>\n"
    );
}

/// One headline card: a big figure over its label; `bad` draws the figure in red.
pub fn card(h: &mut String, big: &str, lbl: &str, bad: bool) {
    let class = if bad { "card bad" } else { "card" };
    let _ = writeln!(
        h,
        "<div class=\"{class}\"><div class=\"big\">{}</div><div class=\"lbl\">{}</div></div>",
        esc(big),
        esc(lbl)
    );
}

/// Rows of a two-column key-value table (`<table class="kv">`), both sides escaped.
pub fn kv_rows(h: &mut String, rows: &[(&str, String)]) {
    for (k, v) in rows {
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td class=\"n\">{}</td></tr>",
            esc(k),
            esc(v)
        );
    }
}

// ---------------------------------------------------------------------------------------------
// SVG plots

/// A nice upper bound for an axis of counts up to `max`, and its tick step.
pub fn count_axis(max: usize) -> (usize, usize) {
    let max = max.max(1);
    let mut step = 1;
    for s in [
        1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000, 2000, 5000, 10_000,
    ] {
        step = s;
        if max.div_ceil(s) <= 5 {
            break;
        }
    }
    while max.div_ceil(step) > 5 {
        step *= 10;
    }
    (max.div_ceil(step) * step, step)
}

pub fn fmt_tick(v: f64) -> String {
    let s = format!("{v:.3}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    match s {
        "-0" => "0".into(),
        s => s.replace('-', "−"),
    }
}

pub fn svg_open(h: &mut String, w: f64, ht: f64, label: &str) {
    let _ = write!(
        h,
        "<svg viewBox=\"0 0 {w} {ht}\" width=\"{w}\" height=\"{ht}\" role=\"img\" \
         aria-label=\"{}\" font-size=\"11\">",
        esc(label)
    );
}

pub fn text(h: &mut String, x: f64, y: f64, anchor: &str, fill: &str, s: &str) {
    let _ = write!(
        h,
        "<text x=\"{x:.1}\" y=\"{y:.1}\" text-anchor=\"{anchor}\" fill=\"{fill}\">{}</text>",
        esc(s)
    );
}

pub fn line(h: &mut String, x1: f64, y1: f64, x2: f64, y2: f64, stroke: &str, extra: &str) {
    let _ = write!(
        h,
        "<line x1=\"{x1:.1}\" y1=\"{y1:.1}\" x2=\"{x2:.1}\" y2=\"{y2:.1}\" stroke=\"{stroke}\"{extra}/>"
    );
}

pub fn rect(h: &mut String, x: f64, y: f64, w: f64, ht: f64, fill: &str, tip: &str) {
    let _ = write!(
        h,
        "<rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{fill}\" rx=\"1.5\">\
         <title>{}</title></rect>",
        w.max(0.0),
        ht.max(0.0),
        esc(tip)
    );
}

/// Horizontal grid lines with count labels, for a plot area `x0..x1` × `y0..y1` (y1 at zero).
pub fn count_grid(h: &mut String, x0: f64, x1: f64, y0: f64, y1: f64, top: usize, step: usize) {
    let mut v = 0;
    while v <= top {
        let y = y1 - (y1 - y0) * v as f64 / top as f64;
        line(h, x0, y, x1, y, if v == 0 { MUTED } else { GRID }, "");
        text(h, x0 - 6.0, y + 4.0, "end", MUTED, &v.to_string());
        v += step;
    }
}

/// Legend entries (swatch and text), right-aligned at `x`.
pub fn legend(h: &mut String, x: f64, y: f64, entries: &[(&str, String)]) {
    let mut x = x;
    for (color, label) in entries.iter().rev() {
        let label = clip(label, 24);
        let w = 6.5 * label.chars().count() as f64 + 18.0;
        x -= w;
        let _ = write!(
            h,
            "<rect x=\"{x:.1}\" y=\"{:.1}\" width=\"10\" height=\"10\" rx=\"2\" fill=\"{color}\"/>",
            y - 9.0
        );
        text(h, x + 14.0, y, "start", INK, &label);
        x -= 10.0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup() {
        assert_eq!(
            esc("<script>alert('x') & \"y\"</script>"),
            "&lt;script&gt;alert(&#39;x&#39;) &amp; &quot;y&quot;&lt;/script&gt;"
        );
    }

    #[test]
    fn clips_and_cleans() {
        assert_eq!(clip("abc", 5), "abc");
        assert_eq!(clip("abcdef", 4), "abc…");
        assert_eq!(clip("a\nb\tc", 10), "a b c");
    }

    #[test]
    fn axes_are_round() {
        assert_eq!(count_axis(0), (1, 1));
        assert_eq!(count_axis(4), (4, 1));
        assert_eq!(count_axis(7), (8, 2));
        assert_eq!(count_axis(23), (25, 5));
        assert_eq!(count_axis(480), (500, 100));
        assert_eq!(fmt_tick(-0.5), "−0.5");
        assert_eq!(fmt_tick(0.0), "0");
        assert_eq!(fmt_tick(1.0), "1");
    }
}
