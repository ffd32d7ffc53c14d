//! `answer_line`: find the last `ANSWER:` line of the final answer and compare its value, parsed
//! as a typed kind (integer, decimal, money, date, bool, id, cell reference, list or set), with
//! the expected value parsed by the same parser when the verifier is built. Tested end to end in
//! `mod.rs` (`tests::answer_line`).

use std::fmt;
use std::sync::LazyLock;

use regex::Regex;

use serde_json::Value;

use super::{type_name, Outcome, Spec};
use crate::trajectory::InputError;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Integer,
    Decimal,
    Money,
    Date,
    Bool,
    Id,
    Cell,
    List,
    Set,
}

/// Each kind's name in specs, and the noun for "... is not <noun>".
const KINDS: [(&str, Kind, &str); 9] = [
    ("integer", Kind::Integer, "an integer"),
    ("decimal", Kind::Decimal, "a decimal number"),
    ("money_cents", Kind::Money, "a money amount"),
    ("date", Kind::Date, "a date"),
    ("bool", Kind::Bool, "a boolean (yes/no/true/false)"),
    ("id", Kind::Id, "an id"),
    ("cell_ref", Kind::Cell, "a cell reference"),
    ("list", Kind::List, "a list"),
    ("set", Kind::Set, "a set"),
];

impl Kind {
    fn is_collection(self) -> bool {
        matches!(self, Kind::List | Kind::Set)
    }

    fn noun(self) -> &'static str {
        KINDS.iter().find(|k| k.1 == self).map_or("", |k| k.2)
    }
}

/// A parsed value: money in cents, a date as (year, month, day), an id compared by its key
/// (lowercase, no whitespace), a cell reference with its range normalised (`B12`, `A1:C3`).
#[derive(Debug, Clone, PartialEq)]
enum Val {
    Int(i64),
    Dec(f64),
    Cents(i64),
    Date(i32, u32, u32),
    Bool(bool),
    /// As written, and the key it compares by.
    Id(String, String),
    /// Sheet as written (unquoted), and the normalised range.
    Cell(Option<String>, String),
    List(Vec<Val>),
    Set(Vec<Val>),
}

impl fmt::Display for Val {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let items = |f: &mut fmt::Formatter<'_>, open, items: &[Val], close| {
            let shown: Vec<String> = items.iter().map(Val::to_string).collect();
            write!(f, "{open}{}{close}", shown.join(", "))
        };
        match self {
            Val::Int(n) => write!(f, "{n}"),
            Val::Dec(x) => write!(f, "{x}"),
            Val::Cents(c) => write!(f, "{c} cents"),
            Val::Date(y, m, d) => write!(f, "{y:04}-{m:02}-{d:02}"),
            Val::Bool(b) => f.write_str(if *b { "yes" } else { "no" }),
            Val::Id(raw, _) => f.write_str(raw),
            Val::Cell(None, range) => f.write_str(range),
            Val::Cell(Some(s), range) => match s.chars().all(|c| c.is_alphanumeric() || c == '_') {
                true => write!(f, "{s}!{range}"),
                false => write!(f, "'{}'!{range}", s.replace('\'', "''")),
            },
            Val::List(v) => items(f, "[", v, "]"),
            Val::Set(v) => items(f, "{", v, "}"),
        }
    }
}

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

