//! The rubric side of `gavel lint`: each file parsed, then its checklist, verifiers and policy
//! checked as a scoring request would use them; each finding at the line of the TOML key it
//! concerns.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use toml::de::DeTable;

use super::Report;
use crate::domain::reward::{ResolvedPolicy, INDEPENDENT, JUDGE};
use crate::domain::rubric::{line_of, Rubric, RubricSpec};
use crate::domain::verify::Verifier;

/// A finding about a rubric: the TOML path it concerns (e.g. `items[2].weight`, which gives
/// its line), whether it is a warning, and the message.
#[derive(Debug, Clone, PartialEq)]
struct Issue(String, bool, String);

fn problem(path: impl Into<String>, message: impl Into<String>) -> Issue {
    Issue(path.into(), false, message.into())
}

fn warning(path: impl Into<String>, message: impl Into<String>) -> Issue {
    Issue(path.into(), true, message.into())
}

pub(super) fn lint_rubrics(paths: &[PathBuf], report: &mut Report) -> Vec<Rubric> {
    let mut files = Vec::new();
    for p in paths {
        let shown = p.display().to_string();
        if !p.is_dir() {
            match p.exists() {
                true => files.push(p.clone()),
                false => report.add(&shown, None, false, "no such file or directory"),
            }
            continue;
        }
        let mut found: Vec<PathBuf> = match std::fs::read_dir(p) {
            Ok(entries) => entries.filter_map(|e| e.ok().map(|e| e.path())).collect(),
            Err(e) => {
                report.add(&shown, None, false, format!("cannot read: {e}"));
                continue;
            }
        };
        found.retain(|p| p.extension().is_some_and(|x| x == "toml"));
        if found.is_empty() {
            report.add(&shown, None, true, "no *.toml rubrics here");
        }
        found.sort();
        files.extend(found);
    }
    report.rubrics = files.len();
    let mut names: BTreeMap<String, String> = BTreeMap::new();
    let mut rubrics = Vec::new();
    for path in files {
        let file = path.display().to_string();
        let Some(r) = lint_rubric(&path, &file, report) else {
            continue;
        };
        if let Some(other) = names.insert(r.name.clone(), file.clone()) {
            let m = format!("rubric name {:?} is also used by {other}", r.name);
            report.add(&file, None, false, m);
        }
        rubrics.push(r);
    }
    rubrics
}

/// Lints one rubric file; returns the rubric when it loads (to render templates with).
fn lint_rubric(path: &Path, file: &str, report: &mut Report) -> Option<Rubric> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| report.add(file, None, false, format!("cannot read: {e}")))
        .ok()?;
    let spec: RubricSpec = toml::from_str(&text)
        .map_err(|e| {
            let line = e.span().map(|s| line_of(&text, s.start));
            report.add(file, line, false, e.message().replace('\n', "; "))
        })
        .ok()?;
    let doc = DeTable::parse(&text).ok();
    let line = |path: &str| doc.as_ref().and_then(|d| line_at(d.get_ref(), &text, path));
    let mut issues: Vec<(Option<usize>, Issue)> = check_spec(&spec)
        .into_iter()
        .map(|i| (line(&i.0), i))
        .collect();
    issues.sort_by_key(|(line, _)| *line);
    for (line, Issue(_, warning, message)) in &issues {
        report.add(file, *line, *warning, message);
    }
    let stem = path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("rubric");
    match Rubric::from_spec(spec, stem, file) {
        Ok(r) => Some(r),
        // Whatever `from_spec` refuses that the checks above did not report.
        Err(e) if issues.iter().all(|(_, i)| i.1) => {
            let m = e.to_string().replacen(&format!("{file}: "), "", 1);
            report.add(file, None, false, m);
            None
        }
        Err(_) => None,
    }
}

