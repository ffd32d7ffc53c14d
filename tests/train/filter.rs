//! The difficulty filter on the toy model: a survey before training (and every `resurvey_every`
//! steps) drops the tasks the policy always or never solves, the steps draw only from the rest,
//! `metrics.jsonl` reports the mix, and a survey that keeps nothing stops training (an error before
//! the first step, the end of the run with a checkpoint after it).

use gavel::train::filter::{Band, FilterConfig, FilterState};
use gavel::train::tasks::read_tasks;
use gavel::train::toy::{constant_toy_config, write_toy};
use gavel::train::trainer::{Source, Trainer};

use super::in_process;

/// A task on `prompt` whose single verifier is `pattern` (reward 1 on a match, else 0).
fn task(prompt: &str, pattern: &str) -> String {
    serde_json::json!({"messages": [{"role": "user", "content": prompt}],
        "verifiers": [{"type": "regex", "name": "v", "pattern": pattern}],
        "policy": {"type": "weighted", "weights": {"v": 1.0}}})
    .to_string()
}

/// Always solved (an empty pattern matches anything), never solved (the toy vocabulary has no
/// `x`), and in between (a first digit in 0..=4, about half the random model's draws).
const ALWAYS: [usize; 2] = [0, 3];
const NEVER: [usize; 2] = [1, 4];
const BETWEEN: [usize; 2] = [2, 5];

fn trainer(
    dir: &std::path::Path,
    lines: &[String],
    rt: &tokio::runtime::Runtime,
    filter: FilterConfig,
    steps: u64,
) -> Trainer {
    let (model, _) = write_toy(dir).unwrap();
    let tasks = dir.join("mixed.jsonl");
    std::fs::write(&tasks, lines.join("\n") + "\n").unwrap();
    let mut cfg = constant_toy_config(model, tasks.clone(), dir.join("out"));
    cfg.steps = steps;
    cfg.prompts_per_step = 4;
    cfg.group_size = 8;
    cfg.micro_batch_groups = 4;
    // Small steps: the next survey sees much the same policy, so the same tasks stay in the band.
    cfg.learning_rate = 1e-4;
    cfg.filter = Some(filter);
    let source = Source::Online {
        tasks: read_tasks(&tasks).unwrap(),
        rewarder: in_process(rt),
        rt: rt.handle().clone(),
    };
    Trainer::new(cfg, source).unwrap()
}

