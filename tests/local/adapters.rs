//! LoRA adapters on the local judge (`adapter = DIR`), on tiny random models: the side path over
//! quantized weights gives the probabilities of the same adapter merged into f32 weights, an
//! adapter made for another base model is refused naming both, and judges that differ only in
//! their adapter have different identities (so different verdict cache keys).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use serde_json::json;

use crate::common::model::testkit::{self, GgmlDType, TinyOptions};
use gavel::judge::config::LocalConfig;
use gavel::judge::local::{LoadedModel, LocalJudge, LocalModelSpec};
use gavel::judge::Judge;
use gavel::model::adapter::{base_record, peft_name, JudgeRecord, Reach};
use gavel::model::{Arch, ModelFiles};

const SCALE: f64 = 4.0 / 2.0;

pub(super) fn options() -> TinyOptions {
    let mut o = TinyOptions::new(Arch::Qwen3);
    o.gguf_dtype = GgmlDType::Q8_0;
    o
}

/// A rank-2 adapter (alpha 4) on layer 1's q_proj and down_proj with values drawn from `seed`.
pub(super) fn write_adapter(
    dir: &Path,
    seed: u32,
    record: Option<&JudgeRecord>,
) -> HashMap<String, Tensor> {
    std::fs::create_dir_all(dir).unwrap();
    let dev = Device::Cpu;
    let mut tensors = HashMap::new();
    let mut k = seed;
    let mut draw = |n: usize| -> Vec<f32> {
        (0..n)
            .map(|_| {
                k = k.wrapping_mul(1_103_515_245).wrapping_add(12345);
                ((k >> 16) % 1000) as f32 / 1000.0 - 0.5
            })
            .collect()
    };
    // Tiny shape: hidden 32, 4 heads of 8 (q_proj out 32), intermediate 64.
    for (m, out, inp) in [("q_proj", 32, 32), ("down_proj", 32, 64)] {
        let a = Tensor::from_vec(draw(2 * inp), (2, inp), &dev).unwrap();
        let b = Tensor::from_vec(draw(out * 2), (out, 2), &dev).unwrap();
        tensors.insert(peft_name(1, m, "A"), a);
        tensors.insert(peft_name(1, m, "B"), b);
    }
    candle_core::safetensors::save(&tensors, dir.join("adapter_model.safetensors")).unwrap();
    let cfg = json!({"peft_type": "LORA", "r": 2, "lora_alpha": 4.0,
        "target_modules": ["q_proj", "down_proj"], "layers_to_transform": [1],
        "use_rslora": false, "bias": "none"});
    std::fs::write(dir.join("adapter_config.json"), cfg.to_string()).unwrap();
    if let Some(r) = record {
        std::fs::write(
            dir.join("gavel_judge.json"),
            serde_json::to_string(r).unwrap(),
        )
        .unwrap();
    }
    tensors
}

fn softmax(logits: &[f32]) -> Vec<f64> {
    let top = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let e: Vec<f64> = logits.iter().map(|&l| f64::from(l - top).exp()).collect();
    let s: f64 = e.iter().sum();
    e.iter().map(|x| x / s).collect()
}

fn probabilities(model: &Path, adapter: Option<PathBuf>, tokens: &[u32]) -> Vec<f64> {
    let spec = LocalModelSpec::new(model, "cpu").with_adapter(adapter);
    let mut m = LoadedModel::load(&spec).unwrap();
    // The questions' arithmetic: quantized weights dequantized to f32 for every forward.
    m.set_dense_always(true);
    softmax(&m.forward_logits(tokens, 0).unwrap())
}

#[test]
fn the_side_path_over_quantized_weights_equals_the_adapter_merged_into_f32_weights() {
    let tmp = tempfile::tempdir().unwrap();
    let gguf = tmp.path().join("m.gguf");
    testkit::write_gguf(&gguf, &options(), &[]).unwrap();
    let adapter = tmp.path().join("adapter");
    let lora = write_adapter(&adapter, 7, None);

    // The same base weights (dequantized from the GGUF) with W + s·BA, as a model folder.
    let files = ModelFiles::open(&gguf).unwrap();
    let mut dense = files.dense(&Device::Cpu, DType::F32).unwrap().tensors;
    for (m, group) in [("q_proj", "self_attn"), ("down_proj", "mlp")] {
        let name = format!("model.layers.1.{group}.{m}.weight");
        let delta = lora[&peft_name(1, m, "B")]
            .matmul(&lora[&peft_name(1, m, "A")])
            .unwrap();
        let merged = (&dense[&name] + (delta * SCALE).unwrap()).unwrap();
        dense.insert(name, merged);
    }
    let folder = tmp.path().join("merged");
    let mut o = options();
    o.gguf_dtype = GgmlDType::F32;
    testkit::write_folder(&folder, &o).unwrap();
    candle_core::safetensors::save(&dense, folder.join("model.safetensors")).unwrap();

    let tokens: Vec<u32> = (0..40).map(|i| (i * 7 + 3) % 250).collect();
    let side = probabilities(&gguf, Some(adapter), &tokens);
    let merged = probabilities(&folder, None, &tokens);
    let base = probabilities(&gguf, None, &tokens);
    let diff = |a: &[f64], b: &[f64]| {
        a.iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f64::max)
    };
    assert!(diff(&side, &merged) < 1e-4, "{}", diff(&side, &merged));
    // The adapter does change them (the comparison can fail).
    assert!(diff(&side, &base) > 1e-3, "{}", diff(&side, &base));
}

