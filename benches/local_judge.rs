//! The local judge's speed on the real model `GAVEL_TEST_MODEL` names (CI's Qwen2.5-Coder-0.5B
//! GGUF): prefill and decode tokens/s of the bare model on the judge prompt of
//! `examples/groups/rag_answer.json`, and time per group through the scorer (constrained verdict,
//! explanations capped at 80 bytes; cold, then four orders with prefix reuse). Writes
//! `target/bench-local/candle.json` and the exact prompt text (`prompt.txt`) for
//! `benches/llamacpp_bench.py`, which runs llama.cpp on the same file and prompt;
//! `benches/local_vs_llamacpp.sh` runs both.
//!
//! `GAVEL_BENCH_DEVICE` picks the device (default `cpu`).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use gavel::config::{Config, JudgeConfig, LocalConfig};
use gavel::judge::local::{LoadedModel, LocalModelSpec};
use gavel::score::{ScoreRequest, Scorer};
use gavel::store::{SledStore, VerdictStore};

// The allocator the gavel binary ships with (src/main.rs), so that these are the product's
// figures: a prefill allocates every matmul's activations afresh, and under glibc's malloc page
// faults on those were about a tenth of a 1.5B prefill (experiments/local-judge-speed/NOTEBOOK.md,
// issue 15).
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

const DECODE_STEPS: usize = 64;
const REPEATS: usize = 3;

