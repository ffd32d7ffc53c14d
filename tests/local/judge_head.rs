//! The judge trainer's adapted layers compute what the served model computes: on a tiny random
//! model, the trainer's head over the frozen pass's features gives the answers' logits the local
//! judge's network gives with the same adapter attached, for an adapter of the verdict position
//! and for one of every position (which runs the adapted layers over the whole prompt, the
//! group's shared part included).

use std::collections::HashMap;
use std::path::Path;

use candle_core::{Device, Tensor};
use serde_json::json;

use crate::common::model::testkit::{self, TinyOptions};
use crate::max_diff;
use gavel::domain::prompt::JudgeMode;
use gavel::domain::rng::Rng;
use gavel::judge::local::{LoadedModel, LocalModelSpec};
use gavel::model::adapter::{base_record, JudgeRecord, LoraConfig, Reach, TARGETS};
use gavel::model::{Arch, ModelFiles};
use gavel::score::verdict_choices;
use gavel::train::judge::features::BaseModel;
use gavel::train::judge::head::VerdictHead;

/// Writes the head's adapters as the trainer does (PEFT layout, layers `first..`), with a record
/// of `reach`.
fn write(
    dir: &Path,
    head: &VerdictHead,
    lora: &LoraConfig,
    gguf: &Path,
    first: usize,
    reach: Reach,
) {
    std::fs::create_dir_all(dir).unwrap();
    let tensors: HashMap<String, Tensor> = head
        .lora_vars()
        .into_iter()
        .map(|(n, v)| (n, v.as_tensor().clone()))
        .collect();
    candle_core::safetensors::save(&tensors, dir.join("adapter_model.safetensors")).unwrap();
    let layers = ModelFiles::open(gguf).unwrap().config.num_hidden_layers;
    let cfg = json!({"peft_type": "LORA", "r": lora.r, "lora_alpha": lora.alpha,
        "target_modules": TARGETS, "layers_to_transform": (first..layers).collect::<Vec<_>>(),
        "use_rslora": false, "bias": "none"});
    std::fs::write(dir.join("adapter_config.json"), cfg.to_string()).unwrap();
    let record = JudgeRecord {
        reach,
        modes: vec!["pointwise".into()],
        base: base_record(&ModelFiles::open(gguf).unwrap()).unwrap(),
        training: json!({}),
    };
    std::fs::write(
        dir.join("gavel_judge.json"),
        serde_json::to_string(&record).unwrap(),
    )
    .unwrap();
}

/// Both tiny layers adapted (the first over every row, causally masked, the second at the
/// verdict position alone), and the second alone (the frozen pass hands over after the first).
#[test]
fn the_trainers_head_computes_what_the_served_model_computes_for_either_reach() {
    for first in [0, 1] {
        check(first);
    }
}

fn check(first: usize) {
    let tmp = tempfile::tempdir().unwrap();
    let gguf = tmp.path().join("m.gguf");
    // F32 weights: the served model's output head then multiplies as the trainer's does (on
    // quantized weights candle's kernels quantize the activations too; the served figures of
    // BENCHMARKS.md measure that difference).
    let o = TinyOptions::new(Arch::Qwen3);
    testkit::write_gguf(&gguf, &o, &[]).unwrap();
    let files = ModelFiles::open(&gguf).unwrap();
    let layers = files.config.num_hidden_layers;
    assert_eq!(layers, 2, "the tiny model's layers");
    let choices = vec![verdict_choices(JudgeMode::Pointwise)];
    let ids = files
        .tokenizer
        .choice_tokens(&choices[0], files.config.vocab_size)
        .unwrap();
    let lora = LoraConfig {
        r: 2,
        alpha: 4.0,
        ..LoraConfig::default()
    };
    let cpu = Device::Cpu;
    let head = VerdictHead::new(
        &files,
        first,
        std::slice::from_ref(&ids),
        &lora,
        &mut Rng::new(3),
        &cpu,
    )
    .unwrap();
    // Fresh adapters have B = 0 (the base model): give them values, so the adapters count.
    let mut rng = Rng::new(9);
    for (name, var) in head.lora_vars() {
        if name.contains("lora_B") {
            let n = var.as_tensor().elem_count();
            let v: Vec<f32> = (0..n).map(|_| rng.symmetric(0.5) as f32).collect();
            var.set(&Tensor::from_vec(v, var.as_tensor().shape(), &cpu).unwrap())
                .unwrap();
        }
    }
    // Two prompts of one group: a shared part, then each its own.
    let shared: Vec<u32> = (0..24).map(|i| (i * 7 + 3) % 200).collect();
    let prompts: Vec<Vec<u32>> = [[11u32, 12, 13, 14, 15], [21, 22, 23, 24, 25]]
        .iter()
        .map(|own| [&shared[..], own].concat())
        .collect();
    let asked: Vec<(Vec<u32>, usize)> = prompts.iter().map(|p| (p.clone(), 0)).collect();
    let flat: Vec<u32> = ids.iter().flatten().copied().collect();

    let mut by_reach = Vec::new();
    for reach in [Reach::Verdict, Reach::All] {
        let dir = tmp.path().join(format!("{reach:?}-{first}"));
        write(&dir, &head, &lora, &gguf, first, reach);
        let mut base = BaseModel::new(
            ModelFiles::open(&gguf).unwrap(),
            &cpu,
            first,
            reach,
            &choices,
        )
        .unwrap();
        let features = base.group(&asked).unwrap();
        let spec = LocalModelSpec::new(&gguf, "cpu").with_adapter(Some(dir));
        let mut served = LoadedModel::load(&spec).unwrap();
        // The questions' arithmetic (as the frozen pass's): the weights dequantized to f32.
        served.set_dense_always(true);
        served.set_verdict_adapter(true);
        let mut plain = LoadedModel::load(&LocalModelSpec::new(&gguf, "cpu")).unwrap();
        plain.set_dense_always(true);
        for (p, f) in prompts.iter().zip(&features) {
            let pick =
                |all: Vec<f32>| -> Vec<f32> { flat.iter().map(|&t| all[t as usize]).collect() };
            let want = pick(served.forward_logits(p, 0).unwrap());
            let got = head.logits(f, 0, true).unwrap().to_vec1::<f32>().unwrap();
            assert!(
                max_diff(&want, &got) < 1e-5,
                "{reach:?}, layers {first}..: served {want:?}, head {got:?}"
            );
            // Without its adapters the head is the base model.
            let want = pick(plain.forward_logits(p, 0).unwrap());
            let got = head.logits(f, 0, false).unwrap().to_vec1::<f32>().unwrap();
            assert!(
                max_diff(&want, &got) < 1e-5,
                "{reach:?}, layers {first}.., base: served {want:?}, head {got:?}"
            );
            by_reach.push(head.logits(f, 0, true).unwrap().to_vec1::<f32>().unwrap());
        }
    }
    // The two reaches differ (the adapters of every position change the context): the
    // comparisons above could tell them apart.
    assert!(max_diff(&by_reach[0], &by_reach[2]) > 1e-3, "{by_reach:?}");
    assert!(max_diff(&by_reach[1], &by_reach[3]) > 1e-3, "{by_reach:?}");
}
