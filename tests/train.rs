//! `gavel train` end to end on the tiny random-init model: it learns the toy task, checkpoints
//! resume bit-identically, adapters load back; SFT and `--init-adapter` (`train/sft.rs`); the
//! difficulty filter (`train/filter.rs`).
#![cfg(feature = "train")]

mod common;
#[path = "train/dynamic.rs"]
mod dynamic;
#[path = "train/filter.rs"]
mod filter;
#[path = "train/sample.rs"]
mod sample;
#[path = "train/sft.rs"]
mod sft;

use std::sync::Arc;

use candle_core::{DType, Tensor};

use gavel::config::Config;
use gavel::score::Scorer;
use gavel::store::{SledStore, VerdictStore};
use gavel::train::scoring::Rewarder;
use gavel::train::tasks::read_tasks;
use gavel::train::toy::{constant_toy_config, toy_config, write_toy};
use gavel::train::trainer::{Source, Trainer};

/// The largest absolute difference between two tensors of one shape.
fn max_diff(a: &Tensor, b: &Tensor) -> f32 {
    (a - b)
        .unwrap()
        .abs()
        .unwrap()
        .max_all()
        .unwrap()
        .to_dtype(DType::F32)
        .unwrap()
        .to_scalar()
        .unwrap()
}

fn in_process(rt: &tokio::runtime::Runtime) -> Rewarder {
    let cfg = Config::from_env(&|_| None).expect("no variables, no error");
    let store: Arc<dyn VerdictStore> = Arc::new(SledStore::temporary().unwrap());
    let _guard = rt.enter();
    Rewarder::InProcess(Arc::new(Scorer::new(cfg.scorer_parts(), store).unwrap()))
}

/// GRPO on the toy task — ten prompts, each with its own answer, partial credit per digit —
/// raises the mean reward of the last 10 steps (over every group drawn) to ≥ 0.7 and by ≥ 0.4
/// over the first 10.
///
/// The bar sits below the worst of seeds 1–10 (BENCHMARKS.md, "Training: the toy run across
/// seeds": each ends above 0.8 from about 0.23), not at the default seed's figure: the run is
/// chaotic, a change of 5e-8 in one step's gradient gives another run.
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
        m.iter().map(|s| s.drawn_reward_mean).sum::<f64>() / m.len() as f64
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
    assert!(last >= 0.7, "final reward {last:.3} (start {first:.3})");
    assert!(last - first >= 0.4, "reward {first:.3} → {last:.3}");
}

/// The shuffled-reward control on the toy task: the same run with each group's rewards
/// permuted within the group samples the same first step (the same mean reward) but does not
/// learn, where the run with its real rewards does (`toy_run_learns`).
#[test]
fn toy_run_with_shuffled_rewards_does_not_learn() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let (model, tasks) = write_toy(tmp.path()).unwrap();
    let run = |shuffle: bool| {
        let mut cfg = toy_config(
            model.clone(),
            tasks.clone(),
            tmp.path().join(format!("{shuffle}")),
        );
        cfg.shuffle_rewards = shuffle;
        let source = Source::Online {
            tasks: read_tasks(&tasks).unwrap(),
            rewarder: in_process(&rt),
            rt: rt.handle().clone(),
        };
        Trainer::new(cfg, source).unwrap().run(false).unwrap()
    };
    let (real, control) = (run(false), run(true));
    // The same rewards, summed in another order.
    let (r0, c0) = (real[0].reward_mean, control[0].reward_mean);
    assert!(
        (r0 - c0).abs() < 1e-12,
        "the first step samples alike: {r0} vs {c0}"
    );
    let mean = |m: &[gavel::train::trainer::StepMetrics]| {
        m.iter().map(|s| s.reward_mean).sum::<f64>() / m.len() as f64
    };
    let (first, last) = (mean(&control[..10]), mean(&control[control.len() - 10..]));
    let real_last = mean(&real[real.len() - 10..]);
    eprintln!("control: reward {first:.3} → {last:.3}; real rewards: → {real_last:.3}");
    assert!(
        last - first < 0.25,
        "the control learned: {first:.3} → {last:.3}"
    );
    assert!(
        real_last - last >= 0.4,
        "real {real_last:.3} vs control {last:.3}"
    );
}

