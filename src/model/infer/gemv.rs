//! Q8_0 and Q5_0 weights for the decode path on a CPU, with our own matrix-vector kernels.
//!
//! Decoding reads every weight once per token, so its speed is the bytes read and how fast
//! they are turned into dot products. candle 0.11 has no SIMD kernel for Q5_0 (so gavel used to
//! re-quantize Q5_0 to Q8_0 at load: 8.5 instead of 5.5 bits a weight, and seconds of load),
//! and its Q8_0 kernel converts two f16 block scales through a runtime-dispatched call per
//! block. Here the rows are unpacked once at load: block scales as f32, Q8_0 quants as `i8`,
//! Q5_0 kept at 5.5 bits (low nibbles and high bits), and the AVX2 kernels expand them in
//! registers. Activations are quantized per 32-value block to `i8`, as ggml and candle do.
//! Without AVX2 the same arithmetic runs as scalar code (the reference the tests compare with).

use candle_core::quantized::{GgmlDType, QTensor};
use rayon::prelude::*;

const BLOCK: usize = 32;

/// Weight rows one dequantization task handles: big enough that the pool's per-task cost
/// vanishes, small enough to spread a projection over all cores.
const ROWS_PER_TASK: usize = 16;

/// A weight matrix `[n, k]` (rows are output features) in one of the two formats.
#[derive(Debug)]
pub(crate) struct QuantRows {
    n: usize,
    k: usize,
    /// Per row and block: the block's scale.
    scales: Vec<f32>,
    quants: Quants,
}

#[derive(Debug)]
enum Quants {
    /// `n * k` values.
    Q8(Vec<i8>),
    /// Per block: 16 bytes of low nibbles (value `j` in the low nibble of byte `j`, value
    /// `j + 16` in its high nibble) and one `u32` of fifth bits (bit `j` for value `j`).
    Q5 { nibbles: Vec<u8>, high: Vec<u32> },
}

/// Activations quantized per block: `rows * k` values and `rows * k / 32` scales.
struct QuantizedInput {
    values: Vec<i8>,
    scales: Vec<f32>,
}

impl QuantRows {
    /// The rows of `q` when it is a 2-D Q8_0 or Q5_0 tensor on the CPU; None otherwise.
    pub fn from_qtensor(q: &QTensor) -> Option<QuantRows> {
        let [n, k] = *q.shape().dims() else {
            return None;
        };
        if !q.device().is_cpu() || k % BLOCK != 0 {
            return None;
        }
        let data = q.data().ok()?;
        let blocks = n * k / BLOCK;
        let f16_at = |b: &[u8], i: usize| half::f16::from_le_bytes([b[i], b[i + 1]]).to_f32();
        match q.dtype() {
            GgmlDType::Q8_0 => {
                const SIZE: usize = 2 + BLOCK;
                if data.len() != blocks * SIZE {
                    return None;
                }
                let mut scales = Vec::with_capacity(blocks);
                let mut values = Vec::with_capacity(n * k);
                for b in data.chunks_exact(SIZE) {
                    scales.push(f16_at(b, 0));
                    values.extend(b[2..].iter().map(|&v| v as i8));
                }
                Some(QuantRows {
                    n,
                    k,
                    scales,
                    quants: Quants::Q8(values),
                })
            }
            GgmlDType::Q5_0 => {
                const SIZE: usize = 2 + 4 + BLOCK / 2;
                if data.len() != blocks * SIZE {
                    return None;
                }
                let mut scales = Vec::with_capacity(blocks);
                let mut high = Vec::with_capacity(blocks);
                let mut nibbles = Vec::with_capacity(blocks * BLOCK / 2);
                for b in data.chunks_exact(SIZE) {
                    scales.push(f16_at(b, 0));
                    high.push(u32::from_le_bytes([b[2], b[3], b[4], b[5]]));
                    nibbles.extend_from_slice(&b[6..]);
                }
                Some(QuantRows {
                    n,
                    k,
                    scales,
                    quants: Quants::Q5 { nibbles, high },
                })
            }
            _ => None,
        }
    }

    pub fn dims(&self) -> (usize, usize) {
        (self.n, self.k)
    }