fn parse_scalar(kind: Kind, s: &str) -> Result<Val, String> {
    let s = s.trim();
    let not = || format!("{s:?} is not {}", kind.noun());
    match kind {
        Kind::Integer => parse_int(s).map(Val::Int).ok_or_else(not),
        Kind::Decimal => parse_decimal(s).map(Val::Dec).ok_or_else(not),
        Kind::Money => parse_money(s).map(Val::Cents).ok_or_else(not),
        Kind::Date => parse_date(s).map_err(|why| why.map_or_else(not, |w| format!("{s:?} {w}"))),
        Kind::Bool => match s.to_lowercase().as_str() {
            "yes" | "y" | "true" => Ok(Val::Bool(true)),
            "no" | "n" | "false" => Ok(Val::Bool(false)),
            _ => Err(not()),
        },
        Kind::Id => {
            let key: String = s
                .chars()
                .filter(|c| !c.is_whitespace())
                .flat_map(char::to_lowercase)
                .collect();
            match key.is_empty() {
                true => Err(not()),
                false => Ok(Val::Id(s.to_string(), key)),
            }
        }
        Kind::Cell => parse_cell(s).ok_or_else(not),
        Kind::List | Kind::Set => unreachable!("collections are split before parsing items"),
    }
}

/// Strips a leading sign (`-`, `−` or `+`): (negative, rest).
fn sign(s: &str) -> (bool, &str) {
    match s.strip_prefix(['-', '\u{2212}']) {
        Some(r) => (true, r),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    }
}

fn digits_len(s: &str) -> usize {
    s.bytes().take_while(u8::is_ascii_digit).count()
}

/// Leading digits, optionally in thousands groups of one separator (`4,120`, `1_000_000`, thin
/// space): the digits without separators, and the rest.
fn grouped(s: &str) -> Option<(String, &str)> {
    let first = digits_len(s);
    if first == 0 {
        return None;
    }
    let (mut digits, mut rest) = (s[..first].to_string(), &s[first..]);
    let mut sep = None;
    while let Some(c) = rest
        .chars()
        .next()
        .filter(|c| matches!(c, ',' | '_' | '\u{2009}' | '\u{202F}'))
    {
        let after = &rest[c.len_utf8()..];
        if first > 3 || sep.is_some_and(|x| x != c) || digits_len(after) != 3 {
            return None;
        }
        sep = Some(c);
        digits.push_str(&after[..3]);
        rest = &after[3..];
    }
    Some((digits, rest))
}

fn parse_int(s: &str) -> Option<i64> {
    let (neg, r) = sign(s);
    let (digits, rest) = grouped(r)?;
    let n: i64 = digits.parse().ok().filter(|_| rest.is_empty())?;
    Some(if neg { -n } else { n })
}

/// Like an integer, plus one decimal point and an optional exponent (`-1,234.5`, `.5`, `1.5e3`).
fn parse_decimal(s: &str) -> Option<f64> {
    static TAIL: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"^(\.[0-9]*)?([eE][+-]?[0-9]+)?$").expect("valid regex"));
    let (neg, r) = sign(s);
    let (int, tail) = if r.starts_with('.') {
        (String::new(), r)
    } else {
        grouped(r)?
    };
    let has_digit = !int.is_empty() || tail.as_bytes().get(1).is_some_and(u8::is_ascii_digit);
    if !has_digit || !TAIL.is_match(tail) {
        return None;
    }
    let text = format!("{}{int}{tail}", if neg { "-" } else { "" });
    text.parse::<f64>().ok().filter(|x| x.is_finite())
}

const CURRENCY_SYMBOLS: [&str; 8] = ["US$", "A$", "C$", "$", "€", "£", "¥", "₹"];
const CURRENCY_CODES: &str =
    "USD EUR GBP JPY CHF CAD AUD NZD CNY INR SEK NOK DKK HKD SGD MXN BRL ZAR KRW PLN";

/// `s` without a currency symbol or code at its front (or back), trimmed.
fn strip_currency(s: &str, front: bool) -> Option<&str> {
    let symbol = CURRENCY_SYMBOLS.iter().find_map(|c| match front {
        true => s.strip_prefix(c),
        false => s.strip_suffix(c),
    });
    let code = || {
        let at = if front { 3 } else { s.len().checked_sub(3)? };
        let (a, b) = (s.get(..at)?, s.get(at..)?);
        let (code, rest) = if front { (a, b) } else { (b, a) };
        let mut codes = CURRENCY_CODES.split(' ');
        codes.any(|c| c.eq_ignore_ascii_case(code)).then_some(rest)
    };
    symbol.or_else(code).map(str::trim)
}

