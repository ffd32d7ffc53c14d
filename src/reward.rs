//! Rewards and GRPO advantages.
//!
//! Advantages follow TRL's `GRPOTrainer` exactly: reward minus the group mean, divided by
//! (Bessel standard deviation + 1e-4) of the group (`group`, the default) or of the whole batch
//! (`batch`), or not divided (`none`). gavel adds one rule TRL has no need for: a `null` reward
//! ("no reward", e.g. the judge failed) gets advantage 0 and is left out of every mean and std,
//! and a group with fewer than two scored trajectories gets advantage 0 throughout.

use serde::{Deserialize, Serialize};

/// TRL's `scale_rewards`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ScaleRewards {
    #[default]
    Group,
    Batch,
    None,
}

/// TRL adds this to the standard deviation before dividing.
pub const STD_EPS: f64 = 1e-4;

fn mean_std(values: impl Iterator<Item = f64> + Clone) -> Option<(f64, f64)> {
    let n = values.clone().count();
    if n < 2 {
        return None;
    }
    let mean = values.clone().sum::<f64>() / n as f64;
    let var = values.map(|v| (v - mean) * (v - mean)).sum::<f64>() / (n - 1) as f64;
    Some((mean, var.sqrt()))
}

/// Advantages for a batch of groups (one group for `/v1/score_group`).
pub fn advantages(groups: &[Vec<Option<f64>>], scale: ScaleRewards) -> Vec<Vec<f64>> {
    let batch_std = mean_std(groups.iter().flatten().flatten().copied()).map(|(_, s)| s);
    groups
        .iter()
        .map(|g| {
            let Some((mean, group_std)) = mean_std(g.iter().flatten().copied()) else {
                return vec![0.0; g.len()];
            };
            let denom = match scale {
                ScaleRewards::Group => group_std + STD_EPS,
                ScaleRewards::Batch => batch_std.unwrap_or(0.0) + STD_EPS,
                ScaleRewards::None => 1.0,
            };
            g.iter()
                .map(|r| r.map_or(0.0, |r| (r - mean) / denom))
                .collect()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn golden() -> Value {
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/data/grpo_golden.json"
        ))
        .unwrap();
        serde_json::from_str(&text).unwrap()
    }

    #[test]
    fn reproduces_trl_advantages() {
        let g = golden();
        let size = g["G"].as_u64().unwrap() as usize;
        let rewards: Vec<Option<f64>> = g["rewards"]
            .as_array()
            .unwrap()
            .iter()
            .map(Value::as_f64)
            .collect();
        let groups: Vec<Vec<Option<f64>>> = rewards.chunks(size).map(<[_]>::to_vec).collect();
        for (mode, scale) in [
            ("group", ScaleRewards::Group),
            ("batch", ScaleRewards::Batch),
            ("none", ScaleRewards::None),
        ] {
            let got: Vec<f64> = advantages(&groups, scale).concat();
            let want: Vec<f64> = g["advantages"][mode]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_f64().unwrap())
                .collect();
            assert_eq!(got.len(), want.len());
            for (a, b) in got.iter().zip(&want) {
                assert!((a - b).abs() < 1e-9, "{mode}: {got:?} vs {want:?}");
            }
        }
    }

    #[test]
    fn null_rewards_get_zero_and_are_excluded() {
        let adv = advantages(&[vec![Some(1.0), None, Some(0.0)]], ScaleRewards::Group).concat();
        // mean 0.5, std sqrt(0.5) over the two scored rewards only
        let s = 0.5f64.sqrt() + STD_EPS;
        assert!((adv[0] - 0.5 / s).abs() < 1e-12);
        assert_eq!(adv[1], 0.0);
        assert!((adv[2] + 0.5 / s).abs() < 1e-12);
    }

    #[test]
    fn one_scored_trajectory_gets_zero() {
        assert_eq!(
            advantages(&[vec![Some(0.9), None]], ScaleRewards::Group),
            vec![vec![0.0, 0.0]]
        );
        assert_eq!(
            advantages(&[vec![Some(0.9)]], ScaleRewards::None),
            vec![vec![0.0]]
        );
    }
}