    /// The weights as f32, `[n, k]` row-major. A prefill calls this for every projection of
    /// every layer, so each format has its own straight loop (no per-value branch), which the
    /// compiler vectorizes.
    pub fn dequantize(&self) -> Vec<f32> {
        let mut out = vec![0f32; self.n * self.k];
        out.par_chunks_mut(self.k * ROWS_PER_TASK)
            .enumerate()
            .for_each(|(t, rows)| {
                let first = t * ROWS_PER_TASK * self.k / BLOCK;
                for (b, vals) in rows.chunks_exact_mut(BLOCK).enumerate() {
                    let i = first + b;
                    let d = self.scales[i];
                    match &self.quants {
                        Quants::Q8(v) => {
                            for (o, &q) in vals.iter_mut().zip(&v[i * BLOCK..(i + 1) * BLOCK]) {
                                *o = d * f32::from(q);
                            }
                        }
                        Quants::Q5 { nibbles, high } => {
                            let bytes = &nibbles[i * BLOCK / 2..(i + 1) * BLOCK / 2];
                            let h = high[i];
                            let (lo, hi) = vals.split_at_mut(BLOCK / 2);
                            for (j, &byte) in bytes.iter().enumerate() {
                                let a = (byte & 0x0F) | ((((h >> j) & 1) as u8) << 4);
                                let c = (byte >> 4) | ((((h >> (j + 16)) & 1) as u8) << 4);
                                lo[j] = d * f32::from(a as i8 - 16);
                                hi[j] = d * f32::from(c as i8 - 16);
                            }
                        }
                    }
                }
            });
        out
    }

    /// Value `j` of block `i`, as an integer.
    fn quant(&self, i: usize, j: usize) -> i8 {
        match &self.quants {
            Quants::Q8(v) => v[i * BLOCK + j],
            Quants::Q5 { nibbles, high } => {
                let byte = nibbles[i * BLOCK / 2 + j % 16];
                let low = if j < 16 { byte & 0x0F } else { byte >> 4 };
                let fifth = ((high[i] >> j) & 1) as u8;
                (low | (fifth << 4)) as i8 - 16
            }
        }
    }

    /// `x` (`m` rows of `k`) times the transposed weights: `m` rows of `n`. Each weight row is
    /// read once for all `m` input rows.
    pub fn matmul(&self, x: &[f32], m: usize) -> Vec<f32> {
        assert_eq!(x.len(), m * self.k, "input is not {m} rows of {}", self.k);
        let input = quantize(x, self.k);
        let kb = self.k / BLOCK;
        // Output transposed ([n][m]) so each task writes one contiguous piece. The work runs
        // on candle's barrier pool, the one its own quantized matmuls use: a second pool
        // (rayon) would spin against it for the same two cores between the two kinds of
        // matmul in a layer (measured: a sixth of decode time went to spinning and yields).
        let mut out_t = vec![0f32; self.n * m];
        let kernel = Kernel::detect();
        let out = SharedOut(out_t.as_mut_ptr());
        candle_core::utils::barrier_pool().execute_chunked(self.n, |rows| {
            for r in rows {
                for i in 0..m {
                    // SAFETY: each row index r is handed to exactly one task, and r < n, so
                    // the writes are disjoint and inside `out_t`, which outlives the call.
                    unsafe { out.write(r * m + i, self.dot(kernel, r, &input, i, kb)) };
                }
            }
        });
        if m == 1 {
            return out_t;
        }
        let mut out = vec![0f32; m * self.n];
        for (r, outs) in out_t.chunks_exact(m).enumerate() {
            for (i, &v) in outs.iter().enumerate() {
                out[i * self.n + r] = v;
            }
        }
        out
    }

