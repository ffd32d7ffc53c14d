//! AdamW with state the trainer can checkpoint (candle's keeps its moments private), clipping
//! by global norm, and the learning-rate schedules of `transformers` (constant, warmup then
//! linear or cosine decay).

use std::collections::HashMap;

use candle_core::backprop::GradStore;
use candle_core::{DType, Result, Tensor, Var};
use serde::{Deserialize, Serialize};

/// AdamW hyper-parameters (PyTorch's defaults but for the learning rate).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AdamWConfig {
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
}

impl Default for AdamWConfig {
    fn default() -> Self {
        AdamWConfig {
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.0,
        }
    }
}

/// PyTorch's AdamW (decoupled weight decay, bias-corrected moments) over named `Var`s.
pub struct AdamW {
    pub cfg: AdamWConfig,
    vars: Vec<(String, Var)>,
    /// First and second moments by parameter name.
    m: Vec<Tensor>,
    v: Vec<Tensor>,
    /// Steps taken.
    pub t: u64,
}

impl AdamW {
    /// `vars` sorted by name (the order of the state).
    pub fn new(mut vars: Vec<(String, Var)>, cfg: AdamWConfig) -> Result<AdamW> {
        vars.sort_by(|a, b| a.0.cmp(&b.0));
        let m = vars
            .iter()
            .map(|(_, v)| v.as_tensor().zeros_like())
            .collect::<Result<Vec<_>>>()?;
        let v = m.clone();
        Ok(AdamW {
            cfg,
            vars,
            m,
            v,
            t: 0,
        })
    }

    pub fn vars(&self) -> &[(String, Var)] {
        &self.vars
    }

    /// One update with learning rate `lr` from the gradients in `grads` (a parameter without a
    /// gradient is left alone, as PyTorch does).
    pub fn step(&mut self, grads: &HashMap<String, Tensor>, lr: f64) -> Result<()> {
        self.t += 1;
        let c = &self.cfg;
        let bc1 = 1.0 - c.beta1.powi(self.t as i32);
        let bc2 = 1.0 - c.beta2.powi(self.t as i32);
        for (i, (name, var)) in self.vars.iter().enumerate() {
            let Some(g) = grads.get(name) else { continue };
            let p = var.as_tensor();
            let decayed = (p * (1.0 - lr * c.weight_decay))?;
            self.m[i] = ((&self.m[i] * c.beta1)? + (g * (1.0 - c.beta1))?)?;
            self.v[i] = ((&self.v[i] * c.beta2)? + (g.sqr()? * (1.0 - c.beta2))?)?;
            let denom = ((&self.v[i] / bc2)?.sqrt()? + c.eps)?;
            let upd = ((&self.m[i] / bc1)?.div(&denom)? * lr)?;
            var.set(&(decayed - upd)?)?;
        }
        Ok(())
    }

    /// The moments as named tensors (`exp_avg.NAME`, `exp_avg_sq.NAME`) for a checkpoint.
    pub fn state_tensors(&self) -> Vec<(String, Tensor)> {
        let mut out = Vec::new();
        for (i, (name, _)) in self.vars.iter().enumerate() {
            out.push((format!("exp_avg.{name}"), self.m[i].clone()));
            out.push((format!("exp_avg_sq.{name}"), self.v[i].clone()));
        }
        out
    }

    /// Restores moments saved by [`AdamW::state_tensors`] and the step count.
    pub fn load_state(
        &mut self,
        tensors: &HashMap<String, Tensor>,
        t: u64,
    ) -> std::result::Result<(), String> {
        for (i, (name, var)) in self.vars.iter().enumerate() {
            for (kind, slot) in [("exp_avg", &mut self.m[i]), ("exp_avg_sq", &mut self.v[i])] {
                let key = format!("{kind}.{name}");
                let s = tensors
                    .get(&key)
                    .ok_or_else(|| format!("optimizer state has no {key}"))?;
                if s.dims() != var.as_tensor().dims() {
                    return Err(format!(
                        "optimizer state {key} has shape {:?}, the adapter {:?}",
                        s.dims(),
                        var.as_tensor().dims()
                    ));
                }
                *slot = s
                    .to_device(var.as_tensor().device())
                    .and_then(|s| s.to_dtype(var.as_tensor().dtype()))
                    .map_err(|e| e.to_string())?;
            }
        }
        self.t = t;
        Ok(())
    }
}

