//! The verifier types other than `answer_line`: regex, contains / not_contains, json_schema,
//! turn_budget, tool_call_budget, length, reference_f1 and reference_recall (their measures in
//! `overlap`), and grader_address (its patterns in `grader_address`).

use std::sync::Arc;

use regex::{Regex, RegexBuilder};
use serde_json::Value;

use super::answer::AnswerLine;
use super::overlap::Measure;
use super::{type_name, Outcome, Spec};
use crate::domain::trajectory::{InputError, Role, Trajectory};

/// Every verifier type with the fields it takes besides `type`, `name` and `weight`.
pub(super) const TYPES: &[(&str, &[&str])] = &[
    ("answer_line", AnswerLine::FIELDS),
    ("regex", &["pattern", "case_insensitive"]),
    ("contains", &["text", "case_sensitive"]),
    ("not_contains", &["text", "case_sensitive"]),
    ("json_schema", &["schema"]),
    ("turn_budget", &["budget", "limit"]),
    ("tool_call_budget", &["budget", "limit"]),
    ("length", &["unit", "target", "limit"]),
    ("reference_f1", &[]),
    ("reference_recall", &[]),
    ("grader_address", &[]),
];

const NO_FINAL_ANSWER: &str = "no final answer";

#[derive(Debug, Clone)]
pub(super) enum Check {
    Answer(Box<AnswerLine>),
    Regex(Regex),
    Contains {
        /// As given, for reasons.
        text: String,
        /// What is searched for: `text`, lowercased unless `case_sensitive`.
        needle: String,
        case_sensitive: bool,
        negate: bool,
    },
    JsonSchema(Arc<jsonschema::Validator>),
    Budget {
        tool_calls: bool,
        budget: u64,
        limit: u64,
    },
    Length {
        tokens: bool,
        target: u64,
        limit: u64,
    },
    /// Token F1 or recall against the group's reference (`super::overlap`).
    Reference(Measure),
    /// 0 when an assistant message addresses the grader (`super::grader_address`), else 1.
    GraderAddress,
}

impl Check {
    /// Reads the type-specific fields of a spec whose type is `kind` (one of [`TYPES`]).
    pub(super) fn from_spec(kind: &str, s: &Spec) -> Result<Check, InputError> {
        Ok(match kind {
            "answer_line" => Check::Answer(Box::new(AnswerLine::from_spec(s)?)),
            "regex" => {
                let pattern = s.required("pattern", s.str("pattern")?)?;
                let re = RegexBuilder::new(pattern)
                    .case_insensitive(s.bool("case_insensitive")?.unwrap_or(false))
                    .build()
                    .map_err(|e| {
                        s.err("pattern", format!("invalid regex ({})", regex_error(&e)))
                    })?;
                Check::Regex(re)
            }
            "contains" | "not_contains" => {
                let text = s.required("text", s.str("text")?)?;
                if text.is_empty() {
                    return Err(s.err("text", "must not be empty"));
                }
                let case_sensitive = s.bool("case_sensitive")?.unwrap_or(false);
                Check::Contains {
                    text: text.to_string(),
                    needle: if case_sensitive {
                        text.to_string()
                    } else {
                        text.to_lowercase()
                    },
                    case_sensitive,
                    negate: kind == "not_contains",
                }
            }
            "json_schema" => {
                let schema = s.required("schema", s.get("schema"))?;
                if !schema.is_object() && !schema.is_boolean() {
                    return Err(s.err(
                        "schema",
                        format!("expected an object or a boolean, got {}", type_name(schema)),
                    ));
                }
                let validator = jsonschema::validator_for(schema)
                    .map_err(|e| s.err("schema", format!("invalid schema: {e}")))?;
                Check::JsonSchema(Arc::new(validator))
            }
            "turn_budget" | "tool_call_budget" => {
                let (budget, limit) = shaping_bounds(s, "budget")?;
                Check::Budget {
                    tool_calls: kind == "tool_call_budget",
                    budget,
                    limit,
                }
            }
            "length" => {
                let tokens = match s.str("unit")? {
                    None | Some("chars") => false,
                    Some("tokens") => true,
                    Some(other) => {
                        return Err(s.err(
                            "unit",
                            format!("unknown unit {other:?} (expected \"chars\" or \"tokens\")"),
                        ))
                    }
                };
                let (target, limit) = shaping_bounds(s, "target")?;
                Check::Length {
                    tokens,
                    target,
                    limit,
                }
            }
            "reference_f1" => Check::Reference(Measure::F1),
            "reference_recall" => Check::Reference(Measure::Recall),
            "grader_address" => Check::GraderAddress,
            other => unreachable!("verifier type {other:?} is listed in TYPES but not built"),
        })
    }

