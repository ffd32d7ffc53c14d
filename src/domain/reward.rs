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

/// The largest sum of `correctness_plus_shaping`'s shaping weights: up to it, a wrong answer's
/// reward stays below every right answer's in f64 arithmetic (see [`ResolvedPolicy::combine`]).
pub const MAX_SHAPING_SUM: f64 = 1e6;

/// TRL adds this to the standard deviation before dividing.
pub const STD_EPS: f64 = 1e-4;

/// A group's (or a batch's) rewards as `scale · x`, with every `x` in [-1, 1]: the mean and the
/// Bessel standard deviation are taken of the `x`, so rewards anywhere in f64's range (a caller
/// may send ±1e308) give finite statistics where the plain sums would overflow.
#[derive(Debug, Clone, Copy)]
struct Scaled {
    /// The largest |reward| (1 when every reward is 0).
    scale: f64,
    /// Mean and standard deviation of reward / scale.
    mean: f64,
    std: f64,
}

fn scaled_stats(values: impl Iterator<Item = f64> + Clone) -> Option<Scaled> {
    let n = values.clone().count();
    if n < 2 {
        return None;
    }
    let top = values.clone().fold(0.0f64, |m, v| m.max(v.abs()));
    let scale = if top > 0.0 { top } else { 1.0 };
    let mean = values.clone().map(|v| v / scale).sum::<f64>() / n as f64;
    let var = values
        .map(|v| (v / scale - mean) * (v / scale - mean))
        .sum::<f64>()
        / (n - 1) as f64;
    Some(Scaled {
        scale,
        mean,
        std: var.sqrt(),
    })
}

/// An advantage past f64's range: only `scale_rewards = "none"` can get one (reward minus the
/// group mean, unscaled), from caller rewards near ±1.8e308.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdvantageOverflow {
    pub group: usize,
    pub trajectory: usize,
}

