//! The GRPO loss exactly as TRL's `GRPOTrainer._compute_loss` computes it (TRL @f2cd577,
//! v1.9): `loss_type` grpo / bnpo / dr_grpo / dapo, token- or sequence-level importance
//! sampling, ε / ε_high clipping, the optional two-sided bound δ, and β·k3 KL against the
//! reference model; plus optional truncated importance sampling against the sampler's
//! log-probs for off-policy batches. All inputs are `[B, T]` over completion tokens; `mask` is 1
//! on tokens the policy produced (prompt, tool output and padding are 0).

use candle_core::{DType, Result, Tensor, D};
use serde::{Deserialize, Serialize};

/// TRL's `loss_type`: how per-token losses are normalised.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum LossType {
    /// Mean over each sequence's tokens, then over sequences.
    Grpo,
    /// Mean over all tokens of the micro-batch.
    Bnpo,
    /// Sum over tokens / (sequences × max_completion_length).
    DrGrpo,
    /// Sum over tokens / tokens in the whole accumulated batch.
    #[default]
    Dapo,
}

/// TRL's `importance_sampling_level`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum IsLevel {
    #[default]
    Token,
    /// GSPO: one ratio per sequence, the geometric mean of its token ratios.
    Sequence,
}

/// How truncated importance sampling treats a sampler ratio above the cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TisMode {
    /// Use min(ratio, cap).
    Cap,
    /// Drop the token (weight 0).
    Mask,
}

/// The loss options (TRL's names).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GrpoConfig {
    pub loss_type: LossType,
    pub importance_sampling_level: IsLevel,
    /// Lower clip: ratios below 1 − ε are clipped.
    pub epsilon: f64,
    /// Upper clip (DAPO's clip-higher); `None` = ε.
    pub epsilon_high: Option<f64>,
    /// Two-sided clipping: the unclipped ratio is capped at δ (> 1 + ε_high).
    pub delta: Option<f64>,
    /// KL coefficient; 0 skips the reference forward pass.
    pub beta: f64,
    /// dr_grpo's normaliser.
    pub max_completion_length: usize,
    /// Truncated importance sampling against the sampler's log-probs: the cap.
    pub tis_cap: Option<f64>,
    pub tis_mode: TisMode,
}

impl Default for GrpoConfig {
    fn default() -> Self {
        GrpoConfig {
            loss_type: LossType::default(),
            importance_sampling_level: IsLevel::Token,
            epsilon: 0.2,
            epsilon_high: None,
            delta: None,
            beta: 0.0,
            max_completion_length: 256,
            tis_cap: None,
            tis_mode: TisMode::Cap,
        }
    }
}

/// One micro-batch's inputs.
pub struct GrpoInputs<'a> {
    /// The policy's per-token log-probs (carrying the autograd graph).
    pub logp: &'a Tensor,
    /// Log-probs of the policy that generated the batch; `None` = `logp` detached (one
    /// gradient step per generation, as TRL does).
    pub old_logp: Option<&'a Tensor>,
    /// Reference-model log-probs (needed when β ≠ 0).
    pub ref_logp: Option<&'a Tensor>,
    /// The sampler's own log-probs (for truncated importance sampling).
    pub sampler_logp: Option<&'a Tensor>,
    pub mask: &'a Tensor,
    /// One per sequence, `[B]`.
    pub advantages: &'a Tensor,
    /// Micro-batches accumulated into one optimizer step.
    pub grad_accum: usize,
    /// dapo: completion tokens in the whole accumulated batch.
    pub num_items_in_batch: f64,
}

/// The loss and TRL's metrics for one micro-batch.
#[derive(Debug)]
pub struct GrpoOutput {
    pub loss: Tensor,
    /// Masked mean of the per-token k3 KL (0 when β = 0).
    pub kl: f64,
    pub clip_low: f64,
    pub clip_high: f64,
    pub clip_region: f64,
    /// Fraction of tokens whose sampler ratio exceeded the TIS cap.
    pub tis_clipped: f64,
}

fn scalar(t: &Tensor) -> Result<f64> {
    t.to_dtype(DType::F64)?.to_scalar::<f64>()
}

impl GrpoConfig {
    pub fn epsilon_high(&self) -> f64 {
        self.epsilon_high.unwrap_or(self.epsilon)
    }