/// One task in `dir` whose reward half the random toy model's first tokens earn (a first digit
/// in 0..=4): its path.
fn half_rewarded_task(dir: &std::path::Path) -> std::path::PathBuf {
    let tasks = dir.join("low.jsonl");
    let line = serde_json::json!({"messages": [{"role": "user", "content": "12"}],
        "verifiers": [{"type": "regex", "name": "low", "pattern": "^[0-4]"}],
        "policy": {"type": "weighted", "weights": {"low": 1.0}}});
    std::fs::write(&tasks, format!("{line}\n")).unwrap();
    tasks
}

/// N+M steps straight give the same adapters, bit for bit, as N steps, a checkpoint, a new
/// process-like trainer resumed from it, and M more; the checkpoint is in PEFT's layout.
#[test]
fn resume_is_bit_identical_and_checkpoints_are_peft() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let (model, _) = write_toy(tmp.path()).unwrap();
    // A reward that half the random model's first tokens earn, so every step has signal.
    let tasks = half_rewarded_task(tmp.path());
    let trainer = |out: &str, steps: u64| {
        let mut cfg = constant_toy_config(model.clone(), tasks.clone(), tmp.path().join(out));
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

/// The summed log-prob of `completion` after `prompt`, under the adapted policy.
fn seq_logp(t: &Trainer, prompt: &[u32], completion: &[u32]) -> f32 {
    let ids: Vec<u32> = [prompt, completion].concat();
    let n = ids.len();
    let ids = candle_core::Tensor::from_vec(ids, (1, n), &candle_core::Device::Cpu).unwrap();
    let logits = t.policy.model.forward(&ids, true).unwrap();
    let lp = t
        .policy
        .log_probs(&logits, 1.0)
        .unwrap()
        .squeeze(0)
        .unwrap();
    let lp: Vec<Vec<f32>> = lp.to_vec2().unwrap();
    completion
        .iter()
        .enumerate()
        .map(|(j, &tok)| lp[prompt.len() - 1 + j][tok as usize])
        .sum()
}

fn offline_trainer(dir: &std::path::Path, model: std::path::PathBuf, steps: u64) -> Trainer {
    let mut cfg = toy_config(model, dir.join("unused.jsonl"), dir.join("out"));
    cfg.tasks = None;
    cfg.offline = Some(dir.join("scored.jsonl"));
    cfg.steps = steps;
    cfg.prompts_per_step = 2;
    cfg.micro_batch_groups = 1;
    cfg.learning_rate = 1e-2;
    cfg.grpo.beta = 0.0;
    Trainer::new(cfg, Source::Offline(Vec::new())).unwrap()
}

/// Offline GRPO on logged, scored groups — a self-contained line and `gavel rescore` output
/// pointing into its input file — moves the adapters toward the high-reward completions; tool
/// output in a completion is masked out of the loss.
#[test]
fn offline_steps_raise_high_reward_completions() {
    use common::model::testkit::{write_folder, TinyOptions};
    use gavel::model::Arch;
    use gavel::train::offline::read_scored;
    let tmp = tempfile::tempdir().unwrap();
    let model = tmp.path().join("tiny");
    write_folder(&model, &TinyOptions::new(Arch::Qwen2)).unwrap();
    let traj = |answer: &str| {
        serde_json::json!({"messages": [{"role": "user", "content": "0 1 2 3"},
            {"role": "assistant", "content": answer}]})
    };
    let good = "4 5 6";
    let bad = "the end";
    // rescore's input: a request body on line 1, one-trajectory lines of group "g7" after it.
    let input = tmp.path().join("runs.jsonl");
    let agent = serde_json::json!({"group_id": "g7", "messages": [
        {"role": "user", "content": "add"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function",
            "function": {"name": "calc", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "toolresult"},
        {"role": "assistant", "content": "is"}]});
    let agent2 = serde_json::json!({"group_id": "g7", "messages": [
        {"role": "user", "content": "add"}, {"role": "assistant", "content": "no"}]});
    std::fs::write(
        &input,
        format!(
            "{}\n{agent}\n{agent2}\n",
            serde_json::json!({"trajectories": [traj(bad), traj(good), traj("4 5 0")]})
        ),
    )
    .unwrap();
    let lines = [
        serde_json::json!({"trajectories": [traj(good), traj(bad), traj("4 9 9"), traj("x")],
            "rewards": [1.0, 0.0, 0.34, null]}),
        serde_json::json!({"input": "runs.jsonl", "line": 1, "rewards": [0.0, 1.0, 0.67],
            "advantages": [-1.0, 1.0, 0.0]}),
        serde_json::json!({"input": "runs.jsonl", "group_id": "g7", "rewards": [1.0, 0.0]}),
    ];
    let text: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
    std::fs::write(tmp.path().join("scored.jsonl"), text.join("\n")).unwrap();

    let mut t = offline_trainer(tmp.path(), model.clone(), 6);
    let groups = read_scored(&tmp.path().join("scored.jsonl"), &t.policy).unwrap();
    assert_eq!(groups.len(), 3);
    // The null reward is left out; the rest keep their order.
    assert_eq!(groups[0].completions.len(), 3);
    assert_eq!(groups[1].advantages, vec![-1.0, 1.0, 0.0]);
    // The agent's completion: its tool output is masked, its own turns are not.
    let agent = &groups[2];
    let mask = &agent.masks[0];
    let masked: Vec<u32> = agent.completions[0]
        .tokens
        .iter()
        .zip(mask)
        .filter(|(_, m)| **m == 0.0)
        .map(|(t, _)| *t)
        .collect();
    assert!(t.policy.decode(&masked).unwrap().contains("toolresult"));
    let kept: Vec<u32> = agent.completions[0]
        .tokens
        .iter()
        .zip(mask)
        .filter(|(_, m)| **m == 1.0)
        .map(|(t, _)| *t)
        .collect();
    let kept = t.policy.decode(&kept).unwrap();
    assert!(kept.contains("calc") && kept.contains("is") && !kept.contains("toolresult"));
    assert_eq!(agent.prompts[0], agent.prompts[1]);

    let msgs = [gavel::domain::prompt::ChatMessage {
        role: "user".into(),
        content: "0 1 2 3".into(),
    }];
    let prompt = t.policy.prompt_ids(&msgs).unwrap();
    let (g, b) = (
        t.policy.encode(good).unwrap(),
        t.policy.encode(bad).unwrap(),
    );
    let before = seq_logp(&t, &prompt, &g) - seq_logp(&t, &prompt, &b);
    t.source = Source::Offline(groups);
    let metrics = t.run(false).unwrap();
    assert!(metrics
        .iter()
        .all(|m| m.skipped_groups == 0 && m.loss.is_finite()));
    let after = seq_logp(&t, &prompt, &g) - seq_logp(&t, &prompt, &b);
    assert!(
        after > before + 1.0,
        "log p(good) − log p(bad): {before:.3} → {after:.3}"
    );
    let moved = t
        .opt
        .vars()
        .iter()
        .filter(|(n, _)| n.contains("lora_B"))
        .any(|(_, v)| {
            v.as_tensor()
                .abs()
                .unwrap()
                .sum_all()
                .unwrap()
                .to_scalar::<f32>()
                .unwrap()
                > 0.0
        });
    assert!(moved, "the adapters did not move");
}

/// Bad lines of a scored file stop training before the first step, naming file, line and
/// problem.
#[test]
fn offline_bad_lines_name_file_line_and_problem() {
    use common::model::testkit::{write_folder, TinyOptions};
    use gavel::model::Arch;
    use gavel::train::offline::read_scored;
    let tmp = tempfile::tempdir().unwrap();
    let model = tmp.path().join("tiny");
    write_folder(&model, &TinyOptions::new(Arch::Qwen2)).unwrap();
    let t = offline_trainer(tmp.path(), model, 1);
    let good = r#"{"trajectories": [[{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}], [{"role": "user", "content": "a"}, {"role": "assistant", "content": "c"}]], "rewards": [1, 0]}"#;
    let path = tmp.path().join("scored.jsonl");
    for (line, want) in [
        ("{", "not valid JSON"),
        (r#"{"trajectories": []}"#, "rewards: missing"),
        (r#"{"rewards": [1, 0]}"#, "trajectories: missing"),
        (
            r#"{"rewards": [1], "trajectories": [[{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}], [{"role": "user", "content": "a"}, {"role": "assistant", "content": "c"}]]}"#,
            "rewards: 1 rewards for 2 trajectories",
        ),
        (
            r#"{"rewards": [1, 0], "trajectories": [[{"role": "user", "content": "a"}], [{"role": "user", "content": "b"}]]}"#,
            "trajectories[0]: no assistant message",
        ),
        (
            r#"{"rewards": [1, 0], "trajectories": [[{"role": "assistant", "content": "x"}, {"role": "user", "content": "a"}], [{"role": "user", "content": "a"}, {"role": "assistant", "content": "c"}]]}"#,
            "trajectories[0]: no assistant turn",
        ),
        (
            r#"{"rewards": [1, 0], "input": "nope.jsonl", "line": 1}"#,
            "input: nope.jsonl: no such file",
        ),
        (
            r#"{"error_type": "judge_timeout", "reason": "x"}"#,
            "a rejected group",
        ),
    ] {
        std::fs::write(&path, format!("{good}\n{line}\n")).unwrap();
        let e = read_scored(&path, &t.policy).unwrap_err().to_string();
        let at = format!("{}:2: ", path.display());
        assert!(e.starts_with(&at) && e.contains(want), "{e}");
    }
}

/// The step rewards of a short toy run with `rewarder`, and its adapters.
fn short_run(
    dir: &std::path::Path,
    rewarder: Rewarder,
    rt: &tokio::runtime::Runtime,
    tasks: &std::path::Path,
) -> (Vec<f64>, Vec<Vec<f32>>) {
    let (model, _) = write_toy(dir).unwrap();
    let mut cfg = toy_config(model, tasks.to_path_buf(), dir.join("out"));
    cfg.steps = 3;
    cfg.prompts_per_step = 2;
    cfg.micro_batch_groups = 2;
    cfg.group_size = 4;
    let source = Source::Online {
        tasks: read_tasks(tasks).unwrap(),
        rewarder,
        rt: rt.handle().clone(),
    };
    let mut t = Trainer::new(cfg, source).unwrap();
    let m = t.run(false).unwrap();
    let adapters = t
        .opt
        .vars()
        .iter()
        .map(|(_, v)| v.as_tensor().flatten_all().unwrap().to_vec1().unwrap())
        .collect();
    (m.iter().map(|s| s.reward_mean).collect(), adapters)
}

/// `--scorer-url`: rewards come from a running daemon over HTTP — with a judge in the reward —
/// and training goes exactly as with the same scorer in-process.
#[test]
fn scorer_url_trains_like_in_process() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (mock, gavel, dir) = rt.block_on(common::setup());
    let tasks = dir.path().join("tasks.jsonl");
    let mut line = gavel::train::toy::task_line(3);
    line["policy"]["weights"]["judge"] = serde_json::json!(1.0);
    std::fs::write(&tasks, format!("{line}\n")).unwrap();
    let (http, http_adapters) = short_run(
        &dir.path().join("http"),
        Rewarder::http(&gavel.url),
        &rt,
        &tasks,
    );
    let calls = mock.calls();
    assert!(calls > 0, "the daemon never asked the judge");
    let cfg = mock.config(&dir.path().join("store2"));
    let store: Arc<dyn VerdictStore> = Arc::new(SledStore::temporary().unwrap());
    let scorer = {
        let _g = rt.enter();
        Arc::new(Scorer::new(cfg.scorer_parts(), store).unwrap())
    };
    let (local, local_adapters) = short_run(
        &dir.path().join("local"),
        Rewarder::InProcess(scorer),
        &rt,
        &tasks,
    );
    assert!(mock.calls() > calls);
    assert_eq!(http, local);
    assert_eq!(http_adapters, local_adapters);
    // The mock judge scores 0.5 without a marker: every reward holds that quarter.
    assert!(http.iter().all(|r| *r >= 0.125), "{http:?}");
    rt.block_on(gavel.stop());
}

/// A group that gets no rewards says why, with the cause kept as its source: the daemon's typed
/// refusal, a daemon that cannot be reached, or a request refused in-process.
#[test]
fn a_scoring_failure_keeps_its_cause() {
    use gavel::train::scoring::ScoreFailure;
    use std::error::Error;
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (mock, gavel, dir) = rt.block_on(common::setup());
    let bad = serde_json::json!({"trajectories": []});
    let e = rt
        .block_on(Rewarder::http(&gavel.url).score(&bad))
        .unwrap_err();
    let ScoreFailure::Refused { status, kind, .. } = &e else {
        panic!("{e:?}")
    };
    assert_eq!(
        (status.as_u16(), kind.as_str()),
        (400, "invalid_request"),
        "{e}"
    );
    let e = e.at(Some("tasks.jsonl:3"));
    assert!(
        e.to_string().starts_with(&format!(
            "scoring failed: tasks.jsonl:3: {}/v1/score_group: 400",
            gavel.url
        )),
        "{e}"
    );
    assert!(e.source().is_some_and(|s| s.is::<ScoreFailure>()));
    // Nothing listens on the port the daemon had.
    let url = gavel.url.clone();
    rt.block_on(gavel.stop());
    let e = rt.block_on(Rewarder::http(&url).score(&bad)).unwrap_err();
    let ScoreFailure::Http { source, .. } = &e else {
        panic!("{e:?}")
    };
    assert!(source.is_connect(), "{e}");
    let scorer = {
        let _g = rt.enter();
        let store: Arc<dyn VerdictStore> = Arc::new(SledStore::temporary().unwrap());
        Arc::new(Scorer::new(mock.config(&dir.path().join("s")).scorer_parts(), store).unwrap())
    };
    let e = rt
        .block_on(Rewarder::InProcess(scorer).score(&bad))
        .unwrap_err();
    assert!(matches!(e, ScoreFailure::Request(_)), "{e:?}");
}

/// `gavel train merge`: the merged model's logits equal the adapted model's.
#[test]
fn merged_weights_give_the_adapted_logits() {
    use candle_core::Device;
    use gavel::train::rollout::PolicyModel;
    let tmp = tempfile::tempdir().unwrap();
    let (model, tasks) = write_toy(tmp.path()).unwrap();
    let cfg = toy_config(model, tasks, tmp.path().join("out"));
    let t = Trainer::new(cfg.clone(), Source::Offline(Vec::new())).unwrap();
    for (name, v) in t.opt.vars() {
        if name.contains("lora_B") {
            let r = Tensor::rand(-0.5f32, 0.5, v.as_tensor().shape(), &Device::Cpu).unwrap();
            v.set(&r).unwrap();
        }
    }
    let adapter = t.save().unwrap();
    let out = tmp.path().join("merged");
    gavel::train::plan::merge(&cfg, &adapter, &out).unwrap();
    let merged = PolicyModel::load(
        &out,
        "cpu",
        &gavel::train::lora::LoraConfig::default(),
        &mut gavel::domain::rng::Rng::new(1),
    )
    .unwrap();
    let ids = Tensor::new(&[[1u32, 2, 3, 4, 5, 6, 7]], &Device::Cpu).unwrap();
    let adapted = t.policy.model.forward(&ids, true).unwrap();
    let base = t.policy.model.forward(&ids, false).unwrap();
    // Fresh adapters (B = 0) on the merged model change nothing.
    let m = merged.model.forward(&ids, true).unwrap();
    assert!(max_diff(&adapted, &base) > 0.1, "the adapters do nothing");
    assert!(
        max_diff(&adapted, &m) < 1e-4,
        "merged logits differ by {}",
        max_diff(&adapted, &m)
    );
}

/// A LoRA step on the real Qwen2.5-0.5B GGUF (opt-in: `GAVEL_TEST_MODEL`) change
/// the adapters and nothing else: the base model's logits stay bit for bit.
#[test]
fn real_model_lora_steps_change_only_adapters() {
    let Some(path) = std::env::var_os("GAVEL_TEST_MODEL") else {
        eprintln!("skipped: set GAVEL_TEST_MODEL to a Qwen GGUF (tools/fetch-model.sh 0.5b)");
        return;
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let tasks = tmp.path().join("tasks.jsonl");
    let line = serde_json::json!({"messages": [{"role": "user", "content": "Say a number."}],
        "verifiers": [{"type": "regex", "name": "digit", "pattern": "[0-9]"}],
        "policy": {"type": "weighted", "weights": {"digit": 1.0}}});
    std::fs::write(&tasks, format!("{line}\n")).unwrap();
    let mut cfg = constant_toy_config(path.into(), tasks.clone(), tmp.path().join("out"));
    cfg.steps = 1;
    cfg.prompts_per_step = 1;
    cfg.group_size = 4;
    cfg.sampling.max_tokens = 4;
    cfg.sampling.temperature = 1.5;
    cfg.grpo.beta = 0.0;
    cfg.lora.r = 4;
    cfg.lora.target_modules = vec!["q_proj".into(), "v_proj".into()];
    let source = Source::Online {
        tasks: read_tasks(&tasks).unwrap(),
        rewarder: in_process(&rt),
        rt: rt.handle().clone(),
    };
    let mut t = Trainer::new(cfg, source).unwrap();
    let ids =
        candle_core::Tensor::new(&[[9707u32, 11, 1879, 0]], &candle_core::Device::Cpu).unwrap();
    let base_before: Vec<f32> = t
        .policy
        .model
        .forward(&ids, false)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap();
    let vars_before: Vec<Vec<f32>> = t
        .opt
        .vars()
        .iter()
        .map(|(_, v)| v.as_tensor().flatten_all().unwrap().to_vec1().unwrap())
        .collect();
    let m = t.run(false).unwrap();
    eprintln!(
        "real model: rewards {:?}, skipped {:?}",
        m.iter().map(|s| s.reward_mean).collect::<Vec<_>>(),
        m.iter().map(|s| s.skipped_groups).collect::<Vec<_>>()
    );
    let base_after: Vec<f32> = t
        .policy
        .model
        .forward(&ids, false)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap();
    assert_eq!(base_before, base_after, "the base model changed");
    let vars_after: Vec<Vec<f32>> = t
        .opt
        .vars()
        .iter()
        .map(|(_, v)| v.as_tensor().flatten_all().unwrap().to_vec1().unwrap())
        .collect();
    assert!(
        m.iter().any(|s| s.skipped_groups == 0),
        "no step had a reward signal"
    );
    assert_ne!(vars_before, vars_after, "the adapters did not move");
    assert_eq!(
        t.opt.vars().len(),
        24 * 2 * 2,
        "adapters on q_proj and v_proj of 24 layers"
    );
}

/// `gavel train toy` takes its options after the action (the README's command) and honours
/// `--seed`: the same seed replays the run, another seed gives another one.
#[test]
fn train_toy_takes_options_after_the_action_and_honours_the_seed() {
    let tmp = tempfile::tempdir().unwrap();
    let run = |name: &str, seed: &str| -> Vec<f64> {
        let dir = tmp.path().join(name);
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_gavel"))
            .args(["train", "toy", "--output-dir"])
            .arg(&dir)
            .args(["--steps", "2", "--seed", seed, "--quiet"])
            .env_remove("GAVEL_TRAIN_CONFIG")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::read_to_string(dir.join("run/metrics.jsonl"))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .filter_map(|v| v["reward_mean"].as_f64())
            .collect()
    };
    let a = run("a", "1");
    assert_eq!(a.len(), 2, "{a:?}");
    assert_eq!(run("b", "1"), a, "the same seed replays the run");
    assert_ne!(run("c", "2"), a, "another seed draws another run");
}