/// Named gradients of `vars` from a backward pass (zeros where a parameter got none).
pub fn named_grads(vars: &[(String, Var)], store: &GradStore) -> Result<HashMap<String, Tensor>> {
    vars.iter()
        .map(|(n, v)| {
            let g = match store.get(v.as_tensor()) {
                Some(g) => g.clone(),
                None => v.as_tensor().zeros_like()?,
            };
            Ok((n.clone(), g))
        })
        .collect()
}

/// Adds `more` into `acc` (gradient accumulation).
pub fn accumulate(acc: &mut HashMap<String, Tensor>, more: HashMap<String, Tensor>) -> Result<()> {
    for (n, g) in more {
        let sum = match acc.remove(&n) {
            Some(a) => (a + g)?,
            None => g,
        };
        acc.insert(n, sum);
    }
    Ok(())
}

/// `torch.nn.utils.clip_grad_norm_`: the global L2 norm of all gradients, and the gradients
/// scaled by max_norm / (norm + 1e-6) when that is below 1. Returns the norm before clipping.
pub fn clip_grad_norm(grads: &mut HashMap<String, Tensor>, max_norm: f64) -> Result<f64> {
    let mut sq = 0.0f64;
    for g in grads.values() {
        sq += g
            .to_dtype(DType::F64)?
            .sqr()?
            .sum_all()?
            .to_scalar::<f64>()?;
    }
    let norm = sq.sqrt();
    let coef = max_norm / (norm + 1e-6);
    if max_norm > 0.0 && coef < 1.0 {
        for g in grads.values_mut() {
            *g = (&*g * coef)?;
        }
    }
    Ok(norm)
}

/// The learning-rate schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Schedule {
    /// Warmup, then constant.
    #[default]
    Constant,
    /// Warmup, then linear decay to 0 at the last step.
    Linear,
    /// Warmup, then half a cosine down to 0 at the last step.
    Cosine,
}

