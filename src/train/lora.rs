//! Linear layers with optional LoRA adapters: h = Wx + b + s·B(Ax), s = α/r (or α/√r with
//! rsLoRA). A starts uniform in ±1/√in (PEFT's kaiming-uniform bound), B at zero, so a fresh
//! adapter leaves the model exactly as it was. W and b are plain tensors — candle's autograd
//! only tracks `Var`s — so gradients reach A and B and never the base weights; `Wx` is
//! [`matmul_frozen_t`], so the backward pass does not compute W's gradient either, and a
//! projection with its adapter is one op ([`lora_matmul`]) that keeps no intermediate tensor
//! for the backward pass.

use candle_core::{Result, Tensor, Var};

use super::frozen::matmul_frozen_t;
use super::lora_op::lora_matmul;
use crate::domain::rng::Rng;

pub use crate::model::adapter::{LoraConfig, TARGETS};

/// One adapter: A is `[r, in]`, B is `[out, r]` (PEFT's layout).
#[derive(Debug, Clone)]
pub struct Lora {
    pub a: Var,
    pub b: Var,
    pub scale: f64,
}

/// A projection `[out, in]` with optional bias and adapter.
#[derive(Debug, Clone)]
pub struct Linear {
    pub weight: Tensor,
    pub bias: Option<Tensor>,
    pub lora: Option<Lora>,
}

impl Linear {
    pub fn new(weight: Tensor, bias: Option<Tensor>) -> Linear {
        Linear {
            weight,
            bias,
            lora: None,
        }
    }

    /// Adds a fresh adapter (A uniform ±1/√in from `rng`, B = 0).
    pub fn add_lora(&mut self, cfg: &LoraConfig, rng: &mut Rng) -> Result<()> {
        let (out, inp) = self.weight.dims2()?;
        let bound = 1.0 / (inp as f64).sqrt();
        let a: Vec<f32> = (0..cfg.r * inp)
            .map(|_| rng.symmetric(bound) as f32)
            .collect();
        let dev = self.weight.device();
        let dtype = self.weight.dtype();
        let a = Tensor::from_vec(a, (cfg.r, inp), dev)?.to_dtype(dtype)?;
        let b = Tensor::zeros((out, cfg.r), dtype, dev)?;
        self.lora = Some(Lora {
            a: Var::from_tensor(&a)?,
            b: Var::from_tensor(&b)?,
            scale: cfg.scale(),
        });
        Ok(())
    }

    /// `x` is `[..., in]`; the result `[..., out]`. `adapters` false runs the base layer alone
    /// (the reference model of the KL term, without a second copy of the weights).
    pub fn forward(&self, x: &Tensor, adapters: bool) -> Result<Tensor> {
        let dims = x.dims().to_vec();
        let inp = *dims.last().expect("a non-scalar input");
        let rows: usize = dims[..dims.len() - 1].iter().product();
        let x2 = x.reshape((rows, inp))?;
        let y = match (adapters, &self.lora) {
            (true, Some(l)) => lora_matmul(
                &x2,
                &self.weight,
                self.bias.as_ref(),
                l.a.as_tensor(),
                l.b.as_tensor(),
                l.scale,
            )?,
            _ => {
                let y = matmul_frozen_t(&x2, &self.weight)?;
                match &self.bias {
                    Some(b) => y.broadcast_add(b)?,
                    None => y,
                }
            }
        };
        let mut out_dims = dims;
        *out_dims.last_mut().expect("non-scalar") = y.dim(1)?;
        y.reshape(out_dims)
    }

    /// W + s·BA: the merged weight.
    pub fn merged_weight(&self) -> Result<Tensor> {
        match &self.lora {
            None => Ok(self.weight.clone()),
            Some(l) => {
                let delta = l.b.as_tensor().matmul(l.a.as_tensor())?;
                self.weight.add(&(delta * l.scale)?)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    #[test]
    fn fresh_adapter_changes_nothing_and_trains_only_a_and_b() {
        let dev = Device::Cpu;
        let w = Tensor::new(&[[1f32, 2.0, 3.0], [0.5, -1.0, 0.25]], &dev).unwrap();
        let mut lin = Linear::new(w.clone(), Some(Tensor::new(&[0.1f32, -0.2], &dev).unwrap()));
        let x = Tensor::new(&[[[1f32, 0.0, -1.0], [2.0, 1.0, 0.5]]], &dev).unwrap();
        let base = lin.forward(&x, true).unwrap();
        let cfg = LoraConfig {
            r: 2,
            alpha: 4.0,
            ..LoraConfig::default()
        };
        lin.add_lora(&cfg, &mut Rng::new(1)).unwrap();
        let with = lin.forward(&x, true).unwrap();
        let d = (base - &with).unwrap().abs().unwrap().max_all().unwrap();
        assert_eq!(d.to_scalar::<f32>().unwrap(), 0.0);
        assert_eq!(with.dims(), &[1, 2, 2]);
        let a = lin
            .lora
            .as_ref()
            .unwrap()
            .a
            .as_tensor()
            .flatten_all()
            .unwrap();
        let bound = 1.0 / 3f32.sqrt();
        assert!(a.to_vec1::<f32>().unwrap().iter().all(|v| v.abs() <= bound));
        let grads = with.sum_all().unwrap().backward().unwrap();
        let l = lin.lora.as_ref().unwrap();
        // dL/dB = s·(Ax)ᵀ summed: non-zero; dL/dA = s·Bᵀ… = 0 while B = 0.
        let gb = grads.get(l.b.as_tensor()).expect("grad for B");
        assert!(
            gb.abs()
                .unwrap()
                .sum_all()
                .unwrap()
                .to_scalar::<f32>()
                .unwrap()
                > 0.0
        );
        assert!(grads.get(l.a.as_tensor()).is_some());
        assert!(grads.get(&lin.weight).is_none());
    }

    #[test]
    fn merged_weight_equals_the_adapted_forward() {
        let dev = Device::Cpu;
        let w = Tensor::new(&[[1f32, 2.0], [0.5, -1.0], [0.0, 3.0]], &dev).unwrap();
        let mut lin = Linear::new(w, None);
        let cfg = LoraConfig {
            r: 1,
            alpha: 2.0,
            use_rslora: true,
            ..LoraConfig::default()
        };
        assert_eq!(cfg.scale(), 2.0);
        lin.add_lora(&cfg, &mut Rng::new(3)).unwrap();
        let l = lin.lora.as_ref().unwrap();
        l.b.set(&Tensor::new(&[[1f32], [-2.0], [0.5]], &dev).unwrap())
            .unwrap();
        let x = Tensor::new(&[[0.3f32, -0.7]], &dev).unwrap();
        let y = lin.forward(&x, true).unwrap();
        let merged = Linear::new(lin.merged_weight().unwrap(), None);
        let y2 = merged.forward(&x, true).unwrap();
        let d = (y - y2).unwrap().abs().unwrap().max_all().unwrap();
        assert!(d.to_scalar::<f32>().unwrap() < 1e-6);
        let off = lin.forward(&x, false).unwrap();
        let base = Linear::new(lin.weight.clone(), None)
            .forward(&x, true)
            .unwrap();
        let d = (off - base).unwrap().abs().unwrap().max_all().unwrap();
        assert_eq!(d.to_scalar::<f32>().unwrap(), 0.0);
    }
}
