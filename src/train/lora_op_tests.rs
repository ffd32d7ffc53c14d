//! The LoRA op against the tensor ops it replaces: the same output bit for bit, the same
//! gradients of x, A and B to rounding, nothing for W or the bias.

use super::*;
use crate::model::testkit::{max_abs, max_abs_diff};
use candle_core::{DType, Device, Var};

/// The projection written with tensor ops, as `Linear::forward` did before the op.
fn by_tensor_ops(
    x: &Tensor,
    w: &Tensor,
    bias: Option<&Tensor>,
    a: &Tensor,
    b: &Tensor,
    s: f64,
) -> Tensor {
    let mut y = x.matmul(&w.t().unwrap()).unwrap();
    if let Some(bias) = bias {
        y = y.broadcast_add(bias).unwrap();
    }
    let delta = x
        .matmul(&a.t().unwrap())
        .unwrap()
        .matmul(&b.t().unwrap())
        .unwrap();
    (y + (delta * s).unwrap()).unwrap()
}

fn randn(shape: (usize, usize), seed: u64) -> Tensor {
    let mut rng = crate::domain::rng::Rng::new(seed);
    let v: Vec<f32> = (0..shape.0 * shape.1)
        .map(|_| rng.symmetric(1.0) as f32)
        .collect();
    Tensor::from_vec(v, shape, &Device::Cpu).unwrap()
}

#[test]
fn same_output_bit_for_bit_and_same_gradients_of_x_a_and_b() {
    // Shapes past gemm's small-matrix paths on both sides: 37 rows, 64 in, 48 out, r = 8.
    let (m, k, n, r) = (37, 64, 48, 8);
    let w = randn((n, k), 1);
    let bias = randn((1, n), 2).squeeze(0).unwrap();
    for with_bias in [false, true] {
        let bias = with_bias.then_some(&bias);
        let x = Var::from_tensor(&randn((m, k), 3)).unwrap();
        let a = Var::from_tensor(&(randn((r, k), 4) * 0.2).unwrap()).unwrap();
        let b = Var::from_tensor(&(randn((n, r), 5) * 0.3).unwrap()).unwrap();
        let s = 2.0;
        let plain = by_tensor_ops(x.as_tensor(), &w, bias, a.as_tensor(), b.as_tensor(), s);
        let fused = lora_matmul(x.as_tensor(), &w, bias, a.as_tensor(), b.as_tensor(), s).unwrap();
        assert_eq!(
            plain.to_vec2::<f32>().unwrap(),
            fused.to_vec2::<f32>().unwrap(),
            "bias {with_bias}"
        );
        // A loss that is not linear in y, so every gradient depends on the values.
        let loss = |y: &Tensor| y.sqr().unwrap().sum_all().unwrap();
        let gp = loss(&plain).backward().unwrap();
        let gf = loss(&fused).backward().unwrap();
        for (name, v) in [("x", &x), ("A", &a), ("B", &b)] {
            let (p, f) = (
                gp.get(v.as_tensor()).unwrap(),
                gf.get(v.as_tensor()).unwrap(),
            );
            assert_eq!(p.dims(), f.dims(), "{name}");
            let scale = max_abs(p);
            assert!(scale > 1.0, "{name}: a gradient of {scale} proves nothing");
            let d = max_abs_diff(p, f);
            assert!(d <= 1e-5 * scale, "bias {with_bias} {name}: {d} of {scale}");
        }
        // x, A, B and nothing else: the frozen weight and bias get no gradient.
        assert_eq!(gf.get_ids().count(), 3, "bias {with_bias}");
    }
}

#[test]
fn a_wrong_shape_is_an_error_naming_every_shape() {
    let dev = Device::Cpu;
    let x = Tensor::ones((4, 3), DType::F32, &dev).unwrap();
    let w = Tensor::ones((2, 3), DType::F32, &dev).unwrap();
    let a = Tensor::ones((1, 3), DType::F32, &dev).unwrap();
    let b = Tensor::ones((2, 2), DType::F32, &dev).unwrap();
    let e = lora_matmul(&x, &w, None, &a, &b, 1.0)
        .unwrap_err()
        .to_string();
    assert!(e.contains("A [1, 3], B [2, 2]"), "{e}");
}
