//! Micro-benchmarks of the scoring core on an 8-trajectory tool-using agent group:
//! dedup, prompt rendering, verdict parsing, and the three together (the work gavel adds per
//! group before and after a judge call). Token counting (done once per cache miss) is measured
//! on its own.
//!
//!     cargo bench --bench pipeline

use criterion::{criterion_group, criterion_main, Criterion};
use serde_json::{json, Value};
use std::hint::black_box;

use gavel::dedup::{DedupConfig, JudgeInput};
use gavel::judge::parse::{parse_verdict, ParseOptions};
use gavel::prompt::{count_tokens, Prompts, DEFAULT_PROMPT};
use gavel::rubric::RubricSet;
use gavel::trajectory::{parse_trajectories, Trajectory};

/// The shipped 4-trajectory agent example, doubled to 8 with distinct tool-call ids and plans.
fn agent_group() -> Vec<Trajectory> {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/groups/agent_tool_use.json"
    ))
    .unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    let mut trajs = v["trajectories"].as_array().unwrap().clone();
    for i in 0..4 {
        let copy = serde_json::to_string(&trajs[i])
            .unwrap()
            .replace("\"call_", &format!("\"call_x{i}"));
        let mut copy: Value = serde_json::from_str(&copy).unwrap();
        copy["messages"][2]["content"] = json!(format!(
            "Plan {i}: read the metadata, then the sales sheet."
        ));
        trajs.push(copy);
    }
    parse_trajectories(&Value::Array(trajs), 64).unwrap()
}

fn verdict(n: usize) -> String {
    let scores: Vec<Value> = (1..=n)
        .map(|i| json!({"trajectory_id": i.to_string(), "explanation": "Reached the exact net figure from the Sales sheet with two tool calls; no decoy sheet used.", "score": (i as f64) / 10.0}))
        .collect();
    format!("```json\n{}\n```", json!({ "scores": scores }))
}

fn bench(c: &mut Criterion) {
    let group = agent_group();
    let prompts = Prompts::load(None).unwrap();
    let rubrics = RubricSet::load(None).unwrap();
    let rubric = rubrics.get("default").unwrap();
    let cfg = DedupConfig::default();
    let input = JudgeInput::build(&group, &cfg);
    let order: Vec<usize> = (0..input.candidates.len()).collect();
    let rendered = prompts
        .render(DEFAULT_PROMPT, &input, &order, rubric, None)
        .unwrap();
    let text = verdict(rendered.ids.len());
    let opts = ParseOptions {
        expected_ids: &rendered.ids,
        allow_missing_score: false,
        expected_items: &[],
    };

    c.bench_function("dedup/8-agent", |b| {
        b.iter(|| JudgeInput::build(black_box(&group), &cfg))
    });
    c.bench_function("render/8-agent", |b| {
        b.iter(|| {
            prompts
                .render(DEFAULT_PROMPT, black_box(&input), &order, rubric, None)
                .unwrap()
        })
    });
    c.bench_function("parse/8-scores", |b| {
        b.iter(|| parse_verdict(black_box(&text), &opts).unwrap())
    });
    c.bench_function("dedup+render+parse/8-agent", |b| {
        b.iter(|| {
            let input = JudgeInput::build(black_box(&group), &cfg);
            let order: Vec<usize> = (0..input.candidates.len()).collect();
            let r = prompts
                .render(DEFAULT_PROMPT, &input, &order, rubric, None)
                .unwrap();
            let opts = ParseOptions {
                expected_ids: &r.ids,
                allow_missing_score: false,
                expected_items: &[],
            };
            parse_verdict(&text, &opts).unwrap()
        })
    });
    c.bench_function("count_tokens/8-agent-prompt", |b| {
        b.iter(|| count_tokens(black_box(&rendered.messages)))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
