//! Dynamic sampling (DAPO) on the toy model: a step whose groups tie draws prompts again for
//! them, so it trains on groups with spread; without it the same run trains on tied groups.

use gavel::train::tasks::read_tasks;
use gavel::train::toy::{constant_toy_config, write_toy};
use gavel::train::trainer::{Source, StepMetrics, Trainer};

use super::{half_rewarded_task, in_process};

/// Groups of two on a reward the random model earns about half the time (a first digit in
/// 0..=4): about half the groups tie.
fn run(rounds: u32) -> Vec<StepMetrics> {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let (model, _) = write_toy(tmp.path()).unwrap();
    let tasks = half_rewarded_task(tmp.path());
    let mut cfg = constant_toy_config(model, tasks.clone(), tmp.path().join("out"));
    cfg.steps = 4;
    cfg.prompts_per_step = 4;
    cfg.group_size = 2;
    cfg.dynamic_sampling_rounds = rounds;
    let source = Source::Online {
        tasks: read_tasks(&tasks).unwrap(),
        rewarder: in_process(&rt),
        rt: rt.handle().clone(),
    };
    Trainer::new(cfg, source).unwrap().run(false).unwrap()
}

#[test]
fn tied_groups_are_drawn_again_up_to_the_rounds() {
    let plain = run(0);
    assert!(plain.iter().all(|m| m.groups_drawn == 4));
    let plain_tied: usize = plain.iter().map(|m| m.skipped_groups).sum();
    assert!(
        plain_tied > 0,
        "the reward ties no group: the test shows nothing"
    );

    let rounds = 8;
    let dynamic = run(rounds);
    let mut redrawn = 0;
    for m in &dynamic {
        assert!(m.groups_drawn >= 4, "{m:?}");
        redrawn += m.groups_drawn - 4;
        // Tied groups are only left where every round was spent.
        if m.skipped_groups > 0 {
            assert_eq!(m.groups_drawn, 4 * (rounds as usize + 1), "{m:?}");
        }
    }
    assert!(redrawn > 0, "no step drew again");
    let dynamic_tied: usize = dynamic.iter().map(|m| m.skipped_groups).sum();
    assert!(dynamic_tied < plain_tied, "{dynamic_tied} vs {plain_tied}");
    // Seeded: the same run draws the same groups.
    let again = run(rounds);
    let drawn = |r: &[StepMetrics]| r.iter().map(|m| m.groups_drawn).collect::<Vec<_>>();
    assert_eq!(drawn(&dynamic), drawn(&again));
}
