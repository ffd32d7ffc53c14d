//! "Did you mean": the known field a misspelt one was meant to be. Plain functions on names,
//! shared by every refusal of input (requests, trajectories, messages, rubrics, verifiers).

use serde_json::{Map, Value};

/// The problem of an unknown field `key` among `known`: the nearest known name when `key` looks
/// like a typo of it, else the whole list (`label` names it, e.g. "known").
pub fn unknown_field(key: &str, known: &[&str], label: &str) -> String {
    match nearest(key, known) {
        Some(k) => format!("unknown field, did you mean {k}?"),
        None => format!("unknown field ({label}: {})", known.join(", ")),
    }
}

/// The known name closest to `key`, if it is close enough to be what was meant: at most a
/// third of its letters off (one for short names), case ignored. Ties go to the first listed.
pub fn nearest<'a>(key: &str, known: &[&'a str]) -> Option<&'a str> {
    let key = key.to_lowercase();
    known
        .iter()
        .map(|k| (strsim::damerau_levenshtein(&key, &k.to_lowercase()), *k))
        .filter(|(d, k)| *d <= (k.chars().count() / 3).max(1))
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

/// The first key of `obj` that looks like a misspelling of a known field `obj` lacks
/// (`"mesages"` for `messages`), and that field. For objects that may carry fields of their
/// own (a trajectory logged by a framework, an OpenAI message): any other unknown key is
/// theirs to keep, but a near miss of one gavel reads would be silently ignored.
pub fn misspelt<'a>(obj: &Map<String, Value>, known: &[&'a str]) -> Option<(String, &'a str)> {
    near_miss(obj.keys(), known, |n| obj.contains_key(n)).map(|(k, n)| (k.clone(), n))
}

/// As [`misspelt`], for the keys of an object being deserialized: the first of `keys` that is
/// not known and looks like a misspelling of a known field for which `present` is false.
pub fn near_miss<'k, 'a, K: AsRef<str> + 'k>(
    keys: impl IntoIterator<Item = &'k K>,
    known: &[&'a str],
    present: impl Fn(&str) -> bool,
) -> Option<(&'k K, &'a str)> {
    keys.into_iter()
        .filter(|k| !known.contains(&k.as_ref()))
        .find_map(|k| {
            nearest(k.as_ref(), known)
                .filter(|n| !present(n))
                .map(|n| (k, n))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_near_miss_of_a_missing_field_is_found_and_other_keys_are_left_alone() {
        let known = ["messages", "reward", "metrics"];
        let obj = |v: Value| v.as_object().unwrap().clone();
        assert_eq!(
            misspelt(&obj(json!({"mesages": [], "logs": []})), &known),
            Some(("mesages".to_string(), "messages"))
        );
        // `metric` beside `metrics`: the field is there, the other key is the caller's own.
        assert_eq!(
            misspelt(
                &obj(json!({"messages": [], "metrics": {}, "metric": 1})),
                &known
            ),
            None
        );
        assert_eq!(
            misspelt(&obj(json!({"tools": [], "logs": []})), &known),
            None
        );
    }
}
