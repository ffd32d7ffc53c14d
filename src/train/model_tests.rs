//! The trainer's model against candle's stock Qwen2/Qwen3 on the tiny random models.

use candle_core::{DType, Device, IndexOp, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::{qwen2, qwen3};

use super::kv_cache::KvCache;
use super::lora::LoraConfig;
use super::model::LoraQwen;
use crate::domain::rng::Rng;
use crate::model::testkit::{self, TinyOptions};
use crate::model::{Arch, ModelFiles};

const IDS: [[u32; 7]; 2] = [[5, 17, 290, 3, 99, 42, 7], [250, 1, 60, 61, 62, 300, 11]];

fn ids() -> Tensor {
    Tensor::new(&IDS, &Device::Cpu).unwrap()
}

/// candle's stock model's logits at every position: its base `Model` returns the normed
/// hidden states of all positions; the output projection is applied here.
fn stock_logits(arch: Arch, dir: &std::path::Path, tied: bool) -> Tensor {
    let cfg = ModelFiles::open(dir).unwrap().config.candle_json();
    let vb = unsafe {
        VarBuilder::from_mmaped_safetensors(
            &[dir.join("model.safetensors")],
            DType::F32,
            &Device::Cpu,
        )
        .unwrap()
    };
    let head_name = if tied {
        "model.embed_tokens.weight"
    } else {
        "lm_head.weight"
    };
    let head = vb
        .get((testkit::VOCAB, testkit::HIDDEN), head_name)
        .unwrap();
    let ids = ids();
    let hidden = match arch {
        Arch::Qwen2 => {
            let c: qwen2::Config = serde_json::from_value(cfg).unwrap();
            let mut m = qwen2::Model::new(&c, vb).unwrap();
            m.forward(&ids, 0, None).unwrap()
        }
        Arch::Qwen3 => {
            let c: qwen3::Config = serde_json::from_value(cfg).unwrap();
            let mut m = qwen3::Model::new(&c, vb).unwrap();
            m.forward(&ids, 0).unwrap()
        }
    };
    hidden.broadcast_matmul(&head.t().unwrap()).unwrap()
}

fn ours(arch: Arch, dir: &std::path::Path) -> LoraQwen {
    let files = ModelFiles::open(dir).unwrap();
    assert_eq!(files.config.arch, arch);
    LoraQwen::new(files.dense(&Device::Cpu, DType::F32).unwrap()).unwrap()
}

#[test]
fn logits_match_candle_stock_models_at_every_position() {
    for (arch, tied) in [
        (Arch::Qwen2, false),
        (Arch::Qwen3, false),
        (Arch::Qwen2, true),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let mut o = TinyOptions::new(arch);
        o.tied = tied;
        testkit::write_folder(tmp.path(), &o).unwrap();
        let expected = stock_logits(arch, tmp.path(), tied);
        let m = ours(arch, tmp.path());
        let got = m.forward(&ids(), true).unwrap();
        assert_eq!(got.dims(), &[2, 7, testkit::VOCAB]);
        let d = testkit::max_abs_diff(&got, &expected);
        assert!(d < 1e-5, "{arch:?} tied={tied}: max |Δlogit| = {d}");
        // The logits are not trivially small: the comparison means something.
        let scale = testkit::max_abs(&expected);
        assert!(scale > 0.5, "{scale}");
        eprintln!("{arch:?} tied={tied}: max |Δ| {d:e} over logits up to {scale}");
    }
}

#[test]
fn gguf_weights_give_the_same_logits_as_safetensors() {
    let tmp = tempfile::tempdir().unwrap();
    let o = TinyOptions::new(Arch::Qwen3);
    testkit::write_folder(tmp.path(), &o).unwrap();
    let gguf = tmp.path().join("tiny.gguf");
    testkit::write_gguf(&gguf, &o, &[]).unwrap();
    let a = ours(Arch::Qwen3, tmp.path()).forward(&ids(), true).unwrap();
    let b = ours(Arch::Qwen3, &gguf).forward(&ids(), true).unwrap();
    assert!(testkit::max_abs_diff(&a, &b) < 1e-5);
}

#[test]
fn zero_b_adapters_equal_the_base_model_and_gradients_reach_only_adapters() {
    let tmp = tempfile::tempdir().unwrap();
    testkit::write_folder(tmp.path(), &TinyOptions::new(Arch::Qwen2)).unwrap();
    let mut m = ours(Arch::Qwen2, tmp.path());
    let base = m.forward(&ids(), true).unwrap();
    let cfg = LoraConfig {
        r: 4,
        alpha: 8.0,
        ..LoraConfig::default()
    };
    m.add_lora(&cfg, &mut Rng::new(5)).unwrap();
    let vars = m.lora_vars();
    assert_eq!(vars.len(), 2 * 7 * testkit::LAYERS);
    assert_eq!(
        vars[0].0,
        "base_model.model.model.layers.0.mlp.down_proj.lora_A.weight"
    );
    let with = m.forward(&ids(), true).unwrap();
    assert_eq!(testkit::max_abs_diff(&base, &with), 0.0);

    // Make B non-zero so A gets gradients too, then check every adapter gets one.
    for (name, v) in &vars {
        if name.contains("lora_B") {
            let (o, r) = v.as_tensor().dims2().unwrap();
            let vals: Vec<f32> = (0..o * r).map(|i| ((i % 7) as f32 - 3.0) * 0.01).collect();
            v.set(&Tensor::from_vec(vals, (o, r), &Device::Cpu).unwrap())
                .unwrap();
        }
    }
    let logits = m.forward(&ids(), true).unwrap();
    assert!(
        testkit::max_abs_diff(&base, &logits) > 1e-4,
        "adapters change the output"
    );
    let lsm = candle_nn::ops::log_softmax(&logits, candle_core::D::Minus1).unwrap();
    let loss = lsm.i((.., .., 42)).unwrap().sum_all().unwrap();
    let grads = loss.backward().unwrap();
    for (name, v) in &vars {
        let g = grads
            .get(v.as_tensor())
            .unwrap_or_else(|| panic!("no grad for {name}"));
        let n = g
            .abs()
            .unwrap()
            .sum_all()
            .unwrap()
            .to_scalar::<f32>()
            .unwrap();
        assert!(n > 0.0, "zero grad for {name}");
    }
    // Adapters off: the base model again, and no gradient path into base weights.
    let off = m.forward(&ids(), false).unwrap();
    assert_eq!(testkit::max_abs_diff(&base, &off), 0.0);
    let tracked = m
        .merged_tensors()
        .unwrap()
        .into_iter()
        .filter(|(n, _)| !n.ends_with("proj.weight"))
        .filter(|(_, t)| grads.get(t).is_some())
        .count();
    assert_eq!(tracked, 0, "base tensors got gradients");
}

#[test]
fn cached_decoding_matches_the_full_forward() {
    let tmp = tempfile::tempdir().unwrap();
    testkit::write_folder(tmp.path(), &TinyOptions::new(Arch::Qwen3)).unwrap();
    let mut m = ours(Arch::Qwen3, tmp.path());
    m.add_lora(&LoraConfig::default(), &mut Rng::new(5))
        .unwrap();
    let full = m.forward(&ids(), true).unwrap();
    let mut cache = KvCache::default();
    let ids = ids();
    let h = m
        .hidden(&ids.narrow(1, 0, 4).unwrap(), 0, Some(&mut cache), true)
        .unwrap();
    assert_eq!(cache.len(), 4);
    let first = m.logits(&h).unwrap();
    assert!(testkit::max_abs_diff(&first, &full.narrow(1, 0, 4).unwrap()) < 1e-5);
    for p in 4..7 {
        let h = m
            .hidden(&ids.narrow(1, p, 1).unwrap(), p, Some(&mut cache), true)
            .unwrap();
        let step = m.logits(&h).unwrap();
        assert!(
            testkit::max_abs_diff(&step, &full.narrow(1, p, 1).unwrap()) < 1e-5,
            "position {p}"
        );
    }
    // The step's output is trainable (the adapters are `Var`s), the cache is not: it holds
    // values only, not the graph of every step that made them.
    assert!(h.track_op());
    assert!(cache.layers().count() > 0);
    for (k, v) in cache.layers() {
        assert!(!k.track_op() && !v.track_op());
    }
    // Rows of the cache, repeated: what a group of samples of one prompt starts from.
    let rows = Tensor::new(&[0u32, 0, 0], &Device::Cpu).unwrap();
    let three = cache.select_rows(&rows).unwrap();
    assert_eq!(three.len(), 7);
    for ((k1, v1), (k3, v3)) in cache.layers().zip(three.layers()) {
        assert_eq!(k3.dim(0).unwrap(), 3);
        for r in 0..3 {
            assert_eq!(
                testkit::max_abs_diff(&k3.get(r).unwrap(), &k1.get(0).unwrap()),
                0.0
            );
            assert_eq!(
                testkit::max_abs_diff(&v3.get(r).unwrap(), &v1.get(0).unwrap()),
                0.0
            );
        }
    }
}

/// Prompts of different lengths, each prefilled alone and stacked with left padding, decode as
/// each would alone: the padding is hidden from every query and every row keeps its own
/// positions. Checked on both architectures, rows repeated and reordered as a batch of groups
/// is, after a row leaves the batch, and for a step of several positions.
#[test]
fn left_padded_rows_decode_as_each_row_alone() {
    for arch in [Arch::Qwen2, Arch::Qwen3] {
        let tmp = tempfile::tempdir().unwrap();
        testkit::write_folder(tmp.path(), &TinyOptions::new(arch)).unwrap();
        let mut m = ours(arch, tmp.path());
        m.add_lora(&LoraConfig::default(), &mut Rng::new(5))
            .unwrap();
        // Row r's whole sequence is its prompt, then two steps of one token, then one of two:
        // the tokens of step j are `steps[j]`, one per prompt.
        let prompts: [&[u32]; 3] = [&[5, 17, 290], &[250, 1, 60, 61, 62], &[9]];
        let steps: [[u32; 3]; 4] = [[3, 300, 4], [99, 11, 8], [42, 12, 15], [7, 13, 16]];
        let mut caches = Vec::new();
        for p in prompts {
            let mut c = KvCache::default();
            let ids = Tensor::new(p, &Device::Cpu).unwrap().unsqueeze(0).unwrap();
            m.hidden(&ids, 0, Some(&mut c), true).unwrap();
            caches.push(c);
        }
        let order = [2u32, 0, 1, 2];
        let rows = Tensor::new(&order, &Device::Cpu).unwrap();
        let mut cache = KvCache::stack_left_padded(&caches)
            .unwrap()
            .select_rows(&rows)
            .unwrap();
        assert!(cache.positions(5, 1).is_some(), "no row is padded");
        let alone = |r: usize, upto: usize| -> Tensor {
            let seq: Vec<u32> = prompts[r]
                .iter()
                .copied()
                .chain(steps[..upto].iter().map(|column| column[r]))
                .collect();
            let ids = Tensor::new(seq.as_slice(), &Device::Cpu)
                .unwrap()
                .unsqueeze(0)
                .unwrap();
            let logits = m.forward(&ids, true).unwrap();
            logits.i((0, seq.len() - 1)).unwrap()
        };
        let mut active: Vec<usize> = order.iter().map(|&r| r as usize).collect();
        let longest = 5;
        for (step, column) in steps.iter().take(2).enumerate() {
            let next: Vec<u32> = active.iter().map(|&r| column[r]).collect();
            let input = Tensor::from_vec(next, (active.len(), 1), &Device::Cpu).unwrap();
            let h = m
                .hidden(&input, longest + step, Some(&mut cache), true)
                .unwrap();
            let logits = m.logits(&h).unwrap();
            for (row, &r) in active.iter().enumerate() {
                let want = alone(r, step + 1);
                let got = logits.i((row, 0)).unwrap();
                let d = testkit::max_abs_diff(&got, &want);
                assert!(d < 1e-5, "{arch:?} row {row} (prompt {r}) step {step}: {d}");
            }
            if step == 0 {
                // The second row leaves the batch.
                let kept = Tensor::new(&[0u32, 2, 3], &Device::Cpu).unwrap();
                cache = cache.select_rows(&kept).unwrap();
                active = vec![active[0], active[2], active[3]];
            }
        }
        // Two positions at once: causal within the step, padding still hidden.
        let next: Vec<u32> = active
            .iter()
            .flat_map(|&r| [steps[2][r], steps[3][r]])
            .collect();
        let input = Tensor::from_vec(next, (active.len(), 2), &Device::Cpu).unwrap();
        let h = m
            .hidden(&input, longest + 2, Some(&mut cache), true)
            .unwrap();
        let logits = m.logits(&h).unwrap();
        for (row, &r) in active.iter().enumerate() {
            for j in 0..2 {
                let d = testkit::max_abs_diff(&logits.i((row, j)).unwrap(), &alone(r, 3 + j));
                assert!(d < 1e-5, "{arch:?} row {row} position {j}: {d}");
            }
        }
    }
}
