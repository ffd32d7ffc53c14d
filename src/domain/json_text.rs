//! Message contents that are themselves JSON, written into the judge prompt as JSON values.
//!
//! Tool results are often JSON (workbook metadata, range reads, search hits). Quoted as a JSON
//! string inside the message's JSON line, every `"` in them becomes `\"` and every newline `\n`
//! — tokens the judge pays for and reads through. Written as the value itself they cost what
//! the tool returned, minus its insignificant whitespace.

use serde::ser::{Serialize, Serializer};
use serde_json::value::RawValue;

/// `text` as compact JSON when it is a JSON object or array: the same text with the whitespace
/// between tokens removed and nothing else changed — keys in their order, numbers and string
/// escapes exactly as written, so the judge reads what the tool returned. `None` for anything
/// else (plain text, a bare JSON string or number, invalid or truncated JSON).
pub fn compact_json(text: &str) -> Option<String> {
    if !is_json_value(text) {
        return None;
    }
    let mut out = String::with_capacity(text.len());
    let (mut in_string, mut escaped) = (false, false);
    for ch in text.chars() {
        if in_string {
            out.push(ch);
            if escaped {
                escaped = false;
            } else if ch == '\\' {
                escaped = true;
            } else if ch == '"' {
                in_string = false;
            }
        } else if !matches!(ch, ' ' | '\t' | '\n' | '\r') {
            if ch == '"' {
                in_string = true;
            }
            out.push(ch);
        }
    }
    Some(out)
}

/// Whether [`compact_json`] accepts `text`, without building the compact copy (the render
/// asks this of every content to word the system message).
pub fn is_json_value(text: &str) -> bool {
    let start = text.trim_start();
    (start.starts_with('{') || start.starts_with('['))
        && serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok()
}

/// A message content (or tool-call arguments) for the judge prompt: serialized as its JSON value
/// when [`compact_json`] accepts it, else as a JSON string.
pub struct JsonOrText<'a>(pub &'a str);

impl JsonOrText<'_> {
    /// Whether this text is written as a JSON value.
    pub fn is_json(&self) -> bool {
        is_json_value(self.0)
    }
}

impl Serialize for JsonOrText<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match compact_json(self.0).and_then(|c| RawValue::from_string(c).ok()) {
            Some(raw) => raw.serialize(s),
            None => s.serialize_str(self.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_and_arrays_are_compacted_losslessly() {
        let text =
            "{\n  \"a\": [1, 2.50, 1e3],\n  \"s\": \"x  y\\n\\\" z\",\n  \"u\": \"\\u00e9\"\n}";
        let c = compact_json(text).unwrap();
        assert_eq!(c, r#"{"a":[1,2.50,1e3],"s":"x  y\n\" z","u":"\u00e9"}"#);
        // The same value as the original.
        let v: serde_json::Value = serde_json::from_str(text).unwrap();
        assert_eq!(serde_json::from_str::<serde_json::Value>(&c).unwrap(), v);
        assert_eq!(compact_json(" [ ] ").unwrap(), "[]");
    }

    #[test]
    fn everything_else_stays_text() {
        for t in [
            "plain text",
            "\"a json string\"",
            "42",
            "true",
            "{\"a\": 1",
            "{\"a\": 1} trailing",
            "[1, 2] and more",
            "",
        ] {
            assert_eq!(compact_json(t), None, "{t:?}");
        }
    }

    #[test]
    fn serializes_as_value_or_string() {
        let line = |t: &str| serde_json::to_string(&JsonOrText(t)).unwrap();
        assert_eq!(line("{\"k\": [1, \"<b>\"]}"), r#"{"k":[1,"<b>"]}"#);
        assert_eq!(line("a \"quoted\" word"), r#""a \"quoted\" word""#);
        assert!(JsonOrText("[1]").is_json() && !JsonOrText("1").is_json());
    }
}
