//! The HTML kit shared by the reports of `gavel diff` and `gavel eval`: one self-contained page
//! (inline CSS, inline SVG, no script, no external reference) rendered from minijinja templates
//! compiled into the binary. The layout with its CSS (`templates/page.html.j2`) and the pieces
//! every report draws (`templates/kit.html.j2`: headline cards, key-value rows, headings with a
//! note, the SVG of a [`Plot`]) live here; each report adds its own template and hands it a
//! plain serializable context.
//!
//! Escaping is minijinja's: every template here is HTML with autoescape on, so a report never
//! escapes text itself and can never forget to. Undefined is strict: a template that names a
//! field its context lacks fails the render instead of leaving a blank in the page.

mod plot;

pub use plot::{count_axis, fmt_tick, Mark, Plot, GRID, INK, MUTED};

use minijinja::{AutoEscape, Environment, Error, UndefinedBehavior};
use serde::Serialize;

/// The layout every page extends, with the CSS.
const PAGE: &str = include_str!("templates/page.html.j2");
/// Macros the reports import: cards, key-value rows, headings, plots.
const KIT: &str = include_str!("templates/kit.html.j2");

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

/// One headline card: a big figure over its label; `bad` draws the figure in red.
#[derive(Debug, Clone, Serialize)]
pub struct Card {
    pub big: String,
    pub lbl: String,
    pub bad: bool,
}

impl Card {
    pub fn new(big: impl Into<String>, lbl: impl Into<String>, bad: bool) -> Card {
        Card {
            big: big.into(),
            lbl: lbl.into(),
            bad,
        }
    }
}

/// `{{ x|fixed(1) }}`: a number with that many decimals, as Rust's `{:.1}` writes it;
/// `{{ x|fixed }}` as Rust's `{}` does (`760`, not minijinja's `760.0`). SVG coordinates go
/// through it so the page's numbers are the ones the plot code computed, to the digit.
fn fixed(v: f64, digits: Option<usize>) -> String {
    match digits {
        Some(d) => format!("{v:.d$}"),
        None => format!("{v}"),
    }
}

/// Renders the report template `name` (its source `source`, which extends `page.html.j2`) with
/// `ctx`. An error is a bug in a template or its context, never in the user's data.
pub fn render<S: Serialize>(
    name: &'static str,
    source: &'static str,
    ctx: &S,
) -> Result<String, Error> {
    let mut env = Environment::new();
    env.set_undefined_behavior(UndefinedBehavior::Strict);
    // Every template here is HTML, whatever its name ends in.
    env.set_auto_escape_callback(|_| AutoEscape::Html);
    // A block tag alone on its line leaves no line behind, so a template can keep one tag a
    // line and the page does not fill with blank lines.
    env.set_syntax(
        minijinja::syntax::SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .keep_trailing_newline(true)
            .build()?,
    );
    env.add_filter("fixed", fixed);
    env.add_template("page.html.j2", PAGE)?;
    env.add_template("kit.html.j2", KIT)?;
    env.add_template(name, source)?;
    env.get_template(name)?.render(minijinja::value::Serde(ctx))
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIXTURE: &str = r#"{% extends "page.html.j2" %}
{% from "kit.html.j2" import card, svg %}
{% block body %}{{ card(c) }}{{ svg(plot) }}<p>{{ text }}</p>{% endblock %}
{% block footer %}footer{% endblock %}"#;

    #[derive(Serialize)]
    struct Fixture {
        title: String,
        c: Card,
        plot: Plot,
        text: String,
    }

    fn fixture(user: &str) -> Fixture {
        let mut plot = Plot::new(100.0, 50.0, user);
        plot.text(1.0, 2.0, "start", INK, user);
        plot.bar(1.0, 2.0, 3.0, 4.0, GRID, user);
        plot.polyline(vec![[1.0, 2.0], [3.0, 4.0]], INK, user);
        Fixture {
            title: user.into(),
            c: Card::new(user, user, false),
            plot,
            text: user.into(),
        }
    }

    #[test]
    fn user_text_is_escaped_everywhere_the_kit_writes_it() {
        let user = "<script>alert('x')</script>";
        let page = render("fixture.html.j2", FIXTURE, &fixture(user)).unwrap();
        assert!(!page.contains("<script"), "{page}");
        // title, card ×2, aria-label, text, bar tip, polyline title, paragraph.
        assert_eq!(page.matches("&lt;script&gt;").count(), 8, "{page}");
    }

    #[test]
    fn the_page_is_whole_and_numbers_are_written_as_computed() {
        let page = render("fixture.html.j2", FIXTURE, &fixture("p")).unwrap();
        assert!(
            page.starts_with("<!DOCTYPE html>\n<html lang=\"en\">"),
            "{page}"
        );
        assert!(page.ends_with("</html>\n"), "{page}");
        assert!(page.contains("<title>p</title>"), "{page}");
        assert!(page.contains("viewBox=\"0 0 100 50\""), "{page}");
        assert!(page.contains("<footer>footer</footer>"), "{page}");
        assert!(page.contains("points=\"1.0,2.0 3.0,4.0\""), "{page}");
        assert!(
            page.contains(
                "<div class=\"card\"><div class=\"big\">p</div><div class=\"lbl\">p</div></div>"
            ),
            "{page}"
        );
    }

    #[test]
    fn a_field_the_context_lacks_fails_the_render() {
        let missing = r#"{% extends "page.html.j2" %}{% block body %}{{ nope }}{% endblock %}"#;
        let err = render(
            "missing.html.j2",
            missing,
            &minijinja::context! { title => "t" },
        )
        .unwrap_err();
        assert_eq!(err.kind(), minijinja::ErrorKind::UndefinedError, "{err}");
        // An `if` on a missing field fails too, rather than quietly leaving a section out.
        let tested = r#"{% if nope %}x{% endif %}"#;
        assert!(render("if.html.j2", tested, &minijinja::context! {}).is_err());
    }

    #[test]
    fn clips_and_cleans() {
        assert_eq!(clip("abc", 5), "abc");
        assert_eq!(clip("abcdef", 4), "abc…");
        assert_eq!(clip("a\nb\tc", 10), "a b c");
    }
}
