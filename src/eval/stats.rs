//! The pure statistics of an evaluation: pair credit with ties, accuracies, bootstrap intervals
//! over groups, flip rate, the position and length splits and calibration. No I/O.
//!
//! A *judging* is one group scored in one order; its scores are indexed by the trajectory's
//! position in the file (mapped back from the order shown). Scores closer than
//! [`crate::domain::stats::TIE_EPS`] are ties, and a tie earns half a pair.

use std::cmp::Ordering;

use crate::domain::stats::{bootstrap_ci, cmp_eps, kendall_tau_b};

/// Bins of the score histogram over [0, 1].
pub const HISTOGRAM_BINS: usize = 10;

/// Credit for deciding a (better, worse) pair with these scores: 1 right, ½ tie, 0 wrong.
pub fn pair_credit(better: f64, worse: f64) -> f64 {
    match cmp_eps(better, worse) {
        Ordering::Greater => 1.0,
        Ordering::Equal => 0.5,
        Ordering::Less => 0.0,
    }
}

/// Every (better, worse) pair of a group by its labels; equal labels make no pair.
pub fn labelled_pairs(labels: &[f64]) -> Vec<(usize, usize)> {
    let mut pairs = Vec::new();
    for i in 0..labels.len() {
        for j in 0..labels.len() {
            if labels[i] > labels[j] {
                pairs.push((i, j));
            }
        }
    }
    pairs
}

/// Credit for putting a best-labelled trajectory on top: the share of the top-scored
/// trajectories (ties within the epsilon) that carry the best label.
pub fn top1_credit(labels: &[f64], scores: &[f64]) -> f64 {
    let best_label = labels.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let top = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let tops: Vec<usize> = (0..scores.len())
        .filter(|&i| cmp_eps(scores[i], top) == Ordering::Equal)
        .collect();
    let hits = tops.iter().filter(|&&i| labels[i] == best_label).count();
    hits as f64 / tops.len().max(1) as f64
}

/// A sum of credits over a number of decisions.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Tally {
    pub credit: f64,
    pub count: f64,
}

impl Tally {
    pub fn add(&mut self, credit: f64) {
        self.credit += credit;
        self.count += 1.0;
    }
    pub fn merge(&mut self, o: &Tally) {
        self.credit += o.credit;
        self.count += o.count;
    }
    /// The mean credit, `None` when nothing was counted.
    pub fn rate(&self) -> Option<f64> {
        (self.count > 0.0).then(|| self.credit / self.count)
    }
    /// The rate of all of `v` merged: the pooled figure over groups.
    pub fn pooled(v: &[Tally]) -> Option<f64> {
        let mut t = Tally::default();
        v.iter().for_each(|x| t.merge(x));
        t.rate()
    }
}

/// One valid group's contribution to every figure, from all its judgings.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GroupFigures {
    /// Labelled pairs of the group.
    pub pairs: usize,
    /// Pair decisions over every order.
    pub accuracy: Tally,
    /// Top-1 credit per order.
    pub top1: Tally,
    /// Mean τ-b over the orders where it is defined.
    pub kendall_tau: Option<f64>,
    /// Pairs whose decision differs between orders (only with two or more orders).
    pub flipped_pairs: usize,
    /// Decisions where the better trajectory was shown before the worse one, and after it.
    pub better_first: Tally,
    pub better_later: Tally,
    /// Decisions on pairs whose better trajectory is the longer one, and the shorter one.
    pub better_longer: Tally,
    pub better_shorter: Tally,
    /// Pairs (not decisions) whose better trajectory is the longer, and the shorter.
    pub pairs_better_longer: usize,
    pub pairs_better_shorter: usize,
    /// Scores of the best- and the worst-labelled trajectories, every order.
    pub best_scores: Vec<f64>,
    pub worst_scores: Vec<f64>,
}

