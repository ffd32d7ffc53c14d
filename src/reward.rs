//! Rewards and GRPO advantages.
//!
//! A trajectory's reward merges named components — `judge`, each verifier (by its name), and the
//! caller's own reward as `independent_reward` — under a [`Policy`]. A component that is "not
//! applicable" (`None`) is left out of the weighting, never counted as 0.
//!
//! Advantages follow TRL's `GRPOTrainer` exactly: reward minus the group mean, divided by
//! (Bessel standard deviation + 1e-4) of the group (`group`, the default) or of the whole batch
//! (`batch`), or not divided (`none`). gavel adds one rule TRL has no need for: a `null` reward
//! ("no reward", e.g. the judge failed) gets advantage 0 and is left out of every mean and std,
//! and a group with fewer than two scored trajectories gets advantage 0 throughout.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// TRL's `scale_rewards`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, utoipa::ToSchema)]
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

/// The judge's component name.
pub const JUDGE: &str = "judge";
/// The caller's own reward's component name.
pub const INDEPENDENT: &str = "independent_reward";

/// How components merge into one reward (declared in a rubric's `[policy]` or a request's
/// `"policy"`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Policy {
    /// Σ wᵢ·cᵢ / Σ wᵢ over the applicable components. Without `weights`: the judge 1.0, each
    /// verifier its own `weight` (default 1.0), the caller's reward 0.
    Weighted {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        weights: Option<BTreeMap<String, f64>>,
    },
    /// If the `gate` component is below `threshold` (default 1.0: anything but a pass), the
    /// reward is `floor`; otherwise the weighted result.
    Gate {
        gate: String,
        #[serde(default)]
        floor: f64,
        #[serde(default = "one")]
        threshold: f64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        weights: Option<BTreeMap<String, f64>>,
    },
    /// Correctness dominates: with shaping weights summing to S and the weighted shaping
    /// average a ∈ [0, 1] scaled to b = S·a, an exact answer (correctness 1) gets
    /// (1 + b)/(1 + S) ∈ [1/(1+S), 1] and anything else (c + b)/(1 + S)², which is always below
    /// 1/(1+S). Shaping ranks trajectories within each tier and never lifts a wrong one above a
    /// right one.
    CorrectnessPlusShaping {
        correctness: String,
        #[serde(default)]
        shaping: BTreeMap<String, f64>,
    },
}

fn one() -> f64 {
    1.0
}

impl Default for Policy {
    fn default() -> Self {
        Policy::Weighted { weights: None }
    }
}

impl Policy {
    /// Checks that every weight is finite and non-negative (names are checked against the
    /// components of a request by [`Policy::resolve`]).
    pub fn check_weights(&self) -> Result<(), String> {
        let maps: Vec<(&str, &BTreeMap<String, f64>)> = match self {
            Policy::Weighted { weights } | Policy::Gate { weights, .. } => {
                weights.iter().map(|w| ("weights", w)).collect()
            }
            Policy::CorrectnessPlusShaping { shaping, .. } => vec![("shaping", shaping)],
        };
        for (field, map) in maps {
            for (name, w) in map {
                if !(w.is_finite() && *w >= 0.0) {
                    return Err(format!("{field}.{name} must be a finite number >= 0"));
                }
            }
        }
        if let Policy::Gate {
            floor, threshold, ..
        } = self
        {
            if !(floor.is_finite() && threshold.is_finite()) {
                return Err("floor and threshold must be finite".into());
            }
        }
        Ok(())
    }

