//! `gavel train --sft` and `--init-adapter` on the tiny random-init models: SFT learns the toy
//! answers, only assistant tokens are in the loss, GRPO starts from an SFT adapter, and an
//! adapter that does not fit is refused.

use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use gavel::train::config::TrainConfig;
use gavel::train::rollout::{sample_rows, SamplingConfig};
use gavel::train::sft::{Sft, SftExample};
use gavel::train::tasks::read_tasks;
use gavel::train::toy::{constant_toy_config, write_toy, TOY_STARTS};
use gavel::train::trainer::{Source, Trainer};

use super::max_diff;

/// The toy prompt starting at `s` ("3456") and its answer ("789").
fn toy_pair(s: u32) -> (String, String) {
    let d = |k: u32| char::from_digit((s + k) % 10, 10).unwrap();
    ((0..4).map(d).collect(), (4..7).map(d).collect())
}

/// The toy model and tasks under `dir`, and an SFT file of the ten toy prompts with their
/// answers (plus the metadata `gavel select` writes, which is ignored).
fn toy_sft_files(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let (model, tasks) = write_toy(dir).unwrap();
    let lines: Vec<String> = TOY_STARTS
        .iter()
        .map(|&s| {
            let (p, a) = toy_pair(s);
            serde_json::json!({"messages": [{"role": "user", "content": p},
                {"role": "assistant", "content": a}], "reward": 1.0, "group_id": s,
                "metadata": {"source": "test"}})
            .to_string()
        })
        .collect();
    let sft = dir.join("sft.jsonl");
    std::fs::write(&sft, lines.join("\n") + "\n").unwrap();
    (model, tasks, sft)
}

fn sft_config(model: PathBuf, sft: PathBuf, out: PathBuf, steps: u64) -> TrainConfig {
    let mut c = constant_toy_config(model, PathBuf::new(), out);
    c.tasks = None;
    c.sft = Some(sft);
    c.steps = steps;
    c.sft_batch_size = 5;
    c.sft_micro_batch_tokens = 16;
    c.learning_rate = 1e-2;
    c
}

/// Greedy answers (3 tokens) of the policy to the ten toy prompts.
fn greedy_answers(t: &Trainer) -> Vec<String> {
    let cfg = SamplingConfig {
        temperature: 0.0,
        max_tokens: 3,
        ..SamplingConfig::default()
    };
    TOY_STARTS
        .iter()
        .map(|&s| {
            let msgs = [gavel::domain::prompt::ChatMessage {
                role: "user".into(),
                content: toy_pair(s).0,
            }];
            let prompt = t.policy.prompt_ids(&msgs).unwrap();
            let out = sample_rows(
                &t.policy,
                &[&prompt],
                &cfg,
                &mut gavel::domain::rng::Rng::new(0),
            );
            out.unwrap().remove(0).text
        })
        .collect()
}

