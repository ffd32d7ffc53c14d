//! Parsing of judge verdicts (`{"scores": [{"trajectory_id", "explanation", "score"}, ...]}`):
//! finds the JSON amid fences and commentary, normalises scores to [0, 1] mapped by trajectory id
//! (never by position), and reports problems in messages precise enough to re-ask the judge.

use std::collections::HashMap;

use serde_json::{Map, Value};

/// One checklist item verdict.
#[derive(Debug, Clone, PartialEq)]
pub struct ItemVerdict {
    pub id: String,
    pub met: bool,
}

/// The normalised verdict for one trajectory.
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedScore {
    pub trajectory_id: String,
    /// In [0, 1]; `None` only when `allow_missing_score` is set and the judge gave no score.
    pub score: Option<f64>,
    pub explanation: String,
    pub items: Vec<ItemVerdict>,
    /// The judge's score lay outside the scale and was clamped to 0 or 1 (counted in the
    /// response's usage and on `/metrics`: a judge doing this often misreads the scale).
    pub clamped: bool,
}

/// A problem with a verdict. `Display` is the exact message sent back to the judge.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ParseProblem {
    #[error("no JSON object with a \"scores\" array found")]
    NoScores,
    /// `index` is 1-based.
    #[error("score entry {index} is not a JSON object: {raw}")]
    EntryNotObject { index: usize, raw: String },
    #[error("score entry {index} has no \"trajectory_id\"")]
    MissingId { index: usize },
    #[error("score entry {index} has an invalid trajectory_id: {raw} (expected a non-empty string or an integer)")]
    InvalidId { index: usize, raw: String },
    /// Missing, unknown and duplicate trajectory ids, reported together.
    #[error("{}", id_message(.missing, .unknown, .duplicate, .expected))]
    IdMismatch {
        missing: Vec<String>,
        unknown: Vec<String>,
        duplicate: Vec<String>,
        expected: Vec<String>,
    },
    #[error("missing score for trajectory {trajectory_id}")]
    MissingScore { trajectory_id: String },
    #[error("score for trajectory {trajectory_id} is not a number: {raw}")]
    NotANumber { trajectory_id: String, raw: String },
    /// Every explanation is the prompt example's placeholder: the reply copied the example.
    #[error("the reply copies the example's placeholders: write each trajectory's own explanation and score")]
    CopiedExample,
    /// A problem with the checklist `items` of one trajectory.
    #[error("checklist items for trajectory {trajectory_id}: {problem}")]
    InvalidItems {
        trajectory_id: String,
        problem: String,
    },
}

fn id_message(
    missing: &[String],
    unknown: &[String],
    duplicate: &[String],
    expected: &[String],
) -> String {
    let mut parts = Vec::new();
    if !missing.is_empty() {
        parts.push(format!(
            "missing scores for trajectory ids: {}",
            missing.join(", ")
        ));
    }
    if !unknown.is_empty() {
        parts.push(format!(
            "unknown trajectory ids: {} (expected ids are {})",
            unknown.join(", "),
            expected.join(", ")
        ));
    }
    if !duplicate.is_empty() {
        let s = if duplicate.len() == 1 { "" } else { "s" };
        parts.push(format!(
            "duplicate trajectory id{s}: {}",
            duplicate.join(", ")
        ));
    }
    parts.join("; ")
}

/// The explanation the listwise prompt's example shows (`prompts/relative.system.jinja`).
const EXAMPLE_PLACEHOLDER: &str = "...";

/// What a verdict must cover: exactly `expected_ids`, each with a score unless `allow_missing_score`.
pub struct ParseOptions<'a> {
    pub expected_ids: &'a [String],
    pub allow_missing_score: bool,
    /// Checklist item ids every trajectory must give a verdict for (empty: no checklist).
    pub expected_items: &'a [String],
}

