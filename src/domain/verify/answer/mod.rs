//! `answer_line`: find the last `ANSWER:` line of the final answer and compare its value, parsed
//! as a typed kind (integer, decimal, money, date, bool, id, cell reference, list or set), with
//! the expected value parsed by the same parser when the verifier is built. Tested end to end in
//! `mod.rs` (`tests::answer_line`).

use serde_json::Value;

use super::{type_name, Outcome, Spec};
use crate::domain::trajectory::InputError;

mod value;

use value::{parse_scalar, Kind, Val, KINDS};

/// A compiled `answer_line` verifier.
#[derive(Debug, Clone)]
pub(crate) struct AnswerLine {
    kind: Kind,
    item_kind: Kind,
    prefix: String,
    abs_tol: f64,
    rel_tol: f64,
    separator: Option<char>,
    partial: bool,
    expected: Val,
}

impl AnswerLine {
    pub(crate) const FIELDS: &'static [&'static str] = &[
        "expected",
        "kind",
        "prefix",
        "abs_tol",
        "rel_tol",
        "item_kind",
        "separator",
        "partial_credit",
    ];

    pub(crate) fn from_spec(s: &Spec) -> Result<AnswerLine, InputError> {
        let kind_of = |field: &str, scalar_only: bool| -> Result<Option<Kind>, InputError> {
            let Some(name) = s.str(field)? else {
                return Ok(None);
            };
            let allowed = KINDS
                .iter()
                .filter(|k| !scalar_only || !k.1.is_collection());
            match allowed.clone().find(|k| k.0 == name) {
                Some(k) => Ok(Some(k.1)),
                None => {
                    let names: Vec<&str> = allowed.map(|k| k.0).collect();
                    let expected = names.join(", ");
                    Err(s.err(
                        field,
                        format!("unknown kind {name:?} (expected one of {expected})"),
                    ))
                }
            }
        };
        let kind = kind_of("kind", false)?.unwrap_or(Kind::Id);
        let item_kind = kind_of("item_kind", true)?.unwrap_or(Kind::Id);
        for field in ["item_kind", "separator", "partial_credit"] {
            if !kind.is_collection() && s.get(field).is_some() {
                return Err(s.err(field, "only applies to kind list or set"));
            }
        }
        let separator = match s.str("separator")? {
            None => None,
            Some(";") => Some(';'),
            Some(",") => Some(','),
            Some(other) => {
                return Err(s.err(
                    "separator",
                    format!("expected \";\" or \",\", got {other:?}"),
                ))
            }
        };
        let decimal = kind == Kind::Decimal || (kind.is_collection() && item_kind == Kind::Decimal);
        let tolerance = |field: &str| -> Result<f64, InputError> {
            let Some(t) = s.number(field)? else {
                return Ok(0.0);
            };
            if !decimal {
                return Err(s.err(field, "only applies to kind decimal (or item_kind decimal)"));
            }
            match t >= 0.0 {
                true => Ok(t),
                false => Err(s.err(field, format!("must be >= 0, got {t}"))),
            }
        };
        let prefix = s.str("prefix")?.unwrap_or("ANSWER:").trim();
        if prefix.is_empty() {
            return Err(s.err("prefix", "must not be empty"));
        }
        let mut line = AnswerLine {
            kind,
            item_kind,
            prefix: prefix.to_string(),
            abs_tol: tolerance("abs_tol")?,
            rel_tol: tolerance("rel_tol")?,
            separator,
            partial: s.bool("partial_credit")?.unwrap_or(false),
            expected: Val::Bool(false),
        };
        line.expected = line.parse_expected(s)?;
        Ok(line)
    }

    fn parse_expected(&self, s: &Spec) -> Result<Val, InputError> {
        let v = s.required("expected", s.get("expected"))?;
        let text_of = |v: &Value, at: &str, what: &str| match v {
            Value::String(t) => Ok(t.trim().to_string()),
            Value::Number(n) => Ok(n.to_string()),
            Value::Bool(b) => Ok(b.to_string()),
            other => Err(s.err(at, format!("expected {what}, got {}", type_name(other)))),
        };
        match v {
            Value::Array(items) if self.kind.is_collection() => {
                let mut vals = Vec::with_capacity(items.len());
                for (i, item) in items.iter().enumerate() {
                    let at = format!("expected[{i}]");
                    let text = text_of(item, &at, "a string or a number")?;
                    vals.push(parse_scalar(self.item_kind, &text).map_err(|p| s.err(&at, p))?);
                }
                Ok(self.collect(vals))
            }
            _ => {
                let what = match self.kind.is_collection() {
                    true => "an array, a string or a number",
                    false => "a string or a number",
                };
                let text = text_of(v, "expected", what)?;
                self.parse(&text).map_err(|p| s.err("expected", p))
            }
        }
    }

    pub(crate) fn check(&self, final_answer: Option<&str>) -> Outcome {
        let Some(raw) = final_answer.and_then(|a| self.answer_text(a)) else {
            let reason = format!("missing: no line starting with {}", self.prefix);
            return Outcome::score(0.0, reason);
        };
        match self.parse(strip_markup(raw, true)) {
            Err(problem) => Outcome::score(0.0, format!("unparseable: {problem}")),
            Ok(got) => self.compare(&got),
        }
    }

    /// The rest of the last line that starts with the prefix, after leading markdown.
    fn answer_text<'a>(&self, text: &'a str) -> Option<&'a str> {
        text.lines().rev().find_map(|line| {
            let line = line.trim_start_matches(|c: char| {
                matches!(c, '*' | '_' | '#' | '>' | '`') || c.is_whitespace()
            });
            strip_prefix_loose(line, &self.prefix)
        })
    }

    fn parse(&self, text: &str) -> Result<Val, String> {
        if !self.kind.is_collection() {
            return parse_scalar(self.kind, text);
        }
        let mut body = text.trim();
        for (open, close) in [('[', ']'), ('{', '}')] {
            if let Some(inner) = body.strip_prefix(open).and_then(|b| b.strip_suffix(close)) {
                body = inner;
            }
        }
        let sep = (self.separator).unwrap_or(if body.contains(';') { ';' } else { ',' });
        let mut items = Vec::new();
        for (i, raw) in body.split(sep).enumerate() {
            let item = strip_markup(raw, false);
            if !item.is_empty() {
                let val = parse_scalar(self.item_kind, item);
                items.push(val.map_err(|p| format!("item {}: {p}", i + 1))?);
            }
        }
        Ok(self.collect(items))
    }

    fn collect(&self, items: Vec<Val>) -> Val {
        if self.kind == Kind::List {
            return Val::List(items);
        }
        let mut out: Vec<Val> = Vec::with_capacity(items.len());
        for v in items {
            if !out.iter().any(|o| self.same(&v, o)) {
                out.push(v);
            }
        }
        Val::Set(out)
    }

    /// Whether an answer value equals an expected one (not symmetric for cell references).
    fn same(&self, got: &Val, exp: &Val) -> bool {
        match (got, exp) {
            (Val::Dec(a), Val::Dec(e)) => {
                // A few ulps of slack so that a tolerance's own boundary is inside it (3.13 is
                // within 0.01 of 3.14); with no tolerance, exact equality.
                let d = (a - e).abs();
                let slack = 4.0 * f64::EPSILON * a.abs().max(e.abs());
                d == 0.0
                    || (self.abs_tol > 0.0 && d <= self.abs_tol + slack)
                    || (self.rel_tol > 0.0 && d <= self.rel_tol * e.abs() + slack)
            }
            (Val::Id(_, a), Val::Id(_, e)) => a == e,
            // An expected sheet must be named; a sheet the expected value lacks is ignored.
            (Val::Cell(gs, g), Val::Cell(es, e)) => {
                g == e
                    && match (gs, es) {
                        (_, None) => true,
                        (Some(gs), Some(es)) => gs.to_lowercase() == es.to_lowercase(),
                        (None, Some(_)) => false,
                    }
            }
            (a, e) => a == e,
        }
    }

    fn compare(&self, got: &Val) -> Outcome {
        let wrong = || Outcome::score(0.0, format!("wrong: got {got}, expected {}", self.expected));
        let (g, e, matched) = match (got, &self.expected) {
            (Val::List(g), Val::List(e)) => (g, e, self.lcs(g, e)),
            (Val::Set(g), Val::Set(e)) => {
                let mut used = vec![false; g.len()];
                let matched = e.iter().filter(|ev| {
                    let hit = (0..g.len()).find(|&i| !used[i] && self.same(&g[i], ev));
                    hit.map(|i| used[i] = true).is_some()
                });
                (g, e, matched.count())
            }
            (got, exp) if self.same(got, exp) => return Outcome::score(1.0, "correct"),
            _ => return wrong(),
        };
        if matched == e.len() && g.len() == e.len() {
            Outcome::score(1.0, "correct")
        } else if self.partial && matched > 0 {
            let f1 = 2.0 * matched as f64 / (g.len() + e.len()) as f64;
            let reason = format!(
                "partial: {matched} of {} expected items, {} extra",
                e.len(),
                g.len() - matched
            );
            Outcome::score(f1, reason)
        } else {
            wrong()
        }
    }

    /// Length of the longest common subsequence: the in-order matches of a list.
    fn lcs(&self, g: &[Val], e: &[Val]) -> usize {
        let mut row = vec![0usize; e.len() + 1];
        for a in g {
            let mut diag = 0;
            for (j, b) in e.iter().enumerate() {
                let up = row[j + 1];
                row[j + 1] = if self.same(a, b) {
                    diag + 1
                } else {
                    up.max(row[j])
                };
                diag = up;
            }
        }
        row[e.len()]
    }
}