/// SFT on the ten toy examples lowers the loss and then greedy-decodes every answer of its
/// training set; the loss is the mean NLL of the answer tokens alone (the prompt is not in it).
#[test]
fn sft_lowers_the_loss_and_decodes_the_answers() {
    let tmp = tempfile::tempdir().unwrap();
    let (model, _, data) = toy_sft_files(tmp.path());
    let out = tmp.path().join("sft");
    let mut s = Sft::new(sft_config(model, data, out.clone(), 60)).unwrap();
    assert_eq!(s.data.len(), 10);
    let want: Vec<String> = TOY_STARTS.iter().map(|&s| toy_pair(s).1).collect();
    let before = greedy_answers(&s.trainer);
    assert_ne!(before, want, "the random model already knows the answers");
    let started = std::time::Instant::now();
    let m = s.run(false).unwrap();
    let mean = |m: &[gavel::train::sft::SftMetrics]| {
        m.iter().map(|x| x.loss).sum::<f64>() / m.len() as f64
    };
    let (first, last) = (mean(&m[..4]), mean(&m[m.len() - 4..]));
    eprintln!(
        "toy sft: {} steps in {:.1}s, loss {first:.3} → {last:.3}",
        m.len(),
        started.elapsed().as_secs_f64()
    );
    assert!(
        last < 0.2 * first && last < 0.3,
        "loss {first:.3} → {last:.3}"
    );
    // Five examples a step of four answer tokens (three digits and the template's `<|im_end|>`)
    // after a four-token prompt, in passes of ≤ 16 padded tokens: two rows, two, one.
    assert!(m.iter().all(|x| x.tokens == 20 && x.seq_tokens == 40));
    assert!(m.iter().all(|x| x.micro_batches == 3 && x.pad_tokens == 0));
    assert_eq!(greedy_answers(&s.trainer), want);
    // The loss of one example is −log p(answer | prompt) / 4, from a plain forward pass.
    let ex = &s.data[0];
    let ids: Vec<u32> = [ex.prompt.as_slice(), &ex.tokens].concat();
    let n = ids.len();
    let logits = s
        .trainer
        .policy
        .model
        .forward(&Tensor::from_vec(ids, (1, n), &Device::Cpu).unwrap(), true)
        .unwrap();
    let lp: Vec<Vec<f32>> = s
        .trainer
        .policy
        .log_probs(&logits, 1.0)
        .unwrap()
        .squeeze(0)
        .unwrap()
        .to_vec2()
        .unwrap();
    let p = ex.prompt.len();
    let nll: f64 = -(0..ex.tokens.len())
        .map(|j| lp[p - 1 + j][ex.tokens[j] as usize] as f64)
        .sum::<f64>()
        / ex.tokens.len() as f64;
    let got = s.mean_nll(&[ex]).unwrap();
    assert!((got - nll).abs() < 1e-5, "sft loss {got} vs NLL {nll}");
    // metrics.jsonl has a line a step; the last step's checkpoint is there.
    let lines = std::fs::read_to_string(out.join("metrics.jsonl")).unwrap();
    let v: serde_json::Value = serde_json::from_str(lines.lines().last().unwrap()).unwrap();
    assert_eq!(lines.lines().count(), 60);
    for k in ["step", "loss", "tokens", "tokens_per_s", "learning_rate"] {
        assert!(v.get(k).is_some(), "metrics has no {k}: {v}");
    }
    assert!(out
        .join("checkpoint-60/adapter_model.safetensors")
        .is_file());
}

/// Tool results and prompts get no loss: a trailing tool result's text changes nothing in it,
/// while the same examples scored on every token (the mask ignored) do differ.
#[test]
fn sft_masks_tool_results() {
    use crate::common::model::testkit::{write_folder, TinyOptions};
    use gavel::model::Arch;
    let tmp = tempfile::tempdir().unwrap();
    let model = tmp.path().join("tiny");
    write_folder(&model, &TinyOptions::new(Arch::Qwen2)).unwrap();
    let call = serde_json::json!({"role": "assistant", "content": "", "tool_calls": [{"id": "c1",
        "type": "function", "function": {"name": "calc", "arguments": "{}"}}]});
    let line = |result: &str, more: bool| {
        let mut msgs = vec![
            serde_json::json!({"role": "user", "content": "add"}),
            call.clone(),
            serde_json::json!({"role": "tool", "tool_call_id": "c1", "content": result}),
        ];
        if more {
            msgs.push(serde_json::json!({"role": "assistant", "content": "is four"}));
        }
        serde_json::json!({"messages": msgs, "tools": [{"type": "function",
            "function": {"name": "calc"}}]})
        .to_string()
    };
    let data = tmp.path().join("sft.jsonl");
    std::fs::write(
        &data,
        [
            line("4", false),
            line("a much longer tool result text", false),
            line("toolresult", true),
        ]
        .join("\n"),
    )
    .unwrap();
    let mut cfg = sft_config(model, data, tmp.path().join("out"), 1);
    cfg.seed = 3;
    let s = Sft::new(cfg).unwrap();
    // Random adapters in B, so the adapted model is not the base one.
    for (name, v) in s.trainer.opt.vars() {
        if name.contains("lora_B") {
            v.set(&Tensor::rand(-0.3f32, 0.3, v.as_tensor().shape(), &Device::Cpu).unwrap())
                .unwrap();
        }
    }
    let (a, b, full) = (&s.data[0], &s.data[1], &s.data[2]);
    assert_eq!(a.loss_tokens(), b.loss_tokens());
    assert!(b.tokens.len() > a.tokens.len());
    // Summed, not averaged: a near-uniform tiny model gives every token about ln(vocab), so a
    // mean over all tokens hardly moves with more of them, while a sum moves by each token's NLL.
    let summed = |e: &SftExample| -> (f64, usize) {
        let (nll, k) = s.nll_sum(&[e]).unwrap();
        (
            nll.to_dtype(DType::F64)
                .unwrap()
                .to_scalar::<f64>()
                .unwrap(),
            k,
        )
    };
    let ((la, ka), (lb, kb)) = (summed(a), summed(b));
    assert_eq!(ka, kb);
    assert!(
        (la - lb).abs() < 1e-4,
        "tool text moved the loss: {la} vs {lb}"
    );
    let unmasked = |e: &SftExample| SftExample {
        mask: vec![1.0; e.tokens.len()],
        ..e.clone()
    };
    let ((ua, uka), (ub, ukb)) = (summed(&unmasked(a)), summed(&unmasked(b)));
    assert!(ukb > uka);
    assert!(
        (ua - ub).abs() > 1.0,
        "the control cannot tell: {ua} vs {ub}"
    );
    // In the two-turn example the tool output is masked, both assistant turns are not.
    let pick = |keep: f32| -> String {
        let ids: Vec<u32> = full
            .tokens
            .iter()
            .zip(&full.mask)
            .filter(|(_, m)| **m == keep)
            .map(|(t, _)| *t)
            .collect();
        s.trainer.policy.decode(&ids).unwrap()
    };
    assert!(pick(0.0).contains("toolresult"));
    let kept = pick(1.0);
    assert!(kept.contains("calc") && kept.contains("is four") && !kept.contains("toolresult"));
    // A batch's loss is the mean over all its assistant tokens, whatever the padding.
    let both = s.mean_nll(&[a, full]).unwrap();
    let (na, nf) = (a.loss_tokens() as f64, full.loss_tokens() as f64);
    let want = (s.mean_nll(&[a]).unwrap() * na + s.mean_nll(&[full]).unwrap() * nf) / (na + nf);
    assert!((both - want).abs() < 1e-5, "{both} vs {want}");
}