/// 1-based line of the most specific part of `path` (`items[2].weight`, `policy.shaping.judge`)
/// present in the document: the key when it is there, else the nearest table above it.
fn line_at(doc: &DeTable, text: &str, path: &str) -> Option<usize> {
    let mut best = None;
    let mut table = Some(doc);
    for part in path.split('.') {
        let (key, rest) = part.split_once('[').unwrap_or((part, ""));
        let indices = rest
            .split('[')
            .filter_map(|i| i.trim_end_matches(']').parse().ok());
        let Some((k, v)) = table.and_then(|t| t.iter().find(|(k, _)| k.get_ref() == key)) else {
            break;
        };
        best = Some(k.span().start);
        let mut value = v.get_ref();
        for i in indices {
            let Some(e) = value.get::<usize>(i) else {
                return best.map(|b| line_of(text, b));
            };
            (best, value) = (Some(e.span().start), e.get_ref());
        }
        table = value.as_table();
    }
    best.map(|b| line_of(text, b))
}

/// Everything wrong with a parsed rubric.
fn check_spec(spec: &RubricSpec) -> Vec<Issue> {
    let mut out = Vec::new();
    if spec.text.trim().is_empty() {
        let m = "\"text\" is empty: a rubric states grading standards";
        out.push(problem("text", m));
    }
    check_items(spec, &mut out);
    if let Some(k) = spec.permutations.filter(|k| *k == 0 || *k > 16) {
        out.push(problem(
            "permutations",
            format!("permutations must be 1..=16, got {k}"),
        ));
    }
    let (weights, explicit) = check_verifiers(spec, &mut out);
    match spec.policy.clone().unwrap_or_default().resolve(&weights) {
        Err(m) => {
            let key = m.split([':', ' ']).next().unwrap_or("");
            out.push(problem(format!("policy.{key}"), format!("policy: {m}")));
        }
        Ok(p) => check_policy(&p, !spec.items.is_empty(), &explicit, &mut out),
    }
    out
}

fn check_items(spec: &RubricSpec, out: &mut Vec<Issue>) {
    let mut seen = BTreeSet::new();
    for (i, item) in spec.items.iter().enumerate() {
        let at = format!("items[{i}]");
        if item.id.trim().is_empty() {
            out.push(problem(format!("{at}.id"), format!("{at}.id is empty")));
        } else if !seen.insert(item.id.as_str()) {
            let m = format!("{at}.id {:?} appears twice", item.id);
            out.push(problem(format!("{at}.id"), m));
        }
        if item.text.trim().is_empty() {
            out.push(problem(format!("{at}.text"), format!("{at}.text is empty")));
        }
        let w = item.weight;
        if !(w.is_finite() && w >= 0.0) {
            let m = format!("{at}.weight must be a finite number >= 0, got {w}");
            out.push(problem(format!("{at}.weight"), m));
        } else if item.required && w == 0.0 {
            let m = format!(
                "{at}: required item {:?} has weight 0: it caps the score when unmet and adds \
                 nothing when met",
                item.id
            );
            out.push(warning(format!("{at}.weight"), m));
        }
    }
    if !spec.items.is_empty() && spec.items.iter().all(|i| i.weight == 0.0) {
        out.push(problem("items", "every checklist item has weight 0"));
    }
    match spec.required_cap {
        Some(c) if !(0.0..=1.0).contains(&c) => {
            let m = format!("required_cap must be within [0, 1], got {c}");
            out.push(problem("required_cap", m));
        }
        Some(_) if spec.items.is_empty() => {
            let m = "required_cap has no effect without [[items]]";
            out.push(warning("required_cap", m));
        }
        Some(_) if !spec.items.iter().any(|i| i.required) => {
            let m = "required_cap has no effect: no item is required";
            out.push(warning("required_cap", m));
        }
        _ => {}
    }
}

/// Compiles each verifier as a request would (with a placeholder `expected` when the rubric
/// leaves it to the request). Returns each verifier's weight by name, for the policy, and
/// (index, name, weight) of those that set `weight` themselves.
#[allow(clippy::type_complexity)]
fn check_verifiers(
    spec: &RubricSpec,
    out: &mut Vec<Issue>,
) -> (BTreeMap<String, f64>, Vec<(usize, String, f64)>) {
    let (mut weights, mut explicit) = (BTreeMap::new(), Vec::new());
    for (i, v) in spec.verifiers.iter().enumerate() {
        let at = format!("verifiers[{i}]");
        let field = |k: &str| v.get(k).and_then(Value::as_str);
        let name = field("name").or(field("type")).unwrap_or("").to_string();
        let weight = match Verifier::from_json(&with_placeholder(v), &at) {
            Ok(ver) => ver.weight(),
            Err(e) => {
                out.push(problem(e.path.clone(), e.to_string()));
                v.get("weight").and_then(Value::as_f64).unwrap_or(1.0)
            }
        };
        if name.is_empty() {
            continue; // `from_json` said why
        } else if name == JUDGE || name == INDEPENDENT {
            let m = format!("{at}.name: {name:?} is reserved");
            out.push(problem(format!("{at}.name"), m));
        } else if weights.insert(name.clone(), weight).is_some() {
            let m = format!("{at}: a second verifier named {name:?} (give one a \"name\")");
            out.push(problem(at, m));
        } else if v.get("weight").is_some() {
            explicit.push((i, name, weight));
        }
    }
    (weights, explicit)
}

