//! Verifiable rewards: pure, deterministic checks of a trajectory against a JSON specification.
//!
//! A [`Verifier`] is built once from its spec (every problem in the spec is an [`InputError`]
//! naming the exact field) and then checked against any number of trajectories; checking does no
//! I/O and never fails — a trajectory that lacks what a check looks for scores 0 with a reason.
//!
//! `answer_line` (in `answer`) extracts and compares a typed `ANSWER:` line; the other types
//! (in `checks`) are regex, substring, JSON-schema, turn/tool-call budget and length shaping, and
//! token F1 or recall against the group's reference (`reference_f1`, `reference_recall`, in
//! `overlap`), and `grader_address` (text that speaks to the grader, in [`grader_address`]).

mod answer;
mod checks;
pub mod grader_address;
mod overlap;

use serde::Serialize;
use serde_json::{Map, Value};

use crate::domain::trajectory::{InputError, Trajectory};

/// The result of one check: `value` in `[0, 1]`, or `None` when the check does not apply.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Outcome {
    pub value: Option<f64>,
    pub reason: String,
}

impl Outcome {
    pub(crate) fn score(value: f64, reason: impl Into<String>) -> Outcome {
        Outcome {
            value: Some(value.clamp(0.0, 1.0)),
            reason: reason.into(),
        }
    }
}

/// One compiled verifier: its name, weight and check.
#[derive(Debug, Clone)]
pub struct Verifier {
    name: String,
    kind: &'static str,
    weight: f64,
    check: checks::Check,
}

/// Fields every verifier spec may carry, whatever its type.
const COMMON_FIELDS: [&str; 3] = ["type", "name", "weight"];

impl Verifier {
    /// Builds a verifier from its JSON spec; `at` is the path used in errors, e.g. "verifiers[2]".
    pub fn from_json(v: &Value, at: &str) -> Result<Verifier, InputError> {
        let obj = v.as_object().ok_or_else(|| {
            InputError::new(
                at,
                format!("expected a verifier object, got {}", type_name(v)),
            )
        })?;
        let spec = Spec { obj, at };
        let ty = spec.required("type", spec.str("type")?)?;
        let (kind, fields) = checks::TYPES
            .iter()
            .find(|(k, _)| *k == ty)
            .ok_or_else(|| {
                let known: Vec<&str> = checks::TYPES.iter().map(|(k, _)| *k).collect();
                spec.err(
                    "type",
                    format!(
                        "unknown verifier type {ty:?} (expected one of {})",
                        known.join(", ")
                    ),
                )
            })?;
        for key in obj.keys() {
            if !COMMON_FIELDS.contains(&key.as_str()) && !fields.contains(&key.as_str()) {
                let known: Vec<&str> = COMMON_FIELDS.iter().chain(fields.iter()).copied().collect();
                return Err(spec.err(
                    key,
                    crate::domain::input::unknown_field(
                        key,
                        &known,
                        &format!("known fields for {kind}"),
                    ),
                ));
            }
        }
        let name = match spec.str("name")? {
            Some("") => return Err(spec.err("name", "must not be empty")),
            Some(n) => n.to_string(),
            None => kind.to_string(),
        };
        let weight = spec.number("weight")?.unwrap_or(1.0);
        if weight < 0.0 {
            return Err(spec.err("weight", format!("must be >= 0, got {weight}")));
        }
        let check = checks::Check::from_spec(kind, &spec)?;
        Ok(Verifier {
            name,
            kind,
            weight,
            check,
        })
    }

    /// The `name` field, or the type string when it has none.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The type string, e.g. `"answer_line"`.
    pub fn kind(&self) -> &'static str {
        self.kind
    }

    /// The `weight` field (default 1.0; finite and >= 0).
    pub fn weight(&self) -> f64 {
        self.weight
    }

    /// Checks one trajectory of a group without a reference answer.
    pub fn check(&self, t: &Trajectory) -> Outcome {
        self.check.run(t, None)
    }

    /// Checks one trajectory of a group whose reference answer is `reference` (what
    /// `reference_f1` and `reference_recall` compare with; the other types do not read it).
    pub fn check_in_group(&self, t: &Trajectory, reference: Option<&str>) -> Outcome {
        self.check.run(t, reference)
    }
}

