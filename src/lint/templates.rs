//! The template side of `gavel lint`: every judge template pair (shipped, or from
//! `--prompts`) rendered through the real [`Prompts::render`] with each rubric against a
//! built-in sample group, and the result checked for the trajectories, the rubric text and the
//! checklist items.

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::json;

use super::Report;
use crate::domain::dedup::{DedupConfig, JudgeInput};
use crate::domain::prompt::{GroupExtras, Prompts};
use crate::domain::rubric::Rubric;
use crate::domain::trajectory::{parse_trajectories, Trajectory};

/// What a judge template may use, for the hint after "`x` is undefined".
const JUDGE_VARS: &str =
    "n, ids, rubric, context, shared, trajectories, tools, reference, json_values, reply_schema";

/// Checks the template pairs — the shipped ones, plus (or replaced by) those in `dir` — by
/// rendering each with each rubric against the sample group, with and without tools.
pub(super) fn lint_templates(dir: Option<&Path>, rubrics: &[Rubric], report: &mut Report) {
    let shipped = match Prompts::load(None) {
        Ok(p) => p,
        Err(e) => return report.add("prompts", None, false, e.to_string()),
    };
    let mut names: BTreeSet<String> = (shipped.names())
        .flat_map(|n| [format!("{n}.system.jinja"), format!("{n}.user.jinja")])
        .chain(["reask.jinja".to_string()])
        .collect();
    let mut local = BTreeSet::new();
    let shown = |local: &BTreeSet<String>, name: &str| match dir.filter(|_| local.contains(name)) {
        Some(d) => d.join(name).display().to_string(),
        None => format!("prompts/{name}"),
    };
    let prompts = match dir {
        None => shipped,
        Some(dir) => {
            let before = report.problems();
            local = match precheck_dir(dir, &names, report) {
                Some(local) => local,
                None => return,
            };
            names.extend(local.iter().cloned());
            report.templates = names.len();
            match Prompts::load(Some(dir)) {
                Ok(p) => p,
                // Reported by the pre-check already, or else as the loader says it.
                Err(_) if report.problems() > before => return,
                Err(e) => return report.template_error(&e, &|n| shown(&local, n), JUDGE_VARS),
            }
        }
    };
    report.templates = names.len();
    let shown = |name: &str| shown(&local, name);
    let input = JudgeInput::build(&sample_group(), &DedupConfig::default());
    let order: Vec<usize> = (0..input.candidates.len()).collect();
    let tools = json!([{"type": "function", "function": {"name": "search",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}}}}]);
    let all: Vec<Rubric> = sample_rubrics()
        .into_iter()
        .chain(rubrics.iter().cloned())
        .collect();
    for p in prompts.names() {
        let (system, user) = (
            shown(&format!("{p}.system.jinja")),
            shown(&format!("{p}.user.jinja")),
        );
        for (rubric, tools) in all.iter().flat_map(|r| [(r, Some(&tools)), (r, None)]) {
            // With tools, also with a reference answer and a judge held to the reply's schema;
            // without, a judge that is not: every optional block and both reply forms render.
            let extras = GroupExtras {
                tools,
                reference: tools.map(|_| "LINT-SAMPLE-REFERENCE"),
                reply_schema: tools.is_some(),
            };
            let rendered = match prompts.render(p, &input, &order, rubric, extras) {
                Ok(r) => r.messages,
                Err(e) => {
                    report.template_error(&e, &shown, JUDGE_VARS);
                    continue;
                }
            };
            let text: Vec<&str> = rendered.iter().map(|m| m.content.as_str()).collect();
            let text = text.join("\n");
            if !text.contains("<trajectory id=\"1\">") {
                let m = "template does not show the trajectories (no <trajectory id=\"1\">)";
                report.add(&user, None, false, m);
            }
            if !text.contains(rubric.text.trim()) {
                let m = "template does not include the rubric text";
                report.add(&system, None, false, m);
            }
            if rubric.items.iter().any(|i| !text.contains(&i.id)) {
                let m = "template does not list the checklist items (rubric.items)";
                report.add(&system, None, false, m);
            }
        }
    }
    match prompts.render_reask("LINT-SAMPLE-PROBLEM", &["1".into(), "2".into()]) {
        Ok(m) if m.content.contains("LINT-SAMPLE-PROBLEM") => {}
        Ok(_) => {
            let m = "the re-ask does not show {{ problem }}";
            report.add(&shown("reask.jinja"), None, true, m);
        }
        Err(e) => report.template_error(&e, &shown, "problem, ids"),
    }
}

