//! How sure a probability verdict is, per trajectory, in [0, 1]: what a cascade of judges routes
//! on and what `gavel eval` checks against the labels (accuracy by confidence). Listwise verdicts
//! have none: a score written as text says nothing of how likely the judge thought the others.

/// Pointwise: how far P(yes) is from ½, scaled to [0, 1], times `coverage`, the share of the
/// next-token distribution on the two answers (a remote judge sees its top-K alone, so an
/// answer it does not list lowers it).
pub fn pointwise(p_yes: f64, coverage: f64) -> f64 {
    ((2.0 * p_yes - 1.0).abs() * coverage.clamp(0.0, 1.0)).clamp(0.0, 1.0)
}

/// Pairwise, for each of `m` candidates: the mean, over the opponents it met, of how decisive
/// the pair's verdict is (|2p̄ − 1|, p̄ its chance of winning averaged over both orders), times
/// how far the two orders agree (1 − |p₁ − p₂|; 1 when the pair was asked in one order), times
/// the pair's mean coverage. `pairs[k]` is (shown first, shown second), `firsts[k]` the
/// probability that the first shown is better. `None` for a candidate that met nobody.
pub fn pairwise(
    m: usize,
    pairs: &[(usize, usize)],
    firsts: &[f64],
    coverage: &[f64],
) -> Vec<Option<f64>> {
    // For each unordered pair (a < b): a's chance of winning in each order asked, and coverage.
    let mut met: std::collections::BTreeMap<(usize, usize), (Vec<f64>, Vec<f64>)> =
        std::collections::BTreeMap::new();
    for (k, &(x, y)) in pairs.iter().enumerate() {
        let (key, a_wins) = if x < y {
            ((x, y), firsts[k])
        } else {
            ((y, x), 1.0 - firsts[k])
        };
        let e = met.entry(key).or_default();
        e.0.push(a_wins);
        e.1.push(coverage[k]);
    }
    let mut sum = vec![0.0; m];
    let mut count = vec![0usize; m];
    for (&(a, b), (wins, cov)) in &met {
        let mean = wins.iter().sum::<f64>() / wins.len() as f64;
        let spread = wins.iter().copied().fold(f64::NEG_INFINITY, f64::max)
            - wins.iter().copied().fold(f64::INFINITY, f64::min);
        let cov = cov.iter().sum::<f64>() / cov.len() as f64;
        let c = ((2.0 * mean - 1.0).abs() * (1.0 - spread) * cov.clamp(0.0, 1.0)).clamp(0.0, 1.0);
        for i in [a, b] {
            sum[i] += c;
            count[i] += 1;
        }
    }
    (0..m)
        .map(|i| (count[i] > 0).then(|| sum[i] / count[i] as f64))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pointwise_by_hand() {
        assert_eq!(pointwise(0.5, 1.0), 0.0);
        assert!((pointwise(0.9, 1.0) - 0.8).abs() < 1e-12);
        assert!(
            (pointwise(0.1, 1.0) - 0.8).abs() < 1e-12,
            "sure of no is sure too"
        );
        assert!(
            (pointwise(1.0, 0.5) - 0.5).abs() < 1e-12,
            "half the mass elsewhere"
        );
    }

    #[test]
    fn pairwise_by_hand() {
        // Two candidates, both orders. 0 wins 0.9 shown first and 0.7 shown second (P(first)
        // of (1, 0) is 0.3): mean 0.8, decisive 0.6, the orders 0.2 apart, agreement 0.8.
        let c = pairwise(2, &[(0, 1), (1, 0)], &[0.9, 0.3], &[1.0, 1.0]);
        assert!(
            (c[0].unwrap() - 0.48).abs() < 1e-12 && c[0] == c[1],
            "{c:?}"
        );
        // Orders that contradict each other (each prefers whoever is shown first): nothing.
        let c = pairwise(2, &[(0, 1), (1, 0)], &[0.9, 0.9], &[1.0, 1.0]);
        assert_eq!(c[0], Some(0.0));
        // A third candidate met by nobody has none; a pair asked once counts its one order.
        let c = pairwise(3, &[(0, 1)], &[1.0], &[0.5]);
        assert_eq!(c, [Some(0.5), Some(0.5), None]);
    }
}
