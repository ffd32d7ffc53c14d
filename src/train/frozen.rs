//! `x · Wᵀ` for a frozen weight W (a base projection, the output head) as one autograd op whose
//! backward pass gives the input's gradient alone.
//!
//! Why: candle's matmul backward computes the gradient of *both* operands whether or not
//! anything asked for it, and keeps the gradient of a leaf that is not a `Var` to the end of
//! `backward`. For LoRA training that is a W-shaped gradient for every base weight — as many
//! FLOPs as the input's gradient, a third of the backward matmuls, and a second copy of the
//! model's weights in memory (2 GB for a 0.5B model in f32) — all thrown away.

use std::sync::Arc;

use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, CudaStorage, CustomOp1, Layout, Result, Shape, Storage, Tensor};

/// The op: holds W `[out, in]`; its input is `[rows, in]`, its output `[rows, out]`.
struct FrozenMatmul {
    w: Tensor,
}

impl FrozenMatmul {
    /// `x · Wᵀ` on one backend's storage; `w` is None when the weight lives elsewhere.
    fn apply<S: BackendStorage>(
        &self,
        x: &S,
        xl: &Layout,
        w: Option<&S>,
        wl: &Layout,
    ) -> Result<(S, Shape)> {
        let Some(w) = w else {
            candle_core::bail!("frozen matmul: the input and the weight are on different devices")
        };
        let (m, k) = xl.shape().dims2()?;
        let (n, k2) = wl.shape().dims2()?;
        if k != k2 {
            candle_core::bail!("frozen matmul: input has {k} columns, the weight {k2}");
        }
        let y = x.matmul(w, (1, m, n, k), xl, &wl.transpose(0, 1)?)?;
        Ok((y, Shape::from((m, n))))
    }
}

impl CustomOp1 for FrozenMatmul {
    fn name(&self) -> &'static str {
        "frozen-matmul"
    }

    fn cpu_fwd(&self, x: &CpuStorage, xl: &Layout) -> Result<(CpuStorage, Shape)> {
        let (ws, wl) = self.w.storage_and_layout();
        let w = match &*ws {
            Storage::Cpu(w) => Some(w),
            _ => None,
        };
        self.apply(x, xl, w, wl)
    }

    fn cuda_fwd(&self, x: &CudaStorage, xl: &Layout) -> Result<(CudaStorage, Shape)> {
        let (ws, wl) = self.w.storage_and_layout();
        let w = match &*ws {
            Storage::Cuda(w) => Some(w),
            _ => None,
        };
        self.apply(x, xl, w, wl)
    }

    fn bwd(&self, _x: &Tensor, _y: &Tensor, grad: &Tensor) -> Result<Option<Tensor>> {
        // d(x·Wᵀ)/dx = grad · W; W gets nothing.
        Ok(Some(grad.matmul(&self.w)?))
    }
}

/// `x · Wᵀ` for `x` `[rows, in]` and a weight `w` `[out, in]` that is not trained: the same
/// values as `x.matmul(&w.t())`, with a backward pass that never computes W's gradient. When
/// nothing upstream of `x` is trained, it is the plain matmul.
pub fn matmul_frozen_t(x: &Tensor, w: &Tensor) -> Result<Tensor> {
    if !x.track_op() {
        return x.matmul(&w.t()?);
    }
    x.contiguous()?
        .apply_op1_arc(Arc::new(Box::new(FrozenMatmul { w: w.clone() })))
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Var};

    #[test]
    fn same_values_and_input_gradient_as_matmul_and_no_weight_gradient() {
        let dev = Device::Cpu;
        let x0 = Tensor::new(&[[1f32, -2.0, 0.5], [0.25, 3.0, -1.0]], &dev).unwrap();
        let w = Tensor::new(&[[0.5f32, 1.0, -1.5], [2.0, 0.0, 1.0]], &dev).unwrap();
        let x = Var::from_tensor(&x0).unwrap();
        // A non-linear loss, so the gradient depends on the values through the op.
        let loss = |y: Tensor| y.sqr().unwrap().sum_all().unwrap();

        let plain = x.as_tensor().matmul(&w.t().unwrap()).unwrap();
        let frozen = matmul_frozen_t(x.as_tensor(), &w).unwrap();
        assert_eq!(
            plain.to_vec2::<f32>().unwrap(),
            frozen.to_vec2::<f32>().unwrap()
        );

        let g_plain = loss(plain).backward().unwrap();
        let g_frozen = loss(frozen).backward().unwrap();
        assert_eq!(
            g_plain
                .get(x.as_tensor())
                .unwrap()
                .to_vec2::<f32>()
                .unwrap(),
            g_frozen
                .get(x.as_tensor())
                .unwrap()
                .to_vec2::<f32>()
                .unwrap()
        );
        // candle's matmul computes and keeps a gradient for Wᵀ (`[3, 2]`, stored under the
        // transposed view's id); the frozen op keeps the input's alone.
        let weight_shaped = |g: &candle_core::backprop::GradStore| {
            g.get_ids()
                .filter(|id| g.get_id(**id).unwrap().dims() == [3, 2])
                .count()
        };
        assert_eq!(weight_shaped(&g_plain), 1);
        assert_eq!(weight_shaped(&g_frozen), 0);
        assert_eq!(g_frozen.get_ids().count(), 1);
    }

    #[test]
    fn untracked_input_takes_the_plain_path_and_bad_shapes_are_errors() {
        let dev = Device::Cpu;
        let x = Tensor::ones((4, 3), candle_core::DType::F32, &dev).unwrap();
        let w = Tensor::ones((2, 3), candle_core::DType::F32, &dev).unwrap();
        assert_eq!(matmul_frozen_t(&x, &w).unwrap().dims(), &[4, 2]);
        let v = Var::from_tensor(&x).unwrap();
        let bad = Tensor::ones((2, 5), candle_core::DType::F32, &dev).unwrap();
        let e = matmul_frozen_t(v.as_tensor(), &bad)
            .unwrap_err()
            .to_string();
        assert!(e.contains("input has 3 columns, the weight 5"), "{e}");
    }
}
