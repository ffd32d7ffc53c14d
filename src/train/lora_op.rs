//! A LoRA projection `y = x·Wᵀ + b + s·(x·Aᵀ)·Bᵀ` as one autograd op over `(x, A, B)`, for a
//! frozen W and bias b.
//!
//! Why: written as tensor ops, the projection leaves six tensors in the autograd graph until
//! the backward pass (`x·Wᵀ`, `+ b`, `x·Aᵀ`, `·Bᵀ`, `· s`, and the sum), all but `x·Aᵀ` the
//! output's size: for the MLP of a 0.5B model (4,864 wide) that is most of what a training pass
//! holds, and each is a fresh allocation the kernel zeroes page by page. The op keeps its
//! inputs and its output alone and computes the three gradients from them (recomputing the
//! `[rows, r]` product `x·Aᵀ`). The forward pass runs the very kernels of the tensor ops in
//! the same order, so its output is bit-identical; the gradients are the same products, summed
//! in another order (equal to rounding; tested).

use candle_core::backend::BackendStorage;
use candle_core::op::Add;
use candle_core::{CpuStorage, CudaStorage, CustomOp3, Layout, Result, Shape, Storage, Tensor};

/// W's storage and layout, and the bias's when there is one, on the input's device.
type Frozen<'a, S> = (&'a S, &'a Layout, Option<(&'a S, &'a Layout)>);

/// The op: holds the frozen W `[out, in]`, its bias `[out]` and the adapter scale; its inputs
/// are x `[rows, in]`, A `[r, in]` and B `[out, r]`, its output `[rows, out]`.
struct LoraMatmul {
    w: Tensor,
    bias: Option<Tensor>,
    scale: f64,
}

impl LoraMatmul {
    /// The forward pass on one backend's storage: the ops of [`super::lora::Linear::forward`]
    /// written with tensors, one after the other. `frozen` is W's and the bias's storage, None
    /// when they live on another device.
    fn apply<S: BackendStorage>(
        &self,
        (x, xl): (&S, &Layout),
        (a, al): (&S, &Layout),
        (b, bl): (&S, &Layout),
        frozen: Option<Frozen<'_, S>>,
    ) -> Result<(S, Shape)> {
        let Some((w, wl, bias)) = frozen else {
            candle_core::bail!(
                "lora matmul: the input and the frozen weight are on different devices"
            )
        };
        let (m, k) = xl.shape().dims2()?;
        let (n, k2) = wl.shape().dims2()?;
        let (r, k3) = al.shape().dims2()?;
        let (n2, r2) = bl.shape().dims2()?;
        if k != k2 || k != k3 || n != n2 || r != r2 {
            candle_core::bail!(
                "lora matmul: input [{m}, {k}], weight [{n}, {k2}], A [{r}, {k3}], B [{n2}, {r2}]"
            );
        }
        let out = Layout::contiguous((m, n));
        let mut y = x.matmul(w, (1, m, n, k), xl, &wl.transpose(0, 1)?)?;
        if let Some((bias, biasl)) = bias {
            y = y.binary_impl::<Add>(bias, &out, &biasl.broadcast_as((m, n))?)?;
        }
        let xa = x.matmul(a, (1, m, r, k), xl, &al.transpose(0, 1)?)?;
        let xal = Layout::contiguous((m, r));
        let delta = xa.matmul(b, (1, m, n, r), &xal, &bl.transpose(0, 1)?)?;
        let delta = delta.affine(&out, self.scale, 0.0)?;
        Ok((
            y.binary_impl::<Add>(&delta, &out, &out)?,
            Shape::from((m, n)),
        ))
    }
}

impl CustomOp3 for LoraMatmul {
    fn name(&self) -> &'static str {
        "lora-matmul"
    }

    fn cpu_fwd(
        &self,
        x: &CpuStorage,
        xl: &Layout,
        a: &CpuStorage,
        al: &Layout,
        b: &CpuStorage,
        bl: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let (ws, wl) = self.w.storage_and_layout();
        let bias = self.bias.as_ref().map(|b| b.storage_and_layout());
        let frozen = match (&*ws, bias.as_ref().map(|(s, l)| (&**s, *l))) {
            (Storage::Cpu(w), None) => Some((w, wl, None)),
            (Storage::Cpu(w), Some((Storage::Cpu(b), l))) => Some((w, wl, Some((b, l)))),
            _ => None,
        };
        self.apply((x, xl), (a, al), (b, bl), frozen)
    }

    fn cuda_fwd(
        &self,
        x: &CudaStorage,
        xl: &Layout,
        a: &CudaStorage,
        al: &Layout,
        b: &CudaStorage,
        bl: &Layout,
    ) -> Result<(CudaStorage, Shape)> {
        let (ws, wl) = self.w.storage_and_layout();
        let bias = self.bias.as_ref().map(|b| b.storage_and_layout());
        let frozen = match (&*ws, bias.as_ref().map(|(s, l)| (&**s, *l))) {
            (Storage::Cuda(w), None) => Some((w, wl, None)),
            (Storage::Cuda(w), Some((Storage::Cuda(b), l))) => Some((w, wl, Some((b, l)))),
            _ => None,
        };
        self.apply((x, xl), (a, al), (b, bl), frozen)
    }

    fn bwd(
        &self,
        x: &Tensor,
        a: &Tensor,
        b: &Tensor,
        _y: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        // The chain rule of the tensor ops, in their order: the scaled delta's gradient
        // first, then each matmul's operands. W and the bias get nothing. Detached: a product
        // of a tracked input would keep its operands (`grad · s` is the output's size) alive
        // for as long as the gradient is kept, to the end of the backward pass for A and B.
        let (x, a, b) = (x.detach(), a.detach(), b.detach());
        let gd = (grad * self.scale)?;
        let xa = x.matmul(&a.t()?)?;
        let gxa = gd.matmul(&b)?;
        let gb = xa.t()?.matmul(&gd)?.t()?;
        let ga = x.t()?.matmul(&gxa)?.t()?;
        let gx = (grad.matmul(&self.w)? + gxa.matmul(&a)?)?;
        Ok((Some(gx), Some(ga), Some(gb)))
    }
}

/// `x·Wᵀ + bias + scale·(x·Aᵀ)·Bᵀ` for `x` `[rows, in]`, a frozen `w` `[out, in]` and `bias`
/// `[out]`, and the adapter's `a` `[r, in]` and `b` `[out, r]`: the values of those tensor
/// ops, with a backward pass that keeps only the inputs and the output alive.
pub fn lora_matmul(
    x: &Tensor,
    w: &Tensor,
    bias: Option<&Tensor>,
    a: &Tensor,
    b: &Tensor,
    scale: f64,
) -> Result<Tensor> {
    let op = LoraMatmul {
        w: w.clone(),
        bias: bias.cloned(),
        scale,
    };
    x.contiguous()?
        .apply_op3_arc(a, b, std::sync::Arc::new(Box::new(op)))
}

#[cfg(test)]
#[path = "lora_op_tests.rs"]
mod tests;
