//! Refusals of input worded alike wherever they arise: an unknown field names the nearest known
//! one, an integer too large says so and shows the number as written, and serde's own errors
//! (for the parts of a request that are deserialized, such as an inline rubric or a policy)
//! become the same `path: problem` as the hand-written checks. Plain functions on JSON values
//! and strings; no I/O.

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Number, Value};

pub use super::spelling::{nearest, unknown_field};

/// A refusal of input, naming where the problem is. `Display` is the message returned to the
/// caller, e.g. `trajectories[2].messages[5].tool_call_id: missing (required for role "tool")`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{path}: {problem}")]
pub struct InputError {
    pub path: String,
    pub problem: String,
}

impl InputError {
    pub fn new(path: impl Into<String>, problem: impl Into<String>) -> Self {
        InputError {
            path: path.into(),
            problem: problem.into(),
        }
    }

    /// The same refusal with its path under `prefix` (`messages[1]` under `trajectories[0]`;
    /// an empty path is the prefix itself).
    pub fn under(self, prefix: &str) -> InputError {
        let path = if prefix.is_empty() {
            self.path
        } else if self.path.is_empty() {
            prefix.to_string()
        } else if self.path.starts_with('[') {
            format!("{prefix}{}", self.path)
        } else {
            format!("{prefix}.{}", self.path)
        };
        InputError { path, ..self }
    }
}

/// "a string", "an array", …: how errors name the JSON type they got.
pub fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Where an integer was expected and `n` is not one that fits: "too large: N" for an integer
/// beyond what the field can hold (JSON keeps such a number only as the nearest float, which
/// serde_json would print as `1e20`: it is shown as an integer here, and the daemon puts back
/// the digits as written, see [`as_written`]), else `expected {expected}, got N`.
pub fn not_an_integer(n: &Number, expected: &str) -> String {
    match n.as_f64() {
        Some(f) if f.fract() == 0.0 && f >= 2f64.powi(63) => too_large(f),
        _ => format!("expected {expected}, got {n}"),
    }
}

/// "too large: N", N written out in digits.
fn too_large(f: f64) -> String {
    // `Display` for f64 never uses an exponent: 1e20 prints as 100000000000000000000.
    format!("{TOO_LARGE}{f}")
}

const TOO_LARGE: &str = "too large: ";

/// `e` with the number of a "too large" problem as the request wrote it (every digit of
/// `99999999999999999999`, which a float can only round), when `body` is the request's JSON
/// text and `e.path` leads to the number in it; otherwise `e` unchanged.
pub fn as_written(e: InputError, body: &str) -> InputError {
    let Some(shown) = e.problem.strip_prefix(TOO_LARGE) else {
        return e;
    };
    let written = written_at(body, &e.path).map(str::trim);
    match written {
        // The same number (it is not another value at a path that reads alike).
        Some(w) if w.parse::<f64>().ok() == shown.parse::<f64>().ok() && w != shown => {
            InputError::new(e.path, format!("{TOO_LARGE}{w}"))
        }
        _ => e,
    }
}

/// Whether `text` may hold an integer that a float rounds (a run of more than 15 digits), so
/// that a refusal after parsing could need it to quote the number as written; a daemon keeps a
/// request's text only then.
pub fn has_long_digit_run(text: &[u8]) -> bool {
    text.split(|b| !b.is_ascii_digit())
        .any(|run| run.len() > 15)
}

/// The text of the value at `path` (as refusals write paths: `groups[1].rubric.permutations`)
/// in the JSON document `text`, exactly as written. `None` when the path leads nowhere — or
/// cannot be followed, such as a key that holds `.` or `[`.
pub fn written_at<'a>(text: &'a str, path: &str) -> Option<&'a str> {
    use std::collections::HashMap;
    let mut raw: &'a RawValue = serde_json::from_str(text).ok()?;
    for seg in segments(path)? {
        let inner: &'a str = raw.get();
        raw = match seg {
            Segment::Key(k) => {
                let mut m: HashMap<String, &'a RawValue> = serde_json::from_str(inner).ok()?;
                m.remove(k)?
            }
            Segment::Index(i) => {
                let mut v: Vec<&'a RawValue> = serde_json::from_str(inner).ok()?;
                (i < v.len()).then(|| v.swap_remove(i))?
            }
        };
    }
    Some(raw.get())
}

#[derive(Debug, PartialEq)]
enum Segment<'a> {
    Key(&'a str),
    Index(usize),
}

