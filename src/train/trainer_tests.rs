//! The training pass with a group's prompt run once against every row running its whole
//! sequence: the same loss and adapter gradients.

use super::*;
use crate::train::rollout::Finish;
use crate::train::toy::{toy_config, write_toy};

/// A group of four completions of one prompt, of different lengths (padding in the batch),
/// with advantages of both signs.
fn group(trainer: &Trainer) -> GroupData {
    let msgs = [crate::domain::prompt::ChatMessage {
        role: "user".into(),
        content: "3456".into(),
    }];
    let prompt = trainer.policy.prompt_ids(&msgs).unwrap();
    let digits: Vec<u32> = "0123456789"
        .chars()
        .map(|c| trainer.policy.encode(&c.to_string()).unwrap()[0])
        .collect();
    let completions: Vec<SampledCompletion> = [1usize, 3, 5, 2]
        .iter()
        .enumerate()
        .map(|(k, &n)| SampledCompletion {
            tokens: (0..n).map(|j| digits[(k * 3 + j * 7) % 10]).collect(),
            logp: vec![-2.0; n],
            text: String::new(),
            finish: Finish::Length,
        })
        .collect();
    GroupData {
        prompts: vec![prompt; 4],
        completions,
        masks: Vec::new(),
        rewards: vec![Some(1.0), Some(0.0), Some(0.5), Some(0.2)],
        advantages: vec![1.2, -0.9, 0.4, -0.7],
        has_sampler_logp: false,
    }
}

#[test]
fn a_shared_prompt_gives_the_loss_and_gradients_of_whole_sequences() {
    let tmp = tempfile::tempdir().unwrap();
    let (model, tasks) = write_toy(tmp.path()).unwrap();
    for beta in [0.0, 0.04] {
        let mut cfg = toy_config(model.clone(), tasks.clone(), tmp.path().join("out"));
        cfg.grpo.beta = beta;
        let trainer = Trainer::new(cfg, Source::Offline(Vec::new())).unwrap();
        // Adapters away from their zero start, so every adapter matrix gets a gradient.
        for (_, v) in trainer.opt.vars() {
            let t = v.as_tensor();
            let bumped = (t + 0.05 * t.randn_like(0.0, 1.0).unwrap()).unwrap();
            v.set(&bumped).unwrap();
        }
        let g = group(&trainer);
        let shared = trainer.micro_batch_with(&[&g], 1, 11.0, true).unwrap();
        let whole = trainer.micro_batch_with(&[&g], 1, 11.0, false).unwrap();
        assert!(
            (shared.loss - whole.loss).abs() < 1e-5,
            "beta {beta}: {} vs {}",
            shared.loss,
            whole.loss
        );
        assert!(whole.loss.abs() > 1e-4, "a loss of zero proves nothing");
        assert!((shared.entropy - whole.entropy).abs() < 1e-5);
        assert_eq!(shared.grads.len(), whole.grads.len());
        let mut moved = 0;
        for (name, a) in &whole.grads {
            let b = &shared.grads[name];
            let d = crate::model::testkit::max_abs_diff(a, b);
            assert!(d < 1e-5, "beta {beta} {name}: {d}");
            let norm = crate::model::testkit::max_abs(a);
            moved += usize::from(norm > 1e-6);
        }
        assert!(
            moved > whole.grads.len() / 2,
            "{moved} of {}",
            whole.grads.len()
        );
    }
}