impl Schedule {
    /// The learning rate of optimizer step `step` (0-based) of `total`, as `transformers`'
    /// `get_{constant,linear,cosine}_schedule_with_warmup` compute it.
    pub fn lr(self, base: f64, step: u64, warmup: u64, total: u64) -> f64 {
        let (s, w, n) = (step as f64, warmup as f64, total as f64);
        if step < warmup {
            return base * s / w.max(1.0);
        }
        let factor = match self {
            Schedule::Constant => 1.0,
            Schedule::Linear => ((n - s) / (n - w).max(1.0)).max(0.0),
            Schedule::Cosine => {
                let progress = (s - w) / (n - w).max(1.0);
                (0.5 * (1.0 + (std::f64::consts::PI * progress).cos())).max(0.0)
            }
        };
        base * factor
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    #[test]
    fn adamw_matches_hand_computed_steps() {
        let dev = Device::Cpu;
        let p = Var::from_tensor(&Tensor::new(&[1.0f64, -2.0], &dev).unwrap()).unwrap();
        let cfg = AdamWConfig {
            weight_decay: 0.1,
            ..AdamWConfig::default()
        };
        let mut opt = AdamW::new(vec![("p".into(), p.clone())], cfg).unwrap();
        let g1 = Tensor::new(&[0.5f64, -1.0], &dev).unwrap();
        let g2 = Tensor::new(&[-0.25f64, 2.0], &dev).unwrap();
        let lr = 0.01;
        // By hand (PyTorch AdamW): p ← p(1 − lr·wd) − lr·m̂/(√v̂ + eps).
        let mut want = [1.0f64, -2.0];
        let (mut m, mut v) = ([0.0f64; 2], [0.0f64; 2]);
        for (t, g) in [[0.5f64, -1.0], [-0.25, 2.0]].iter().enumerate() {
            for i in 0..2 {
                want[i] *= 1.0 - lr * 0.1;
                m[i] = 0.9 * m[i] + 0.1 * g[i];
                v[i] = 0.999 * v[i] + 0.001 * g[i] * g[i];
                let mh = m[i] / (1.0 - 0.9f64.powi(t as i32 + 1));
                let vh = v[i] / (1.0 - 0.999f64.powi(t as i32 + 1));
                want[i] -= lr * mh / (vh.sqrt() + 1e-8);
            }
        }
        for g in [g1, g2] {
            opt.step(&HashMap::from([("p".to_string(), g)]), lr)
                .unwrap();
        }
        let got = p.as_tensor().to_vec1::<f64>().unwrap();
        for i in 0..2 {
            assert!((got[i] - want[i]).abs() < 1e-12, "{got:?} vs {want:?}");
        }
        // The first step moves each parameter by ≈ lr (Adam's sign-like first step).
        assert!((1.0 - got[0]).abs() > 0.0);
    }

    #[test]
    fn adamw_state_round_trips() {
        let dev = Device::Cpu;
        let mk = || Var::from_tensor(&Tensor::new(&[1.0f32, 2.0], &dev).unwrap()).unwrap();
        let (a, b) = (mk(), mk());
        let mut oa = AdamW::new(vec![("x".into(), a.clone())], AdamWConfig::default()).unwrap();
        let g = HashMap::from([("x".to_string(), Tensor::new(&[0.3f32, -0.1], &dev).unwrap())]);
        oa.step(&g, 0.1).unwrap();
        let mut ob = AdamW::new(vec![("x".into(), b.clone())], AdamWConfig::default()).unwrap();
        b.set(a.as_tensor()).unwrap();
        let state: HashMap<String, Tensor> = oa.state_tensors().into_iter().collect();
        ob.load_state(&state, oa.t).unwrap();
        oa.step(&g, 0.1).unwrap();
        ob.step(&g, 0.1).unwrap();
        assert_eq!(
            a.as_tensor().to_vec1::<f32>().unwrap(),
            b.as_tensor().to_vec1::<f32>().unwrap()
        );
        let e = ob.load_state(&HashMap::new(), 1).unwrap_err();
        assert_eq!(e, "optimizer state has no exp_avg.x");
    }

    #[test]
    fn clipping_scales_to_the_global_norm() {
        let dev = Device::Cpu;
        let mut g = HashMap::from([
            ("a".to_string(), Tensor::new(&[3.0f32], &dev).unwrap()),
            ("b".to_string(), Tensor::new(&[0.0f32, 4.0], &dev).unwrap()),
        ]);
        let norm = clip_grad_norm(&mut g, 1.0).unwrap();
        assert!((norm - 5.0).abs() < 1e-9);
        let a = g["a"].to_vec1::<f32>().unwrap()[0] as f64;
        assert!((a - 3.0 / (5.0 + 1e-6)).abs() < 1e-6);
        let norm2 = clip_grad_norm(&mut g, 10.0).unwrap();
        assert!((norm2 - 1.0).abs() < 1e-5);
        assert!((g["a"].to_vec1::<f32>().unwrap()[0] as f64 - a).abs() < 1e-9);
    }

    #[test]
    fn schedules_follow_transformers() {
        let s = Schedule::Linear;
        assert_eq!(s.lr(1.0, 0, 10, 110), 0.0);
        assert_eq!(s.lr(1.0, 5, 10, 110), 0.5);
        assert_eq!(s.lr(1.0, 10, 10, 110), 1.0);
        assert_eq!(s.lr(1.0, 60, 10, 110), 0.5);
        assert_eq!(s.lr(1.0, 110, 10, 110), 0.0);
        let c = Schedule::Cosine;
        assert!((c.lr(2.0, 60, 10, 110) - 1.0).abs() < 1e-12);
        assert!(
            (c.lr(2.0, 35, 10, 110) - (1.0 + (std::f64::consts::PI / 4.0).cos())).abs() < 1e-12
        );
        assert_eq!(Schedule::Constant.lr(3.0, 1000, 0, 10), 3.0);
        assert_eq!(Schedule::Constant.lr(3.0, 1, 2, 10), 1.5);
    }
}