/// Figures of one group from its judgings: `scores[o][i]` is trajectory i's score in order o
/// and `shown[o][i]` its position in that order; `lengths[i]` its length.
pub fn group_figures(
    labels: &[f64],
    lengths: &[usize],
    scores: &[Vec<f64>],
    shown: &[Vec<usize>],
) -> GroupFigures {
    let pairs = labelled_pairs(labels);
    let mut f = GroupFigures {
        pairs: pairs.len(),
        ..GroupFigures::default()
    };
    let best = labels.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let worst = labels.iter().copied().fold(f64::INFINITY, f64::min);
    let mut taus = Vec::new();
    for (s, pos) in scores.iter().zip(shown) {
        f.top1.add(top1_credit(labels, s));
        if let Some(t) = kendall_tau_b(s, labels) {
            taus.push(t);
        }
        for &(b, w) in &pairs {
            let c = pair_credit(s[b], s[w]);
            f.accuracy.add(c);
            if pos[b] < pos[w] {
                f.better_first.add(c);
            } else {
                f.better_later.add(c);
            }
            match lengths[b].cmp(&lengths[w]) {
                Ordering::Greater => f.better_longer.add(c),
                Ordering::Less => f.better_shorter.add(c),
                Ordering::Equal => {}
            }
        }
        for (i, &l) in labels.iter().enumerate() {
            if l == best {
                f.best_scores.push(s[i]);
            }
            if l == worst {
                f.worst_scores.push(s[i]);
            }
        }
    }
    f.kendall_tau = (!taus.is_empty()).then(|| taus.iter().sum::<f64>() / taus.len() as f64);
    for &(b, w) in &pairs {
        match lengths[b].cmp(&lengths[w]) {
            Ordering::Greater => f.pairs_better_longer += 1,
            Ordering::Less => f.pairs_better_shorter += 1,
            Ordering::Equal => {}
        }
        if scores.len() > 1 {
            let first = cmp_eps(scores[0][b], scores[0][w]);
            if scores[1..].iter().any(|s| cmp_eps(s[b], s[w]) != first) {
                f.flipped_pairs += 1;
            }
        }
    }
    f
}

/// 95% interval of the pooled accuracy Σcredit / Σcount, resampling groups.
pub fn accuracy_ci(tallies: &[Tally], seed: u64) -> Option<[f64; 2]> {
    bootstrap_ci(tallies.len(), seed, |idx| {
        let mut t = Tally::default();
        idx.iter().for_each(|&i| t.merge(&tallies[i]));
        t.rate()
    })
}

/// 95% interval of accuracy(B) − accuracy(A) over the same groups, resampling groups in pairs.
pub fn paired_difference_ci(a: &[Tally], b: &[Tally], seed: u64) -> Option<[f64; 2]> {
    assert_eq!(a.len(), b.len(), "paired tallies");
    bootstrap_ci(a.len(), seed, |idx| {
        let (mut ta, mut tb) = (Tally::default(), Tally::default());
        for &i in idx {
            ta.merge(&a[i]);
            tb.merge(&b[i]);
        }
        Some(tb.rate()? - ta.rate()?)
    })
}

/// Counts of scores in [`HISTOGRAM_BINS`] equal bins over [0, 1] (values outside are clamped).
pub fn histogram(scores: impl IntoIterator<Item = f64>) -> Vec<usize> {
    let mut bins = vec![0usize; HISTOGRAM_BINS];
    for s in scores {
        let b =
            ((s.clamp(0.0, 1.0) * HISTOGRAM_BINS as f64).floor() as usize).min(HISTOGRAM_BINS - 1);
        bins[b] += 1;
    }
    bins
}

/// The orders a group of `m` is judged in for `k` orders: as given, then reversed, then seeded
/// shuffles (gavel's own permutation schedule) not already used. Fewer than `k` when `m!` < `k`.
/// `order[p]` is the file index of the trajectory shown at position p.
pub fn eval_orders(m: usize, k: usize, seed: &str) -> Vec<Vec<usize>> {
    let mut orders: Vec<Vec<usize>> = vec![(0..m).collect()];
    let reversed: Vec<usize> = (0..m).rev().collect();
    if k >= 2 && !orders.contains(&reversed) {
        orders.push(reversed);
    }
    let wanted = u32::try_from(k.saturating_mul(4).max(8)).unwrap_or(u32::MAX);
    for o in crate::score::samples::permutation_orders(m, wanted, seed) {
        if orders.len() >= k {
            break;
        }
        if !orders.contains(&o) {
            orders.push(o);
        }
    }
    orders.truncate(k.max(1));
    orders
}