/// `a.b[2].c` as keys and indexes; `None` when it is not such a path.
fn segments(path: &str) -> Option<Vec<Segment<'_>>> {
    let mut out = Vec::new();
    for part in path.split('.') {
        let (key, mut rest) = part.split_at(part.find('[').unwrap_or(part.len()));
        if !key.is_empty() {
            out.push(Segment::Key(key));
        } else if !out.is_empty() || rest.is_empty() {
            // `a..b`, `a.[0]`, a trailing dot, or nothing.
            return None;
        }
        while let Some(r) = rest.strip_prefix('[') {
            let (index, after) = r.split_once(']')?;
            out.push(Segment::Index(index.parse().ok()?));
            rest = after;
        }
        if !rest.is_empty() {
            return None;
        }
    }
    Some(out)
}

/// Whether `path` is a field path a program can point at (`rubric`, `judge[1]`,
/// `trajectories[0].messages[2].role`): names of letters, digits, `_` and `-`, joined by dots,
/// with `[n]` indexes. The error body's `param` is such a path or null.
pub fn is_field_path(path: &str) -> bool {
    segments(path).is_some_and(|s| {
        s.iter().all(|seg| match seg {
            Segment::Key(k) => k
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'),
            Segment::Index(_) => true,
        })
    }) && path != "body"
}

/// `value` deserialized as `T`; a refusal names the field under `at` and says what is wrong
/// the way the hand-written checks do.
pub fn deserialize<'a, T: Deserialize<'a>>(value: &'a Value, at: &str) -> Result<T, InputError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let mut node = Some(value);
        let mut path = at.to_string();
        for seg in e.path().iter() {
            use serde_path_to_error::Segment as S;
            match seg {
                S::Seq { index } => {
                    node = node.and_then(|n| n.get(index));
                    path.push_str(&format!("[{index}]"));
                }
                S::Map { key } | S::Enum { variant: key } => {
                    node = node.and_then(|n| n.get(key));
                    path = join(&path, key);
                }
                S::Unknown => node = None,
            }
        }
        serde_problem(path, node, &e.into_inner().to_string())
    })
}

/// The fields serde's derive reads of the struct `T`, as the derive itself lists them, so that
/// no list of them is kept by hand beside the type (serde hands the list to the deserializer).
pub fn struct_fields<T: serde::de::DeserializeOwned>() -> &'static [&'static str] {
    use serde::de::{Error, Visitor};
    struct Fields<'a>(&'a mut &'static [&'static str]);
    impl<'de> serde::Deserializer<'de> for Fields<'_> {
        type Error = serde::de::value::Error;
        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
            Err(Error::custom("not a struct"))
        }
        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Self::Error> {
            *self.0 = fields;
            Err(Error::custom("fields read"))
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
            option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
            ignored_any
        }
    }
    let mut fields: &'static [&'static str] = &[];
    let _ = T::deserialize(Fields(&mut fields));
    fields
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// The names in backticks in `text`.
fn ticked(text: &str) -> Vec<&str> {
    text.split('`').skip(1).step_by(2).collect()
}

/// A serde message about the value `node` at `path` as a refusal in the house style.
fn serde_problem(path: String, node: Option<&Value>, msg: &str) -> InputError {
    if let Some(rest) = msg.strip_prefix("missing field `") {
        let field = rest.trim_end_matches('`');
        return InputError::new(join(&path, field), "missing");
    }
    if let Some(rest) = msg.strip_prefix("unknown field `") {
        let (field, known) = rest.split_once('`').unwrap_or((rest, ""));
        // serde names the unknown key in the path when it read the object itself, and only its
        // object when an internally tagged enum (a policy) read the object whole first.
        let named = path == field || path.ends_with(&format!(".{field}"));
        let path = if named && node.is_none_or(|n| n.get(field).is_none()) {
            path
        } else {
            join(&path, field)
        };
        return InputError::new(path, unknown_field(field, &ticked(known), "known"));
    }
    if let Some(rest) = msg.strip_prefix("unknown variant `") {
        let (variant, known) = rest.split_once('`').unwrap_or((rest, ""));
        // An internally tagged enum (a policy's `type`) reports at the object that holds the
        // tag: point at the tag.
        let tagged = node.and_then(|n| n.get("type")).and_then(Value::as_str) == Some(variant);
        let path = if tagged { join(&path, "type") } else { path };
        return InputError::new(
            path,
            format!(
                "unknown variant {variant:?}, expected one of {}",
                ticked(known).join(", ")
            ),
        );
    }
    for kind in ["invalid type: ", "invalid value: "] {
        if let Some((got, expected)) = msg
            .strip_prefix(kind)
            .and_then(|rest| rest.rsplit_once(", expected "))
        {
            return wrong_value(path, node, got, expected);
        }
    }
    InputError::new(path, msg)
}