/// Reports what would stop `dir`'s templates from loading or pairing up (unreadable files,
/// syntax errors, a half without its partner in `dir` or among the `shipped` files); returns the
/// names of its `*.jinja` files, or `None` when `dir` cannot be read.
fn precheck_dir(
    dir: &Path,
    shipped: &BTreeSet<String>,
    report: &mut Report,
) -> Option<BTreeSet<String>> {
    let shown = |name: &str| dir.join(name).display().to_string();
    let entries = std::fs::read_dir(dir)
        .map_err(|e| {
            let m = match e.kind() {
                std::io::ErrorKind::NotFound => "no such file or directory".to_string(),
                _ => format!("cannot read: {e}"),
            };
            report.add(&dir.display().to_string(), None, false, m)
        })
        .ok()?;
    let mut names = BTreeSet::new();
    let mut syntax = minijinja::Environment::new();
    for path in entries.filter_map(|e| e.ok().map(|e| e.path())) {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if !name.ends_with(".jinja") {
            continue;
        }
        names.insert(name.to_string());
        match std::fs::read_to_string(&path) {
            Err(e) => report.add(&shown(name), None, false, format!("cannot read: {e}")),
            Ok(text) => {
                if let Err(e) = syntax.add_template_owned(name.to_string(), text) {
                    let m = format!("{}: {}", e.kind(), e.detail().unwrap_or_default());
                    report.add(&shown(name), e.line(), false, m);
                }
            }
        }
    }
    for name in &names {
        let partner = match name.strip_suffix(".jinja").and_then(|n| n.rsplit_once('.')) {
            Some((p, "system")) => format!("{p}.user.jinja"),
            Some((p, "user")) => format!("{p}.system.jinja"),
            _ => continue,
        };
        if !names.contains(&partner) && !shipped.contains(&partner) {
            let m = format!("has no partner {partner}");
            report.add(&shown(name), None, false, m);
        }
    }
    Some(names)
}

/// The group every template renders: a shared system prompt and request, tool calls with a
/// long result two trajectories share, and three different endings.
fn sample_group() -> Vec<Trajectory> {
    let doc = "Q3 2024 report. ".repeat(20);
    let call = |id: &str| {
        json!({"role": "assistant", "content": null, "tool_calls": [{"id": id,
        "type": "function", "function": {"name": "search", "arguments": "{\"query\": \"Q3\"}"}}]})
    };
    let result = |id: &str| json!({"role": "tool", "tool_call_id": id, "content": doc});
    let say = |role: &str, text: &str| json!({"role": role, "content": text});
    let (system, user) = (
        say(
            "system",
            "You are a research agent. End with 'ANSWER: <value>'.",
        ),
        say("user", "What was Q3 2024 revenue?"),
    );
    let group = json!([
        {"messages": [system, user, call("a"), result("a"),
                      say("assistant", "$4.21 billion.\nANSWER: 4210000000")]},
        {"messages": [system, user, call("b"), result("b"), say("assistant", "ANSWER: 41")]},
        {"messages": [system, user, say("assistant", "I could not find it.")]},
    ]);
    parse_trajectories(&group, 64).expect("the lint sample group is valid")
}

/// A plain rubric and a checklist one, so every `rubric.items` branch renders.
fn sample_rubrics() -> Vec<Rubric> {
    let checklist = "text = \"Judge each item strictly.\"\nrequired_cap = 0.2\n\
        [[items]]\nid = \"lint_revenue\"\ntext = \"States Q3 revenue.\"\nrequired = true\n\
        [[items]]\nid = \"lint_source\"\ntext = \"Cites the filing.\"\nweight = 0.5\n";
    let plain = "text = \"Prefer the trajectory that answers correctly and directly.\"";
    [("lint_plain", plain), ("lint_checklist", checklist)]
        .iter()
        .map(|(name, text)| Rubric::parse_toml(text, name, name).expect("lint samples are valid"))
        .collect()
}
