//! `reference_f1` and `reference_recall`: how much of the group's reference answer a final
//! answer says. Both texts are normalised as SQuAD's evaluation does (lowercased, every character
//! that is not a letter or digit made a space, the articles "a", "an" and "the" dropped) and their
//! common words counted (each as often as it occurs in both). `reference_f1` is SQuAD's token F1:
//! the harmonic mean of the share of the answer's words found in the reference (precision) and
//! the share of the reference's words found in the answer (recall). `reference_recall` is the
//! recall alone: an answer that says the reference inside a sentence of its own scores as well as
//! the bare reference, where F1 pays for dropping every other word. The reference is the
//! request's, or under a rubric with `reference = "judge"` the judge's own answer to the task.

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

/// What a reference check measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Measure {
    /// SQuAD's token F1 (`reference_f1`).
    F1,
    /// The share of the reference's words the answer says (`reference_recall`).
    Recall,
}

impl Measure {
    fn name(self) -> &'static str {
        match self {
            Measure::F1 => "token F1",
            Measure::Recall => "token recall",
        }
    }
}

/// `measure` of `answer` against `reference`, in [0, 1]. As in SQuAD's evaluation, when either
/// text has no words the score is 1.0 if both have none and 0.0 otherwise.
pub(super) fn token_score(measure: Measure, answer: &str, reference: &str) -> f64 {
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
    let recall = common as f64 / r.len() as f64;
    match measure {
        Measure::Recall => recall,
        Measure::F1 if common == 0 => 0.0,
        Measure::F1 => {
            let precision = common as f64 / a.len() as f64;
            2.0 * precision * recall / (precision + recall)
        }
    }
}

/// The check: not applicable (no value) when the group has no reference.
pub(super) fn check(measure: Measure, answer: &str, reference: Option<&str>) -> Outcome {
    match reference {
        None => Outcome {
            value: None,
            reason: "no reference to compare with".into(),
        },
        Some(r) => {
            let v = token_score(measure, answer, r);
            Outcome::score(
                v,
                format!("{} {v:.3} against the reference", measure.name()),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token_f1(answer: &str, reference: &str) -> f64 {
        token_score(Measure::F1, answer, reference)
    }

    fn recall(answer: &str, reference: &str) -> f64 {
        token_score(Measure::Recall, answer, reference)
    }

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
    fn recall_is_the_share_of_the_references_words_the_answer_says() {
        // A sentence around the whole reference scores as the bare reference does ...
        assert_eq!(
            recall("He was born on 9 August 1887.", "9 August 1887"),
            1.0
        );
        assert_eq!(recall("9 August 1887", "9 August 1887"), 1.0);
        // ... where F1 pays for the other words: answer 7 words, reference 3, common 3 ->
        // P 3/7, R 1 -> F1 0.6.
        let sentence = token_f1("He was born on 9 August 1887.", "9 August 1887");
        assert!((sentence - 0.6).abs() < 1e-12, "{sentence}");
        // Part of the reference: 1 of its 3 words.
        assert!((recall("1887", "9 August 1887") - 1.0 / 3.0).abs() < 1e-12);
        // Repeated words count as often as the reference has them.
        assert!((recall("new york", "new new york") - 2.0 / 3.0).abs() < 1e-12);
        assert_eq!(recall("new new new york", "new new york"), 1.0);
        assert_eq!(recall("Lyon", "Paris"), 0.0);
        assert_eq!(recall("", "Paris"), 0.0);
        assert_eq!(recall("Paris", "..."), 0.0);
        assert_eq!(recall("...", "!"), 1.0);
    }

    #[test]
    fn without_a_reference_the_check_does_not_apply() {
        for measure in [Measure::F1, Measure::Recall] {
            let o = check(measure, "Paris", None);
            assert_eq!(o.value, None);
        }
        let o = check(Measure::F1, "It is Paris.", Some("Paris"));
        assert!((o.value.unwrap() - 0.5).abs() < 1e-12, "{o:?}");
        assert_eq!(o.reason, "token F1 0.500 against the reference");
        let o = check(Measure::Recall, "It is Paris.", Some("Paris"));
        assert_eq!(o.value, Some(1.0));
        assert_eq!(o.reason, "token recall 1.000 against the reference");
    }
}