    /// Resolves weights against the components a request has. `defaults` holds each verifier's
    /// own weight. Unknown component names are an error naming the known ones.
    pub fn resolve(
        &self,
        verifier_weights: &BTreeMap<String, f64>,
    ) -> Result<ResolvedPolicy, String> {
        self.check_weights()?;
        let known = |name: &str| {
            name == JUDGE || name == INDEPENDENT || verifier_weights.contains_key(name)
        };
        let known_list = || {
            let mut v = vec![JUDGE.to_string(), INDEPENDENT.to_string()];
            v.extend(verifier_weights.keys().cloned());
            v.join(", ")
        };
        let check = |field: &str, name: &str| {
            if known(name) {
                Ok(())
            } else {
                Err(format!(
                    "{field}: no component named {name:?} (components: {})",
                    known_list()
                ))
            }
        };
        let weights = |w: &Option<BTreeMap<String, f64>>| -> Result<BTreeMap<String, f64>, String> {
            match w {
                Some(w) => {
                    for name in w.keys() {
                        check(&format!("weights.{name}"), name)?;
                    }
                    Ok(w.clone())
                }
                None => {
                    let mut w = verifier_weights.clone();
                    w.insert(JUDGE.into(), 1.0);
                    Ok(w)
                }
            }
        };
        Ok(match self {
            Policy::Weighted { weights: w } => ResolvedPolicy::Weighted {
                weights: weights(w)?,
            },
            Policy::Gate {
                gate,
                floor,
                threshold,
                weights: w,
            } => {
                check("gate", gate)?;
                ResolvedPolicy::Gate {
                    gate: gate.clone(),
                    floor: *floor,
                    threshold: *threshold,
                    weights: weights(w)?,
                }
            }
            Policy::CorrectnessPlusShaping {
                correctness,
                shaping,
            } => {
                check("correctness", correctness)?;
                for name in shaping.keys() {
                    check(&format!("shaping.{name}"), name)?;
                }
                ResolvedPolicy::CorrectnessPlusShaping {
                    correctness: correctness.clone(),
                    shaping: shaping.clone(),
                }
            }
        })
    }
}

/// A policy with its weights resolved for one request.
#[derive(Debug, Clone, PartialEq)]
pub enum ResolvedPolicy {
    Weighted {
        weights: BTreeMap<String, f64>,
    },
    Gate {
        gate: String,
        floor: f64,
        threshold: f64,
        weights: BTreeMap<String, f64>,
    },
    CorrectnessPlusShaping {
        correctness: String,
        shaping: BTreeMap<String, f64>,
    },
}

impl ResolvedPolicy {
    /// Whether the judge takes part; when it does not, it is not called at all.
    pub fn needs_judge(&self) -> bool {
        let w = |m: &BTreeMap<String, f64>| m.get(JUDGE).copied().unwrap_or(0.0) > 0.0;
        match self {
            ResolvedPolicy::Weighted { weights } => w(weights),
            ResolvedPolicy::Gate { gate, weights, .. } => gate == JUDGE || w(weights),
            ResolvedPolicy::CorrectnessPlusShaping {
                correctness,
                shaping,
            } => correctness == JUDGE || w(shaping),
        }
    }