    /// Checks `t`; `reference` is the group's reference answer, if it has one.
    pub(super) fn run(&self, t: &Trajectory, reference: Option<&str>) -> Outcome {
        match self {
            Check::Answer(a) => a.check(t.final_answer()),
            Check::Reference(measure) => match t.final_answer() {
                None => Outcome::score(0.0, NO_FINAL_ANSWER),
                Some(answer) => super::overlap::check(*measure, answer, reference),
            },
            Check::GraderAddress => {
                let found = t
                    .messages
                    .iter()
                    .filter(|m| m.role == Role::Assistant)
                    .filter_map(|m| m.content.as_deref())
                    .find_map(super::grader_address::find);
                match found {
                    Some((what, text)) => Outcome::score(0.0, format!("{what}: {text:?}")),
                    None => Outcome::score(1.0, "does not address the grader"),
                }
            }
            Check::Budget {
                tool_calls,
                budget,
                limit,
            } => {
                let assistant = t.messages.iter().filter(|m| m.role == Role::Assistant);
                let (n, unit) = if *tool_calls {
                    (
                        assistant.map(|m| m.tool_calls.len() as u64).sum(),
                        "tool call",
                    )
                } else {
                    (assistant.count() as u64, "turn")
                };
                let plural = if n == 1 { "" } else { "s" };
                Outcome::score(
                    shaped(n, *budget, *limit),
                    format!("{n} {unit}{plural} (budget {budget}, limit {limit})"),
                )
            }
            _ => match t.final_answer() {
                None => Outcome::score(0.0, NO_FINAL_ANSWER),
                Some(answer) => self.run_on_answer(answer),
            },
        }
    }

    fn run_on_answer(&self, answer: &str) -> Outcome {
        match self {
            Check::Regex(re) => match re.is_match(answer) {
                true => Outcome::score(1.0, "match"),
                false => Outcome::score(0.0, "no match"),
            },
            Check::Contains {
                text,
                needle,
                case_sensitive,
                negate,
            } => {
                let found = if *case_sensitive {
                    answer.contains(needle.as_str())
                } else {
                    answer.to_lowercase().contains(needle.as_str())
                };
                let reason = match found {
                    true => format!("contains {text:?}"),
                    false => format!("does not contain {text:?}"),
                };
                Outcome::score(if found != *negate { 1.0 } else { 0.0 }, reason)
            }
            Check::JsonSchema(validator) => {
                let doc: Value = match serde_json::from_str(json_text(answer)) {
                    Ok(doc) => doc,
                    Err(e) => return Outcome::score(0.0, format!("not JSON: {e}")),
                };
                let first = validator.iter_errors(&doc).next().map(|e| {
                    let path = e.instance_path().as_str();
                    let at = if path.is_empty() { "root" } else { path };
                    format!("invalid: {e} (at {at})")
                });
                match first {
                    None => Outcome::score(1.0, "valid"),
                    Some(reason) => Outcome::score(0.0, reason),
                }
            }
            Check::Length {
                tokens,
                target,
                limit,
            } => {
                let (n, unit) = if *tokens {
                    let bpe = tiktoken_rs::o200k_base_singleton();
                    (bpe.encode_ordinary(answer).len() as u64, "tokens")
                } else {
                    (answer.chars().count() as u64, "chars")
                };
                Outcome::score(
                    shaped(n, *target, *limit),
                    format!("{n} {unit} (target {target}, limit {limit})"),
                )
            }
            Check::Answer(_)
            | Check::Budget { .. }
            | Check::Reference(_)
            | Check::GraderAddress => {
                unreachable!("handled in run")
            }
        }
    }
}

