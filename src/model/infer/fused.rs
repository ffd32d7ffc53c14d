//! Two fused CPU kernels for the prefill, where candle runs them as several passes over large
//! tensors: the causal softmax of attention scores (candle: a broadcast add of a mask, then a
//! softmax that also exponentiates the masked half) and SwiGLU's `silu(gate) * up` (candle: a
//! single-threaded unary pass, then a multiply). On the 0.5B judge prompt these passes took
//! about a sixth of the prefill (BENCHMARKS.md, "Local judge"). Other devices and dtypes keep candle's
//! ops, which these match (unit tests below).

use candle_core::{CpuStorage, CustomOp2, DType, InplaceOp1, Layout, Result, Shape, Tensor};
use rayon::prelude::*;

/// Softmax over the last axis of `att` (`[.., rows, kv_len]`, rows ordered `(.., s)` for `s`
/// queries at positions `pos..pos + s`), each row over the keys its query may see: row `r` is
/// query `r % s`, which sees keys `0..=pos + r % s`; the rest get probability 0.
pub(crate) fn causal_softmax(att: Tensor, s: usize, pos: usize) -> Result<Tensor> {
    if att.device().is_cpu() && att.dtype() == DType::F32 && att.is_contiguous() {
        att.inplace_op1(&CausalSoftmax { s, pos })?;
        return Ok(att);
    }
    let kv_len = att.dim(candle_core::D::Minus1)?;
    let mask = causal_mask(s, pos, att.dtype(), att.device())?;
    let rows = att.elem_count() / kv_len;
    let att = att
        .reshape((rows / s, s, kv_len))?
        .broadcast_add(&mask)?
        .reshape(att.shape())?;
    candle_nn::ops::softmax_last_dim(&att)
}

/// `silu(gate) * up`, elementwise.
pub(crate) fn silu_mul(gate: &Tensor, up: &Tensor) -> Result<Tensor> {
    let fused = gate.device().is_cpu()
        && gate.dtype() == DType::F32
        && up.dtype() == DType::F32
        && gate.is_contiguous()
        && up.is_contiguous()
        && gate.shape() == up.shape();
    if fused {
        return gate.apply_op2_no_bwd(up, &SiluMul);
    }
    candle_nn::ops::silu(gate)? * up
}

/// Additive causal mask `[s, pos + s]` for `s` new positions after `pos` cached ones.
pub(crate) fn causal_mask(
    s: usize,
    pos: usize,
    dtype: DType,
    device: &candle_core::Device,
) -> Result<Tensor> {
    let n = pos + s;
    let m: Vec<f32> = (0..s)
        .flat_map(|i| (0..n).map(move |j| if j > pos + i { f32::NEG_INFINITY } else { 0.0 }))
        .collect();
    Tensor::from_vec(m, (s, n), device)?.to_dtype(dtype)
}

struct CausalSoftmax {
    s: usize,
    pos: usize,
}

impl InplaceOp1 for CausalSoftmax {
    fn name(&self) -> &'static str {
        "gavel-causal-softmax"
    }

    fn cpu_fwd(&self, storage: &mut CpuStorage, layout: &Layout) -> Result<()> {
        let CpuStorage::F32(data) = storage else {
            candle_core::bail!("causal softmax: f32 only");
        };
        let Some((start, end)) = layout.contiguous_offsets() else {
            candle_core::bail!("causal softmax: contiguous input only");
        };
        let kv_len = *layout.dims().last().unwrap_or(&0);
        if kv_len != self.pos + self.s || kv_len == 0 {
            candle_core::bail!(
                "causal softmax: {kv_len} keys for {} queries after {}",
                self.s,
                self.pos
            );
        }
        data[start..end]
            .par_chunks_mut(kv_len)
            .enumerate()
            .for_each(|(r, row)| {
                let (seen, hidden) = row.split_at_mut(self.pos + r % self.s + 1);
                let max = seen.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let mut sum = 0.0f32;
                for x in seen.iter_mut() {
                    *x = (*x - max).exp();
                    sum += *x;
                }
                let inv = 1.0 / sum;
                seen.iter_mut().for_each(|x| *x *= inv);
                hidden.fill(0.0);
            });
        Ok(())
    }
}

struct SiluMul;