/// `shown[i]`: the position at which trajectory i appears in `order`.
pub fn positions(order: &[usize]) -> Vec<usize> {
    let mut pos = vec![0; order.len()];
    for (p, &i) in order.iter().enumerate() {
        pos[i] = p;
    }
    pos
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn pairs_and_credit_with_ties() {
        // Labels 2, 1, 1, 0: pairs (0,1) (0,2) (0,3) (1,3) (2,3); 1 and 2 are equal: no pair.
        let pairs = labelled_pairs(&[2.0, 1.0, 1.0, 0.0]);
        assert_eq!(pairs, vec![(0, 1), (0, 2), (0, 3), (1, 3), (2, 3)]);
        assert_eq!(pair_credit(0.9, 0.1), 1.0);
        assert_eq!(pair_credit(0.5, 0.5 + 1e-12), 0.5);
        assert_eq!(pair_credit(0.1, 0.9), 0.0);
        assert!(labelled_pairs(&[1.0, 1.0]).is_empty());
    }

    #[test]
    fn accuracy_top1_and_tau_by_hand() {
        // Labels [2, 1, 1, 0], scores [0.9, 0.2, 0.5, 0.5] in one order:
        // (0,1) 1 · (0,2) 1 · (0,3) 1 · (1,3) 0 · (2,3) ½ → 3.5 / 5 = 0.7.
        let labels = [2.0, 1.0, 1.0, 0.0];
        let scores = vec![vec![0.9, 0.2, 0.5, 0.5]];
        let shown = vec![positions(&[0, 1, 2, 3])];
        let f = group_figures(&labels, &[1, 1, 1, 1], &scores, &shown);
        assert_eq!(f.pairs, 5);
        assert!(close(f.accuracy.rate().unwrap(), 0.7));
        assert!(close(f.top1.rate().unwrap(), 1.0));
        // τ-b: over 6 pairs of (scores, labels): (0,1) C, (0,2) C, (0,3) C, (1,2) score-D
        // label-tie → tie in b, (1,3) D, (2,3) tie in a. C = 3, D = 1, n1 (ties in scores)
        // = 1, n2 (ties in labels) = 1: (3 − 1) / √(5 · 5) = 0.4.
        assert!(close(f.kendall_tau.unwrap(), 0.4), "{:?}", f.kendall_tau);
        // Best-labelled top score tied with a worse one: half credit.
        assert!(close(top1_credit(&[1.0, 0.0], &[0.7, 0.7]), 0.5));
        assert!(close(top1_credit(&[1.0, 1.0, 0.0], &[0.2, 0.9, 0.4]), 1.0));
        assert!(close(top1_credit(&[1.0, 0.0, 0.0], &[0.2, 0.9, 0.4]), 0.0));
    }

    #[test]
    fn flips_position_and_length_splits() {
        // Two trajectories, better = 0 (longer). A judge that prefers whatever is shown first:
        // order [0, 1] → 0 wins (right, better first); order [1, 0] → 1 wins (wrong, better
        // later). Flip rate 1, accuracy 1 first vs 0 later, overall ½.
        let labels = [1.0, 0.0];
        let orders = [vec![0, 1], vec![1, 0]];
        let shown: Vec<Vec<usize>> = orders.iter().map(|o| positions(o)).collect();
        let scores = vec![vec![0.8, 0.3], vec![0.3, 0.8]];
        let f = group_figures(&labels, &[20, 10], &scores, &shown);
        assert_eq!(f.flipped_pairs, 1);
        assert_eq!(
            f.better_first,
            Tally {
                credit: 1.0,
                count: 1.0
            }
        );
        assert_eq!(
            f.better_later,
            Tally {
                credit: 0.0,
                count: 1.0
            }
        );
        assert!(close(f.accuracy.rate().unwrap(), 0.5));
        assert_eq!(
            f.better_longer,
            Tally {
                credit: 1.0,
                count: 2.0
            }
        );
        assert_eq!(f.better_shorter, Tally::default());
        assert_eq!((f.pairs_better_longer, f.pairs_better_shorter), (1, 0));
        assert_eq!(f.best_scores, vec![0.8, 0.3]);
        assert_eq!(f.worst_scores, vec![0.3, 0.8]);
        // A consistent judge: no flip; one order alone never counts a flip.
        let f = group_figures(&labels, &[5, 10], &[vec![0.9, 0.1], vec![0.7, 0.2]], &shown);
        assert_eq!(f.flipped_pairs, 0);
        assert_eq!(
            f.better_shorter,
            Tally {
                credit: 2.0,
                count: 2.0
            }
        );
        let f = group_figures(&labels, &[5, 5], &scores[..1], &shown[..1]);
        assert_eq!(f.flipped_pairs, 0);
        assert_eq!((f.pairs_better_longer, f.pairs_better_shorter), (0, 0));
    }

    #[test]
    fn bootstrap_intervals() {
        // Every group right: the interval is the point [1, 1].
        let all = vec![
            Tally {
                credit: 1.0,
                count: 1.0
            };
            20
        ];
        assert_eq!(accuracy_ci(&all, 1), Some([1.0, 1.0]));
        // Half right: the interval holds 0.5, lies within [0, 1] and is reproducible.
        let half: Vec<Tally> = (0..40)
            .map(|i| Tally {
                credit: (i % 2) as f64,
                count: 1.0,
            })
            .collect();
        let ci = accuracy_ci(&half, 7).unwrap();
        assert!(
            ci[0] < 0.5 && ci[1] > 0.5 && ci[0] > 0.2 && ci[1] < 0.8,
            "{ci:?}"
        );
        assert_eq!(accuracy_ci(&half, 7), Some(ci));
        // The normal-approximation half-width for p = ½, n = 40 is 1.96·√(¼/40) ≈ 0.155.
        assert!(((ci[1] - ci[0]) / 2.0 - 0.155).abs() < 0.03, "{ci:?}");
        assert_eq!(accuracy_ci(&[], 1), None);
        // Paired difference: B right everywhere A is wrong → B − A = ½ ± something, and an
        // identical pair gives exactly [0, 0].
        let ones = vec![
            Tally {
                credit: 1.0,
                count: 1.0
            };
            40
        ];
        let d = paired_difference_ci(&half, &ones, 3).unwrap();
        assert!(
            d[0] > 0.2 && d[1] < 0.8 && d[0] < 0.5 && d[1] > 0.5,
            "{d:?}"
        );
        assert_eq!(paired_difference_ci(&half, &half, 3), Some([0.0, 0.0]));
    }

    #[test]
    fn histogram_bins_and_orders() {
        assert_eq!(
            histogram([0.0, 0.05, 0.1, 0.55, 0.99, 1.0, 1.7, -0.2]),
            vec![3, 1, 0, 0, 0, 1, 0, 0, 0, 3]
        );
        assert_eq!(eval_orders(2, 2, "s"), vec![vec![0, 1], vec![1, 0]]);
        // Only two orders of two exist.
        assert_eq!(eval_orders(2, 5, "s").len(), 2);
        let o = eval_orders(4, 4, "g1");
        assert_eq!(o.len(), 4);
        assert_eq!(o[0], vec![0, 1, 2, 3]);
        assert_eq!(o[1], vec![3, 2, 1, 0]);
        assert!(o[2] != o[0] && o[2] != o[1] && o[3] != o[2]);
        assert_eq!(eval_orders(4, 4, "g1"), o);
        assert_eq!(eval_orders(3, 1, "x"), vec![vec![0, 1, 2]]);
        assert_eq!(positions(&[2, 0, 1]), vec![1, 2, 0]);
    }
}