/// SFT, then GRPO with `--init-adapter` on its checkpoint: the GRPO policy at step 0 has the
/// SFT model's logits (not the base model's), a fresh optimizer, and its first sampled groups
/// already earn the SFT model's reward.
#[test]
fn grpo_with_init_adapter_starts_from_the_sft_adapter() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let (model, tasks, data) = toy_sft_files(tmp.path());
    let mut s = Sft::new(sft_config(model.clone(), data, tmp.path().join("sft"), 40)).unwrap();
    s.run(false).unwrap();
    let mut cfg = constant_toy_config(model, tasks.clone(), tmp.path().join("grpo"));
    cfg.init_adapter = Some(tmp.path().join("sft/checkpoint-40"));
    cfg.steps = 1;
    cfg.seed = 11;
    let source = Source::Online {
        tasks: read_tasks(&tasks).unwrap(),
        rewarder: super::in_process(&rt),
        rt: rt.handle().clone(),
    };
    let mut g = Trainer::new(cfg, source).unwrap();
    assert_eq!((g.step, g.opt.t), (0, 0));
    let ids = Tensor::new(&[[1u32, 2, 3, 4, 5, 6, 7]], &Device::Cpu).unwrap();
    let sft_logits = s.trainer.policy.model.forward(&ids, true).unwrap();
    let grpo_logits = g.policy.model.forward(&ids, true).unwrap();
    let base_logits = g.policy.model.forward(&ids, false).unwrap();
    assert!(
        max_diff(&sft_logits, &grpo_logits) < 1e-6,
        "GRPO starts {} away from the SFT model",
        max_diff(&sft_logits, &grpo_logits)
    );
    assert!(
        max_diff(&grpo_logits, &base_logits) > 0.5,
        "the adapter does nothing"
    );
    let m = g.train_step().unwrap();
    assert!(
        m.reward_mean >= 0.8,
        "first GRPO step reward {}",
        m.reward_mean
    );
}