/// `got` (serde's description of a value) where `expected` (a Rust type or a description) was
/// wanted. When `node` is an object or array that serde read whole first (an internally tagged
/// enum does), the one value in it that `got` describes is the field to name.
fn wrong_value(mut path: String, node: Option<&Value>, got: &str, expected: &str) -> InputError {
    let mut leaf = node;
    let buffered = |n: &&Value| (n.is_object() || n.is_array()) && serde_describes(n) != got;
    if let Some(n) = node.filter(buffered) {
        let mut found = Vec::new();
        described_leaves(n, got, String::new(), 3, &mut found);
        if let [(sub, v)] = found.as_slice() {
            path = if sub.starts_with('[') {
                format!("{path}{sub}")
            } else {
                join(&path, sub)
            };
            leaf = Some(*v);
        }
    }
    let integer = matches!(
        expected,
        "u8" | "u16" | "u32" | "u64" | "u128" | "usize" | "i8" | "i16" | "i32" | "i64" | "isize"
    );
    let wanted = match expected {
        "f32" | "f64" => "a number",
        e if e.starts_with('u') && integer => "a non-negative integer",
        _ if integer => "an integer",
        "a sequence" => "an array",
        "a map" => "an object",
        e if e.starts_with("struct ") || e.contains("enum ") => "an object",
        e => e,
    };
    if integer {
        match leaf {
            Some(Value::Number(n))
                if n.as_u64().is_some() || n.as_f64().is_some_and(|f| f > 0.0) =>
            {
                // Out of the field's range (serde said "invalid value: integer `N`") or a
                // float (an integer literal past what JSON keeps exactly, or one written as
                // a float: only a whole number past 2^63 is an integer too large).
                let big = n.as_u64().is_some() && got.starts_with("integer");
                return InputError::new(
                    path,
                    if big {
                        format!("{TOO_LARGE}{n}")
                    } else {
                        not_an_integer(n, wanted)
                    },
                );
            }
            Some(Value::Number(n)) => {
                return InputError::new(path, format!("expected {wanted}, got {n}"));
            }
            _ => {}
        }
    }
    let got = match leaf {
        Some(v) => type_name(v).to_string(),
        None => got.to_string(),
    };
    InputError::new(path, format!("expected {wanted}, got {got}"))
}

/// Leaves of `v` (to `depth` levels) that serde would describe as `got`, with their sub-paths.
fn described_leaves<'a>(
    v: &'a Value,
    got: &str,
    at: String,
    depth: usize,
    out: &mut Vec<(String, &'a Value)>,
) {
    let children: Vec<(String, &Value)> = match v {
        Value::Object(o) => o.iter().map(|(k, x)| (join(&at, k), x)).collect(),
        Value::Array(a) => a
            .iter()
            .enumerate()
            .map(|(i, x)| (format!("{at}[{i}]"), x))
            .collect(),
        _ => return,
    };
    for (sub, x) in children {
        if serde_describes(x) == got {
            out.push((sub.clone(), x));
        }
        if depth > 1 {
            described_leaves(x, got, sub, depth - 1, out);
        }
    }
}

