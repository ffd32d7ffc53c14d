//! `gavel bench-load`: the local judge under a training loop's load, measured through the
//! daemon. Distinct 4-trajectory RAG groups (the example group `rag_answer.json`, its question
//! marked per group) are judged in one mode (pointwise by default; listwise decodes verdicts),
//! sent one after another and then at each concurrency asked for, by a daemon on 127.0.0.1 over
//! a fresh temporary store; for each `max_batch_tokens` and `max_decode_batch` setting its own
//! daemon. Every group is new (no verdict from the store), every run starts after one warm-up
//! group.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{json, Value};

use super::BenchError;
use crate::config::{Config, JudgeConfig, LocalConfig};
use crate::domain::prompt::JudgeMode;
use crate::score::Scorer;
use crate::server::{self, AppState};
use crate::store::{SledStore, VerdictStore};

const EXAMPLE: &str = include_str!("../../examples/groups/rag_answer.json");

/// What to measure.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    pub model: PathBuf,
    pub device: crate::model::DeviceSpec,
    /// Groups sent in each run.
    pub groups: usize,
    /// Groups in flight at once, one run each (1: one after another).
    pub concurrency: Vec<usize>,
    /// The engine's `max_batch_tokens` settings compared (0: each prompt alone).
    pub max_batch_tokens: Vec<usize>,
    /// The engine's `max_decode_batch` settings compared (1: one generation at a time).
    pub max_decode_batch: Vec<usize>,
    /// How the groups are judged.
    pub mode: JudgeMode,
    /// Cap on each explanation, bytes: a listwise verdict's, or in pointwise and pairwise mode
    /// the explanation decoded after each score (0: none).
    pub explain_bytes: usize,
}

/// One daemon's engine settings.
#[derive(Debug, Clone, Copy)]
struct Setting {
    max_batch_tokens: usize,
    max_decode_batch: usize,
}

/// The example group with its question marked `k`: distinct content, the same shape.
pub fn distinct_group(k: usize) -> Value {
    let mut g: Value = serde_json::from_str(EXAMPLE).expect("the example group is JSON");
    for t in g["trajectories"].as_array_mut().into_iter().flatten() {
        for m in t["messages"].as_array_mut().into_iter().flatten() {
            if m["role"] == "user" {
                let text = format!("{} (case {k})", m["content"].as_str().unwrap_or(""));
                m["content"] = json!(text);
            }
        }
    }
    g["judge_mode"] = json!("pointwise");
    g
}

/// [`distinct_group`] judged in `mode`.
fn group_in(k: usize, mode: JudgeMode) -> Value {
    let mut g = distinct_group(k);
    g["judge_mode"] = json!(mode);
    g
}

fn config(o: &LoadOptions, setting: Setting) -> Config {
    let mut j = LocalConfig::new(&o.model);
    j.device = o.device;
    j.common.mode = Some(o.mode);
    j.explain = o.explain_bytes > 0;
    j.max_explanation_bytes = o.explain_bytes;
    j.common.deadline_s = 3600.0;
    j.max_batch_tokens = setting.max_batch_tokens;
    j.max_decode_batch = setting.max_decode_batch;
    let mut cfg = Config::from_env(&|_| None).expect("no variables, no error");
    cfg.judges.clear();
    cfg.judges.insert("local".into(), JudgeConfig::Local(j));
    cfg.default_judge = Some("local".into());
    cfg.server.request_timeout_s = 3600.0;
    cfg.server.max_in_flight = cfg.server.max_in_flight.max(1024);
    cfg
}

/// A daemon on 127.0.0.1:0 until the returned sender is dropped or fired.
async fn start(cfg: Config) -> Result<(String, tokio::sync::oneshot::Sender<()>), BenchError> {
    let err = |e: &dyn std::fmt::Display| BenchError::Judge(e.to_string());
    let store: Arc<dyn VerdictStore> = Arc::new(SledStore::temporary().map_err(|e| err(&e))?);
    let scorer = Arc::new(Scorer::new(cfg.scorer_parts(), store).map_err(|e| err(&e))?);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| err(&e))?;
    let url = format!("http://{}", listener.local_addr().map_err(|e| err(&e))?);
    let state = AppState::new(scorer, cfg.server.clone());
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(server::serve(listener, state, async {
        let _ = rx.await;
    }));
    Ok((url, tx))
}

/// One group through the daemon: its latency and usage.
async fn send(
    client: &reqwest::Client,
    url: &str,
    body: &Value,
) -> Result<(Duration, Value), BenchError> {
    let t = Instant::now();
    let resp = client
        .post(format!("{url}/v1/score_group"))
        .json(body)
        .send()
        .await
        .map_err(|e| BenchError::Judge(e.to_string()))?;
    let status = resp.status();
    let v: Value = resp
        .json()
        .await
        .map_err(|e| BenchError::Judge(e.to_string()))?;
    if !status.is_success() {
        return Err(BenchError::Judge(format!(
            "the daemon answered {status}: {v}"
        )));
    }
    Ok((t.elapsed(), v["usage"].clone()))
}