/// An adapter of another rank, scale or target set, or with a tensor of another shape, is
/// refused naming the file; `--sft` with `--tasks` or `--offline` is refused.
#[test]
fn mismatched_adapters_and_options_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let (model, tasks) = write_toy(tmp.path()).unwrap();
    let cfg = constant_toy_config(model, tasks, tmp.path().join("out"));
    let adapter = Trainer::new(cfg.clone(), Source::Offline(Vec::new()))
        .unwrap()
        .save()
        .unwrap();
    let try_with = |edit: &dyn Fn(&mut TrainConfig), dir: &Path| -> String {
        let mut c = cfg.clone();
        c.init_adapter = Some(dir.to_path_buf());
        edit(&mut c);
        match Trainer::new(c, Source::Offline(Vec::new())) {
            Ok(_) => String::from("accepted"),
            Err(e) => e.to_string(),
        }
    };
    assert_eq!(try_with(&|_| {}, &adapter), "accepted");
    let config_file = adapter.join("adapter_config.json").display().to_string();
    for (edit, want) in [
        (
            &(|c: &mut TrainConfig| c.lora.r = 4) as &dyn Fn(&mut TrainConfig),
            "rank r = 8, this run 4",
        ),
        (&|c: &mut TrainConfig| c.lora.alpha = 32.0, "scale"),
        (
            &|c: &mut TrainConfig| c.lora.target_modules = vec!["q_proj".into()],
            "target modules",
        ),
    ] {
        let e = try_with(edit, &adapter);
        assert!(e.starts_with(&config_file) && e.contains(want), "{e}");
    }
    let e = try_with(&|_| {}, &tmp.path().join("nope"));
    assert!(e.contains("nope/adapter_config.json: missing"), "{e}");
    // One tensor of another shape (an adapter of another model).
    let file = adapter.join("adapter_model.safetensors");
    let mut t = candle_core::safetensors::load(&file, &Device::Cpu).unwrap();
    let name = "base_model.model.model.layers.1.mlp.up_proj.lora_A.weight";
    t.insert(
        name.into(),
        Tensor::zeros((8, 7), DType::F32, &Device::Cpu).unwrap(),
    );
    candle_core::safetensors::save(&t, &file).unwrap();
    let e = try_with(&|_| {}, &adapter);
    assert!(
        e.starts_with(&file.display().to_string()) && e.contains(name) && e.contains("shape"),
        "{e}"
    );
    // --sft excludes --tasks and --offline in train.toml (the flags: commands/train/args_tests.rs).
    let toml = tmp.path().join("train.toml");
    std::fs::write(
        &toml,
        "model = \"m\"\ntasks = \"t.jsonl\"\nsft = \"s.jsonl\"\n",
    )
    .unwrap();
    let e = TrainConfig::from_file(&toml)
        .unwrap()
        .validate()
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("`sft` and `tasks`/`offline` both set"),
        "{e}"
    );
}

/// SFT resumed from a checkpoint ends with the adapters of the straight run, bit for bit (the
/// data order is a function of the step).
#[test]
fn sft_resume_is_bit_identical() {
    let tmp = tempfile::tempdir().unwrap();
    let (model, _, data) = toy_sft_files(tmp.path());
    let run = |out: &str, steps: u64, resume: Option<PathBuf>| {
        let cfg = sft_config(model.clone(), data.clone(), tmp.path().join(out), steps);
        let mut s = Sft::new(cfg).unwrap();
        if let Some(dir) = resume {
            s.trainer.resume(&dir).unwrap();
        }
        s.run(false).unwrap();
        s.trainer
            .opt
            .vars()
            .iter()
            .map(|(_, v)| {
                v.as_tensor()
                    .flatten_all()
                    .unwrap()
                    .to_vec1::<f32>()
                    .unwrap()
            })
            .collect::<Vec<_>>()
    };
    let straight = run("a", 5, None);
    run("b", 3, None);
    let resumed = run("b", 5, Some(tmp.path().join("b/checkpoint-3")));
    assert_eq!(straight, resumed);
    // Every example is seen once per pass over the data (two passes in four steps of five).
    let s = Sft::new(sft_config(model, data, tmp.path().join("c"), 4)).unwrap();
    let mut seen: Vec<usize> = (0..4).flat_map(|k| s.batch(k)).collect();
    assert_ne!(seen[..10], (0..10).collect::<Vec<_>>()[..], "not shuffled");
    seen[..10].sort();
    seen[10..].sort();
    assert_eq!(
        seen,
        [(0..10).collect::<Vec<_>>(), (0..10).collect()].concat()
    );
}
