//! Pure planning and aggregation for judging one group several ways: K orders of the candidates
//! (position-bias control), several judges (a panel), and chunks of a group too large for a
//! judge's context. No I/O here.

use sha2::{Digest, Sha256};

/// `k` distinct orders of `m` candidates: the identity first (so one order is the plain
/// request), then shuffles seeded by `seed` and the order's index, so the same group always
/// gets the same orders (reproducible and cacheable). Fewer than `k` when `m!` < `k`.
pub fn permutation_orders(m: usize, k: u32, seed: &str) -> Vec<Vec<usize>> {
    let mut orders: Vec<Vec<usize>> = vec![(0..m).collect()];
    let mut attempt = 0u32;
    while orders.len() < k as usize && attempt < 64 * k {
        attempt += 1;
        let digest = Sha256::digest(format!("{seed}/{attempt}").as_bytes());
        let mut state = u64::from_le_bytes(digest[..8].try_into().expect("8 bytes"));
        let mut order: Vec<usize> = (0..m).collect();
        // Fisher–Yates with a xorshift stream from the seed. Not `domain::rng`: the orders are in
        // every stored verdict's key, and another stream would orphan them all.
        for i in (1..m).rev() {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let j = (state % (i as u64 + 1)) as usize;
            order.swap(i, j);
        }
        if !orders.contains(&order) {
            orders.push(order);
        }
    }
    orders
}

/// Splits candidates into chunks that each fit: every chunk starts with the `anchors` (the first
/// candidates) and is filled greedily. `cost[i]` is candidate i's token cost, `base` the cost of
/// everything else in a prompt, `budget` what a prompt may use. `None` if even the anchors plus
/// one candidate do not fit.
pub fn chunk_candidates(
    cost: &[usize],
    base: usize,
    budget: usize,
    anchors: usize,
) -> Option<Vec<Vec<usize>>> {
    let anchors = anchors.min(cost.len().saturating_sub(1));
    let anchor_cost: usize = cost[..anchors].iter().sum();
    let mut chunks = Vec::new();
    let mut current: Vec<usize> = (0..anchors).collect();
    let mut used = base + anchor_cost;
    for (i, &c) in cost.iter().enumerate().skip(anchors) {
        if used + c > budget && current.len() > anchors {
            chunks.push(std::mem::replace(&mut current, (0..anchors).collect()));
            used = base + anchor_cost;
        }
        if used + c > budget {
            return None;
        }
        current.push(i);
        used += c;
    }
    if current.len() > anchors || chunks.is_empty() {
        chunks.push(current);
    }
    Some(chunks)
}

/// Merges per-chunk scores into one score per candidate. With `shift`, each chunk's scores are
/// moved by the difference between the anchors' mean over all chunks and their mean in that
/// chunk, so chunks judged separately stay on one scale (then clamped to [0, 1]); anchors get
/// their mean. Checklist scores are absolute and are not shifted.
pub fn merge_chunks(
    m: usize,
    chunks: &[(Vec<usize>, Vec<Option<f64>>)],
    anchors: usize,
    shift: bool,
) -> Vec<Option<f64>> {
    if chunks.len() == 1 {
        let mut out = vec![None; m];
        for (&c, s) in chunks[0].0.iter().zip(&chunks[0].1) {
            out[c] = *s;
        }
        return out;
    }
    let anchor_mean = |scores: &[Option<f64>]| {
        let vals: Vec<f64> = scores[..anchors].iter().flatten().copied().collect();
        (!vals.is_empty()).then(|| vals.iter().sum::<f64>() / vals.len() as f64)
    };
    let means: Vec<Option<f64>> = chunks.iter().map(|(_, s)| anchor_mean(s)).collect();
    let known: Vec<f64> = means.iter().flatten().copied().collect();
    let overall = (!known.is_empty()).then(|| known.iter().sum::<f64>() / known.len() as f64);
    let mut sums = vec![(0.0, 0usize); m];
    for ((members, scores), mean) in chunks.iter().zip(&means) {
        let delta = match (shift, overall, mean) {
            (true, Some(o), Some(c)) => o - c,
            _ => 0.0,
        };
        for (pos, (&c, s)) in members.iter().zip(scores).enumerate() {
            if let Some(s) = s {
                let v = if pos < anchors {
                    *s
                } else {
                    (s + delta).clamp(0.0, 1.0)
                };
                sums[c].0 += v;
                sums[c].1 += 1;
            }
        }
    }
    sums.into_iter()
        .map(|(s, n)| (n > 0).then(|| s / n as f64))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orders_are_distinct_deterministic_and_start_with_identity() {
        let a = permutation_orders(5, 4, "sha256:abc");
        assert_eq!(a.len(), 4);
        assert_eq!(a[0], vec![0, 1, 2, 3, 4]);
        assert_eq!(a, permutation_orders(5, 4, "sha256:abc"));
        assert_ne!(a, permutation_orders(5, 4, "sha256:abd"));
        for o in &a {
            let mut s = o.clone();
            s.sort();
            assert_eq!(s, vec![0, 1, 2, 3, 4]);
        }
        // Two candidates have only two orders.
        assert_eq!(permutation_orders(2, 5, "x").len(), 2);
        assert_eq!(permutation_orders(1, 3, "x"), vec![vec![0]]);
    }

    #[test]
    fn chunks_share_anchors_and_fit() {
        let cost = [10, 10, 30, 30, 30, 30];
        let chunks = chunk_candidates(&cost, 5, 85, 2).unwrap();
        assert_eq!(chunks, vec![vec![0, 1, 2, 3], vec![0, 1, 4, 5]]);
        assert_eq!(
            chunk_candidates(&cost, 5, 1000, 2).unwrap(),
            vec![vec![0, 1, 2, 3, 4, 5]]
        );
        assert_eq!(chunk_candidates(&cost, 5, 40, 2), None);
    }

    #[test]
    fn merged_chunks_are_shifted_onto_the_anchor_scale() {
        // Chunk 2's judge was 0.2 harsher on the anchor; its other scores move up by 0.1 (the
        // anchor's mean across chunks is 0.6).
        let chunks = vec![
            (vec![0, 1, 2], vec![Some(0.7), Some(0.9), Some(0.1)]),
            (vec![0, 3], vec![Some(0.5), Some(0.6)]),
        ];
        let merged = merge_chunks(4, &chunks, 1, true);
        let want = [0.6, 0.8, 0.0, 0.7];
        for (m, w) in merged.iter().zip(want) {
            assert!((m.unwrap() - w).abs() < 1e-12, "{merged:?}");
        }
        let unshifted = merge_chunks(4, &chunks, 1, false);
        assert!((unshifted[3].unwrap() - 0.6).abs() < 1e-12);
    }
}
