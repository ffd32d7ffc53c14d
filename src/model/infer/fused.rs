//! Fused CPU kernels for the prefill, where candle runs them as several passes over large
//! tensors: the causal softmax of attention scores (candle: a broadcast add of a mask, then a
//! softmax that also exponentiates the masked half) and SwiGLU's `silu(gate) * up` (candle: a
//! single-threaded unary pass, then a multiply). On the 0.5B judge prompt these passes took
//! about a sixth of the prefill (experiments/local-judge-speed/NOTEBOOK.md). A third, the
//! attention's weighted sum of values, is here for exactness rather than speed: summed key by
//! key, a query's output does not depend on the matrix it was computed in ([`causal_values`]).
//! Other devices and dtypes keep candle's ops, which these match (unit tests below).

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
    if s == 1 {
        // One query sees every key.
        return candle_nn::ops::softmax_last_dim(&att);
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

/// `att · v` for attention probabilities from [`causal_softmax`] (`att`: `[1, kv_heads, rows,
/// kv_len]`, rows ordered as there; `v`: `[1, kv_heads, kv_len, head_dim]`): each row sums its
/// visible values one key after another, in key order. candle's matmul blocks the key axis by
/// a length that depends on the whole matrix (the number of keys, of rows, and the machine's
/// caches), so the same query got other roundings alone than in a longer chunk or after a
/// prefix prefilled apart; on the 0.5B model that moved a question's probabilities by 0.007.
/// Summed this way a row's output depends on its own keys only, and the masked half is skipped.
pub(crate) fn causal_values(att: &Tensor, v: &Tensor, s: usize, pos: usize) -> Result<Tensor> {
    let fused = att.device().is_cpu()
        && att.dtype() == DType::F32
        && v.dtype() == DType::F32
        && att.is_contiguous();
    if !fused {
        return att.matmul(v);
    }
    att.apply_op2_no_bwd(&v.contiguous()?, &CausalValues { s, pos })
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
        let softmax = |(r, row): (usize, &mut [f32])| {
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
        };
        let data = &mut data[start..end];
        // A decode step's few rows run on the calling thread (see `SiluMul`).
        if data.len() <= 1 << 16 {
            data.chunks_mut(kv_len).enumerate().for_each(softmax);
        } else {
            data.par_chunks_mut(kv_len).enumerate().for_each(softmax);
        }
        Ok(())
    }
}

struct CausalValues {
    s: usize,
    pos: usize,
}

impl CustomOp2 for CausalValues {
    fn name(&self) -> &'static str {
        "gavel-causal-values"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let (att, v) = f32_pair("causal values", s1, l1, s2, l2)?;
        let (&[b, heads, rows, keys], &[vb, vheads, vkeys, d]) = (l1.dims(), l2.dims()) else {
            candle_core::bail!("causal values: 4-D inputs only");
        };
        if b != 1 || vb != 1 || heads != vheads || keys != vkeys || keys != self.pos + self.s {
            candle_core::bail!(
                "causal values: scores {:?} and values {:?} for {} queries after {}",
                l1.dims(),
                l2.dims(),
                self.s,
                self.pos
            );
        }
        let mut out = vec![0f32; heads * rows * d];
        let row = |(i, o): (usize, &mut [f32])| {
            let (h, r) = (i / rows, i % rows);
            let p = &att[i * keys..(i + 1) * keys];
            let vh = &v[h * keys * d..(h + 1) * keys * d];
            for (j, &pj) in p[..self.pos + r % self.s + 1].iter().enumerate() {
                for (o, &x) in o.iter_mut().zip(&vh[j * d..(j + 1) * d]) {
                    *o += pj * x;
                }
            }
        };
        // A decode step's few rows run on the calling thread (see `SiluMul`).
        if heads * rows * keys * d <= 1 << 16 {
            out.chunks_mut(d).enumerate().for_each(row);
        } else {
            out.par_chunks_mut(d).enumerate().for_each(row);
        }
        Ok((CpuStorage::F32(out), Shape::from((1, heads, rows, d))))
    }
}

/// The two inputs of a fused op as f32 slices, refused unless both are f32 and contiguous.
fn f32_pair<'a>(
    op: &str,
    s1: &'a CpuStorage,
    l1: &Layout,
    s2: &'a CpuStorage,
    l2: &Layout,
) -> Result<(&'a [f32], &'a [f32])> {
    let (CpuStorage::F32(a), CpuStorage::F32(b)) = (s1, s2) else {
        candle_core::bail!("{op}: f32 only");
    };
    let (Some((a0, a1)), Some((b0, b1))) = (l1.contiguous_offsets(), l2.contiguous_offsets())
    else {
        candle_core::bail!("{op}: contiguous inputs only");
    };
    Ok((&a[a0..a1], &b[b0..b1]))
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
        let (g, u) = f32_pair("silu-mul", s1, l1, s2, l2)?;
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

    /// The weighted values are the matmul's, and a query's row is the same whether it ran in
    /// a chunk of queries or alone after the keys before it (bit for bit).
    #[test]
    fn causal_values_match_the_matmul_and_do_not_depend_on_the_chunk() {
        let (heads, group, d) = (2, 3, 16);
        let (s, pos) = (5, 600);
        let n = pos + s;
        let scores = Tensor::randn(0f32, 3.0, (1, heads, group * s, n), &Device::Cpu).unwrap();
        let v = Tensor::randn(0f32, 1.0, (1, heads, n, d), &Device::Cpu).unwrap();
        let att = causal_softmax(scores.copy().unwrap(), s, pos).unwrap();
        let got = causal_values(&att, &v, s, pos).unwrap();
        let want = att.matmul(&v).unwrap();
        assert_eq!(got.dims(), want.dims());
        assert!(testkit::max_abs_diff(&got, &want) < 1e-5);
        // The chunk's third query again, alone after its 602 keys.
        let q = 2;
        let rows: Vec<Tensor> = (0..group)
            .map(|g| scores.narrow(2, g * s + q, 1).unwrap())
            .collect();
        let one = Tensor::cat(&rows, 2)
            .unwrap()
            .narrow(3, 0, pos + q + 1)
            .unwrap();
        let one = causal_softmax(one.contiguous().unwrap(), 1, pos + q).unwrap();
        let alone = causal_values(&one, &v.narrow(2, 0, pos + q + 1).unwrap(), 1, pos + q).unwrap();
        for g in 0..group {
            let a = alone.narrow(2, g, 1).unwrap().flatten_all().unwrap();
            let c = got.narrow(2, g * s + q, 1).unwrap().flatten_all().unwrap();
            assert_eq!(a.to_vec1::<f32>().unwrap(), c.to_vec1::<f32>().unwrap());
        }
        let e = causal_values(&att, &v.narrow(2, 0, n - 1).unwrap(), s, pos).unwrap_err();
        assert!(e.to_string().contains("for 5 queries after 600"), "{e}");
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
