//! The eval page's template against a context whose every text is markup: every place the page
//! writes user text escapes it, every section shows, and a context that lacks a field fails
//! the render.

use super::*;

const HOSTILE: &str = "<script>alert('x')</script>";

fn hostile() -> String {
    HOSTILE.to_string()
}

fn plot() -> Plot {
    let mut p = Plot::new(10.0, 10.0, HOSTILE);
    p.text(1.0, 1.0, "end", crate::toolkit::html::INK, HOSTILE);
    p
}

/// A page with every section drawn and every text the hostile one.
fn page() -> Page {
    let dash = || "—".to_string();
    Page {
        title: hostile(),
        files: hostile(),
        ranking: hostile(),
        orders: 2,
        permutations: Some(3),
        cards: vec![Card::new(HOSTILE, HOSTILE, false)],
        accuracy: plot(),
        position: plot(),
        length: plot(),
        results: vec![ResultRow {
            set: hostile(),
            judge: hostile(),
            rubric: hostile(),
            mode: "listwise",
            groups: 1,
            valid: 1,
            pairs: 1,
            accuracy: "1.000".into(),
            ci: dash(),
            top1: dash(),
            tau: dash(),
            flip_rate: dash(),
            mean_best: dash(),
            mean_worst: dash(),
            invalid: 0,
            calls: "2".into(),
            tokens: "1 · 2".into(),
            seconds: dash(),
        }],
        comparisons: vec![ComparisonRow {
            set: hostile(),
            a: hostile(),
            b: hostile(),
            groups: 1,
            accuracy_a: dash(),
            accuracy_b: dash(),
            difference: dash(),
            ci: dash(),
            verdict: "B is better",
        }],
        confidence: Some(ConfidenceSection {
            plot: plot(),
            legend: vec![("#000", hostile())],
            rows: vec![ConfidenceRow {
                label: hostile(),
                pairs: 1,
                area: "1.000".into(),
                top10: dash(),
                top50: dash(),
                all: dash(),
                deciles: "0.50 1.00".into(),
            }],
        }),
        calibration: Some(CalibrationSection {
            accuracy: "0.9".into(),
            probability: "0.9".into(),
            rows: vec![CalibrationRow {
                label: hostile(),
                threshold: "none".into(),
                kept_pairs: 0,
                pairs: 1,
                coverage: "0.000".into(),
                kept_groups: 0,
                groups: 1,
                accuracy: dash(),
                lower_bound: dash(),
                note: "fewer than 30 pairs".into(),
            }],
            toml: vec![hostile()],
        }),
        cascades: vec![hostile(), hostile()],
        attacks: Some(AttacksSection {
            cards: vec![Card::new("0.500", HOSTILE, true)],
            rows: vec![AttackRow {
                label: hostile(),
                attack: hostile(),
                kind: hostile(),
                groups: 1,
                success: dash(),
                success_ci: dash(),
                shift: dash(),
                shift_ci: dash(),
                accuracy_clean: dash(),
                accuracy_attacked: dash(),
                invalid: 0,
            }],
        }),
        misranked: vec![MisrankedGroup {
            title: hostile(),
            under: hostile(),
            accuracy: "0.50".into(),
            rows: vec![MisrankedRow {
                label: "1".into(),
                scores: "0.100 · 0.900".into(),
                answer: hostile(),
                explanation: hostile(),
            }],
        }],
    }
}

fn render_page(ctx: &impl Serialize) -> Result<String, minijinja::Error> {
    crate::toolkit::html::render("eval.html.j2", TEMPLATE, ctx)
}

#[test]
fn every_user_text_is_escaped() {
    let html = render_page(&page()).unwrap();
    assert!(!html.contains("<script"), "{html}");
    // title; subtitle ×2; card ×2; 4 plots × (label, text); results ×3; comparisons ×3;
    // confidence legend, row; calibration row, line; cascade lines ×2; attack card, row ×3;
    // misranked title, set, answer, explanation.
    assert_eq!(html.matches("&lt;script&gt;").count(), 33, "{html}");
}

#[test]
fn every_section_shows_and_wide_tables_scroll() {
    let html = render_page(&page()).unwrap();
    for want in [
        "<h1>Judge quality</h1>",
        "each group judged in 2 orders · 3 permutations per request</p>",
        "<h3>Pairwise accuracy</h3>",
        "<h3>Position bias</h3>",
        "<h3>Length bias</h3>",
        "<h2>Results</h2>\n<div class=\"box scroll\"><table class=\"res\">",
        "<h2>Comparisons</h2>\n<div class=\"box scroll\"><table class=\"res\">",
        "<h2>Confidence <span",
        "<h2>Calibration <span",
        "<h2>Cascades</h2>",
        "<h2>Attacks <span",
        "<h2>Misranked groups <span",
        "<td>B is better</td>",
        "<div class=\"card bad\"><div class=\"big\">0.500</div>",
        ".box.scroll { overflow-x: auto; }",
        "main { max-width: 1320px; }",
    ] {
        assert!(html.contains(want), "missing {want:?} in {html}");
    }
    // The lines to paste keep their line breaks.
    let lines = format!(
        "{0}\n{0}\n</pre>",
        "&lt;script&gt;alert(&#x27;x&#x27;)&lt;&#x2f;script&gt;"
    );
    assert!(html.contains(&lines), "{html}");
    assert!(!html.contains("No group was misranked."));
}

#[test]
fn empty_sections_are_left_out() {
    let mut p = page();
    p.comparisons.clear();
    p.confidence = None;
    p.calibration = None;
    p.cascades.clear();
    p.attacks = None;
    p.misranked.clear();
    p.permutations = None;
    p.orders = 1;
    let html = render_page(&p).unwrap();
    for gone in [
        "Comparisons",
        "Confidence",
        "Calibration",
        "Cascades",
        "Attacks",
    ] {
        assert!(!html.contains(gone), "{gone} in {html}");
    }
    assert!(html.contains("each group judged in 1 order</p>"), "{html}");
    assert!(html.contains("<p class=\"sub\">No group was misranked.</p>"));
}

#[test]
fn a_context_without_a_field_fails_the_render() {
    let mut ctx = serde_json::to_value(page()).unwrap();
    ctx["results"][0].as_object_mut().unwrap().remove("judge");
    let err = render_page(&ctx).unwrap_err();
    assert_eq!(err.kind(), minijinja::ErrorKind::UndefinedError, "{err}");
    // A section's absence is `null`, never a missing key: that fails too.
    let mut ctx = serde_json::to_value(page()).unwrap();
    ctx.as_object_mut().unwrap().remove("attacks");
    assert!(render_page(&ctx).is_err());
}