pub(super) fn record_for(model: &Path) -> JudgeRecord {
    JudgeRecord {
        reach: Reach::Verdict,
        modes: vec!["pointwise".into()],
        base: base_record(&ModelFiles::open(model).unwrap()).unwrap(),
        training: json!({}),
    }
}

#[test]
fn an_adapter_made_for_another_base_is_refused_naming_both() {
    let tmp = tempfile::tempdir().unwrap();
    let (ours, other) = (tmp.path().join("ours.gguf"), tmp.path().join("other.gguf"));
    testkit::write_gguf(&ours, &options(), &[]).unwrap();
    // The same shapes, other weights' bytes (F32 instead of Q8_0).
    let mut o = options();
    o.gguf_dtype = GgmlDType::F32;
    testkit::write_gguf(&other, &o, &[]).unwrap();
    let adapter = tmp.path().join("adapter");
    write_adapter(&adapter, 3, Some(&record_for(&ours)));
    let load = |m: &Path| {
        LoadedModel::load(&LocalModelSpec::new(m, "cpu").with_adapter(Some(adapter.clone())))
    };
    assert!(load(&ours).is_ok());
    let e = load(&other).unwrap_err().to_string();
    assert!(e.contains("made for another base model"), "{e}");
    assert!(e.contains("ours.gguf") && e.contains("other.gguf"), "{e}");

    // Shapes that are not the model's: refused before any record is read.
    let wrong = tmp.path().join("wrong");
    write_adapter(&wrong, 3, None);
    let t = HashMap::from([
        (
            peft_name(1, "q_proj", "A"),
            Tensor::zeros((2, 33), DType::F32, &Device::Cpu).unwrap(),
        ),
        (
            peft_name(1, "q_proj", "B"),
            Tensor::zeros((32, 2), DType::F32, &Device::Cpu).unwrap(),
        ),
    ]);
    candle_core::safetensors::save(&t, wrong.join("adapter_model.safetensors")).unwrap();
    let spec = LocalModelSpec::new(&ours, "cpu").with_adapter(Some(wrong));
    let e = LoadedModel::load(&spec).unwrap_err().to_string();
    assert!(
        e.contains("q_proj is [32, 33], the model's [32, 32]"),
        "{e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn judges_on_one_base_with_different_adapters_have_different_identities() {
    let tmp = tempfile::tempdir().unwrap();
    let gguf = tmp.path().join("m.gguf");
    testkit::write_gguf(&gguf, &options(), &[]).unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    write_adapter(&a, 1, Some(&record_for(&gguf)));
    write_adapter(&b, 2, Some(&record_for(&gguf)));
    let judge = |adapter: Option<&PathBuf>| {
        let mut cfg = LocalConfig::new(&gguf);
        cfg.adapter = adapter.cloned();
        LocalJudge::new("j", &cfg).unwrap().identity()
    };
    let (plain, with_a, with_b) = (judge(None), judge(Some(&a)), judge(Some(&b)));
    assert!(plain.get("adapter").is_none(), "{plain}");
    assert_ne!(with_a, with_b);
    assert_ne!(with_a, plain);
    assert_eq!(
        judge(Some(&a)),
        with_a,
        "the same adapter, the same identity"
    );
    // A verdict adapter trained for pointwise mode only is refused by a pairwise judge.
    let mut cfg = LocalConfig::new(&gguf);
    cfg.adapter = Some(a);
    cfg.common.mode = Some(gavel::domain::prompt::JudgeMode::Pairwise);
    let e = LocalJudge::new("j", &cfg).unwrap_err().to_string();
    assert!(e.contains("trained for mode pointwise"), "{e}");
}