/// Advantages for a batch of groups (one group for `/v1/score_group`). Every division is done in
/// scaled units ([`Scaled`]), so group and batch scaling are finite for any finite rewards.
pub fn advantages(
    groups: &[Vec<Option<f64>>],
    scale: ScaleRewards,
) -> Result<Vec<Vec<f64>>, AdvantageOverflow> {
    let batch = scaled_stats(groups.iter().flatten().flatten().copied());
    groups
        .iter()
        .enumerate()
        .map(|(gi, g)| {
            let Some(st) = scaled_stats(g.iter().flatten().copied()) else {
                return Ok(vec![0.0; g.len()]);
            };
            // (r − mean) / (std + ε), written in the units of whichever scale divides.
            let one = |r: f64| match scale {
                ScaleRewards::Group => (r / st.scale - st.mean) / (st.std + STD_EPS / st.scale),
                ScaleRewards::Batch => {
                    let b = batch.unwrap_or(st);
                    let mean = (st.scale / b.scale) * st.mean;
                    (r / b.scale - mean) / (b.std + STD_EPS / b.scale)
                }
                ScaleRewards::None => st.scale * (r / st.scale - st.mean),
            };
            g.iter()
                .enumerate()
                .map(|(ti, r)| {
                    let a = r.map_or(0.0, one);
                    if a.is_finite() {
                        Ok(a)
                    } else {
                        Err(AdvantageOverflow {
                            group: gi,
                            trajectory: ti,
                        })
                    }
                })
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
                // The tiers are (1 + b)/(1 + S) and (c + b)/(1 + S)²: past MAX_SHAPING_SUM,
                // 1 + S and c + S round alike in f64 and a wrong answer ties a right one (and
                // past 1.8e308, S itself overflows).
                let sum: f64 = shaping.values().sum();
                if sum > MAX_SHAPING_SUM {
                    return Err(format!(
                        "shaping: the weights sum to {sum:e}, above {MAX_SHAPING_SUM:e}: past \
                         that, a wrong answer's reward can round up to a right one's; scale \
                         them down (shaping below 0.5 keeps the tiers far apart)"
                    ));
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

    /// Whether a trajectory without the `component` can get no reward at all, whatever the
    /// others are: the policy counts nothing else (only `independent_reward`, say), or it is
    /// the correctness of `correctness_plus_shaping`.
    pub fn cannot_do_without(&self, component: &str) -> bool {
        let mut others: BTreeMap<String, Option<f64>> = match self {
            ResolvedPolicy::Weighted { weights } => {
                weights.keys().map(|k| (k.clone(), Some(1.0))).collect()
            }
            ResolvedPolicy::Gate { gate, weights, .. } => weights
                .keys()
                .chain([gate])
                .map(|k| (k.clone(), Some(1.0)))
                .collect(),
            ResolvedPolicy::CorrectnessPlusShaping {
                correctness,
                shaping,
            } => shaping
                .keys()
                .chain([correctness])
                .map(|k| (k.clone(), Some(1.0)))
                .collect(),
        };
        others.insert(component.to_string(), None);
        self.combine(&others).is_none()
    }

    /// The reward for one trajectory's components; `None` ("no reward") when nothing that
    /// counts is applicable.
    pub fn combine(&self, c: &BTreeMap<String, Option<f64>>) -> Option<f64> {
        let value = |name: &str| c.get(name).copied().flatten();
        // Σ wᵢ·cᵢ / Σ wᵢ as a convex combination of the applicable components, with the weights
        // first divided by the largest: any finite weights (1e308 each) and any finite
        // components give a finite result between the smallest and largest component.
        let weighted = |weights: &BTreeMap<String, f64>| {
            let applicable: Vec<(f64, f64)> = weights
                .iter()
                .filter(|(_, &w)| w > 0.0)
                .filter_map(|(name, &w)| value(name).map(|v| (w, v)))
                .collect();
            let top = applicable.iter().fold(0.0f64, |m, (w, _)| m.max(*w));
            let den: f64 = applicable.iter().map(|(w, _)| w / top).sum();
            (den > 0.0).then(|| {
                applicable
                    .iter()
                    .map(|(w, v)| (w / top) / den * v)
                    .sum::<f64>()
            })
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
                // Divided twice rather than by (1 + S)², which overflows for S above ~1e154
                // (`resolve` keeps S itself finite).
                Some(if c >= 1.0 - 1e-9 {
                    (1.0 + b) / (1.0 + total)
                } else {
                    (c.clamp(0.0, 1.0) + b) / (1.0 + total) / (1.0 + total)
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
            let got: Vec<f64> = advantages(&groups, scale).unwrap().concat();
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
        let adv = advantages(&[vec![Some(1.0), None, Some(0.0)]], ScaleRewards::Group)
            .unwrap()
            .concat();
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
            Ok(vec![vec![0.0, 0.0]])
        );
        assert_eq!(
            advantages(&[vec![Some(0.9)]], ScaleRewards::None),
            Ok(vec![vec![0.0]])
        );
    }

    #[test]
    fn rewards_at_the_ends_of_f64_give_finite_advantages() {
        let big = [vec![Some(1e308), Some(-1e308)]];
        for scale in [ScaleRewards::Group, ScaleRewards::Batch] {
            let adv = advantages(&big, scale).unwrap().concat();
            // Scaled, the rewards are ±1: mean 0, std √2.
            let want = 1.0 / (2f64.sqrt() + STD_EPS / 1e308);
            assert!((adv[0] - want).abs() < 1e-12, "{scale:?}: {adv:?}");
            assert!((adv[1] + want).abs() < 1e-12, "{scale:?}: {adv:?}");
        }
        // Unscaled, reward minus the mean is the reward itself here...
        assert_eq!(
            advantages(&big, ScaleRewards::None),
            Ok(vec![vec![1e308, -1e308]])
        );
        // ...and past f64's range, an error naming the trajectory, never inf or 0.
        let far = [
            vec![Some(0.0)],
            vec![Some(1.7e308), Some(-1.7e308), Some(-1.7e308)],
        ];
        assert_eq!(
            advantages(&far, ScaleRewards::None),
            Err(AdvantageOverflow {
                group: 1,
                trajectory: 0
            })
        );
        // Small rewards are untouched by the scaling.
        let adv = advantages(&[vec![Some(1e-300), Some(0.0)]], ScaleRewards::None).unwrap();
        assert_eq!(adv, vec![vec![5e-301, -5e-301]]);
    }

    #[test]
    fn weights_at_the_end_of_f64_weigh_like_equal_weights() {
        let p = policy(
            serde_json::json!({"type": "weighted", "weights": {"judge": 1e308, "answer_line": 1e308}}),
            &[("answer_line", 1.0)],
        );
        let right = p.combine(&comps(&[("judge", Some(0.3)), ("answer_line", Some(1.0))]));
        let wrong = p.combine(&comps(&[("judge", Some(0.9)), ("answer_line", Some(0.0))]));
        assert!((right.unwrap() - 0.65).abs() < 1e-12, "{right:?}");
        assert!((wrong.unwrap() - 0.45).abs() < 1e-12, "{wrong:?}");
        // Huge components under huge weights stay a weighted mean.
        let both = p.combine(&comps(&[
            ("judge", Some(1e308)),
            ("answer_line", Some(1e308)),
        ]));
        assert_eq!(both, Some(1e308));
        // correctness_plus_shaping: a sum of shaping weights past f64 is refused, a large one
        // keeps the tiers apart.
        let e = serde_json::from_value::<Policy>(
            serde_json::json!({"type": "correctness_plus_shaping",
            "correctness": "answer_line", "shaping": {"judge": 1e308, "turn_budget": 1e308}}),
        )
        .unwrap()
        .resolve(&BTreeMap::from([
            ("answer_line".into(), 1.0),
            ("turn_budget".into(), 1.0),
        ]))
        .unwrap_err();
        assert!(
            e.starts_with("shaping: the weights sum to inf, above 1e6"),
            "{e}"
        );
        // At the largest sum allowed, the best wrong answer still ranks below the worst right one.
        let p = policy(
            serde_json::json!({"type": "correctness_plus_shaping", "correctness": "answer_line", "shaping": {"judge": MAX_SHAPING_SUM}}),
            &[("answer_line", 1.0)],
        );
        let right = p.combine(&comps(&[("judge", Some(0.0)), ("answer_line", Some(1.0))]));
        let wrong = p.combine(&comps(&[
            ("judge", Some(1.0)),
            ("answer_line", Some(1.0 - 2e-9)),
        ]));
        assert!(right.unwrap() > wrong.unwrap(), "{right:?} {wrong:?}");
    }

    #[test]
    fn a_policy_of_the_callers_reward_alone_cannot_do_without_it() {
        let only = policy(
            serde_json::json!({"type": "weighted", "weights": {"independent_reward": 1.0}}),
            &[],
        );
        assert!(only.cannot_do_without(INDEPENDENT));
        let mixed = policy(
            serde_json::json!({"type": "weighted", "weights": {"independent_reward": 1.0, "judge": 1.0}}),
            &[],
        );
        assert!(!mixed.cannot_do_without(INDEPENDENT));
        let correctness = policy(
            serde_json::json!({"type": "correctness_plus_shaping", "correctness": "independent_reward", "shaping": {"judge": 0.1}}),
            &[],
        );
        assert!(correctness.cannot_do_without(INDEPENDENT));
        assert!(
            !policy(serde_json::json!({"type": "weighted"}), &[]).cannot_do_without(INDEPENDENT)
        );
    }
}