/// The `(low, limit)` pair of a shaping check: both required non-negative integers, low < limit.
fn shaping_bounds(s: &Spec, low: &str) -> Result<(u64, u64), InputError> {
    let lo = s.required(low, s.count(low)?)?;
    let limit = s.required("limit", s.count("limit")?)?;
    if lo >= limit {
        return Err(s.err(low, format!("must be less than limit ({limit}), got {lo}")));
    }
    Ok((lo, limit))
}

/// 1.0 at or below `low`, falling linearly to 0.0 at `limit` and beyond.
fn shaped(n: u64, low: u64, limit: u64) -> f64 {
    if n <= low {
        1.0
    } else if n >= limit {
        0.0
    } else {
        (limit - n) as f64 / (limit - low) as f64
    }
}

/// The one-line cause of a regex error (its `Display` is a multi-line diagram).
fn regex_error(e: &regex::Error) -> String {
    let text = e.to_string();
    match text
        .lines()
        .rev()
        .find_map(|l| l.trim().strip_prefix("error: "))
    {
        Some(cause) => cause.to_string(),
        None => text.split_whitespace().collect::<Vec<_>>().join(" "),
    }
}

/// The JSON to validate: the last ```json fenced block of the answer if it has one, the body of
/// an answer that is nothing but one untagged fence, or else the whole answer.
fn json_text(answer: &str) -> &str {
    let mut blocks: Vec<(&str, &str)> = Vec::new(); // (info string, body)
    let mut open: Option<(&str, usize)> = None; // (info, byte offset where the body starts)
    let mut offset = 0;
    for line in answer.split_inclusive('\n') {
        let start = offset;
        offset += line.len();
        let fence = line.trim().strip_prefix("```");
        match (fence, open) {
            (Some(info), None) => open = Some((info.trim(), offset)),
            (Some(rest), Some((info, body))) if rest.trim().is_empty() => {
                blocks.push((info, &answer[body..start]));
                open = None;
            }
            _ => {}
        }
    }
    if let Some((info, body)) = open {
        blocks.push((info, &answer[body..])); // an unclosed fence runs to the end
    }
    if let Some((_, body)) = blocks
        .iter()
        .rev()
        .find(|(info, _)| info.eq_ignore_ascii_case("json"))
    {
        return body;
    }
    let whole = answer.trim();
    match blocks.as_slice() {
        [("", body)] if whole.starts_with("```") && whole.ends_with("```") => body,
        _ => answer,
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{build_err, run, traj_with};
    use super::super::Verifier;
    use serde_json::json;

    fn score(spec: serde_json::Value, answer: &str) -> (Option<f64>, String) {
        run(spec, answer)
    }

    #[test]
    fn regex_matches_anywhere() {
        let spec = json!({"type": "regex", "pattern": r"total:\s*\d+"});
        assert_eq!(
            score(spec.clone(), "The total: 42 units"),
            (Some(1.0), "match".into())
        );
        assert_eq!(score(spec, "TOTAL: 42"), (Some(0.0), "no match".into()));
        let ci = json!({"type": "regex", "pattern": r"total:\s*\d+", "case_insensitive": true});
        assert_eq!(score(ci.clone(), "TOTAL: 42"), (Some(1.0), "match".into()));
        let v = Verifier::from_json(&ci, "v").unwrap();
        let o = v.check(&traj_with(None, 1, 0));
        assert_eq!((o.value, o.reason.as_str()), (Some(0.0), "no final answer"));
        assert_eq!(
            build_err(json!({"type": "regex", "pattern": "(abc"})),
            "verifiers[2].pattern: invalid regex (unclosed group)"
        );
        assert_eq!(
            build_err(json!({"type": "regex"})),
            "verifiers[2].pattern: missing"
        );
    }

    #[test]
    fn contains_and_not_contains() {
        let c = json!({"type": "contains", "text": "Paris"});
        assert_eq!(
            score(c.clone(), "It is PARIS."),
            (Some(1.0), "contains \"Paris\"".into())
        );
        assert_eq!(
            score(c, "Lyon"),
            (Some(0.0), "does not contain \"Paris\"".into())
        );
        let cs = json!({"type": "contains", "text": "Paris", "case_sensitive": true});
        assert_eq!(
            score(cs.clone(), "PARIS"),
            (Some(0.0), "does not contain \"Paris\"".into())
        );
        assert_eq!(
            score(cs, "in Paris"),
            (Some(1.0), "contains \"Paris\"".into())
        );
        let n = json!({"type": "not_contains", "text": "sorry"});
        assert_eq!(
            score(n.clone(), "Sorry, no."),
            (Some(0.0), "contains \"sorry\"".into())
        );
        assert_eq!(
            score(n.clone(), "42"),
            (Some(1.0), "does not contain \"sorry\"".into())
        );
        let v = Verifier::from_json(&n, "v").unwrap();
        let o = v.check(&traj_with(None, 2, 0));
        assert_eq!((o.value, o.reason.as_str()), (Some(0.0), "no final answer"));
        assert_eq!(
            build_err(json!({"type": "not_contains", "text": ""})),
            "verifiers[2].text: must not be empty"
        );
    }

    #[test]
    fn json_schema_valid_invalid_not_json_fenced() {
        let spec = json!({"type": "json_schema", "schema": {
            "type": "object", "required": ["total"],
            "properties": {"total": {"type": "integer"}}}});
        assert_eq!(
            score(spec.clone(), r#"{"total": 4}"#),
            (Some(1.0), "valid".into())
        );
        assert_eq!(
            score(spec.clone(), r#"{"total": "4"}"#),
            (
                Some(0.0),
                "invalid: \"4\" is not of type \"integer\" (at /total)".into()
            )
        );
        assert_eq!(
            score(spec.clone(), r#"{}"#),
            (
                Some(0.0),
                "invalid: \"total\" is a required property (at root)".into()
            )
        );
        assert_eq!(
            score(spec.clone(), "The total is 4"),
            (
                Some(0.0),
                "not JSON: expected value at line 1 column 1".into()
            )
        );
        let fenced = "Here you go:\n```json\n{\"total\": 1}\n```\nand the fixed one:\n```JSON\n{\"total\": 7}\n```\n";
        assert_eq!(score(spec.clone(), fenced), (Some(1.0), "valid".into()));
        let bad_last = "```json\n{\"total\": 1}\n```\n```json\n{\"total\": 1.5}\n```";
        assert_eq!(score(spec.clone(), bad_last).0, Some(0.0));
        assert_eq!(
            score(spec.clone(), "```\n{\"total\": 3}\n```"),
            (Some(1.0), "valid".into())
        );
        let unclosed = "Result:\n```json\n{\"total\": 3}\n";
        assert_eq!(score(spec.clone(), unclosed), (Some(1.0), "valid".into()));
        assert_eq!(
            build_err(json!({"type": "json_schema", "schema": {"type": "nonsense"}})),
            "verifiers[2].schema: invalid schema: \"nonsense\" is not valid under any of the \
             schemas listed in the 'anyOf' keyword"
        );
        assert_eq!(
            build_err(json!({"type": "json_schema", "schema": "object"})),
            "verifiers[2].schema: expected an object or a boolean, got a string"
        );
    }

    fn budget(kind: &str, turns: usize, calls: usize) -> (Option<f64>, String) {
        let v = Verifier::from_json(&json!({"type": kind, "budget": 6, "limit": 15}), "v").unwrap();
        let o = v.check(&traj_with(Some("done"), turns, calls));
        (o.value, o.reason)
    }

    #[test]
    fn turn_budget_shapes_linearly() {
        let r = |turns| budget("turn_budget", turns, 0);
        assert_eq!(r(6), (Some(1.0), "6 turns (budget 6, limit 15)".into()));
        assert_eq!(r(1), (Some(1.0), "1 turn (budget 6, limit 15)".into()));
        assert_eq!(
            r(9),
            (Some(6.0 / 9.0), "9 turns (budget 6, limit 15)".into())
        );
        assert_eq!(r(15), (Some(0.0), "15 turns (budget 6, limit 15)".into()));
        assert_eq!(r(20).0, Some(0.0));
        assert_eq!(
            build_err(json!({"type": "turn_budget", "budget": 15, "limit": 15})),
            "verifiers[2].budget: must be less than limit (15), got 15"
        );
        assert_eq!(
            build_err(json!({"type": "turn_budget", "budget": -1, "limit": 15})),
            "verifiers[2].budget: expected a non-negative integer, got -1"
        );
        assert_eq!(
            build_err(json!({"type": "turn_budget", "budget": 2})),
            "verifiers[2].limit: missing"
        );
    }

    #[test]
    fn tool_call_budget_counts_calls_of_all_assistant_turns() {
        // 2 calls per assistant turn; budget 6, limit 15.
        let r = |turns| budget("tool_call_budget", turns, 2);
        assert_eq!(
            r(3),
            (Some(1.0), "6 tool calls (budget 6, limit 15)".into())
        );
        assert_eq!(
            r(5),
            (Some(5.0 / 9.0), "10 tool calls (budget 6, limit 15)".into())
        );
        assert_eq!(
            r(8),
            (Some(0.0), "16 tool calls (budget 6, limit 15)".into())
        );
        assert_eq!(
            budget("tool_call_budget", 1, 1),
            (Some(1.0), "1 tool call (budget 6, limit 15)".into())
        );
    }

    #[test]
    fn length_in_chars_and_tokens() {
        let chars = json!({"type": "length", "target": 4, "limit": 8});
        assert_eq!(
            score(chars.clone(), "abcd"),
            (Some(1.0), "4 chars (target 4, limit 8)".into())
        );
        assert_eq!(
            score(chars.clone(), "héllo!"),
            (Some(0.5), "6 chars (target 4, limit 8)".into())
        );
        assert_eq!(
            score(chars.clone(), "123456789"),
            (Some(0.0), "9 chars (target 4, limit 8)".into())
        );
        let v = Verifier::from_json(&chars, "v").unwrap();
        let o = v.check(&traj_with(None, 1, 0));
        assert_eq!((o.value, o.reason.as_str()), (Some(0.0), "no final answer"));
        let tokens = json!({"type": "length", "unit": "tokens", "target": 2, "limit": 6});
        assert_eq!(
            score(tokens.clone(), "hello world"),
            (Some(1.0), "2 tokens (target 2, limit 6)".into())
        );
        assert_eq!(
            score(tokens, "hello world hello world"),
            (Some(0.5), "4 tokens (target 2, limit 6)".into())
        );
        assert_eq!(
            build_err(json!({"type": "length", "unit": "words", "target": 1, "limit": 2})),
            "verifiers[2].unit: unknown unit \"words\" (expected \"chars\" or \"tokens\")"
        );
        assert_eq!(
            build_err(json!({"type": "length", "target": 10, "limit": 5})),
            "verifiers[2].target: must be less than limit (5), got 10"
        );
    }
}