/// A score as written by the judge.
enum RawScore {
    /// A number or numeric string: subject to scale inference.
    Plain(f64),
    /// A fraction or percentage: already in [0, 1] terms.
    Normalised(f64),
}

/// Parses a judge reply into one `ParsedScore` per expected id, in `expected_ids` order.
pub fn parse_verdict(text: &str, opts: &ParseOptions) -> Result<Vec<ParsedScore>, ParseProblem> {
    let entries = find_entries(text).ok_or(ParseProblem::NoScores)?;
    let expected: Vec<&str> = opts.expected_ids.iter().map(|s| s.trim()).collect();
    let mut by_id: HashMap<String, &Map<String, Value>> = HashMap::new();
    let (mut unknown, mut duplicate) = (Vec::new(), Vec::new());
    for (i, entry) in entries.iter().enumerate() {
        let (id, obj) = entry_id(i + 1, entry)?;
        let list = if !expected.contains(&id.as_str()) {
            &mut unknown
        } else if by_id.insert(id.clone(), obj).is_some() {
            &mut duplicate
        } else {
            continue;
        };
        if !list.contains(&id) {
            list.push(id);
        }
    }
    let missing: Vec<String> = expected
        .iter()
        .filter(|e| !by_id.contains_key(**e))
        .map(|e| e.to_string())
        .collect();
    if !(missing.is_empty() && unknown.is_empty() && duplicate.is_empty()) {
        let expected = expected.iter().map(|e| e.to_string()).collect();
        return Err(ParseProblem::IdMismatch {
            missing,
            unknown,
            duplicate,
            expected,
        });
    }

    let mut raw_scores = Vec::with_capacity(expected.len());
    let mut out = Vec::with_capacity(expected.len());
    for id in &expected {
        let obj = by_id[*id];
        let trajectory_id = id.to_string();
        let raw_score = match obj.get("score").filter(|v| !v.is_null()) {
            None if opts.allow_missing_score => None,
            None => return Err(ParseProblem::MissingScore { trajectory_id }),
            Some(v) => Some(parse_score(v).ok_or_else(|| ParseProblem::NotANumber {
                trajectory_id: trajectory_id.clone(),
                raw: raw(v),
            })?),
        };
        raw_scores.push(raw_score);
        let explanation = match obj.get("explanation") {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(s)) => s.clone(),
            Some(other) => other.to_string(),
        };
        let items = parse_items(&trajectory_id, obj.get("items"), opts.expected_items)?;
        out.push(ParsedScore {
            trajectory_id,
            score: None,
            explanation,
            items,
            clamped: false,
        });
    }

    if out
        .iter()
        .all(|p| p.explanation.trim() == EXAMPLE_PLACEHOLDER)
    {
        return Err(ParseProblem::CopiedExample);
    }
    let plain: Vec<f64> = raw_scores
        .iter()
        .filter_map(|s| match s {
            Some(RawScore::Plain(x)) => Some(*x),
            _ => None,
        })
        .collect();
    let divisor = scale_divisor(&plain);
    for (parsed, raw_score) in out.iter_mut().zip(raw_scores) {
        let Some(raw_score) = raw_score else { continue };
        let x = match raw_score {
            RawScore::Plain(x) => x / divisor,
            RawScore::Normalised(x) => x,
        };
        parsed.clamped = !(0.0..=1.0).contains(&x);
        parsed.score = Some(x.clamp(0.0, 1.0));
    }
    Ok(out)
}

/// The trimmed id and the object of score entry `index` (1-based).
fn entry_id(index: usize, entry: &Value) -> Result<(String, &Map<String, Value>), ParseProblem> {
    let not_object = || ParseProblem::EntryNotObject {
        index,
        raw: raw(entry),
    };
    let obj = entry.as_object().ok_or_else(not_object)?;
    let id_value = ["trajectory_id", "id"]
        .iter()
        .find_map(|k| obj.get(*k).filter(|v| !v.is_null()));
    let id_value = id_value.ok_or(ParseProblem::MissingId { index })?;
    let id = id_string(id_value).ok_or_else(|| ParseProblem::InvalidId {
        index,
        raw: raw(id_value),
    })?;
    Ok((id, obj))
}