pub(crate) use crate::domain::trajectory::type_name;

/// A verifier spec being read: typed access to its fields with errors naming `at.field`.
/// A field set to `null` counts as absent.
pub(crate) struct Spec<'a> {
    obj: &'a Map<String, Value>,
    at: &'a str,
}

impl<'a> Spec<'a> {
    pub(crate) fn path(&self, field: &str) -> String {
        format!("{}.{field}", self.at)
    }

    pub(crate) fn err(&self, field: &str, problem: impl Into<String>) -> InputError {
        InputError::new(self.path(field), problem)
    }

    pub(crate) fn get(&self, field: &str) -> Option<&'a Value> {
        self.obj.get(field).filter(|v| !v.is_null())
    }

    pub(crate) fn required<T>(&self, field: &str, v: Option<T>) -> Result<T, InputError> {
        v.ok_or_else(|| self.err(field, "missing"))
    }

    fn wrong_type(&self, field: &str, expected: &str, v: &Value) -> InputError {
        self.err(field, format!("expected {expected}, got {}", type_name(v)))
    }

    pub(crate) fn str(&self, field: &str) -> Result<Option<&'a str>, InputError> {
        match self.get(field) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(v) => Err(self.wrong_type(field, "a string", v)),
        }
    }

    pub(crate) fn bool(&self, field: &str) -> Result<Option<bool>, InputError> {
        match self.get(field) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(v) => Err(self.wrong_type(field, "a boolean", v)),
        }
    }

    /// A finite number (JSON numbers always are).
    pub(crate) fn number(&self, field: &str) -> Result<Option<f64>, InputError> {
        match self.get(field) {
            None => Ok(None),
            Some(Value::Number(n)) => n
                .as_f64()
                .filter(|x| x.is_finite())
                .map(Some)
                .ok_or_else(|| self.err(field, "not a finite number")),
            Some(v) => Err(self.wrong_type(field, "a number", v)),
        }
    }

    /// A non-negative integer.
    pub(crate) fn count(&self, field: &str) -> Result<Option<u64>, InputError> {
        match self.get(field) {
            None => Ok(None),
            Some(Value::Number(n)) => n.as_u64().map(Some).ok_or_else(|| {
                self.err(
                    field,
                    crate::domain::input::not_an_integer(n, "a non-negative integer"),
                )
            }),
            Some(v) => Err(self.wrong_type(field, "a non-negative integer", v)),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::domain::trajectory::{Message, Role, ToolCall};
    use serde_json::json;

    fn msg(role: Role, content: Option<&str>, calls: usize) -> Message {
        Message {
            reasoning: None,
            role,
            content: content.map(str::to_string),
            tool_calls: (0..calls)
                .map(|i| ToolCall {
                    id: format!("c{i}"),
                    name: "f".into(),
                    arguments: "{}".into(),
                })
                .collect(),
            tool_call_id: None,
            name: None,
        }
    }

    /// A trajectory of a user question then `turns` assistant messages, the last saying `answer`
    /// (no assistant message at all when `turns` is 0); each assistant turn makes `calls` calls.
    pub(crate) fn traj_with(answer: Option<&str>, turns: usize, calls: usize) -> Trajectory {
        let mut messages = vec![msg(Role::User, Some("question"), 0)];
        for i in 0..turns {
            let last = i + 1 == turns;
            messages.push(msg(
                Role::Assistant,
                if last { answer } else { Some("thinking") },
                calls,
            ));
        }
        Trajectory {
            messages,
            reward: None,
            metrics: Map::new(),
            metadata: Map::new(),
        }
    }

    /// Builds `spec` (panicking on a spec error) and checks it against a one-turn answer.
    pub(crate) fn run(spec: Value, answer: &str) -> (Option<f64>, String) {
        let v = Verifier::from_json(&spec, "verifiers[0]").unwrap();
        let o = v.check(&traj_with(Some(answer), 1, 0));
        (o.value, o.reason)
    }

    pub(crate) fn build_err(spec: Value) -> String {
        Verifier::from_json(&spec, "verifiers[2]")
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn common_fields_and_defaults() {
        let v = Verifier::from_json(&json!({"type": "regex", "pattern": "x"}), "v").unwrap();
        assert_eq!((v.name(), v.kind(), v.weight()), ("regex", "regex", 1.0));
        let v = Verifier::from_json(
            &json!({"type": "contains", "text": "x", "name": "has_x", "weight": 2.5}),
            "v",
        )
        .unwrap();
        assert_eq!((v.name(), v.kind(), v.weight()), ("has_x", "contains", 2.5));
        fn send_sync<T: Send + Sync>() {}
        send_sync::<Verifier>();
    }

    #[test]
    fn spec_errors_name_the_field() {
        assert_eq!(
            build_err(json!({"type": "magic"})),
            "verifiers[2].type: unknown verifier type \"magic\" (expected one of answer_line, \
             regex, contains, not_contains, json_schema, turn_budget, tool_call_budget, length, reference_f1, \
             reference_recall, grader_address)"
        );
        assert_eq!(
            build_err(json!({"name": "x"})),
            "verifiers[2].type: missing"
        );
        assert_eq!(
            build_err(json!("regex")),
            "verifiers[2]: expected a verifier object, got a string"
        );
        assert_eq!(
            build_err(json!({"type": "regex", "pattern": "x", "flags": "i"})),
            "verifiers[2].flags: unknown field (known fields for regex: type, name, weight, \
             pattern, case_insensitive)"
        );
        assert_eq!(
            build_err(json!({"type": "regex", "patern": "x"})),
            "verifiers[2].patern: unknown field, did you mean pattern?"
        );
        let huge: Value = serde_json::from_str(
            r#"{"type": "turn_budget", "budget": 2, "limit": 99999999999999999999}"#,
        )
        .unwrap();
        assert_eq!(
            build_err(huge),
            "verifiers[2].limit: too large: 100000000000000000000"
        );
        assert_eq!(
            build_err(json!({"type": "turn_budget", "budget": 2.5, "limit": 4})),
            "verifiers[2].budget: expected a non-negative integer, got 2.5"
        );
        assert_eq!(
            build_err(json!({"type": "regex", "pattern": "x", "weight": -1})),
            "verifiers[2].weight: must be >= 0, got -1"
        );
        assert_eq!(
            build_err(json!({"type": "regex", "pattern": "x", "weight": "1"})),
            "verifiers[2].weight: expected a number, got a string"
        );
        assert_eq!(
            build_err(json!({"type": "regex", "pattern": "x", "name": ""})),
            "verifiers[2].name: must not be empty"
        );
    }

    /// `answer_line` end to end: value kinds, line finding, reasons and spec errors (kept here,
    /// beside the public API, so that `answer/` stays code).
    mod answer_line {
        use super::super::Verifier;
        use super::{build_err, run, traj_with};
        use serde_json::{json, Value};

        /// (expected, answer, reason): `expected` is JSON if it parses as JSON, else a string; the
        /// value must be 1 for "correct" and 0 otherwise.
        type Case = (&'static str, &'static str, &'static str);

        fn cases(spec: Value, cases: &[Case]) {
            for &(expected, answer, reason) in cases {
                let mut spec = spec.clone();
                spec["type"] = json!("answer_line");
                spec["expected"] = serde_json::from_str(expected).unwrap_or(json!(expected));
                let value = if reason == "correct" { 1.0 } else { 0.0 };
                let got = run(spec, &format!("Working...\nANSWER: {answer}"));
                assert_eq!(got, (Some(value), reason.into()), "{answer:?}");
            }
        }

        #[test]
        #[rustfmt::skip]
        fn integers() {
            cases(json!({"kind": "integer"}), &[
                ("4120", "4,120", "correct"),
                ("4120", "4120", "correct"),
                ("1000000", "1_000_000", "correct"),
                ("4120", "4\u{2009}120", "correct"),
                ("-7", "−7", "correct"),
                ("4120", "4121", "wrong: got 4121, expected 4120"),
                ("4120", "4120.0", "unparseable: \"4120.0\" is not an integer"),
                ("4120", "4120 items", "unparseable: \"4120 items\" is not an integer"),
                ("4120", "41,20", "unparseable: \"41,20\" is not an integer"),
            ]);
        }

        #[test]
        #[rustfmt::skip]
        fn decimals_with_tolerances() {
            cases(json!({"kind": "decimal"}), &[
                ("0.3", "0.30", "correct"),
                ("1500", "1.5e3", "correct"),
                ("\"-0.5\"", "-.5", "correct"),
                ("0.3", "0.3000001", "wrong: got 0.3000001, expected 0.3"),
                ("1", "abc", "unparseable: \"abc\" is not a decimal number"),
            ]);
            cases(json!({"kind": "decimal", "abs_tol": 0.01}), &[
                ("2.5", "2.509", "correct"),
                ("2.5", "2.49", "correct"),
                ("2.5", "2.51", "correct"),
                ("2.5", "2.4899", "wrong: got 2.4899, expected 2.5"),
                ("2.5", "2.52", "wrong: got 2.52, expected 2.5"),
            ]);
            cases(json!({"kind": "decimal", "rel_tol": 0.01}), &[
                ("200", "201.9", "correct"),
                ("200", "198", "correct"),
                ("200", "197.9", "wrong: got 197.9, expected 200"),
                ("200", "202.5", "wrong: got 202.5, expected 200"),
            ]);
        }

        #[test]
        #[rustfmt::skip]
        fn money_in_cents() {
            cases(json!({"kind": "money_cents"}), &[
                ("12245525", "$122,455.25", "correct"),
                ("12245525", "12245525", "correct"),
                ("12245520", "122455.2", "correct"),
                ("-500", "-$5.00", "correct"),
                ("-500", "$-5", "correct"),
                ("-500", "($5.00)", "correct"),
                ("500", "USD 5", "correct"),
                ("€5", "5.00 eur", "correct"),
                ("£1,000", "100000", "correct"),
                ("12245525", "122455", "wrong: got 122455 cents, expected 12245525 cents"),
                ("123", "1.234", "unparseable: \"1.234\" is not a money amount"),
                ("500", "$$5", "unparseable: \"$$5\" is not a money amount"),
                ("500", "5 dollars", "unparseable: \"5 dollars\" is not a money amount"),
            ]);
        }

        #[test]
        #[rustfmt::skip]
        fn dates() {
            let same = [
                "March 15th, 2024", "2024-03-15", "2024/03/15", "2024.03.15", "15 March 2024",
                "15 Mar 2024", "Mar 15 2024", "mar. 15, 2024", "MARCH 15, 2024", "15/03/2024",
                "03-15-2024", "Friday, 15 March 2024", "Fri 15th of March 2024", "2024-3-15",
            ];
            for answer in same {
                cases(json!({"kind": "date"}), &[("2024-03-15", answer, "correct")]);
            }
            cases(json!({"kind": "date"}), &[
                ("2024-09-01", "Sept 1st, 2024", "correct"),
                ("2024-04-13", "13/04/2024", "correct"),
                ("2024-03-03", "03/03/2024", "correct"),
                ("2024-02-29", "29 Feb 2024", "correct"),
                ("2000-02-29", "2000-02-29", "correct"),
                ("2024-03-15", "2024-03-16", "wrong: got 2024-03-16, expected 2024-03-15"),
                ("2024-03-04", "03/04/2024", "unparseable: \"03/04/2024\" is ambiguous (day and month both <= 12)"),
                ("2023-03-01", "2023-02-29", "unparseable: \"2023-02-29\" is not a valid date (2023-02 has 28 days)"),
                ("2023-03-01", "1900-02-29", "unparseable: \"1900-02-29\" is not a valid date (1900-02 has 28 days)"),
                ("2023-03-01", "April 31, 2023", "unparseable: \"April 31, 2023\" is not a valid date (2023-04 has 30 days)"),
                ("2023-03-01", "2023-13-01", "unparseable: \"2023-13-01\" is not a valid date (no month 13)"),
                ("2023-03-01", "next Tuesday", "unparseable: \"next Tuesday\" is not a date"),
                ("2023-03-01", "March 2023", "unparseable: \"March 2023\" is not a date"),
                ("2023-03-01", "24-03-15", "unparseable: \"24-03-15\" is not a date"),
            ]);
        }

        #[test]
        #[rustfmt::skip]
        fn bools_ids_and_cells() {
            cases(json!({"kind": "bool"}), &[
                ("true", "Yes.", "correct"),
                ("no", "N", "correct"),
                ("false", "**false**", "correct"),
                ("true", "no", "wrong: got no, expected yes"),
                ("true", "maybe", "unparseable: \"maybe\" is not a boolean (yes/no/true/false)"),
            ]);
            cases(json!({}), &[
                ("inv1010", "INV 1010", "correct"),
                ("INV-1010", "`inv-1010`", "correct"),
                ("INV-1010", "INV-1011", "wrong: got INV-1011, expected INV-1010"),
            ]);
            cases(json!({"kind": "cell_ref"}), &[
                ("Sales!B12", "'Sales'!$b$12", "correct"),
                ("'My Sheet'!B12", "'my sheet'!B$12", "correct"),
                ("B12", "Sales!B12", "correct"),
                ("A1:C3", "$C$3:a1", "correct"),
                ("Sales!B12", "Costs!B12", "wrong: got Costs!B12, expected Sales!B12"),
                ("Sales!B12", "B12", "wrong: got B12, expected Sales!B12"),
                ("'My Sheet'!B12", "'My Sheet'!B13", "wrong: got 'My Sheet'!B13, expected 'My Sheet'!B12"),
                ("B12", "B 12", "unparseable: \"B 12\" is not a cell reference"),
            ]);
        }

        #[test]
        #[rustfmt::skip]
        fn sets_and_lists() {
            cases(json!({"kind": "set"}), &[
                (r#"["a", "b"]"#, "b; A; a", "correct"),
                ("a, b", "[b, a]", "correct"),
                (r#"["a", "b"]"#, "a", "wrong: got {a}, expected {a, b}"),
            ]);
            cases(json!({"kind": "list"}), &[
                (r#"["a", "b"]"#, "a, b", "correct"),
                (r#"["a", "b"]"#, "b, a", "wrong: got [b, a], expected [a, b]"),
            ]);
            cases(json!({"kind": "set", "item_kind": "integer"}), &[
                ("[1, 2, 3]", "3, 1, 2", "correct"),
                ("[1, 2, 3]", "3, x", "unparseable: item 2: \"x\" is not an integer"),
                ("\"1,000; 2,000\"", "2,000; 1,000", "correct"),
                ("\"1,000; 2,000\"", "2000, 1000", "correct"),
            ]);
            let partial = |kind: &str, answer: &str| {
                let spec = json!({"type": "answer_line", "kind": kind, "expected": "a; b; c", "partial_credit": true});
                run(spec, &format!("ANSWER: {answer}"))
            };
            assert_eq!(partial("set", "b; a; d"), (Some(2.0 / 3.0), "partial: 2 of 3 expected items, 1 extra".into()));
            assert_eq!(partial("set", "a"), (Some(0.5), "partial: 1 of 3 expected items, 0 extra".into()));
            assert_eq!(partial("set", "c, b, a"), (Some(1.0), "correct".into()));
            assert_eq!(partial("set", "x; y"), (Some(0.0), "wrong: got {x, y}, expected {a, b, c}".into()));
            // In order, a then b (or a then c) of "a, c, b" line up with "a, b, c".
            assert_eq!(partial("list", "a, c, b"), (Some(2.0 / 3.0), "partial: 2 of 3 expected items, 1 extra".into()));
        }

        #[test]
        fn finds_the_last_answer_line_through_markdown() {
            let spec = json!({"type": "answer_line", "kind": "integer", "expected": 42});
            let ok = (Some(1.0), "correct".to_string());
            assert_eq!(
                run(spec.clone(), "ANSWER: 41\nWait, recheck.\nANSWER: 42"),
                ok
            );
            assert_eq!(run(spec.clone(), "ANSWER: 42\nANSWER: 41").0, Some(0.0));
            for text in [
                "**ANSWER:** 42",
                "**Answer**: 42",
                "> answer: `42`.",
                "## ANSWER: **42**",
                "  _Answer: \"42\"_",
            ] {
                assert_eq!(run(spec.clone(), text), ok, "{text}");
            }
            let missing = (
                Some(0.0),
                "missing: no line starting with ANSWER:".to_string(),
            );
            assert_eq!(run(spec.clone(), "The answer is 42"), missing);
            assert_eq!(run(spec.clone(), "ANSWERS: 42"), missing);
            let v = Verifier::from_json(&spec, "v").unwrap();
            let o = v.check(&traj_with(None, 0, 0));
            assert_eq!((o.value, o.reason), missing);
            let empty = (Some(0.0), "unparseable: \"\" is not an integer".to_string());
            assert_eq!(run(spec, "ANSWER:"), empty);
            let custom =
                json!({"type": "answer_line", "expected": "Paris", "prefix": "Final answer:"});
            assert_eq!(run(custom.clone(), "final ANSWER: paris"), ok);
            assert_eq!(
                run(custom, "x"),
                (
                    Some(0.0),
                    "missing: no line starting with Final answer:".into()
                )
            );
        }

        #[test]
        #[rustfmt::skip]
        fn spec_errors() {
            for (spec, error) in [
                (json!({"kind": "integer"}), "expected: missing"),
                (json!({"kind": "integer", "expected": "12x"}), "expected: \"12x\" is not an integer"),
                (json!({"kind": "integer", "expected": 4120.0}), "expected: \"4120.0\" is not an integer"),
                (json!({"kind": "date", "expected": "2023-02-29"}),
                    "expected: \"2023-02-29\" is not a valid date (2023-02 has 28 days)"),
                (json!({"kind": "date", "expected": "03/04/2024"}),
                    "expected: \"03/04/2024\" is ambiguous (day and month both <= 12)"),
                (json!({"kind": "set", "item_kind": "integer", "expected": [1, "x"]}),
                    "expected[1]: \"x\" is not an integer"),
                (json!({"kind": "list", "expected": [1, null]}),
                    "expected[1]: expected a string or a number, got null"),
                (json!({"kind": "integer", "expected": [1]}),
                    "expected: expected a string or a number, got an array"),
                (json!({"kind": "number", "expected": 1}),
                    "kind: unknown kind \"number\" (expected one of integer, decimal, money_cents, date, bool, id, cell_ref, list, set)"),
                (json!({"kind": "set", "item_kind": "list", "expected": "a"}),
                    "item_kind: unknown kind \"list\" (expected one of integer, decimal, money_cents, date, bool, id, cell_ref)"),
                (json!({"kind": "integer", "expected": 1, "abs_tol": 1}),
                    "abs_tol: only applies to kind decimal (or item_kind decimal)"),
                (json!({"kind": "decimal", "expected": 1, "rel_tol": -0.1}), "rel_tol: must be >= 0, got -0.1"),
                (json!({"expected": "a", "partial_credit": true}), "partial_credit: only applies to kind list or set"),
                (json!({"kind": "set", "expected": "a", "separator": "|"}),
                    "separator: expected \";\" or \",\", got \"|\""),
                (json!({"expected": "a", "prefix": " "}), "prefix: must not be empty"),
                (json!({"expected": "a", "tolerance": 1}),
                    "tolerance: unknown field (known fields for answer_line: type, name, weight, expected, kind, prefix, abs_tol, rel_tol, item_kind, separator, partial_credit)"),
            ] {
                let mut spec = spec;
                spec["type"] = json!("answer_line");
                assert_eq!(build_err(spec), format!("verifiers[2].{error}"));
            }
        }
    }
}