    /// Weight row `r` with input row `i`.
    fn dot(&self, kernel: Kernel, r: usize, x: &QuantizedInput, i: usize, kb: usize) -> f32 {
        let ws = &self.scales[r * kb..(r + 1) * kb];
        let xs = &x.scales[i * kb..(i + 1) * kb];
        let xv = &x.values[i * self.k..(i + 1) * self.k];
        match (&self.quants, kernel) {
            #[cfg(target_arch = "x86_64")]
            (Quants::Q8(v), Kernel::Avx2) => unsafe {
                avx2::dot_q8(&v[r * self.k..(r + 1) * self.k], ws, xv, xs)
            },
            #[cfg(target_arch = "x86_64")]
            (Quants::Q5 { nibbles, high }, Kernel::Avx2) => unsafe {
                avx2::dot_q5(
                    &nibbles[r * kb * 16..(r + 1) * kb * 16],
                    &high[r * kb..(r + 1) * kb],
                    ws,
                    xv,
                    xs,
                )
            },
            _ => (0..kb)
                .map(|b| {
                    let i = r * kb + b;
                    let sum: i32 = (0..BLOCK)
                        .map(|j| i32::from(self.quant(i, j)) * i32::from(xv[b * BLOCK + j]))
                        .sum();
                    ws[b] * xs[b] * sum as f32
                })
                .sum(),
        }
    }
}

