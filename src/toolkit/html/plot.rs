//! A plot as data: the SVG's size and its marks (lines, texts, bars, a polyline) with their
//! coordinates computed here, in Rust, and the markup written by `kit.html.j2`'s `svg` macro.
//! Also the axis helpers both reports draw with: round count axes, tick labels, grids, legends.

use serde::Serialize;

use super::clip;

pub const INK: &str = "#212529";
pub const MUTED: &str = "#6c757d";
pub const GRID: &str = "#e9ecef";

/// One thing drawn in a plot. `kind` tells the template which element to write.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Mark {
    /// `<line>`, dashed (`stroke-dasharray`) or thicker when asked.
    Line {
        x1: f64,
        y1: f64,
        x2: f64,
        y2: f64,
        stroke: &'static str,
        dash: Option<&'static str>,
        width: Option<f64>,
    },
    /// `<text>`; with a `title`, wrapped in a `<g>` whose tooltip is the text unclipped.
    Text {
        x: f64,
        y: f64,
        anchor: Option<&'static str>,
        fill: &'static str,
        size: Option<u32>,
        text: String,
        title: Option<String>,
    },
    /// A bar (`<rect>`, rounded) with its tooltip.
    Bar {
        x: f64,
        y: f64,
        w: f64,
        h: f64,
        fill: &'static str,
        tip: String,
    },
    /// A legend's colour square.
    Swatch { x: f64, y: f64, fill: &'static str },
    /// A curve through `points`, with its tooltip.
    Polyline {
        points: Vec<[f64; 2]>,
        stroke: &'static str,
        title: String,
    },
}

/// An SVG plot: its size, what it shows (`aria-label`), and its marks in drawing order.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Plot {
    pub width: f64,
    pub height: f64,
    pub label: String,
    /// The default text size, unless the plot's texts set their own.
    pub font_size: Option<u32>,
    pub marks: Vec<Mark>,
}

impl Plot {
    /// A plot whose texts are 11 px unless they say otherwise.
    pub fn new(width: f64, height: f64, label: &str) -> Plot {
        Plot {
            width,
            height,
            label: label.to_string(),
            font_size: Some(11),
            marks: Vec::new(),
        }
    }

    pub fn line(&mut self, x1: f64, y1: f64, x2: f64, y2: f64, stroke: &'static str) {
        self.styled_line([x1, y1, x2, y2], stroke, None, None);
    }

    /// A line with a dash pattern and/or a stroke width.
    pub fn styled_line(
        &mut self,
        [x1, y1, x2, y2]: [f64; 4],
        stroke: &'static str,
        dash: Option<&'static str>,
        width: Option<f64>,
    ) {
        self.marks.push(Mark::Line {
            x1,
            y1,
            x2,
            y2,
            stroke,
            dash,
            width,
        });
    }

    pub fn text(&mut self, x: f64, y: f64, anchor: &'static str, fill: &'static str, s: &str) {
        self.marks.push(Mark::Text {
            x,
            y,
            anchor: Some(anchor),
            fill,
            size: None,
            text: s.to_string(),
            title: None,
        });
    }

    /// A text in its own size, placed by its start.
    pub fn sized_text(&mut self, x: f64, y: f64, fill: &'static str, size: u32, s: &str) {
        self.marks.push(Mark::Text {
            x,
            y,
            anchor: None,
            fill,
            size: Some(size),
            text: s.to_string(),
            title: None,
        });
    }

    /// A text (`clipped`) whose tooltip is the whole of it (`full`).
    pub fn titled_text(
        &mut self,
        (x, y): (f64, f64),
        anchor: &'static str,
        fill: &'static str,
        full: &str,
        clipped: &str,
    ) {
        self.marks.push(Mark::Text {
            x,
            y,
            anchor: Some(anchor),
            fill,
            size: None,
            text: clipped.to_string(),
            title: Some(full.to_string()),
        });
    }

    /// A bar; a negative width or height draws nothing rather than an invalid rect.
    pub fn bar(&mut self, x: f64, y: f64, w: f64, h: f64, fill: &'static str, tip: &str) {
        self.marks.push(Mark::Bar {
            x,
            y,
            w: w.max(0.0),
            h: h.max(0.0),
            fill,
            tip: tip.to_string(),
        });
    }

    pub fn polyline(&mut self, points: Vec<[f64; 2]>, stroke: &'static str, title: &str) {
        self.marks.push(Mark::Polyline {
            points,
            stroke,
            title: title.to_string(),
        });
    }

    /// Horizontal grid lines with count labels, for a plot area `x0..x1` × `y0..y1` (y1 at
    /// zero).
    pub fn count_grid(&mut self, x0: f64, x1: f64, y0: f64, y1: f64, top: usize, step: usize) {
        let mut v = 0;
        while v <= top {
            let y = y1 - (y1 - y0) * v as f64 / top as f64;
            self.line(x0, y, x1, y, if v == 0 { MUTED } else { GRID });
            self.text(x0 - 6.0, y + 4.0, "end", MUTED, &v.to_string());
            v += step;
        }
    }

    /// Legend entries (swatch and text), right-aligned at `x`; the widths are estimated from
    /// the number of characters, as SVG cannot measure text.
    pub fn legend(&mut self, x: f64, y: f64, entries: &[(&'static str, String)]) {
        let mut x = x;
        for (color, label) in entries.iter().rev() {
            let label = clip(label, 24);
            let w = 6.5 * label.chars().count() as f64 + 18.0;
            x -= w;
            self.marks.push(Mark::Swatch {
                x,
                y: y - 9.0,
                fill: color,
            });
            self.text(x + 14.0, y, "start", INK, &label);
            x -= 10.0;
        }
    }
}

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

/// A tick label: at most three decimals, no trailing zeros, a true minus sign.
pub fn fmt_tick(v: f64) -> String {
    let s = format!("{v:.3}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    match s {
        "-0" => "0".into(),
        s => s.replace('-', "−"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn a_legend_ends_at_its_right_edge() {
        let mut p = Plot::new(100.0, 50.0, "l");
        p.legend(100.0, 14.0, &[(INK, "ab".into())]);
        // One entry: 6.5 px a character + 18 px, ending at x = 100.
        assert_eq!(
            p.marks[0],
            Mark::Swatch {
                x: 69.0,
                y: 5.0,
                fill: INK
            }
        );
    }
}