/// How serde's `Unexpected` shows `v` in an error message.
fn serde_describes(v: &Value) -> String {
    match v {
        Value::Null => "unit value".into(),
        Value::Bool(b) => format!("boolean `{b}`"),
        Value::Number(n) if n.is_f64() => {
            let f = n.as_f64().unwrap_or_default();
            let mut s = f.to_string();
            if f.is_finite() && !s.contains('.') {
                s.push_str(".0");
            }
            format!("floating point `{s}`")
        }
        Value::Number(n) => format!("integer `{n}`"),
        Value::String(s) => format!("string {s:?}"),
        Value::Array(_) => "sequence".into(),
        Value::Object(_) => "map".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_unknown_field_suggests_the_nearest_known_one() {
        let known = ["trajectories", "rubric", "judge", "policy"];
        assert_eq!(
            unknown_field("rubrik", &known, "known"),
            "unknown field, did you mean rubric?"
        );
        assert_eq!(
            unknown_field("Judges", &known, "known"),
            "unknown field, did you mean judge?"
        );
        assert_eq!(
            unknown_field("colour", &known, "known"),
            "unknown field (known: trajectories, rubric, judge, policy)"
        );
    }

    #[test]
    fn an_integer_too_large_says_so_in_digits() {
        let big: Value = serde_json::from_str("99999999999999999999").unwrap();
        let Value::Number(n) = &big else { panic!() };
        // Without the request's text, the nearest float in digits (not 1e20).
        assert_eq!(
            not_an_integer(n, "a non-negative integer"),
            "too large: 100000000000000000000"
        );
        let Value::Number(half) = json!(1.5) else {
            panic!()
        };
        assert_eq!(
            not_an_integer(&half, "a non-negative integer"),
            "expected a non-negative integer, got 1.5"
        );
        // With it, as written.
        let body = r#"{"groups": [{}, {"verifiers": [{"max_turns": 99999999999999999999 }]}]}"#;
        let e = InputError::new(
            "groups[1].verifiers[0].max_turns",
            not_an_integer(n, "a non-negative integer"),
        );
        assert_eq!(
            as_written(e, body).to_string(),
            "groups[1].verifiers[0].max_turns: too large: 99999999999999999999"
        );
        assert_eq!(written_at(body, "groups[0]"), Some("{}"));
        assert_eq!(written_at(body, "groups[2]"), None);
        assert_eq!(written_at(body, "groups.x"), None);
    }

    #[test]
    fn only_a_text_with_a_long_number_is_worth_keeping() {
        assert!(has_long_digit_run(b"{\"n\": 99999999999999999999}"));
        assert!(!has_long_digit_run(
            b"{\"n\": 123456789012345, \"m\": 1e300}"
        ));
    }

    #[test]
    fn field_paths_are_told_from_descriptions() {
        for p in [
            "rubric",
            "judge[1]",
            "groups[0].trajectories[2].messages[1].role",
            "a-b.c_d",
        ] {
            assert!(is_field_path(p), "{p}");
        }
        for p in [
            "body",
            "rubric \"qa\" verifiers[0]",
            "rubric policy",
            "",
            "a..b",
            "x[y]",
            "a.",
        ] {
            assert!(!is_field_path(p), "{p}");
        }
    }

    #[derive(Debug, serde::Deserialize)]
    #[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
    #[allow(dead_code)]
    enum Policy {
        Weighted {
            weights: Option<std::collections::BTreeMap<String, f64>>,
        },
        Gate {
            gate: String,
            #[serde(default)]
            floor: f64,
        },
    }

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Spec {
        text: String,
        #[serde(default)]
        items: Vec<Item>,
        permutations: Option<u32>,
        policy: Option<Policy>,
    }

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Item {
        id: String,
        weight: f64,
    }

    fn refusal(v: Value) -> String {
        deserialize::<Spec>(&v, "rubric").unwrap_err().to_string()
    }

    #[test]
    fn serde_refusals_name_the_field() {
        assert_eq!(refusal(json!({})), "rubric.text: missing");
        assert_eq!(
            refusal(json!({"text": "t", "policy": {"type": "gate"}})),
            "rubric.policy.gate: missing"
        );
        assert_eq!(
            refusal(json!({"text": "t", "policy": {"type": "best"}})),
            "rubric.policy.type: unknown variant \"best\", expected one of weighted, gate"
        );
        assert_eq!(
            refusal(json!({"text": "t", "policy": {"type": "gate", "gate": "g", "flor": 1}})),
            "rubric.policy.flor: unknown field, did you mean floor?"
        );
        assert_eq!(
            refusal(json!({"text": "t", "policy": {"type": "gate", "gate": "g", "floor": "low"}})),
            "rubric.policy.floor: expected a number, got a string"
        );
        assert_eq!(
            refusal(
                json!({"text": "t", "policy": {"type": "weighted", "weights": {"judge": true}}})
            ),
            "rubric.policy.weights.judge: expected a number, got a boolean"
        );
        assert_eq!(
            refusal(
                json!({"text": "t", "items": [{"id": "a", "weight": 1}, {"id": 3, "weight": 1}]})
            ),
            "rubric.items[1].id: expected a string, got a number"
        );
        assert_eq!(
            refusal(json!({"text": "t", "permutations": 5_000_000_000u64})),
            "rubric.permutations: too large: 5000000000"
        );
        let big: Value =
            serde_json::from_str(r#"{"text": "t", "permutations": 100000000000000000000}"#)
                .unwrap();
        assert_eq!(
            refusal(big),
            "rubric.permutations: too large: 100000000000000000000"
        );
        assert_eq!(
            refusal(json!({"text": "t", "permutations": -2})),
            "rubric.permutations: expected a non-negative integer, got -2"
        );
        assert_eq!(
            refusal(json!({"text": "t", "permutations": 2.5})),
            "rubric.permutations: expected a non-negative integer, got 2.5"
        );
        assert_eq!(
            refusal(json!({"text": "t", "colour": "red"})),
            "rubric.colour: unknown field (known: text, items, permutations, policy)"
        );
        assert_eq!(
            refusal(json!({"text": ["t"]})),
            "rubric.text: expected a string, got an array"
        );
    }
}
