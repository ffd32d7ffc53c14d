//! `gavel train sample`: every task sampled `group_size` times and scored, written as the
//! self-contained scored groups `gavel select` and `train --offline` read.

use gavel::train::sample::write_samples;
use gavel::train::tasks::read_tasks;
use gavel::train::toy::{toy_config, write_toy};
use gavel::train::trainer::{Source, Trainer};

use super::in_process;

#[test]
fn sampled_groups_are_written_with_their_own_rewards_and_read_back() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let (model, tasks) = write_toy(tmp.path()).unwrap();
    let mut cfg = toy_config(model, tasks.clone(), tmp.path().join("out"));
    cfg.group_size = 8;
    cfg.prompts_per_step = 4;
    let n_tasks = read_tasks(&tasks).unwrap().len();
    let source = Source::Online {
        tasks: read_tasks(&tasks).unwrap(),
        rewarder: in_process(&rt),
        rt: rt.handle().clone(),
    };
    let mut trainer = Trainer::new(cfg, source).unwrap();
    let out = tmp.path().join("best8.jsonl");
    assert_eq!(write_samples(&mut trainer, &out).unwrap(), n_tasks);
    assert!(!tmp.path().join("best8.jsonl.tmp").exists());

    let groups = gavel::toolkit::scored::read_scored(&out).unwrap();
    assert_eq!(groups.len(), n_tasks, "one group per task, in task order");
    let rescorer = in_process(&rt);
    let mut spread = 0;
    for (g, line) in groups
        .iter()
        .zip(std::fs::read_to_string(&out).unwrap().lines())
    {
        assert_eq!(g.trajectories.len(), 8);
        assert_eq!(g.rewards.len(), 8);
        // The rewards are this group's: scoring the written trajectories again gives them.
        let mut body: serde_json::Value = serde_json::from_str(line).unwrap();
        let obj = body.as_object_mut().unwrap();
        obj.remove("rewards");
        obj.remove("advantages");
        let again = rt.block_on(rescorer.score(&body)).unwrap();
        assert_eq!(again.rewards, g.rewards, "line {}", g.line);
        assert_eq!(Some(again.advantages), g.advantages, "line {}", g.line);
        let r: Vec<f64> = g.rewards.iter().flatten().copied().collect();
        if r.iter().any(|&x| x != r[0]) {
            spread += 1;
        }
    }
    // The untrained toy model's samples differ, so best-of-8 has something to choose.
    assert!(spread > 0, "every group tied");
}

/// A group of one at temperature 0 is the policy's greedy answer to each task, in task order:
/// what an evaluation of a policy reads (`gavel train sample --group-size 1 --temperature 0`).
#[test]
fn a_group_of_one_at_temperature_zero_is_each_tasks_greedy_answer() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let (model, tasks) = write_toy(tmp.path()).unwrap();
    let mut cfg = toy_config(model, tasks.clone(), tmp.path().join("out"));
    cfg.group_size = 1;
    cfg.prompts_per_step = 4;
    cfg.sampling.temperature = 0.0;
    cfg.validate_for_sampling().unwrap();
    let read = read_tasks(&tasks).unwrap();
    let source = Source::Online {
        tasks: read.clone(),
        rewarder: in_process(&rt),
        rt: rt.handle().clone(),
    };
    let mut trainer = Trainer::new(cfg.clone(), source).unwrap();
    let out = tmp.path().join("greedy.jsonl");
    assert_eq!(write_samples(&mut trainer, &out).unwrap(), read.len());
    let groups = gavel::toolkit::scored::read_scored(&out).unwrap();
    assert_eq!(groups.len(), read.len());
    let mut answers = std::collections::BTreeSet::new();
    for (g, task) in groups.iter().zip(&read) {
        assert_eq!(g.trajectories.len(), 1, "line {}", g.line);
        let written = g.trajectories[0].messages.last().unwrap();
        assert_eq!(written.role, gavel::domain::trajectory::Role::Assistant);
        // The greedy answer of the task's prompt alone.
        let prompt = trainer.policy.prompt_ids(&task.messages).unwrap();
        let mut rng = gavel::domain::rng::Rng::new(1);
        let greedy = gavel::train::rollout::sample_rows(
            &trainer.policy,
            &[&prompt],
            &cfg.sampling,
            &mut rng,
        )
        .unwrap();
        assert_eq!(written.content.as_deref(), Some(greedy[0].text.as_str()));
        answers.insert(greedy[0].text.clone());
    }
    // The prompts differ, and so do some of their answers: not one answer copied.
    assert!(answers.len() > 1, "{answers:?}");
    // A group of one has no advantage: the same trainer refuses to train on it.
    let e = trainer.train_step().unwrap_err().to_string();
    assert!(e.contains("group_size >= 2"), "{e}");
}
