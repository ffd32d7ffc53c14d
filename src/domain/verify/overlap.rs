//! `reference_f1`: how much of the group's reference answer a final answer says, as SQuAD's
//! token F1: both texts lowercased, every character that is not a letter or digit made a space,
//! the articles "a", "an" and "the" dropped, then the harmonic mean of the share of the answer's
//! words found in the reference and the share of the reference's words found in the answer
//! (each word counted as often as it occurs in both). The reference is the request's, or under
//! a rubric with `reference = "judge"` the judge's own answer to the task.

use std::collections::HashMap;

use super::Outcome;

/// The words of `text` as SQuAD's evaluation normalises them.
fn words(text: &str) -> Vec<String> {
    let lowered: String = text
        .chars()
        .flat_map(char::to_lowercase)
        .map(|c| if c.is_alphanumeric() { c } else { ' ' })
        .collect();
    lowered
        .split_whitespace()
        .filter(|w| !matches!(*w, "a" | "an" | "the"))
        .map(str::to_string)
        .collect()
}

/// Token F1 of `answer` against `reference`, in [0, 1]; 1.0 when both have no words.
pub(super) fn token_f1(answer: &str, reference: &str) -> f64 {
    let (a, r) = (words(answer), words(reference));
    if a.is_empty() || r.is_empty() {
        return if a.is_empty() && r.is_empty() {
            1.0
        } else {
            0.0
        };
    }
    let mut left: HashMap<&str, usize> = HashMap::new();
    for w in &r {
        *left.entry(w).or_default() += 1;
    }
    let mut common = 0usize;
    for w in &a {
        if let Some(n) = left.get_mut(w.as_str()).filter(|n| **n > 0) {
            *n -= 1;
            common += 1;
        }
    }
    if common == 0 {
        return 0.0;
    }
    let precision = common as f64 / a.len() as f64;
    let recall = common as f64 / r.len() as f64;
    2.0 * precision * recall / (precision + recall)
}

/// The check: not applicable (no value) when the group has no reference.
pub(super) fn check(answer: &str, reference: Option<&str>) -> Outcome {
    match reference {
        None => Outcome {
            value: None,
            reason: "no reference to compare with".into(),
        },
        Some(r) => {
            let f1 = token_f1(answer, r);
            Outcome::score(f1, format!("token F1 {f1:.3} against the reference"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f1_is_squads_over_normalised_words() {
        assert_eq!(token_f1("Paris", "paris."), 1.0);
        assert_eq!(token_f1("The Eiffel Tower", "eiffel tower"), 1.0);
        // answer: paris, france (2); reference: paris (1); common 1 -> P 1/2, R 1 -> F1 2/3.
        assert!((token_f1("Paris, France", "Paris") - 2.0 / 3.0).abs() < 1e-12);
        assert_eq!(token_f1("Lyon", "Paris"), 0.0);
        // Repeated words count as often as they occur in both.
        assert!((token_f1("new new york", "new york") - 0.8).abs() < 1e-12);
        // Letters beyond ASCII are words too; punctuation is not.
        assert_eq!(token_f1("Leoš Janáček!", "leoš janáček"), 1.0);
        assert_eq!(token_f1("", "Paris"), 0.0);
        assert_eq!(token_f1("...", "!"), 1.0);
    }

    #[test]
    fn without_a_reference_the_check_does_not_apply() {
        let o = check("Paris", None);
        assert_eq!(o.value, None);
        let o = check("It is Paris.", Some("Paris"));
        assert!((o.value.unwrap() - 0.5).abs() < 1e-12, "{o:?}");
        assert!(o.reason.contains("0.500"), "{o:?}");
    }
}