fn metrics(dir: &std::path::Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(dir.join("out/metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn a_survey_drops_always_and_never_solved_tasks_and_reports_the_mix() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let mut lines = vec![String::new(); 6];
    // The in-between prompts are ones where the random model's first digit is in 0..=4 about
    // half the time.
    let prompts = ["34", "78", "12", "01", "23", "56"];
    for i in ALWAYS {
        lines[i] = task(prompts[i], "");
    }
    for i in NEVER {
        lines[i] = task(prompts[i], "x");
    }
    for i in BETWEEN {
        lines[i] = task(prompts[i], "^[0-4]");
    }
    let filter = FilterConfig {
        resurvey_every: 2,
        ..FilterConfig::default()
    };
    let mut t = trainer(tmp.path(), &lines, &rt, filter, 3);
    let steps = t.run(false).unwrap();
    assert_eq!(steps.len(), 3);
    assert_eq!(t.filter.active, Some(BETWEEN.to_vec()));
    assert_eq!(t.filter.surveyed_at, Some(2));

    let lines = metrics(tmp.path());
    let events: Vec<&str> = lines
        .iter()
        .map(|l| l["event"].as_str().unwrap_or("step"))
        .collect();
    // A survey before step 1 and again after step 2 (resurvey_every = 2).
    assert_eq!(events, ["survey", "step", "step", "survey", "step"]);
    for (line, step) in [(&lines[0], 0), (&lines[3], 2)] {
        assert_eq!(line["step"], step, "{line}");
        assert_eq!(line["tasks"], 6, "{line}");
        assert_eq!(line["below"], 2, "{line}");
        assert_eq!(line["inside"], 2, "{line}");
        assert_eq!(line["above"], 2, "{line}");
        assert_eq!(line["unscored"], 0, "{line}");
        assert_eq!(line["survey_samples"], 8, "{line}");
        let tokens = line["survey_tokens"].as_u64().unwrap();
        // 6 tasks × 8 samples × at most 3 tokens each.
        assert!(tokens > 0 && tokens <= 6 * 8 * 3, "{line}");
    }
    // Only tasks in the band were drawn: every group had a reward spread, none was skipped
    // (two thirds of the tasks always tie, so an unfiltered draw of 12 groups would skip some).
    for s in &steps {
        assert_eq!(s.skipped_groups, 0, "step {}: {:?}", s.step, s);
    }

    // The kept tasks go into the checkpoint, so a resumed run draws from the same ones.
    let ckpt = t.save().unwrap();
    assert_eq!(FilterState::load(&ckpt).unwrap(), t.filter);
}

#[test]
fn a_survey_that_keeps_no_task_stops_training() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let lines = vec![task("12", ""), task("34", "x"), task("56", "")];
    let mut t = trainer(tmp.path(), &lines, &rt, FilterConfig::default(), 2);
    let e = t.run(false).unwrap_err().to_string();
    assert!(
        e.contains("no task inside filter.pass_rate [0.1, 0.9]"),
        "{e}"
    );
    assert!(e.contains("1 below, 2 above"), "{e}");
    assert_eq!(t.step, 0, "trained on nothing");
    // The same tasks with a band that takes the never-solved end: one is kept.
    let mut t = trainer(
        &tmp.path().join("wide"),
        &lines,
        &rt,
        FilterConfig {
            pass_rate: [0.0, 0.5],
            ..FilterConfig::default()
        },
        1,
    );
    let p = t.survey_if_due().unwrap().unwrap();
    assert_eq!((p.below, p.inside, p.above), (0, 1, 2));
    assert_eq!(p.bands, [Band::Above, Band::Inside, Band::Above]);
    assert_eq!(t.filter.active, Some(vec![1]));
    assert!(
        t.survey_if_due().unwrap().is_none(),
        "resurvey_every = 0: one survey"
    );
}

/// A later survey that finds no task left inside the band ends the run at that step with a
/// checkpoint (what was trained is kept), instead of an error that would lose it.
#[test]
fn a_later_survey_that_keeps_no_task_ends_the_run_with_a_checkpoint() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    // Band [0, 0.5]: the never-solved task is inside, the always-solved one above.
    let lines = vec![task("12", ""), task("34", "x")];
    let filter = FilterConfig {
        pass_rate: [0.0, 0.5],
        resurvey_every: 1,
        ..FilterConfig::default()
    };
    let mut t = trainer(tmp.path(), &lines, &rt, filter, 5);
    let p = t.survey_if_due().unwrap().unwrap();
    assert_eq!((p.inside, p.above), (1, 1));
    let kept = t.filter.clone();
    t.train_step().unwrap();
    // The task that was inside is now solved every time: the survey at step 1 keeps nothing.
    let Source::Online { tasks, .. } = &mut t.source else {
        unreachable!()
    };
    tasks[1] = tasks[0].clone();
    let m = t.run(false).unwrap();
    assert!(m.is_empty(), "no step after the empty survey");
    assert_eq!(t.step, 1);
    assert!(tmp.path().join("out/checkpoint-1").is_dir());
    assert_eq!(
        t.filter, kept,
        "the kept tasks stay as the last useful survey left them"
    );
    let last = metrics(tmp.path()).pop().unwrap();
    assert_eq!(last["event"], "survey");
    assert_eq!(
        (last["step"].as_u64(), last["inside"].as_u64()),
        (Some(1), Some(0))
    );
}

/// With the filter on, N steps, a checkpoint, a resumed trainer and M more steps give the
/// adapters and the surveys of N+M steps straight: the kept tasks travel with the checkpoint.
#[test]
fn resume_with_the_filter_is_bit_identical() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let lines = vec![task("34", ""), task("12", "^[0-4]"), task("56", "^[0-4]")];
    let filter = FilterConfig {
        resurvey_every: 2,
        ..FilterConfig::default()
    };
    let adapters = |t: &Trainer| -> Vec<Vec<f32>> {
        t.opt
            .vars()
            .iter()
            .map(|(_, v)| v.as_tensor().flatten_all().unwrap().to_vec1().unwrap())
            .collect()
    };
    let mut straight = trainer(&tmp.path().join("a"), &lines, &rt, filter.clone(), 5);
    straight.run(false).unwrap();
    let mut first = trainer(&tmp.path().join("b"), &lines, &rt, filter.clone(), 3);
    first.run(false).unwrap();
    let mut second = trainer(&tmp.path().join("b"), &lines, &rt, filter, 5);
    second
        .resume(&tmp.path().join("b/out/checkpoint-3"))
        .unwrap();
    assert_eq!(second.filter, first.filter);
    second.run(false).unwrap();
    assert_eq!(adapters(&straight), adapters(&second));
    assert_eq!(straight.filter, second.filter);
    let surveys = |dir: &str| -> Vec<serde_json::Value> {
        metrics(&tmp.path().join(dir))
            .into_iter()
            .filter(|l| l["event"] == "survey")
            .map(|mut l| {
                l.as_object_mut().unwrap().remove("seconds");
                l
            })
            .collect()
    };
    let (a, b) = (surveys("a"), surveys("b"));
    // Surveys before steps 1, 3 and 5; the resumed run's metrics.jsonl continues the first's.
    assert_eq!(a.len(), 3, "{a:?}");
    assert_eq!(a, b);
}