/// Amount in cents. A plain integer is cents already; a currency symbol or code, or a decimal
/// point (one or two decimals), makes it an amount in currency units. `-$5`, `$-5` and `($5)`
/// are negative.
fn parse_money(s: &str) -> Option<i64> {
    let mut s = s.trim();
    let mut neg = false;
    if let Some(inner) = s.strip_prefix('(').and_then(|x| x.strip_suffix(')')) {
        (neg, s) = (true, inner.trim());
    }
    let (mut signed, mut currency) = (neg, false);
    loop {
        let (minus, r) = sign(s);
        if !signed && r.len() != s.len() {
            (neg, signed, s) = (minus, true, r.trim_start());
        } else if let Some(r) = strip_currency(s, true).filter(|_| !currency) {
            (currency, s) = (true, r);
        } else {
            break;
        }
    }
    if let Some(r) = strip_currency(s, false).filter(|_| !currency) {
        (currency, s) = (true, r);
    }
    let (digits, rest) = grouped(s)?;
    let whole: i64 = digits.parse().ok()?;
    let cents = match rest.strip_prefix('.') {
        Some(f) if (1..=2).contains(&f.len()) && digits_len(f) == f.len() => {
            let frac: i64 = f.parse().ok()?;
            whole
                .checked_mul(100)?
                .checked_add(if f.len() == 1 { frac * 10 } else { frac })?
        }
        None if rest.is_empty() && currency => whole.checked_mul(100)?,
        None if rest.is_empty() => whole,
        _ => return None,
    };
    Some(if neg { -cents } else { cents })
}

const MONTHS: &str = "january february march april may june july august september october \
                      november december";
const WEEKDAYS: &str = "monday tuesday wednesday thursday friday saturday sunday";

fn month_named(tok: &str) -> Option<u32> {
    let t = tok.strip_suffix('.').unwrap_or(tok).to_lowercase();
    let i = match t.as_str() {
        "sept" => 8,
        _ => MONTHS
            .split_whitespace()
            .position(|m| m == t || (t.len() == 3 && m.starts_with(t.as_str())))?,
    };
    Some(i as u32 + 1)
}

fn number(tok: &str, len: std::ops::RangeInclusive<usize>) -> Option<u32> {
    let ok = len.contains(&tok.len()) && digits_len(tok) == tok.len();
    tok.parse().ok().filter(|_| ok)
}

/// A (year, month, day); `Err(None)` is "not a date", `Err(Some(why))` a more precise refusal.
fn parse_date(s: &str) -> Result<Val, Option<String>> {
    let spaced = s.replace(',', " ");
    let mut toks: Vec<&str> = spaced
        .split_whitespace()
        .filter(|t| !matches!(t.to_lowercase().as_str(), "the" | "of"))
        .collect();
    if let Some(first) = toks
        .first()
        .map(|t| t.strip_suffix('.').unwrap_or(t).to_lowercase())
    {
        if toks.len() > 1 && first.len() >= 3 && WEEKDAYS.split(' ').any(|w| w.starts_with(&first))
        {
            toks.remove(0);
        }
    }
    let (y, m, d) = match toks.as_slice() {
        [one] => numeric_date(one)?,
        [a, b, c] => {
            let (day, month) = match (month_named(a), month_named(b)) {
                (Some(m), _) => (b, m),
                (None, Some(m)) => (a, m),
                (None, None) => return Err(None),
            };
            let lower = day.to_lowercase();
            let day = ["st", "nd", "rd", "th"]
                .iter()
                .find_map(|o| lower.strip_suffix(o))
                .unwrap_or(&lower);
            (
                number(c, 4..=4).ok_or(None)? as i32,
                month,
                number(day, 1..=2).ok_or(None)?,
            )
        }
        _ => return Err(None),
    };
    if !(1..=12).contains(&m) {
        return Err(Some(format!("is not a valid date (no month {m})")));
    }
    let leap = y % 4 == 0 && (y % 100 != 0 || y % 400 == 0);
    let days = match m {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    };
    if d == 0 || d > days {
        return Err(Some(format!(
            "is not a valid date ({y:04}-{m:02} has {days} days)"
        )));
    }
    Ok(Val::Date(y, m, d))
}