/// Each row of `x` (rows of `k`) as `i8` per 32-value block with the block's scale
/// (max |x| / 127), exactly as ggml's and candle's Q8_0 (scale kept at f16 precision), so the
/// products match theirs.
fn quantize(x: &[f32], k: usize) -> QuantizedInput {
    let mut values = Vec::with_capacity(x.len());
    let mut scales = Vec::with_capacity(x.len() / BLOCK);
    debug_assert_eq!(x.len() % k, 0);
    for block in x.chunks_exact(BLOCK) {
        let amax = block.iter().fold(0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let inv = if d > 0.0 { 1.0 / d } else { 0.0 };
        scales.push(half::f16::from_f32(d).to_f32());
        values.extend(block.iter().map(|v| (v * inv).round() as i8));
    }
    QuantizedInput { values, scales }
}

/// The output buffer, written by the pool's threads at disjoint indices.
struct SharedOut(*mut f32);

// SAFETY: only used for writes to disjoint indices while the buffer is alive (see `matmul`).
unsafe impl Sync for SharedOut {}

impl SharedOut {
    /// # Safety
    /// `i` is inside the buffer and no other thread writes it.
    unsafe fn write(&self, i: usize, v: f32) {
        unsafe { *self.0.add(i) = v };
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Kernel {
    Scalar,
    #[cfg(target_arch = "x86_64")]
    Avx2,
}

impl Kernel {
    fn detect() -> Kernel {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            return Kernel::Avx2;
        }
        Kernel::Scalar
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    /// Sum of the products of signed bytes `a` and `b`, as 8 partial f32 sums.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn products(a: __m256i, b: __m256i) -> __m256 {
        // maddubs takes one unsigned operand: move a's sign onto b.
        let pairs = _mm256_maddubs_epi16(_mm256_sign_epi8(a, a), _mm256_sign_epi8(b, a));
        _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, _mm256_set1_epi16(1)))
    }

    #[target_feature(enable = "avx2,fma")]
    unsafe fn sum(v: __m256) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
    }

    /// # Safety
    /// AVX2 and FMA must be available; `w` and `x` hold `32 * ws.len()` values, `xs` as many
    /// scales as `ws`.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn dot_q8(w: &[i8], ws: &[f32], x: &[i8], xs: &[f32]) -> f32 {
        debug_assert!(w.len() >= ws.len() * 32 && x.len() >= ws.len() * 32);
        let mut acc = _mm256_setzero_ps();
        for b in 0..ws.len() {
            let wv = _mm256_loadu_si256(w.as_ptr().add(b * 32).cast());
            let xv = _mm256_loadu_si256(x.as_ptr().add(b * 32).cast());
            let d = _mm256_set1_ps(ws[b] * xs[b]);
            acc = _mm256_fmadd_ps(d, products(wv, xv), acc);
        }
        sum(acc)
    }

    /// The 32 bytes of one Q5_0 block as signed values (-16..=15).
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn q5_block(nibbles: *const u8, high: u32) -> __m256i {
        let packed = _mm_loadu_si128(nibbles.cast());
        let low = _mm256_and_si256(
            _mm256_set_m128i(_mm_srli_epi16(packed, 4), packed),
            _mm256_set1_epi8(0x0F),
        );
        // Byte j of `bits` is 0xFF when bit j of `high` is set: broadcast the byte holding
        // bit j to position j, then test the bit.
        let spread = _mm256_shuffle_epi8(
            _mm256_set1_epi32(high as i32),
            _mm256_set_epi64x(
                0x0303_0303_0303_0303,
                0x0202_0202_0202_0202,
                0x0101_0101_0101_0101,
                0,
            ),
        );
        let which = _mm256_set1_epi64x(0x8040_2010_0804_0201_u64 as i64);
        let bits = _mm256_cmpeq_epi8(_mm256_and_si256(spread, which), which);
        // value = low + 16·bit − 16: with the bit it is `low`; without, `low | 0xF0` (low − 16).
        _mm256_or_si256(
            low,
            _mm256_andnot_si256(bits, _mm256_set1_epi8(0xF0_u8 as i8)),
        )
    }

    /// # Safety
    /// AVX2 and FMA must be available; `nibbles` holds `16 * ws.len()` bytes, `high` and `xs`
    /// as many entries as `ws`, `x` `32 * ws.len()` values.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn dot_q5(nibbles: &[u8], high: &[u32], ws: &[f32], x: &[i8], xs: &[f32]) -> f32 {
        debug_assert!(nibbles.len() >= ws.len() * 16 && high.len() >= ws.len());
        debug_assert!(x.len() >= ws.len() * 32);
        let mut acc = _mm256_setzero_ps();
        for b in 0..ws.len() {
            let wv = q5_block(nibbles.as_ptr().add(b * 16), high[b]);
            let xv = _mm256_loadu_si256(x.as_ptr().add(b * 32).cast());
            let d = _mm256_set1_ps(ws[b] * xs[b]);
            acc = _mm256_fmadd_ps(d, products(wv, xv), acc);
        }
        sum(acc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Tensor};

    fn weights(n: usize, k: usize, dtype: GgmlDType) -> (Tensor, QTensor) {
        let w = Tensor::randn(0f32, 1.0, (n, k), &Device::Cpu).unwrap();
        let q = QTensor::quantize(&w, dtype).unwrap();
        (w, q)
    }

    #[test]
    fn rows_unpack_to_what_candle_dequantizes() {
        for dtype in [GgmlDType::Q8_0, GgmlDType::Q5_0] {
            let (_, q) = weights(7, 96, dtype);
            let rows = QuantRows::from_qtensor(&q).expect("supported");
            assert_eq!(rows.dims(), (7, 96));
            let want = q.dequantize(&Device::Cpu).unwrap().flatten_all().unwrap();
            assert_eq!(
                rows.dequantize(),
                want.to_vec1::<f32>().unwrap(),
                "{dtype:?}"
            );
        }
        let (_, q) = weights(4, 256, GgmlDType::Q4K);
        assert!(QuantRows::from_qtensor(&q).is_none());
    }

    #[test]
    fn kernels_match_the_scalar_reference_and_candles_matmul() {
        for dtype in [GgmlDType::Q8_0, GgmlDType::Q5_0] {
            let (n, k) = (45, 192);
            let (w, q) = weights(n, k, dtype);
            let rows = QuantRows::from_qtensor(&q).unwrap();
            for m in [1, 3] {
                let x = Tensor::randn(0f32, 1.0, (m, k), &Device::Cpu).unwrap();
                let xv = x.flatten_all().unwrap().to_vec1::<f32>().unwrap();
                let got = rows.matmul(&xv, m);
                // The scalar kernel, and candle's quantized matmul (same activation quantization).
                let input = quantize(&xv, k);
                let scalar: Vec<f32> = (0..m)
                    .flat_map(|i| (0..n).map(move |r| (r, i)))
                    .map(|(r, i)| rows.dot(Kernel::Scalar, r, &input, i, k / BLOCK))
                    .collect();
                let candle = candle_core::quantized::QMatMul::from_qtensor(
                    QTensor::quantize(&w, dtype).unwrap(),
                )
                .unwrap()
                .forward(&x)
                .unwrap()
                .flatten_all()
                .unwrap()
                .to_vec1::<f32>()
                .unwrap();
                for ((g, s), c) in got.iter().zip(&scalar).zip(&candle) {
                    assert!((g - s).abs() < 1e-3, "{dtype:?} m={m}: {g} vs scalar {s}");
                    assert!(
                        (g - c).abs() < 1e-2 * (1.0 + c.abs()),
                        "{dtype:?}: {g} vs {c}"
                    );
                }
            }
        }
    }

    use candle_core::Module;
}