/// 10 for a 0–10 verdict, 100 for a 0–100 verdict, otherwise 1 (out-of-range values get clamped).
fn scale_divisor(plain: &[f64]) -> f64 {
    let max = plain.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let enough = |threshold: f64| {
        let over = plain.iter().filter(|&&x| x > threshold).count();
        over >= 2 || (over == 1 && plain.len() == 1)
    };
    if enough(1.0) && max <= 10.0 {
        10.0
    } else if enough(10.0) && max <= 100.0 {
        100.0
    } else {
        1.0
    }
}

fn parse_score(v: &Value) -> Option<RawScore> {
    let num = |s: &str| s.trim().parse::<f64>().ok().filter(|x| x.is_finite());
    match v {
        Value::Number(n) => n.as_f64().filter(|x| x.is_finite()).map(RawScore::Plain),
        Value::String(s) => {
            let s = s.trim();
            if let Some(p) = s.strip_suffix('%') {
                num(p).map(|x| RawScore::Normalised(x / 100.0))
            } else if let Some((a, b)) = s.split_once('/') {
                let (a, b) = (num(a)?, num(b)?);
                (b > 0.0).then(|| RawScore::Normalised(a / b))
            } else {
                num(s).map(RawScore::Plain)
            }
        }
        _ => None,
    }
}

fn parse_items(
    trajectory_id: &str,
    items: Option<&Value>,
    expected: &[String],
) -> Result<Vec<ItemVerdict>, ParseProblem> {
    let bad = |problem: String| ParseProblem::InvalidItems {
        trajectory_id: trajectory_id.to_string(),
        problem,
    };
    let list = match items {
        // A checklist rubric's verdict without items would count every item as unmet: a reward
        // of 0 the judge never gave. It is a problem to re-ask about, never a score.
        None | Some(Value::Null) if !expected.is_empty() => {
            return Err(bad(format!(
                "no \"items\" (expected a verdict for each of the items {})",
                expected.join(", ")
            )))
        }
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(list)) => list,
        Some(other) => return Err(bad(format!("\"items\" is not an array: {}", raw(other)))),
    };
    let mut out: Vec<ItemVerdict> = Vec::with_capacity(list.len());
    for (i, item) in list.iter().enumerate() {
        let Some(id) = item.get("id").and_then(id_string) else {
            let problem = format!(
                "item {} has no string or integer \"id\": {}",
                i + 1,
                raw(item)
            );
            return Err(bad(problem));
        };
        let met = match item.get("met").filter(|v| !v.is_null()) {
            None => {
                return Err(bad(format!(
                    "item {id} has no \"met\" value {EXPECTED_BOOL}"
                )))
            }
            Some(v) => met_value(v).ok_or_else(|| {
                bad(format!(
                    "item {id} has an invalid \"met\" value: {} {EXPECTED_BOOL}",
                    raw(v)
                ))
            })?,
        };
        if out.iter().any(|o| o.id == id) {
            return Err(bad(format!("duplicate item id: {id}")));
        }
        out.push(ItemVerdict { id, met });
    }
    if !expected.is_empty() {
        let missing: Vec<&str> = expected
            .iter()
            .filter(|e| !out.iter().any(|o| &o.id == *e))
            .map(String::as_str)
            .collect();
        let unknown: Vec<&str> = out
            .iter()
            .filter(|o| !expected.contains(&o.id))
            .map(|o| o.id.as_str())
            .collect();
        let mut parts = Vec::new();
        if !missing.is_empty() {
            parts.push(format!("missing items: {}", missing.join(", ")));
        }
        if !unknown.is_empty() {
            parts.push(format!(
                "unknown items: {} (expected items are {})",
                unknown.join(", "),
                expected.join(", ")
            ));
        }
        if !parts.is_empty() {
            return Err(bad(parts.join("; ")));
        }
    }
    Ok(out)
}