/// `YYYY-MM-DD` (or `/`, `.`), or `DD/MM/YYYY` / `MM/DD/YYYY` when the order is unambiguous.
fn numeric_date(tok: &str) -> Result<(i32, u32, u32), Option<String>> {
    let sep = tok.chars().find(|c| !c.is_ascii_digit()).ok_or(None)?;
    let parts: Vec<&str> = tok.split(sep).collect();
    let ([a, b, c], true) = (parts.as_slice(), matches!(sep, '-' | '/' | '.')) else {
        return Err(None);
    };
    if let (Some(y), Some(m), Some(d)) = (number(a, 4..=4), number(b, 1..=2), number(c, 1..=2)) {
        return Ok((y as i32, m, d));
    }
    let (Some(x), Some(z), Some(y)) = (number(a, 1..=2), number(b, 1..=2), number(c, 4..=4)) else {
        return Err(None);
    };
    match (x > 12, z > 12) {
        (true, false) => Ok((y as i32, z, x)),
        (false, true) => Ok((y as i32, x, z)),
        (false, false) if x == z => Ok((y as i32, x, x)),
        (false, false) => Err(Some("is ambiguous (day and month both <= 12)".into())),
        (true, true) => Err(None),
    }
}

/// `B12`, `$B$12`, `A1:C3`, optionally `Sheet!` or `'My Sheet'!` first.
fn parse_cell(s: &str) -> Option<Val> {
    let (sheet, reference) = if let Some(mut r) = s.strip_prefix('\'') {
        let mut name = String::new();
        loop {
            let i = r.find('\'')?;
            name.push_str(&r[..i]);
            r = &r[i + 1..];
            match r.strip_prefix('\'') {
                Some(more) => {
                    name.push('\'');
                    r = more;
                }
                None => break,
            }
        }
        (Some(name), r.strip_prefix('!')?)
    } else if let Some((name, r)) = s.rsplit_once('!') {
        (Some(name.trim().to_string()), r)
    } else {
        (None, s)
    };
    if sheet.as_deref().is_some_and(|n| n.trim().is_empty()) {
        return None;
    }
    let (a, b) = reference.split_once(':').unwrap_or((reference, reference));
    let ((c1, r1), (c2, r2)) = (a1(a.trim())?, a1(b.trim())?);
    let name = |c: u32, r: u32| {
        let mut col = Vec::new();
        let mut c = c;
        while c > 0 {
            col.push(b'A' + ((c - 1) % 26) as u8);
            c = (c - 1) / 26;
        }
        col.reverse();
        format!("{}{r}", String::from_utf8_lossy(&col))
    };
    let (lo, hi) = (name(c1.min(c2), r1.min(r2)), name(c1.max(c2), r1.max(r2)));
    let range = if lo == hi { lo } else { format!("{lo}:{hi}") };
    Some(Val::Cell(sheet, range))
}

/// One A1 cell, `$` anchors allowed: (column number, row).
fn a1(s: &str) -> Option<(u32, u32)> {
    let s = s.strip_prefix('$').unwrap_or(s);
    let n = s.bytes().take_while(u8::is_ascii_alphabetic).count();
    if !(1..=3).contains(&n) {
        return None;
    }
    let col = s[..n].bytes().fold(0, |acc, b| {
        acc * 26 + u32::from(b.to_ascii_uppercase() - b'A' + 1)
    });
    let row_text = s[n..].strip_prefix('$').unwrap_or(&s[n..]);
    let row = number(row_text, 1..=7).filter(|r| *r > 0)?;
    Some((col, row))
}
