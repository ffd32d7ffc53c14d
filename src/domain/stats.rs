//! The statistics every tool shares: means and standard deviations, average ranks, rank flips,
//! Kendall's τ-b, the biggest mover, bootstrap intervals, and rounding for reports.
//!
//! Rewards closer than [`TIE_EPS`] count as tied, so a judge's `0.8` and a policy's
//! `0.7999999999999999` do not make a spurious flip. (GRPO's advantages take their own, scaled
//! statistics with Bessel's correction, as TRL does: [`super::reward`].)

use std::cmp::Ordering;

use super::rng::Rng;

/// Rewards closer than this are ties.
pub const TIE_EPS: f64 = 1e-9;

/// `x` against `y` with ties within [`TIE_EPS`].
pub fn cmp_eps(x: f64, y: f64) -> Ordering {
    if (x - y).abs() <= TIE_EPS {
        Ordering::Equal
    } else if x < y {
        Ordering::Less
    } else {
        Ordering::Greater
    }
}

/// Rank of each value, 1 = highest; tied values share the average of the ranks they span
/// (`[0.9, 0.5, 0.5, 0.1]` → `[1, 2.5, 2.5, 4]`).
pub fn average_ranks(x: &[f64]) -> Vec<f64> {
    let mut order: Vec<usize> = (0..x.len()).collect();
    order.sort_by(|&i, &j| x[j].total_cmp(&x[i]));
    let mut ranks = vec![0.0; x.len()];
    let mut start = 0;
    while start < order.len() {
        let mut end = start + 1;
        while end < order.len() && cmp_eps(x[order[start]], x[order[end]]) == Ordering::Equal {
            end += 1;
        }
        // Positions start..end hold ranks start+1 ..= end.
        let rank = (start + 1 + end) as f64 / 2.0;
        for &i in &order[start..end] {
            ranks[i] = rank;
        }
        start = end;
    }
    ranks
}

/// Pair counts over all `i < j`: concordant, discordant, tied in `a`, tied in `b` (a pair tied
/// in both counts in both).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PairCounts {
    pub pairs: usize,
    pub concordant: usize,
    pub discordant: usize,
    pub tied_a: usize,
    pub tied_b: usize,
}

pub fn pair_counts(a: &[f64], b: &[f64]) -> PairCounts {
    assert_eq!(a.len(), b.len(), "paired vectors");
    let mut c = PairCounts::default();
    for i in 0..a.len() {
        for j in i + 1..a.len() {
            c.pairs += 1;
            let (x, y) = (cmp_eps(a[i], a[j]), cmp_eps(b[i], b[j]));
            if x == Ordering::Equal {
                c.tied_a += 1;
            }
            if y == Ordering::Equal {
                c.tied_b += 1;
            }
            if x != Ordering::Equal && y != Ordering::Equal {
                if x == y {
                    c.concordant += 1;
                } else {
                    c.discordant += 1;
                }
            }
        }
    }
    c
}

/// Pairs whose order strictly reverses between `a` and `b` (a pair that becomes tied is no
/// flip).
pub fn rank_flips(a: &[f64], b: &[f64]) -> usize {
    pair_counts(a, b).discordant
}

/// Kendall's τ-b between two paired vectors: (C − D) / √((n₀ − n₁)(n₀ − n₂)). `None` when it is
/// undefined: fewer than two values, or every value of one side tied.
pub fn kendall_tau_b(a: &[f64], b: &[f64]) -> Option<f64> {
    let c = pair_counts(a, b);
    let denom = ((c.pairs - c.tied_a) as f64 * (c.pairs - c.tied_b) as f64).sqrt();
    if denom == 0.0 {
        return None;
    }
    let tau = (c.concordant as f64 - c.discordant as f64) / denom;
    Some(tau.clamp(-1.0, 1.0))
}