fn is_emphasis(c: char) -> bool {
    matches!(c, '*' | '_' | '`')
}

/// `prefix` at the start of `line`, compared case-insensitively and skipping markdown emphasis
/// in the line, so `**Answer**: 42` matches `ANSWER:`; returns the rest of the line.
fn strip_prefix_loose<'a>(line: &'a str, prefix: &str) -> Option<&'a str> {
    let mut rest = line;
    for p in prefix.chars() {
        loop {
            let mut cs = rest.chars();
            let c = cs.next()?;
            rest = cs.as_str();
            if c.to_lowercase().eq(p.to_lowercase()) {
                break;
            }
            if !is_emphasis(c) {
                return None;
            }
        }
    }
    Some(rest)
}

/// Trims whitespace, markdown emphasis and backticks, and matching surrounding quotes, and (with
/// `drop_dot`) one trailing full stop.
fn strip_markup(s: &str, drop_dot: bool) -> &str {
    let mut s = s.trim();
    let mut dot = drop_dot;
    loop {
        let before = s.len();
        s = s.trim_matches(|c: char| is_emphasis(c) || c.is_whitespace());
        for (open, close) in [('"', '"'), ('\'', '\''), ('“', '”'), ('‘', '’')] {
            if let Some(inner) = s.strip_prefix(open).and_then(|r| r.strip_suffix(close)) {
                s = inner.trim();
            }
        }
        if let Some(r) = s.strip_suffix('.').filter(|_| dot) {
            s = r;
            dot = false;
        }
        if s.len() == before {
            return s;
        }
    }
}