    /// The reward for one trajectory's components; `None` ("no reward") when nothing that
    /// counts is applicable.
    pub fn combine(&self, c: &BTreeMap<String, Option<f64>>) -> Option<f64> {
        let value = |name: &str| c.get(name).copied().flatten();
        let weighted = |weights: &BTreeMap<String, f64>| {
            let (mut num, mut den) = (0.0, 0.0);
            for (name, &w) in weights {
                if let (true, Some(v)) = (w > 0.0, value(name)) {
                    num += w * v;
                    den += w;
                }
            }
            (den > 0.0).then(|| num / den)
        };
        match self {
            ResolvedPolicy::Weighted { weights } => weighted(weights),
            ResolvedPolicy::Gate {
                gate,
                floor,
                threshold,
                weights,
            } => match value(gate) {
                Some(g) if g < *threshold => Some(*floor),
                _ => weighted(weights),
            },
            ResolvedPolicy::CorrectnessPlusShaping {
                correctness,
                shaping,
            } => {
                let c = value(correctness)?;
                let total: f64 = shaping.values().filter(|w| **w > 0.0).sum();
                let b = weighted(shaping).map_or(0.0, |avg| total * avg.clamp(0.0, 1.0));
                Some(if c >= 1.0 - 1e-9 {
                    (1.0 + b) / (1.0 + total)
                } else {
                    (c.clamp(0.0, 1.0) + b) / ((1.0 + total) * (1.0 + total))
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    fn comps(pairs: &[(&str, Option<f64>)]) -> BTreeMap<String, Option<f64>> {
        pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    fn policy(v: serde_json::Value, verifiers: &[(&str, f64)]) -> ResolvedPolicy {
        let p: Policy = serde_json::from_value(v).unwrap();
        p.resolve(&verifiers.iter().map(|(k, w)| (k.to_string(), *w)).collect())
            .unwrap()
    }

    #[test]
    fn weighted_leaves_out_not_applicable_components() {
        let p = policy(
            serde_json::json!({"type": "weighted", "weights": {"judge": 1.0, "answer_line": 2.0, "regex": 1.0}}),
            &[("answer_line", 1.0), ("regex", 1.0)],
        );
        let r = p.combine(&comps(&[
            ("judge", Some(0.5)),
            ("answer_line", Some(1.0)),
            ("regex", None),
        ]));
        assert!((r.unwrap() - 2.5 / 3.0).abs() < 1e-12);
        assert_eq!(
            p.combine(&comps(&[("judge", None), ("answer_line", None)])),
            None
        );
        assert!(p.needs_judge());
    }

    #[test]
    fn default_weights_are_judge_one_and_each_verifiers_own() {
        let p = policy(
            serde_json::json!({"type": "weighted"}),
            &[("answer_line", 3.0)],
        );
        let r = p.combine(&comps(&[
            ("judge", Some(0.2)),
            ("answer_line", Some(1.0)),
            ("independent_reward", Some(1.0)),
        ]));
        assert!((r.unwrap() - 3.2 / 4.0).abs() < 1e-12);
    }

    #[test]
    fn zero_judge_weight_means_no_judge() {
        let p = policy(
            serde_json::json!({"type": "weighted", "weights": {"judge": 0.0, "answer_line": 1.0}}),
            &[("answer_line", 1.0)],
        );
        assert!(!p.needs_judge());
        let p = policy(
            serde_json::json!({"type": "correctness_plus_shaping", "correctness": "answer_line", "shaping": {"turn_budget": 0.1}}),
            &[("answer_line", 1.0), ("turn_budget", 1.0)],
        );
        assert!(!p.needs_judge());
    }

    #[test]
    fn gate_floors_failures() {
        let p = policy(
            serde_json::json!({"type": "gate", "gate": "answer_line", "floor": 0.05, "weights": {"judge": 1.0}}),
            &[("answer_line", 1.0)],
        );
        assert_eq!(
            p.combine(&comps(&[("judge", Some(0.9)), ("answer_line", Some(0.0))])),
            Some(0.05)
        );
        assert_eq!(
            p.combine(&comps(&[("judge", Some(0.9)), ("answer_line", Some(1.0))])),
            Some(0.9)
        );
    }

    #[test]
    fn unknown_components_are_refused_by_name() {
        let p: Policy =
            serde_json::from_value(serde_json::json!({"type": "gate", "gate": "answr_line"}))
                .unwrap();
        let e = p
            .resolve(&BTreeMap::from([("answer_line".to_string(), 1.0)]))
            .unwrap_err();
        assert_eq!(e, "gate: no component named \"answr_line\" (components: judge, independent_reward, answer_line)");
        assert!(serde_json::from_value::<Policy>(
            serde_json::json!({"type": "weighted", "wieghts": {}})
        )
        .is_err());
    }

    /// Property: under correctness_plus_shaping, any exact answer outranks any wrong one, for
    /// every shaping weight set and every component value (checked over a dense grid and a
    /// pseudo-random sample).
    #[test]
    fn shaping_never_lifts_a_wrong_answer_above_a_right_one() {
        let mut seed = 0x9e3779b97f4a7c15u64;
        let mut rnd = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed >> 11) as f64 / (1u64 << 53) as f64
        };
        for _ in 0..2000 {
            let (w1, w2) = (rnd() * 3.0, rnd() * 0.5);
            let p = policy(
                serde_json::json!({"type": "correctness_plus_shaping", "correctness": "answer_line", "shaping": {"judge": w1, "turn_budget": w2}}),
                &[("answer_line", 1.0), ("turn_budget", 1.0)],
            );
            let right = p
                .combine(&comps(&[
                    ("answer_line", Some(1.0)),
                    ("judge", Some(rnd() * 0.001)),
                    ("turn_budget", Some(0.0)),
                ]))
                .unwrap();
            let wrong_c = if rnd() < 0.5 {
                0.0
            } else {
                1.0 - 1e-6 - rnd() * 0.5
            };
            let wrong = p
                .combine(&comps(&[
                    ("answer_line", Some(wrong_c)),
                    ("judge", Some(1.0)),
                    ("turn_budget", Some(1.0)),
                ]))
                .unwrap();
            assert!(
                wrong < right,
                "w=({w1},{w2}) c={wrong_c}: wrong {wrong} >= right {right}"
            );
            // Shaping still ranks within a tier.
            let better = p
                .combine(&comps(&[
                    ("answer_line", Some(1.0)),
                    ("judge", Some(0.9)),
                    ("turn_budget", Some(1.0)),
                ]))
                .unwrap();
            if w1 + w2 > 1e-9 {
                assert!(better > right);
            }
            assert!(better <= 1.0 + 1e-12);
        }
    }

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