const EXPECTED_BOOL: &str = "(expected true or false)";

fn met_value(v: &Value) -> Option<bool> {
    match v {
        Value::Bool(b) => Some(*b),
        Value::String(s) => match s.trim().to_ascii_lowercase().as_str() {
            "yes" | "true" => Some(true),
            "no" | "false" => Some(false),
            _ => None,
        },
        _ => None,
    }
}

/// A trimmed, non-empty id from a string or an integer (an integral float counts as an integer).
fn id_string(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.trim().to_string()),
        Value::Number(n) if n.is_i64() || n.is_u64() => Some(n.to_string()),
        Value::Number(n) => n
            .as_f64()
            .filter(|x| x.fract() == 0.0 && x.abs() < 1e15)
            .map(|x| (x as i64).to_string()),
        _ => None,
    }
    .filter(|s| !s.is_empty())
}

/// JSON text of a value for a message, shortened to keep re-asks small.
fn raw(v: &Value) -> String {
    const MAX: usize = 80;
    let s = v.to_string();
    match s.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{}...", &s[..cut]),
        None => s,
    }
}

/// The score entries: the whole text when it is one verdict, else the *last* verdict-shaped
/// JSON span in it (a `{"scores": [...]}` object or a bare array of score objects, fenced or
/// not). A judge that drafts a verdict and then corrects it ends with the one it means.
fn find_entries(text: &str) -> Option<Vec<Value>> {
    let text = text.trim();
    entries_of(text).or_else(|| verdict_spans(text).pop())
}

fn entries_of(s: &str) -> Option<Vec<Value>> {
    entries_in(serde_json::from_str(s.trim()).ok()?)
}

/// The entries of a `{"scores": [...]}` object or of a bare, non-empty array of objects.
fn entries_in(v: Value) -> Option<Vec<Value>> {
    match v {
        Value::Object(mut obj) => match obj.remove("scores") {
            Some(Value::Array(entries)) => Some(entries),
            _ => None,
        },
        Value::Array(entries) if !entries.is_empty() && entries.iter().all(Value::is_object) => {
            Some(entries)
        }
        _ => None,
    }
}

/// Every verdict among the outermost balanced `{...}` and `[...]` spans, in text order. A span
/// that is valid JSON is consumed whole (so the array inside a verdict object is not a second
/// verdict); one that does not parse is retried from the next bracket inside it.
fn verdict_spans(text: &str) -> Vec<Vec<Value>> {
    let bytes = text.as_bytes();
    let mut found = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let close = match bytes[i] {
            b'{' => b'}',
            b'[' => b']',
            _ => {
                i += 1;
                continue;
            }
        };
        if let Some(end) = balanced_end(bytes, i, bytes[i], close) {
            // Brackets are ASCII, so both ends are char boundaries.
            if let Ok(v) = serde_json::from_str::<Value>(&text[i..=end]) {
                found.extend(entries_in(v));
                i = end + 1;
                continue;
            }
        }
        i += 1;
    }
    found
}

/// Index of the `close` matching `bytes[start] == open`, ignoring anything inside JSON strings.
fn balanced_end(bytes: &[u8], start: usize, open: u8, close: u8) -> Option<usize> {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for (j, &c) in bytes.iter().enumerate().skip(start) {
        if in_string {
            if escaped {
                escaped = false;
            } else if c == b'\\' {
                escaped = true;
            } else if c == b'"' {
                in_string = false;
            }
        } else if c == b'"' {
            in_string = true;
        } else if c == open {
            depth += 1;
        } else if c == close {
            depth -= 1;
            if depth == 0 {
                return Some(j);
            }
        }
    }
    None
}

#[cfg(test)]
#[path = "parse_tests.rs"]
mod tests;
