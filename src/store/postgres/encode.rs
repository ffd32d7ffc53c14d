//! What gavel writes, made fit for Postgres columns.
//!
//! Postgres cannot hold U+0000: `text` refuses the byte and `jsonb` the `\u0000` escape, so a
//! NUL anywhere in what gavel writes (a verifier's reason quoting an answer, an inline rubric's
//! name, a judge's explanation) would fail the insert after the judge was paid. Verdicts are kept
//! exactly (see `verdict_for_pg`); the scoring log's `text` and `jsonb` columns get U+FFFD, the
//! Unicode replacement character, for each NUL: one character for one, still valid text that SQL
//! over the log can read, and unlike the six characters `\u0000` it is never mistaken for a
//! trajectory that really wrote an escape. The log's `request` column is `json`, which keeps
//! `\u0000` as written, so the logged request stays exact (and matches its hash). The other
//! tables hold only cache keys, job and unit hashes and `host/pid` owners, which gavel makes and
//! which hold no NUL.

use std::borrow::Cow;

use serde_json::Value;

use crate::store::StoredVerdict;

/// `s` with each U+0000 replaced by U+FFFD.
pub(super) fn text_for_pg(s: &str) -> Cow<'_, str> {
    if s.contains('\0') {
        Cow::Owned(s.replace('\0', "\u{FFFD}"))
    } else {
        Cow::Borrowed(s)
    }
}

/// Whether any string or object key in `v` holds U+0000.
fn has_nul(v: &Value) -> bool {
    match v {
        Value::String(s) => s.contains('\0'),
        Value::Array(a) => a.iter().any(has_nul),
        Value::Object(o) => o.iter().any(|(k, v)| k.contains('\0') || has_nul(v)),
        Value::Null | Value::Bool(_) | Value::Number(_) => false,
    }
}

/// `v` for a `jsonb` column: each U+0000 in its strings and keys replaced by U+FFFD.
pub(super) fn jsonb_for_pg(v: &Value) -> Cow<'_, Value> {
    fn clean(v: &Value) -> Value {
        match v {
            Value::String(s) => Value::String(text_for_pg(s).into_owned()),
            Value::Array(a) => Value::Array(a.iter().map(clean).collect()),
            Value::Object(o) => Value::Object(
                o.iter()
                    .map(|(k, v)| (text_for_pg(k).into_owned(), clean(v)))
                    .collect(),
            ),
            other => other.clone(),
        }
    }
    if has_nul(v) {
        Cow::Owned(clean(v))
    } else {
        Cow::Borrowed(v)
    }
}

/// A verdict as the `verdict` column holds it: the JSON object, or, when the verdict holds a
/// U+0000 (which `jsonb` refuses), a JSON string holding the verdict's JSON text, in which the
/// NUL is the escape `\u0000` (six plain characters inside a string). A verdict is always an
/// object, so a string is unambiguous, and reading it back gives the verdict exactly: the
/// explanation as the judge wrote it, and checklist item ids that still match the rubric's.
/// (A gavel from before this reads such a row as corrupt; it could not have stored one at all.)
pub(super) fn verdict_for_pg(verdict: &StoredVerdict) -> Value {
    let v = serde_json::to_value(verdict).expect("a verdict serialises");
    if has_nul(&v) {
        Value::String(v.to_string())
    } else {
        v
    }
}

/// The verdict a `verdict` column holds (see [`verdict_for_pg`]).
pub(super) fn verdict_from_pg(v: Value) -> serde_json::Result<StoredVerdict> {
    match v {
        Value::String(text) => serde_json::from_str(&text),
        v => serde_json::from_value(v),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::store::StoredScore;

    fn verdict(explanation: &str, item: &str) -> StoredVerdict {
        StoredVerdict {
            scores: vec![StoredScore {
                id: "1".into(),
                score: Some(0.5),
                explanation: explanation.into(),
                items: vec![(item.into(), true)],
                confidence: None,
            }],
            prompt_tokens: 10,
            completion_tokens: 2,
            cached_prompt_tokens: 0,
            forward_passes: 0,
            calls: 1,
            counted_prompt_tokens: 10,
            counted_prompt_tokens_without_dedup: 12,
            model: "m".into(),
            created_unix: 1,
            retries: Default::default(),
            clamped_scores: 0,
        }
    }

    #[test]
    fn verdicts_with_nul_are_kept_exactly_as_text_and_others_as_objects() {
        let plain = verdict("fine", "a");
        assert!(verdict_for_pg(&plain).is_object());
        assert_eq!(verdict_from_pg(verdict_for_pg(&plain)).unwrap(), plain);
        let nul = verdict("fine\0print", "cites\0source");
        let stored = verdict_for_pg(&nul);
        let Value::String(text) = &stored else {
            panic!("{stored}")
        };
        assert!(!text.contains('\0') && text.contains("\\u0000"), "{text}");
        assert_eq!(verdict_from_pg(stored).unwrap(), nul);
    }

    #[test]
    fn jsonb_values_get_u_fffd_for_nul_in_strings_and_keys() {
        let v = json!({"a\0": ["x\0y", {"k": "\0"}], "n": 1, "s": "clean"});
        assert_eq!(
            *jsonb_for_pg(&v),
            json!({"a\u{FFFD}": ["x\u{FFFD}y", {"k": "\u{FFFD}"}], "n": 1, "s": "clean"})
        );
        let clean = json!({"a": ["b"]});
        assert!(matches!(jsonb_for_pg(&clean), Cow::Borrowed(_)));
        assert_eq!(text_for_pg("r\0\0"), "r\u{FFFD}\u{FFFD}");
    }
}