    /// Checks the numbers; the message names the option.
    pub fn validate(&self) -> std::result::Result<(), String> {
        if !(self.epsilon >= 0.0 && self.epsilon < 1.0) {
            return Err(format!("epsilon must be in [0, 1), got {}", self.epsilon));
        }
        if self.epsilon_high().is_nan() || self.epsilon_high() < 0.0 {
            return Err("epsilon_high must be >= 0".into());
        }
        if let Some(d) = self.delta {
            if d.is_nan() || d <= 1.0 + self.epsilon_high() {
                return Err(format!("delta must exceed 1 + epsilon_high, got {d}"));
            }
        }
        if !(self.beta >= 0.0 && self.beta.is_finite()) {
            return Err(format!(
                "beta must be a finite number >= 0, got {}",
                self.beta
            ));
        }
        if let Some(c) = self.tis_cap {
            if c.is_nan() || c <= 0.0 {
                return Err(format!("tis_cap must be > 0, got {c}"));
            }
        }
        if self.max_completion_length == 0 {
            return Err("max_completion_length must be at least 1".into());
        }
        Ok(())
    }

    /// TRL's `_compute_loss` for one micro-batch.
    pub fn loss(&self, x: &GrpoInputs) -> Result<GrpoOutput> {
        let mask = x.mask;
        let (b, _t) = mask.dims2()?;
        let logp = x.logp;
        let detached = logp.detach();
        let old = x.old_logp.unwrap_or(&detached);
        // Masked positions hold arbitrary numbers (padding); zeroing the differences there keeps
        // exp() finite without changing any unmasked value.
        let log_ratio = ((logp - old)? * mask)?;
        let log_w = match self.importance_sampling_level {
            IsLevel::Token => log_ratio,
            IsLevel::Sequence => {
                let n = mask.sum_keepdim(D::Minus1)?.clamp(1.0, f64::INFINITY)?;
                log_ratio.sum_keepdim(D::Minus1)?.div(&n)?
            }
        };
        let coef_1 = log_w.exp()?;
        let coef_2 = coef_1.clamp(1.0 - self.epsilon, 1.0 + self.epsilon_high())?;
        let coef_1 = match self.delta {
            Some(d) => coef_1.clamp(f64::NEG_INFINITY, d)?,
            None => coef_1,
        };
        let adv = x.advantages.reshape((b, 1))?;
        let l1 = coef_1.broadcast_mul(&adv)?;
        let l2 = coef_2.broadcast_mul(&adv)?;
        let mut per_token = l1.minimum(&l2)?.neg()?;
        let mut tis_clipped = 0.0;
        let tokens = mask.sum_all()?.clamp(1.0, f64::INFINITY)?;
        if let (Some(cap), Some(sampler)) = (self.tis_cap, x.sampler_logp) {
            let ratio = ((old - sampler)? * mask)?.exp()?.detach();
            let over = ratio.gt(cap)?.to_dtype(mask.dtype())?;
            tis_clipped = scalar(&((&over * mask)?.sum_all()?.div(&tokens))?)?;
            let w = match self.tis_mode {
                TisMode::Cap => ratio.clamp(f64::NEG_INFINITY, cap)?,
                TisMode::Mask => (ratio * (1.0 - over)?)?,
            };
            per_token = per_token.broadcast_mul(&w)?;
        }
        let mut kl = 0.0;
        if self.beta != 0.0 {
            let r = x.ref_logp.ok_or_else(|| {
                candle_core::Error::Msg("beta > 0 needs reference log-probs".into())
            })?;
            let d = ((r - logp)? * mask)?;
            let per_token_kl = ((d.exp()? - d)? - 1.0)?;
            kl = scalar(&((&per_token_kl * mask)?.sum_all()?.div(&tokens))?)?;
            per_token = per_token.broadcast_add(&(per_token_kl * self.beta)?)?;
        }
        let masked = per_token.broadcast_mul(mask)?;
        let accum = x.grad_accum.max(1) as f64;
        let loss = match self.loss_type {
            LossType::Grpo => {
                let n = mask.sum_keepdim(D::Minus1)?.clamp(1.0, f64::INFINITY)?;
                (masked.sum_keepdim(D::Minus1)?.div(&n)?.mean_all()? / accum)?
            }
            LossType::Bnpo => (masked.sum_all()?.div(&tokens)? / accum)?,
            LossType::DrGrpo => {
                (masked.sum_all()? / (b as f64 * self.max_completion_length as f64 * accum))?
            }
            LossType::Dapo => (masked.sum_all()? / x.num_items_in_batch.max(1.0))?,
        };
        // TRL's metrics: token-level flags are averaged over unmasked tokens, sequence-level
        // ones over sequences.
        let lo = 1.0 - self.epsilon;
        let hi = 1.0 + self.epsilon_high();
        let zero = adv.zeros_like()?;
        let low = coef_1
            .lt(lo)?
            .broadcast_mul(&adv.lt(&zero)?)?
            .to_dtype(mask.dtype())?;
        let high = coef_1
            .gt(hi)?
            .broadcast_mul(&adv.gt(&zero)?)?
            .to_dtype(mask.dtype())?;
        let region = (&low + &high)?.clamp(0.0, 1.0)?;
        let batch_mean = |f: &Tensor| -> Result<f64> {
            if f.dim(1)? == 1 {
                scalar(&f.mean_all()?)
            } else {
                scalar(&(f * mask)?.sum_all()?.div(&tokens)?)
            }
        };
        Ok(GrpoOutput {
            loss,
            kl,
            clip_low: batch_mean(&low)?,
            clip_high: batch_mean(&high)?,
            clip_region: batch_mean(&region)?,
            tis_clipped,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Var};
    use serde_json::Value;

    fn golden() -> Value {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/grpo_golden.json");
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    }

    fn mat(v: &Value, dtype: DType) -> Tensor {
        let rows: Vec<Vec<f64>> = serde_json::from_value(v.clone()).unwrap();
        let (b, t) = (rows.len(), rows[0].len());
        let flat: Vec<f64> = rows.into_iter().flatten().collect();
        Tensor::from_vec(flat, (b, t), &Device::Cpu)
            .unwrap()
            .to_dtype(dtype)
            .unwrap()
    }

    fn config(g: &Value, loss_type: LossType, level: IsLevel) -> GrpoConfig {
        let p = &g["params"];
        GrpoConfig {
            loss_type,
            importance_sampling_level: level,
            epsilon: p["epsilon"].as_f64().unwrap(),
            epsilon_high: p["epsilon_high"].as_f64(),
            beta: p["beta"].as_f64().unwrap(),
            max_completion_length: p["max_completion_length"].as_u64().unwrap() as usize,
            ..GrpoConfig::default()
        }
    }

    fn run(g: &Value, cfg: &GrpoConfig, dtype: DType) -> (GrpoOutput, Var) {
        let logp = Var::from_tensor(&mat(&g["logp"], dtype)).unwrap();
        let old = mat(&g["old_logp"], dtype);
        let r = mat(&g["ref_logp"], dtype);
        let mask = mat(&g["mask"], dtype);
        let adv: Vec<f64> = serde_json::from_value(g["advantages"]["group"].clone()).unwrap();
        let adv = Tensor::new(adv, &Device::Cpu)
            .unwrap()
            .to_dtype(dtype)
            .unwrap();
        let n = mask.sum_all().unwrap().to_dtype(DType::F64).unwrap();
        let out = cfg
            .loss(&GrpoInputs {
                logp: logp.as_tensor(),
                old_logp: Some(&old),
                ref_logp: Some(&r),
                sampler_logp: None,
                mask: &mask,
                advantages: &adv,
                grad_accum: g["params"]["grad_accum"].as_u64().unwrap() as usize,
                num_items_in_batch: n.to_scalar::<f64>().unwrap(),
            })
            .unwrap();
        (out, logp)
    }

    const CASES: [(&str, LossType); 4] = [
        ("grpo", LossType::Grpo),
        ("bnpo", LossType::Bnpo),
        ("dr_grpo", LossType::DrGrpo),
        ("dapo", LossType::Dapo),
    ];

    #[test]
    fn every_golden_loss_and_metric_in_f64_and_f32() {
        let g = golden();
        let mut checked = 0;
        for dtype in [DType::F64, DType::F32] {
            for (name, lt) in CASES {
                for (lname, level) in [("token", IsLevel::Token), ("sequence", IsLevel::Sequence)] {
                    let want = &g["loss"][format!("{name}/{lname}")];
                    let (out, _) = run(&g, &config(&g, lt, level), dtype);
                    let got = [
                        ("loss", scalar(&out.loss).unwrap()),
                        ("kl", out.kl),
                        ("clip_ratio/low_mean", out.clip_low),
                        ("clip_ratio/high_mean", out.clip_high),
                        ("clip_ratio/region_mean", out.clip_region),
                    ];
                    for (k, v) in got {
                        let w = want[k]
                            .as_f64()
                            .unwrap_or_else(|| panic!("{name}/{lname} {k}"));
                        assert!(
                            (v - w).abs() < 1e-6,
                            "{dtype:?} {name}/{lname} {k}: {v} vs {w}"
                        );
                        checked += 1;
                    }
                }
            }
        }
        assert_eq!(checked, 2 * 8 * 5);
    }

    #[test]
    fn golden_gradient_through_autograd() {
        let g = golden();
        let want = mat(&g["grad_logp_grpo_token"], DType::F64);
        for dtype in [DType::F64, DType::F32] {
            let (out, logp) = run(&g, &config(&g, LossType::Grpo, IsLevel::Token), dtype);
            let grads = out.loss.backward().unwrap();
            let got = grads
                .get(logp.as_tensor())
                .unwrap()
                .to_dtype(DType::F64)
                .unwrap();
            let d = (got - &want).unwrap().abs().unwrap().max_all().unwrap();
            let d = d.to_scalar::<f64>().unwrap();
            assert!(d < 1e-6, "{dtype:?}: max |Δgrad| {d}");
        }
    }

    #[test]
    fn delta_caps_the_unclipped_ratio() {
        let g = golden();
        let mut cfg = config(&g, LossType::Grpo, IsLevel::Token);
        cfg.beta = 0.0;
        let (plain, _) = run(&g, &cfg, DType::F64);
        cfg.delta = Some(1.3);
        // Row 1 has A < 0 and ratio e^0.4 ≈ 1.49 on its first token: unclipped by ε, so its
        // loss term −min(r·A, clip(r)·A) = −r·A drops to −1.3·A with δ = 1.3.
        let (capped, _) = run(&g, &cfg, DType::F64);
        let a1 = g["advantages"]["group"][1].as_f64().unwrap();
        let r = (0.4f64).exp();
        let want = scalar(&plain.loss).unwrap() - (-r * a1 + 1.3 * a1) / 2.0 / 6.0;
        let got = scalar(&capped.loss).unwrap();
        assert!((got - want).abs() < 1e-9, "{got} vs {want}");
    }

    #[test]
    fn truncated_importance_sampling_caps_or_masks() {
        let dev = Device::Cpu;
        let logp = Tensor::new(&[[-1.0f64, -1.0]], &dev).unwrap();
        let sampler = Tensor::new(&[[-1.0f64, -3.0]], &dev).unwrap();
        let mask = Tensor::new(&[[1.0f64, 1.0]], &dev).unwrap();
        let adv = Tensor::new(&[1.0f64], &dev).unwrap();
        let mut cfg = GrpoConfig {
            loss_type: LossType::Bnpo,
            tis_cap: Some(2.0),
            ..GrpoConfig::default()
        };
        let inputs = GrpoInputs {
            logp: &logp,
            old_logp: None,
            ref_logp: None,
            sampler_logp: Some(&sampler),
            mask: &mask,
            advantages: &adv,
            grad_accum: 1,
            num_items_in_batch: 2.0,
        };
        // Ratios exp(0) = 1 and exp(2) ≈ 7.4 → weights 1 and 2 (cap) or 1 and 0 (mask).
        let out = cfg.loss(&inputs).unwrap();
        assert!((scalar(&out.loss).unwrap() - (-(1.0 + 2.0) / 2.0)).abs() < 1e-12);
        assert_eq!(out.tis_clipped, 0.5);
        cfg.tis_mode = TisMode::Mask;
        let out = cfg.loss(&inputs).unwrap();
        assert!((scalar(&out.loss).unwrap() - (-0.5)).abs() < 1e-12);
    }

    #[test]
    fn validation_names_the_option() {
        let mut c = GrpoConfig::default();
        assert!(c.validate().is_ok());
        c.delta = Some(1.1);
        assert!(c.validate().unwrap_err().starts_with("delta"));
        c.delta = None;
        c.epsilon = 1.5;
        assert!(c.validate().unwrap_err().starts_with("epsilon"));
    }
}
