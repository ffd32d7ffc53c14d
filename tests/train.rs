//! `gavel train` end to end on the tiny random-init model: it learns the toy task, checkpoints
//! resume bit-identically, adapters load back.

use std::sync::Arc;

use gavel::config::Config;
use gavel::score::Scorer;
use gavel::store::{SledStore, VerdictStore};
use gavel::train::scoring::Rewarder;
use gavel::train::tasks::read_tasks;
use gavel::train::toy::{toy_config, write_toy};
use gavel::train::trainer::{Source, Trainer};

fn in_process(rt: &tokio::runtime::Runtime) -> Rewarder {
    let cfg = Config::from_env(&|_| None);
    let store: Arc<dyn VerdictStore> = Arc::new(SledStore::temporary().unwrap());
    let _guard = rt.enter();
    Rewarder::InProcess(Arc::new(Scorer::new(&cfg, store).unwrap()))
}

/// GRPO on the toy task raises the mean reward of the last 10 steps to ≥ 0.8 and by ≥ 0.5.
#[test]
fn toy_run_learns() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let (model, tasks) = write_toy(tmp.path()).unwrap();
    let cfg = toy_config(model, tasks.clone(), tmp.path().join("out"));
    let source = Source::Online {
        tasks: read_tasks(&tasks).unwrap(),
        rewarder: in_process(&rt),
        rt: rt.handle().clone(),
    };
    let mut t = Trainer::new(cfg, source).unwrap();
    let started = std::time::Instant::now();
    let metrics = t.run(false).unwrap();
    let mean = |m: &[gavel::train::trainer::StepMetrics]| {
        m.iter().map(|s| s.reward_mean).sum::<f64>() / m.len() as f64
    };
    let first = mean(&metrics[..10]);
    let last = mean(&metrics[metrics.len() - 10..]);
    eprintln!(
        "toy run: {} steps in {:.1}s, reward {first:.3} → {last:.3}",
        metrics.len(),
        started.elapsed().as_secs_f64()
    );
    for m in metrics.iter().step_by(10) {
        eprintln!("  step {:3} reward {:.3} loss {:+.4} ent {:.2} |g| {:.3} skip {} time s/s/t {:.2}/{:.2}/{:.2}", m.step, m.reward_mean, m.loss, m.entropy, m.grad_norm, m.skipped_groups, m.sample_seconds, m.score_seconds, m.train_seconds);
    }
    assert!(last >= 0.8, "final reward {last:.3} (start {first:.3})");
    assert!(last - first >= 0.5, "reward {first:.3} → {last:.3}");
}

/// N+M steps straight give the same adapters, bit for bit, as N steps, a checkpoint, a new
/// process-like trainer resumed from it, and M more; the checkpoint is in PEFT's layout.
#[test]
fn resume_is_bit_identical_and_checkpoints_are_peft() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let (model, _) = write_toy(tmp.path()).unwrap();
    // A reward that half the random model's first tokens earn, so every step has signal.
    let tasks = tmp.path().join("ascii.jsonl");
    let line = serde_json::json!({"messages": [{"role": "user", "content": "hello"}],
        "verifiers": [{"type": "regex", "name": "ascii", "pattern": "^[a-z]"}],
        "policy": {"type": "weighted", "weights": {"ascii": 1.0}}});
    std::fs::write(&tasks, format!("{line}\n")).unwrap();
    let trainer = |out: &str, steps: u64| {
        let mut cfg = toy_config(model.clone(), tasks.clone(), tmp.path().join(out));
        cfg.steps = steps;
        cfg.prompts_per_step = 2;
        cfg.group_size = 4;
        let source = Source::Online {
            tasks: read_tasks(&tasks).unwrap(),
            rewarder: in_process(&rt),
            rt: rt.handle().clone(),
        };
        Trainer::new(cfg, source).unwrap()
    };
    let adapters = |t: &Trainer| -> Vec<(String, Vec<f32>)> {
        t.opt
            .vars()
            .iter()
            .map(|(n, v)| {
                (
                    n.clone(),
                    v.as_tensor().flatten_all().unwrap().to_vec1().unwrap(),
                )
            })
            .collect()
    };
    let mut straight = trainer("straight", 6);
    straight.run(false).unwrap();
    let mut first = trainer("split", 3);
    first.run(false).unwrap();
    let ckpt = tmp.path().join("split/checkpoint-3");
    let mut second = trainer("split", 6);
    second.resume(&ckpt).unwrap();
    assert_eq!(second.step, 3);
    second.run(false).unwrap();
    let (a, b) = (adapters(&straight), adapters(&second));
    assert!(a.iter().any(|(_, v)| v.iter().any(|x| *x != 0.0)));
    assert_eq!(a, b, "resumed adapters differ from the straight run");
    // Training moved B away from zero: the comparison is not of untouched adapters.
    let moved = a
        .iter()
        .filter(|(n, _)| n.contains("lora_B"))
        .any(|(_, v)| v.iter().any(|x| *x != 0.0));
    assert!(moved);
    let files = candle_core::safetensors::load(
        ckpt.join("adapter_model.safetensors"),
        &candle_core::Device::Cpu,
    )
    .unwrap();
    assert!(files.contains_key("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"));
    assert!(files.contains_key("base_model.model.model.layers.1.mlp.down_proj.lora_B.weight"));
    let cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(ckpt.join("adapter_config.json")).unwrap())
            .unwrap();
    assert_eq!(cfg["peft_type"], "LORA");
    assert_eq!(cfg["r"], 8);
    let metrics = std::fs::read_to_string(tmp.path().join("straight/metrics.jsonl")).unwrap();
    assert_eq!(metrics.lines().count(), 6);
}
