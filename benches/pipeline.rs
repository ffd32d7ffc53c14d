//! Micro-benchmarks of the scoring core on an 8-trajectory tool-using agent group:
//! dedup, prompt rendering, verdict parsing, and the three together (the work gavel adds per
//! group before and after a judge call). Token counting (exact, for `render` only) is measured
//! on its own.
//!
//!     cargo bench --bench pipeline

// The allocator the `gavel` binary ships with, so the figures are the daemon's.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

use criterion::{criterion_group, criterion_main, Criterion};
use serde_json::{json, Value};
use std::hint::black_box;

use gavel::domain::dedup::{DedupConfig, JudgeInput};
use gavel::domain::prompt::{count_tokens, GroupExtras, Prompts, DEFAULT_PROMPT};
use gavel::domain::rubric::RubricSet;
use gavel::domain::trajectory::{parse_trajectories, Trajectory};
use gavel::domain::verdict::{parse_verdict, ParseOptions};

// What the daemon renders for its default judge: no tools or reference, a remote judge that
// keeps to the verdict's JSON schema.
const EXTRAS: GroupExtras<'static> = GroupExtras {
    tools: None,
    reference: None,
    reply_schema: true,
};

/// The benchmark corpus (`benches/data/groups.jsonl`), labels stripped.
fn corpus() -> Vec<Value> {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/benches/data/groups.jsonl"
    ))
    .unwrap();
    text.lines()
        .map(|l| {
            let mut v: Value = serde_json::from_str(l).unwrap();
            let o = v.as_object_mut().unwrap();
            o.remove("kind");
            o.remove("id");
            v
        })
        .collect()
}

/// The whole in-process cache-hit path (no HTTP): body bytes → request → scorer (verdicts already
/// stored) → response bytes, over every corpus group.
fn bench_hits(c: &mut Criterion) {
    use gavel::config::{Config, JudgeConfig};
    use gavel::score::{ScoreRequest, Scorer};
    use gavel::store::{SledStore, StoredScore, StoredVerdict};
    use std::sync::Arc;

    let mut cfg = Config::from_env(&|_| None).expect("no variables, no error");
    cfg.judges.insert(
        "bench".into(),
        JudgeConfig::openai("http://127.0.0.1:9/v1", "bench-judge", None),
    );
    cfg.default_judge = Some("bench".into());
    let store = Arc::new(SledStore::temporary().unwrap());
    let scorer = Scorer::new(cfg.scorer_parts(), store.clone()).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let bodies: Vec<Vec<u8>> = corpus()
        .iter()
        .map(|v| serde_json::to_vec(v).unwrap())
        .collect();
    // Warm the store with a verdict for every group's cache key.
    for body in &bodies {
        let v: Value = serde_json::from_slice(body).unwrap();
        let req = ScoreRequest::from_json(&v, 64).unwrap();
        let r = scorer.render(&req).unwrap();
        let verdict = StoredVerdict {
            scores: r
                .trajectory_ids
                .iter()
                .map(|id| StoredScore {
                    id: id.clone(),
                    score: Some(0.5),
                    explanation: "fine".into(),
                    items: Vec::new(),
                    confidence: None,
                })
                .collect(),
            prompt_tokens: r.prompt_tokens,
            completion_tokens: 100,
            cached_prompt_tokens: 0,
            forward_passes: 0,
            calls: 1,
            counted_prompt_tokens: r.prompt_tokens,
            counted_prompt_tokens_without_dedup: r.prompt_tokens_without_dedup,
            model: "bench-judge".into(),
            created_unix: 0,
            retries: Default::default(),
            clamped_scores: 0,
        };
        rt.block_on(gavel::store::Verdicts::put(
            store.as_ref(),
            &r.cache_key,
            &verdict,
        ))
        .unwrap();
    }
    let one = |body: &[u8]| {
        let v: Value = serde_json::from_slice(body).unwrap();
        let req = ScoreRequest::from_json(&v, 64).unwrap();
        let resp = rt.block_on(scorer.score_group(&req)).unwrap();
        assert_eq!(resp.usage.cache_hits, 1);
        serde_json::to_vec(&resp).unwrap()
    };
    // For instruction counts under callgrind (wall time is useless on a loaded machine):
    // `GAVEL_HIT_LOOPS=N valgrind --tool=callgrind target/release/deps/pipeline-* --bench hit`,
    // once with N = 0 and once with N > 0; the difference / (27 N) is the cost of one hit.
    if let Some(n) = std::env::var("GAVEL_HIT_LOOPS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
    {
        for _ in 0..n {
            for body in &bodies {
                black_box(one(body));
            }
        }
        std::process::exit(0);
    }
    c.bench_function("hit/corpus-27-groups", |b| {
        b.iter(|| {
            for body in &bodies {
                black_box(one(body));
            }
        })
    });
}

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
        .render(DEFAULT_PROMPT, &input, &order, rubric, EXTRAS)
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
                .render(DEFAULT_PROMPT, black_box(&input), &order, rubric, EXTRAS)
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
                .render(DEFAULT_PROMPT, &input, &order, rubric, EXTRAS)
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

criterion_group!(benches, bench, bench_hits);
criterion_main!(benches);