/// A rubric's `answer_line` usually leaves `expected` to each request: compile it with a value
/// of the right kind in its place.
fn with_placeholder(v: &Value) -> Value {
    let mut v = v.clone();
    let Some(obj) = v.as_object_mut() else {
        return v;
    };
    let has_expected = obj.get("expected").is_some_and(|e| !e.is_null());
    if obj.get("type") != Some(&json!("answer_line")) || has_expected {
        return v;
    }
    let sample = |kind: Option<&Value>| match kind.and_then(Value::as_str) {
        Some("integer" | "decimal" | "money_cents") => json!(0),
        Some("date") => json!("2024-01-01"),
        Some("bool") => json!("yes"),
        Some("cell_ref") => json!("A1"),
        _ => json!("x"),
    };
    let expected = match obj.get("kind").and_then(Value::as_str) {
        Some("list" | "set") => json!([sample(obj.get("item_kind"))]),
        _ => sample(obj.get("kind")),
    };
    obj.insert("expected".into(), expected);
    v
}

/// Checks a resolved policy: something must count, a gate must be able to open, shaping must
/// stay small, verifier weights must matter, and a checklist needs the judge.
fn check_policy(
    p: &ResolvedPolicy,
    has_items: bool,
    explicit: &[(usize, String, f64)],
    out: &mut Vec<Issue>,
) {
    use ResolvedPolicy as P;
    let (weights, always) = match p {
        P::Weighted { weights } => (weights, None),
        P::Gate { gate, weights, .. } => (weights, Some(gate)),
        P::CorrectnessPlusShaping {
            correctness,
            shaping,
        } => (shaping, Some(correctness)),
    };
    let mut counted: BTreeSet<&String> =
        weights.iter().filter(|w| *w.1 > 0.0).map(|w| w.0).collect();
    if counted.is_empty() && !matches!(p, P::CorrectnessPlusShaping { .. }) {
        out.push(problem(
            "policy.weights",
            "policy gives every component weight 0",
        ));
    }
    counted.extend(always);
    let sum: f64 = weights.values().sum();
    match p {
        P::Gate { threshold, .. } if *threshold > 1.0 => {
            let m = format!("policy: threshold {threshold} is above 1: the gate never opens");
            out.push(problem("policy.threshold", m));
        }
        P::CorrectnessPlusShaping { .. } if sum > 0.5 => {
            let m = format!(
                "policy: shaping weights sum to {sum}; shaping this large makes the tiers close"
            );
            out.push(warning("policy.shaping", m));
        }
        _ => {}
    }
    for (i, name, w) in explicit
        .iter()
        .filter(|(_, n, w)| *w > 0.0 && !counted.contains(n))
    {
        let m =
            format!("verifiers[{i}]: weight {w} has no effect: the policy does not name {name:?}");
        out.push(warning(format!("verifiers[{i}].weight"), m));
    }
    if has_items && !p.needs_judge() {
        let m = "policy gives the judge weight 0: the checklist items are never judged";
        out.push(warning("policy", m));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `[W ]PATH: MESSAGE` for each issue of a rubric's TOML.
    fn issues(toml_text: &str) -> Vec<String> {
        let spec: RubricSpec = toml::from_str(toml_text).unwrap();
        let show = |Issue(path, w, m): Issue| format!("{}{path}: {m}", if w { "W " } else { "" });
        check_spec(&spec).into_iter().map(show).collect()
    }

    #[test]
    fn line_at_finds_the_most_specific_line() {
        let text =
            "text = \"x\"\n\n[[items]]\nid = \"a\"\n\n[[items]]\nid = \"b\"\nweight = -1\n\n\
                    [policy]\ntype = \"weighted\"\nweights = { judge = 1.0,\n  answr = 2 }\n";
        let doc = DeTable::parse(text).unwrap();
        let at = |p: &str| line_at(doc.get_ref(), text, p);
        assert_eq!(at("items[1].weight"), Some(8));
        assert_eq!(
            at("items[1].text"),
            Some(6),
            "absent key: its table's header"
        );
        assert_eq!(
            at("items[7].id"),
            Some(3),
            "no such element: the array's key"
        );
        assert_eq!(
            (at("policy.weights.answr"), at("policy.gate")),
            (Some(13), Some(10))
        );
        assert_eq!(at("verifiers[0].pattern"), None);
    }

    #[test]
    fn placeholders_fit_the_kind() {
        let p = |v: Value| with_placeholder(&v)["expected"].clone();
        let date = json!({"type": "answer_line", "kind": "date"});
        let set = json!({"type": "answer_line", "kind": "set", "item_kind": "bool"});
        assert_eq!((p(date), p(set)), (json!("2024-01-01"), json!(["yes"])));
        let given = json!({"type": "answer_line", "expected": 7});
        assert_eq!(p(given), json!(7), "kept when given");
        assert_eq!(p(json!({"type": "regex", "pattern": "a"})), Value::Null);
        for kind in "integer decimal money_cents date bool id cell_ref list set".split(' ') {
            let v = with_placeholder(&json!({"type": "answer_line", "kind": kind}));
            assert!(Verifier::from_json(&v, "v").is_ok(), "{kind}");
        }
    }

    #[test]
    fn checklist_and_policy_issues() {
        let items =
            "text = \"t\"\nrequired_cap = 0.3\n[[items]]\nid = \"a\"\ntext = \"A\"\nweight = 0\n\
                     required = true\n";
        assert_eq!(issues(items), [
            "W items[0].weight: items[0]: required item \"a\" has weight 0: it caps the score when \
             unmet and adds nothing when met",
            "items: every checklist item has weight 0",
        ]);
        let cap = "text = \"t\"\nrequired_cap = 0.5\n";
        assert_eq!(
            issues(cap),
            ["W required_cap: required_cap has no effect without [[items]]"]
        );
        let zero = "text = \"t\"\n[policy]\ntype = \"weighted\"\nweights = { judge = 0.0 }\n";
        assert_eq!(
            issues(zero),
            ["policy.weights: policy gives every component weight 0"]
        );
        let unused = "text = \"t\"\n[[verifiers]]\ntype = \"regex\"\npattern = \"x\"\nweight = 2\n\
                      [policy]\ntype = \"weighted\"\nweights = { judge = 1.0 }\n";
        assert_eq!(issues(unused), [
            "W verifiers[0].weight: verifiers[0]: weight 2 has no effect: the policy does not name \"regex\""
        ]);
        let gate =
            "text = \"t\"\n[[items]]\nid = \"a\"\ntext = \"A\"\n[[verifiers]]\ntype = \"regex\"\n\
                    pattern = \"x\"\n[policy]\ntype = \"gate\"\ngate = \"regex\"\nthreshold = 2.0\n\
                    weights = { regex = 1.0 }\n";
        assert_eq!(
            issues(gate),
            [
                "policy.threshold: policy: threshold 2 is above 1: the gate never opens",
                "W policy: policy gives the judge weight 0: the checklist items are never judged",
            ]
        );
    }

    #[test]
    fn verifier_problems_name_their_field() {
        let text = "text = \"t\"\n[[verifiers]]\ntype = \"regex\"\npattern = \"(\"\n\
                    [[verifiers]]\ntype = \"regex\"\npattern = \"a\"\n\
                    [[verifiers]]\ntype = \"contains\"\nname = \"judge\"\ntext = \"x\"\n";
        let got = issues(text);
        assert!(got[0].starts_with("verifiers[0].pattern: verifiers[0].pattern: invalid regex"));
        assert_eq!(got[1..], [
            "verifiers[1]: verifiers[1]: a second verifier named \"regex\" (give one a \"name\")",
            "verifiers[2].name: verifiers[2].name: \"judge\" is reserved",
        ]);
    }
}