/// Index of the largest |delta| (the first of equals); `None` when nothing moved.
pub fn moved_most(deltas: &[f64]) -> Option<usize> {
    let mut best: Option<usize> = None;
    for (i, d) in deltas.iter().enumerate() {
        if d.abs() <= TIE_EPS {
            continue;
        }
        if best.is_none_or(|b| d.abs() > deltas[b].abs() + TIE_EPS) {
            best = Some(i);
        }
    }
    best
}

/// Mean of the values; `None` for none.
pub fn mean(x: impl IntoIterator<Item = f64>) -> Option<f64> {
    let (mut sum, mut n) = (0.0, 0usize);
    for v in x {
        sum += v;
        n += 1;
    }
    (n > 0).then(|| sum / n as f64)
}

/// Rounds away float noise (`0.9 − 0.8` = `0.09999999999999998` → `0.1`) for reporting.
pub fn tidy(x: f64) -> f64 {
    let r = (x * 1e9).round() / 1e9;
    if r == 0.0 {
        0.0 // no "-0"
    } else {
        r
    }
}

/// Mean and population standard deviation of the values; `None` for none.
pub fn mean_std(values: &[f64]) -> Option<(f64, f64)> {
    let mean = mean(values.iter().copied())?;
    let n = values.len() as f64;
    let var = values.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n;
    Some((mean, var.sqrt()))
}

/// Resamples drawn for a bootstrap interval.
pub const BOOTSTRAP_RESAMPLES: usize = 2000;

/// The percentile interval (2.5%, 97.5%) of `stat` over bootstrap resamples of `n` items
/// (groups), seeded so that a report is reproducible. `None` for no items.
pub fn bootstrap_ci(
    n: usize,
    seed: u64,
    mut stat: impl FnMut(&[usize]) -> Option<f64>,
) -> Option<[f64; 2]> {
    if n == 0 {
        return None;
    }
    let mut rng = Rng::new(seed);
    let mut idx = vec![0usize; n];
    let mut values = Vec::with_capacity(BOOTSTRAP_RESAMPLES);
    for _ in 0..BOOTSTRAP_RESAMPLES {
        for slot in idx.iter_mut() {
            *slot = rng.below(n);
        }
        if let Some(v) = stat(&idx) {
            values.push(v);
        }
    }
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    Some([percentile(&values, 0.025), percentile(&values, 0.975)])
}