impl CustomOp2 for SiluMul {
    fn name(&self) -> &'static str {
        "gavel-silu-mul"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let (CpuStorage::F32(g), CpuStorage::F32(u)) = (s1, s2) else {
            candle_core::bail!("silu-mul: f32 only");
        };
        let (Some((g0, g1)), Some((u0, u1))) = (l1.contiguous_offsets(), l2.contiguous_offsets())
        else {
            candle_core::bail!("silu-mul: contiguous inputs only");
        };
        let (g, u) = (&g[g0..g1], &u[u0..u1]);
        if g.len() != u.len() {
            candle_core::bail!("silu-mul: {} gate and {} up values", g.len(), u.len());
        }
        let silu_mul = |o: &mut [f32], g: &[f32], u: &[f32]| {
            for ((o, &g), &u) in o.iter_mut().zip(g).zip(u) {
                *o = g / (1.0 + (-g).exp()) * u;
            }
        };
        let mut out = vec![0f32; g.len()];
        // Chunks of a few pages: enough work per task, and every thread gets some. A decode
        // step's few thousand values run on the calling thread: waking rayon's threads would
        // cost more, and they would compete with candle's matmul pool.
        const CHUNK: usize = 4096;
        if g.len() <= 16 * CHUNK {
            silu_mul(&mut out, g, u);
        } else {
            out.par_chunks_mut(CHUNK)
                .zip(g.par_chunks(CHUNK).zip(u.par_chunks(CHUNK)))
                .for_each(|(o, (g, u))| silu_mul(o, g, u));
        }
        Ok((CpuStorage::F32(out), l1.shape().clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::testkit;
    use candle_core::Device;

    /// What the fused kernel replaces: candle's mask add and softmax.
    fn reference(att: &Tensor, s: usize, pos: usize) -> Tensor {
        let kv = att.dim(3).unwrap();
        let (b, h, rows) = (
            att.dim(0).unwrap(),
            att.dim(1).unwrap(),
            att.dim(2).unwrap(),
        );
        let m = causal_mask(s, pos, DType::F32, &Device::Cpu).unwrap();
        let masked = att
            .reshape((b, h, rows / s, s, kv))
            .unwrap()
            .broadcast_add(&m)
            .unwrap()
            .reshape((b, h, rows, kv))
            .unwrap();
        candle_nn::ops::softmax_last_dim(&masked).unwrap()
    }

    #[test]
    fn causal_softmax_matches_mask_then_softmax() {
        // Two kv heads, three query heads each, five new queries after seven cached positions;
        // then a first chunk (no cache) and a single decode step.
        for (s, pos) in [(5, 7), (6, 0), (1, 9)] {
            let att = Tensor::randn(0f32, 3.0, (1, 2, 3 * s, pos + s), &Device::Cpu).unwrap();
            let want = reference(&att, s, pos);
            let got = causal_softmax(att.copy().unwrap(), s, pos).unwrap();
            assert!(testkit::max_abs_diff(&got, &want) < 1e-6, "s={s} pos={pos}");
            // Future keys get exactly 0, and each row sums to 1.
            let rows = got.flatten_to(2).unwrap().to_vec2::<f32>().unwrap();
            for (r, row) in rows.iter().enumerate() {
                let seen = pos + r % s + 1;
                assert!(row[seen..].iter().all(|&x| x == 0.0));
                assert!((row.iter().sum::<f32>() - 1.0).abs() < 1e-5);
            }
        }
    }

    #[test]
    fn causal_mask_hides_the_future_only() {
        let m = causal_mask(2, 3, DType::F32, &Device::Cpu)
            .unwrap()
            .to_vec2::<f32>()
            .unwrap();
        let inf = f32::NEG_INFINITY;
        assert_eq!(m, vec![vec![0.0, 0.0, 0.0, 0.0, inf], vec![0.0; 5]]);
    }

    #[test]
    fn causal_softmax_rejects_a_wrong_key_count() {
        let att = Tensor::zeros((1, 1, 4, 5), DType::F32, &Device::Cpu).unwrap();
        let e = causal_softmax(att, 4, 2).unwrap_err().to_string();
        assert!(e.contains("5 keys for 4 queries after 2"), "{e}");
    }

    #[test]
    fn silu_mul_matches_candles_ops() {
        // A decode step's size (one thread), and a prefill's (parallel, in chunks; not a
        // multiple of the chunk).
        for rows in [3, 21] {
            let g = Tensor::randn(0f32, 4.0, (rows, 5000), &Device::Cpu).unwrap();
            let u = Tensor::randn(0f32, 1.0, (rows, 5000), &Device::Cpu).unwrap();
            let want = (candle_nn::ops::silu(&g).unwrap() * &u).unwrap();
            let got = silu_mul(&g, &u).unwrap();
            assert_eq!(got.dims(), want.dims());
            assert!(testkit::max_abs_diff(&got, &want) < 1e-5);
        }
        let g = Tensor::randn(0f32, 4.0, (3, 5000), &Device::Cpu).unwrap();
        let u = Tensor::randn(0f32, 1.0, (3, 5000), &Device::Cpu).unwrap();
        // Not contiguous: candle's ops, same result.
        let gt = g.t().unwrap();
        let ut = u.t().unwrap();
        let want = (candle_nn::ops::silu(&gt).unwrap() * &ut).unwrap();
        assert!(testkit::max_abs_diff(&silu_mul(&gt, &ut).unwrap(), &want) < 1e-6);
    }
}