/// Every run: for each `max_batch_tokens` and `max_decode_batch` setting, each concurrency.
pub async fn figures(o: &LoadOptions) -> Result<Value, BenchError> {
    let client = reqwest::Client::new();
    let mut runs = Vec::new();
    let mut next = 0;
    let settings = o.max_batch_tokens.iter().flat_map(|&max_batch_tokens| {
        o.max_decode_batch
            .iter()
            .map(move |&max_decode_batch| Setting {
                max_batch_tokens,
                max_decode_batch,
            })
    });
    for setting in settings {
        let (batch, decode) = (setting.max_batch_tokens, setting.max_decode_batch);
        let (url, stop) = start(config(o, setting)).await?;
        next += 1;
        send(&client, &url, &group_in(next, o.mode)).await?; // warm-up
        for &c in &o.concurrency {
            let bodies: Vec<Value> = (0..o.groups)
                .map(|k| group_in(next + 1 + k, o.mode))
                .collect();
            next += o.groups + 1;
            let t = Instant::now();
            let done: Vec<(Duration, Value)> = futures::stream::iter(&bodies)
                .map(|b| send(&client, &url, b))
                .buffer_unordered(c.max(1))
                .collect::<Vec<_>>()
                .await
                .into_iter()
                .collect::<Result<_, _>>()?;
            let wall = t.elapsed().as_secs_f64();
            let sum = |k: &str| {
                done.iter()
                    .map(|(_, u)| u[k].as_u64().unwrap_or(0))
                    .sum::<u64>()
            };
            let latency: Vec<f64> = done.iter().map(|(d, _)| d.as_secs_f64()).collect();
            let computed = sum("prompt_tokens") - sum("cached_prompt_tokens");
            eprintln!(
                "bench-load: max_batch_tokens {batch}, max_decode_batch {decode}, \
                 concurrency {c}: {wall:.1} s"
            );
            runs.push(json!({
                "max_batch_tokens": batch,
                "max_decode_batch": decode,
                "concurrency": c,
                "groups": o.groups,
                "wall_s": wall,
                "groups_per_s": o.groups as f64 / wall,
                "latency_mean_s": latency.iter().sum::<f64>() / latency.len().max(1) as f64,
                "latency_max_s": latency.iter().copied().fold(0.0, f64::max),
                "prompt_tokens": sum("prompt_tokens"),
                "computed_tokens": computed,
                "computed_tok_s": computed as f64 / wall,
                "forward_passes": sum("forward_passes"),
                "completion_tokens": sum("completion_tokens"),
                "completion_tok_s": sum("completion_tokens") as f64 / wall,
            }));
        }
        let _ = stop.send(());
    }
    Ok(json!({
        "model": o.model,
        "device": o.device.to_string(),
        "mode": o.mode,
        "threads": std::thread::available_parallelism().map_or(1, |n| n.get()),
        "runs": runs,
    }))
}

/// The report as a markdown table, with each run's wall time against the same setting's run at
/// concurrency 1.
pub fn markdown(r: &Value) -> String {
    let mut s = String::from(
        "| max_batch_tokens | max_decode_batch | concurrency | groups | wall s | × one at a time | groups/s | mean latency s | computed tokens/s | decoded tokens/s | forward passes |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    let empty = Vec::new();
    let runs = r["runs"].as_array().unwrap_or(&empty);
    for run in runs {
        let one = runs
            .iter()
            .find(|o| {
                o["max_batch_tokens"] == run["max_batch_tokens"]
                    && o["max_decode_batch"] == run["max_decode_batch"]
                    && o["concurrency"] == 1
            })
            .and_then(|o| o["wall_s"].as_f64());
        let wall = run["wall_s"].as_f64().unwrap_or(0.0);
        s += &format!(
            "| {} | {} | {} | {} | {:.1} | {} | {:.3} | {:.2} | {:.0} | {:.1} | {} |\n",
            run["max_batch_tokens"],
            run["max_decode_batch"],
            run["concurrency"],
            run["groups"],
            wall,
            one.map_or("–".into(), |o| format!("{:.2}", wall / o)),
            run["groups_per_s"].as_f64().unwrap_or(0.0),
            run["latency_mean_s"].as_f64().unwrap_or(0.0),
            run["computed_tok_s"].as_f64().unwrap_or(0.0),
            run["completion_tok_s"].as_f64().unwrap_or(0.0),
            run["forward_passes"],
        );
    }
    s
}
