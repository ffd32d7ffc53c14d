//! A probability verdict read from the judge's next-token distribution: each answer's mass
//! (pointwise "yes"/"no", pairwise "1"/"2") is the sum of the probabilities of the tokens that
//! spell it. One function for every judge: the local judge passes the exact log-probability
//! of each answer token (its full distribution, read at those tokens), a remote judge the
//! `top_logprobs` its server lists, so a token missing from the top-K adds nothing and the
//! mass found says how much of the distribution the verdict rests on.

/// Each answer's probability mass among `tokens` (a token and its natural-log probability):
/// a token counts for the first answer that lists it among its spellings (case and
/// leading-space variants are listed as spellings), and for none when no answer does.
pub fn answer_masses<T: PartialEq>(tokens: &[(T, f64)], answers: &[Vec<T>]) -> Vec<f64> {
    let mut mass = vec![0.0; answers.len()];
    for (token, logprob) in tokens {
        if let Some(a) = answers
            .iter()
            .position(|spellings| spellings.contains(token))
        {
            mass[a] += logprob.exp();
        }
    }
    mass
}

/// Natural-log probabilities of `ids` under the softmax of `logits` (over the whole vocabulary):
/// what a local judge passes to [`answer_masses`].
pub fn logprobs_at(logits: &[f32], ids: impl IntoIterator<Item = u32>) -> Vec<(u32, f64)> {
    let top = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let log_total = logits
        .iter()
        .map(|&l| f64::from(l - top).exp())
        .sum::<f64>()
        .ln();
    ids.into_iter()
        .map(|id| (id, f64::from(logits[id as usize] - top) - log_total))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variants_add_up_and_other_tokens_count_for_nothing() {
        let yes_no = |w: &[&str]| w.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let answers = vec![
            yes_no(&["yes", "Yes", " Yes"]),
            yes_no(&["no", "No", " No"]),
        ];
        let top: Vec<(String, f64)> = [("Yes", 0.5), (" Yes", 0.2), ("No", 0.1), ("The", 0.15)]
            .iter()
            .map(|(t, p): &(&str, f64)| (t.to_string(), p.ln()))
            .collect();
        let m = answer_masses(&top, &answers);
        assert!(
            (m[0] - 0.7).abs() < 1e-12 && (m[1] - 0.1).abs() < 1e-12,
            "{m:?}"
        );
        // Neither answer listed: no mass at all (the caller refuses it as a verdict).
        let none = answer_masses(&[("The".to_string(), -0.1)], &answers);
        assert_eq!(none, [0.0, 0.0]);
    }

    #[test]
    fn a_local_distribution_reads_as_its_softmax() {
        let logits = [2.0f32, 0.0, 1.0, -1.0];
        let z: f64 = logits.iter().map(|&l| f64::from(l).exp()).sum();
        let lp = logprobs_at(&logits, [0, 2, 3]);
        let m = answer_masses(&lp, &[vec![0u32], vec![2, 3]]);
        assert!((m[0] - 2f64.exp() / z).abs() < 1e-12);
        assert!((m[1] - (1f64.exp() + (-1f64).exp()) / z).abs() < 1e-12);
    }
}