/// The `q` quantile of sorted values, linearly interpolated.
pub fn percentile(sorted: &[f64], q: f64) -> f64 {
    let pos = q * (sorted.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-4
    }

    #[test]
    fn tau_b_without_ties() {
        // C = 5, D = 1 over 6 pairs: 4/6.
        let t = kendall_tau_b(&[1.0, 2.0, 3.0, 4.0], &[1.0, 3.0, 2.0, 4.0]).unwrap();
        assert!(close(t, 0.6667), "{t}");
        assert_eq!(kendall_tau_b(&[1.0, 2.0, 3.0], &[1.0, 2.0, 3.0]), Some(1.0));
        assert_eq!(
            kendall_tau_b(&[1.0, 2.0, 3.0], &[3.0, 2.0, 1.0]),
            Some(-1.0)
        );
    }

    #[test]
    fn tau_b_with_ties() {
        // C = 2, D = 0, n0 = 3, n1 = 1, n2 = 0: 2 / √(2·3).
        let t = kendall_tau_b(&[1.0, 1.0, 2.0], &[1.0, 2.0, 3.0]).unwrap();
        assert!(close(t, 0.8165), "{t}");
        // The same with the sides swapped.
        let t = kendall_tau_b(&[1.0, 2.0, 3.0], &[1.0, 1.0, 2.0]).unwrap();
        assert!(close(t, 0.8165), "{t}");
        // Ties on both sides: a = [.2,.9,.5,.7], b = [.7,.9,.5,.7]: C = 4, D = 1, n1 = 0,
        // n2 = 1: 3 / √(6·5) = 0.5477.
        let t = kendall_tau_b(&[0.2, 0.9, 0.5, 0.7], &[0.7, 0.9, 0.5, 0.7]).unwrap();
        assert!(close(t, 0.5477), "{t}");
        // Within TIE_EPS is a tie.
        let t = kendall_tau_b(&[0.8, 0.8 + 1e-12, 0.9], &[1.0, 2.0, 3.0]).unwrap();
        assert!(close(t, 0.8165), "{t}");
    }

    #[test]
    fn tau_b_undefined() {
        assert_eq!(kendall_tau_b(&[0.5, 0.5, 0.5], &[0.1, 0.2, 0.3]), None);
        assert_eq!(kendall_tau_b(&[0.1, 0.2, 0.3], &[0.4, 0.4, 0.4]), None);
        assert_eq!(kendall_tau_b(&[0.3], &[0.7]), None);
        assert_eq!(kendall_tau_b(&[], &[]), None);
    }

    #[test]
    fn ranks_share_the_average_on_ties() {
        assert_eq!(average_ranks(&[0.1, 0.9, 0.5]), vec![3.0, 1.0, 2.0]);
        assert_eq!(
            average_ranks(&[0.9, 0.5, 0.5, 0.1]),
            vec![1.0, 2.5, 2.5, 4.0]
        );
        assert_eq!(average_ranks(&[0.4, 0.4, 0.4]), vec![2.0, 2.0, 2.0]);
        assert_eq!(
            average_ranks(&[0.7, 0.9, 0.5, 0.7]),
            vec![2.5, 1.0, 4.0, 2.5]
        );
        assert_eq!(average_ranks(&[]), Vec::<f64>::new());
    }

    #[test]
    fn flips_count_strict_reversals_only() {
        assert_eq!(rank_flips(&[1.0, 2.0, 3.0, 4.0], &[1.0, 3.0, 2.0, 4.0]), 1);
        assert_eq!(rank_flips(&[1.0, 2.0, 3.0], &[3.0, 2.0, 1.0]), 3);
        // Becoming tied is not a flip.
        assert_eq!(rank_flips(&[1.0, 2.0], &[2.0, 2.0]), 0);
        assert_eq!(rank_flips(&[0.2, 0.9, 0.5, 0.7], &[0.7, 0.9, 0.5, 0.7]), 1);
        let c = pair_counts(&[0.2, 0.9, 0.5, 0.7], &[0.7, 0.9, 0.5, 0.7]);
        assert_eq!(
            c,
            PairCounts {
                pairs: 6,
                concordant: 4,
                discordant: 1,
                tied_a: 0,
                tied_b: 1
            }
        );
    }

    #[test]
    fn biggest_mover() {
        assert_eq!(moved_most(&[0.1, -0.3, 0.3, 0.2]), Some(1));
        assert_eq!(moved_most(&[0.0, 0.0]), None);
        assert_eq!(moved_most(&[]), None);
        assert_eq!(moved_most(&[0.0, -0.05]), Some(1));
    }

    #[test]
    fn tidy_drops_float_noise() {
        assert_eq!(tidy(0.9 - 0.8), 0.1);
        assert_eq!(tidy(-1e-17), 0.0);
        assert!(tidy(-0.0).is_sign_positive());
        assert_eq!(mean([1.0, 2.0]), Some(1.5));
        assert_eq!(mean(std::iter::empty()), None);
    }

    #[test]
    fn mean_std_and_percentiles() {
        assert_eq!(mean_std(&[]), None);
        let (m, sd) = mean_std(&[0.2, 0.4]).unwrap();
        assert!(close(m, 0.3) && close(sd, 0.1), "{m} {sd}");
        assert_eq!(mean_std(&[5.0]), Some((5.0, 0.0)));
        assert!(close(percentile(&[1.0, 2.0, 3.0, 4.0, 5.0], 0.5), 3.0));
        assert!(close(percentile(&[0.0, 10.0], 0.25), 2.5));
    }
}
