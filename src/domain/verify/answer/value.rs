//! The typed values an `answer_line` compares: the kinds, a parsed value, and one parser per
//! kind (numbers with grouping, money with currency signs, dates in the usual spellings, cell
//! references with sheets and ranges).

use std::fmt;
use std::sync::LazyLock;

use regex::Regex;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
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
pub(super) const KINDS: [(&str, Kind, &str); 9] = [
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
    pub(super) fn is_collection(self) -> bool {
        matches!(self, Kind::List | Kind::Set)
    }

    pub(super) fn noun(self) -> &'static str {
        KINDS.iter().find(|k| k.1 == self).map_or("", |k| k.2)
    }
}

/// A parsed value: money in cents, a date as (year, month, day), an id compared by its key
/// (lowercase, no whitespace), a cell reference with its range normalised (`B12`, `A1:C3`).
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Val {
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

pub(super) fn parse_scalar(kind: Kind, s: &str) -> Result<Val, String> {
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