fn example(name: &str) -> Value {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples/groups")
        .join(name);
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn best(times: &[Duration]) -> Duration {
    *times.iter().min().unwrap()
}

fn main() {
    let Some(model_path) = std::env::var_os("GAVEL_TEST_MODEL").map(PathBuf::from) else {
        eprintln!("skipped: set GAVEL_TEST_MODEL to a Qwen GGUF (tools/fetch-model.sh 0.5b)");
        return;
    };
    let device = std::env::var("GAVEL_BENCH_DEVICE").unwrap_or_else(|_| "cpu".into());
    let out = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench-local");
    std::fs::create_dir_all(&out).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();

    let mut j = LocalConfig::new(&model_path);
    j.device = gavel::model::DeviceSpec::parse(&device).expect("GAVEL_BENCH_DEVICE: cpu or cuda:N");
    j.max_explanation_bytes = 80;
    j.common.deadline_s = 3600.0;
    // The listwise verdict is what llama.cpp's decode is compared with; the probability modes
    // are timed below on a store of their own.
    j.common.mode = Some(gavel::domain::prompt::JudgeMode::Listwise);
    let mut cfg = Config::from_env(&|_| None).expect("no variables, no error");
    cfg.judges.clear();
    cfg.judges.insert("local".into(), JudgeConfig::Local(j));
    cfg.default_judge = Some("local".into());

    // The judge prompt, rendered as the scorer sends it.
    let store: Arc<dyn VerdictStore> = Arc::new(SledStore::temporary().unwrap());
    let group = example("rag_answer.json");
    let req = ScoreRequest::from_json(&group, 64).unwrap();
    let t0 = Instant::now();
    let scorer = Scorer::new(cfg.scorer_parts(), store).unwrap();
    let load = t0.elapsed();
    let messages = scorer.render(&req).unwrap().messages;

    // Bare model: prefill of the whole prompt on an empty cache, then greedy single-token steps.
    let (prefill, decode, n_prompt, prompt_text) = {
        let spec = LocalModelSpec::new(&model_path, device.clone());
        let mut m = LoadedModel::load(&spec).unwrap();
        let text = m.chat_template().render(&messages).unwrap();
        let ids = m.prompt_tokens(&messages).unwrap();
        m.forward_logits(&ids[..16], 0).unwrap(); // warm-up
        let mut prefill = Vec::new();
        let mut decode = Vec::new();
        for _ in 0..REPEATS {
            let t = Instant::now();
            let mut logits = m.forward_logits(&ids, 0).unwrap();
            prefill.push(t.elapsed());
            let t = Instant::now();
            for _ in 0..DECODE_STEPS {
                let next = logits
                    .iter()
                    .enumerate()
                    .max_by(|a, b| a.1.total_cmp(b.1))
                    .unwrap()
                    .0 as u32;
                logits = m.forward_logits(&[next], m.cached_len()).unwrap();
            }
            decode.push(t.elapsed());
        }
        (best(&prefill), best(&decode), ids.len(), text)
    };
    std::fs::write(out.join("prompt.txt"), &prompt_text).unwrap();

    // Through the scorer: one cold group (one order), then four orders of it (the first is a
    // cache hit in the store; three new ones reuse the prompt's shared prefix).
    let (cold, cold_usage) = rt.block_on(async {
        let t = Instant::now();
        let r = scorer.score_group(&req).await.unwrap();
        (t.elapsed(), r.usage)
    });
    let mut req4 = req.clone();
    req4.permutations = Some(4);
    let (perm4, perm4_usage) = rt.block_on(async {
        let t = Instant::now();
        let r = scorer.score_group(&req4).await.unwrap();
        (t.elapsed(), r.usage)
    });
    // Each judging mode on the same group, cold (a fresh store and a fresh prefix cache, so
    // nothing is reused from the runs above): seconds, prompt tokens prefilled and reused,
    // forward passes. Explanations off in every mode, as the probability modes have none.
    let mut modes = serde_json::Map::new();
    for mode in ["listwise", "pointwise", "pairwise"] {
        let mut cfg = cfg.clone();
        if let Some(j) = cfg
            .judges
            .get_mut("local")
            .and_then(JudgeConfig::as_local_mut)
        {
            j.max_explanation_bytes = 0;
        }
        let store: Arc<dyn VerdictStore> = Arc::new(SledStore::temporary().unwrap());
        let scorer = Scorer::new(cfg.scorer_parts(), store).unwrap();
        let mut r = req.clone();
        r.judge_mode = Some(mode.parse().unwrap());
        let (t, u) = rt.block_on(async {
            let t = Instant::now();
            let out = scorer.score_group(&r).await.unwrap();
            (t.elapsed(), out.usage)
        });
        eprintln!("{mode}: {:.2} s, {u:?}", t.as_secs_f64());
        modes.insert(
            mode.into(),
            json!({
                "group_s": t.as_secs_f64(),
                "judge_calls": u.judge_calls,
                "prompt_tokens": u.prompt_tokens,
                "prefilled_tokens": u.prompt_tokens - u.cached_prompt_tokens,
                "reused_tokens": u.cached_prompt_tokens,
                "completion_tokens": u.completion_tokens,
                "forward_passes": u.forward_passes,
            }),
        );
    }
    let tps = |n: usize, d: Duration| n as f64 / d.as_secs_f64();
    let result = json!({
        "engine": "gavel (candle)",
        "model": model_path.file_name().map(|f| f.to_string_lossy().into_owned()),
        "device": device,
        "threads": std::thread::available_parallelism().map_or(1, |n| n.get()),
        "load_s": load.as_secs_f64(),
        "prompt_tokens": n_prompt,
        "prefill_s": prefill.as_secs_f64(),
        "prefill_tok_s": tps(n_prompt, prefill),
        "decode_tokens": DECODE_STEPS,
        "decode_tok_s": tps(DECODE_STEPS, decode),
        "group_cold_s": cold.as_secs_f64(),
        "group_completion_tokens": cold_usage.completion_tokens,
        "group_prompt_tokens": cold_usage.prompt_tokens,
        "four_orders_s": perm4.as_secs_f64(),
        "four_orders_new_calls": perm4_usage.judge_calls,
        "four_orders_prompt_tokens": perm4_usage.prompt_tokens,
        "four_orders_cached_prompt_tokens": perm4_usage.cached_prompt_tokens,
        "cpu_features": cpu_features(),
        "modes": modes,
    });
    println!("{}", serde_json::to_string_pretty(&result).unwrap());
    std::fs::write(out.join("candle.json"), result.to_string()).unwrap();
}

/// The SIMD features the kernels pick from at run time (BENCHMARKS.md records them per run).
fn cpu_features() -> Vec<&'static str> {
    #[cfg(target_arch = "x86_64")]
    {
        let mut f = Vec::new();
        macro_rules! has {
            ($($name:tt),*) => {$(
                if std::arch::is_x86_feature_detected!($name) {
                    f.push($name);
                }
            )*};
        }
        has!(
            "avx2",
            "fma",
            "f16c",
            "avx512f",
            "avx512bw",
            "avx512vl",
            "avx512vnni",
            "avxvnni"
        );
        f
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        Vec::new()
    }
}
