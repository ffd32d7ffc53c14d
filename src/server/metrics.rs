//! Prometheus metrics: one process-wide recorder, rendered at `GET /metrics`, and a middleware
//! that counts requests by route and status and records their latency. Every name starts with
//! `gavel_`.

use std::sync::OnceLock;
use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::Response;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// Histogram buckets for every `*_seconds` metric: from a cache hit (milliseconds) to a long
/// judge call (minutes).
const SECONDS_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 900.0,
];

/// Every metric gavel exports, with its `# HELP` text (docs/production.md lists the same).
const DESCRIPTIONS: &[(&str, &str)] = &[
    (
        "gavel_http_requests_total",
        "HTTP requests answered, by route, method and status",
    ),
    (
        "gavel_http_request_seconds",
        "HTTP request latency, by route",
    ),
    (
        "gavel_http_requests_in_flight",
        "HTTP requests being handled now",
    ),
    (
        "gavel_score_requests_in_flight",
        "Scoring requests holding a max_in_flight slot",
    ),
    (
        "gavel_openrlhf_pending_groups",
        "/get_reward groups by state: filling (waiting for samples) or judging; \
         [openrlhf] max_pending_groups bounds their sum",
    ),
    (
        "gavel_openrlhf_pending_samples",
        "/get_reward samples in groups that are filling up",
    ),
    (
        "gavel_overloaded_total",
        "Scoring requests refused with 429 (max_in_flight reached)",
    ),
    (
        "gavel_judge_calls_total",
        "Judge call attempts, by judge and outcome (ok or failure cause)",
    ),
    (
        "gavel_judge_retries_total",
        "Judge call retries, by judge and cause",
    ),
    (
        "gavel_judge_errors_total",
        "Verdicts that failed after every retry, by judge and error type",
    ),
    (
        "gavel_judge_failed_calls_total",
        "Judge calls spent on verdicts that failed (every attempt, an unusable reply and its \
         re-ask), by judge: the calls that gave no verdict",
    ),
    (
        "gavel_judge_failed_tokens_total",
        "Tokens the judge reported for calls that gave no verdict, by judge and kind",
    ),
    (
        "gavel_judge_reasks_total",
        "Structural re-asks after an unusable verdict, by judge",
    ),
    (
        "gavel_judge_call_seconds",
        "Latency of one judge call attempt, by judge",
    ),
    (
        "gavel_judge_tokens_total",
        "Tokens the judge reported, by judge and kind (prompt, completion)",
    ),
    (
        "gavel_judge_queue_depth",
        "Judge calls waiting for the judge's rate limits or concurrency cap",
    ),
    (
        "gavel_judge_calls_in_flight",
        "Judge calls sent and not yet answered, by judge",
    ),
    (
        "gavel_judge_scores_clamped_total",
        "Scores a judge gave outside its scale, clamped to 0 or 1, by judge",
    ),
    (
        "gavel_verdicts_total",
        "Verdicts used, by source: cache (a cache hit) or judge",
    ),
];

/// The local judge's metrics, exported once a local judge runs (so not in [`names`], whose
/// metrics every daemon exports).
/// Metrics of cascades (`backend = "cascade"`), exported once a cascade has judged
/// (`tests/cascade.rs` checks them).
pub const CASCADE_DESCRIPTIONS: &[(&str, &str)] = &[
    (
        "gavel_cascade_decisions_total",
        "Groups a cascade's stage decided, by cascade and stage",
    ),
    (
        "gavel_cascade_escalations_total",
        "Groups a cascade's stage passed to the next, by cascade, stage and cause (unsure, failed)",
    ),
];

const LOCAL_DESCRIPTIONS: &[(&str, &str)] = &[
    (
        "gavel_local_prompt_tokens_total",
        "Prompt tokens the local judges ran or reused",
    ),
    (
        "gavel_local_cached_prompt_tokens_total",
        "Prompt tokens whose KV came from the prefix cache or a group's shared prefix",
    ),
    (
        "gavel_local_completion_tokens_total",
        "Tokens the local judges generated",
    ),
    (
        "gavel_local_queue_seconds",
        "Time a local judge request waited in the queue",
    ),
    (
        "gavel_local_prefill_seconds",
        "Prefill time of one local judge prompt",
    ),
    (
        "gavel_local_decode_seconds",
        "Decode time of one local judge completion",
    ),
    (
        "gavel_local_rejected_total",
        "Local judge requests refused (max_queue reached)",
    ),
    (
        "gavel_local_restarts_total",
        "Panics a local judge's model thread survived (reset)",
    ),
    (
        "gavel_local_queue_depth",
        "Local judge requests queued or running (a group's questions are one request)",
    ),
    (
        "gavel_local_batch_prompts",
        "Prompts in one batched forward of a group's question suffixes",
    ),
    (
        "gavel_local_batch_tokens",
        "Suffix tokens in one batched forward of a group's questions",
    ),
    (
        "gavel_local_reading_jobs_joined_total",
        "Reading jobs (judgings) whose prompts joined the last packed forward of the job before",
    ),
    (
        "gavel_local_probe_jobs_joined_total",
        "Deprecated: the old name of gavel_local_reading_jobs_joined_total, counted alike",
    ),
    (
        "gavel_local_batch_generations",
        "Generations (listwise verdicts, explanations) stepped in one batched decoding forward",
    ),
    (
        "gavel_local_decode_batches_total",
        "Decoding forwards that stepped several generations at once",
    ),
    (
        "gavel_local_prefix_cache_bytes",
        "Bytes of KV the prefix cache holds",
    ),
    (
        "gavel_local_prefix_cache_budget_bytes",
        "The prefix cache's budget (prefix_cache_bytes)",
    ),
    (
        "gavel_local_prefix_cache_hits_total",
        "Prompts that started from a cached prefix",
    ),
    (
        "gavel_local_prefix_cache_misses_total",
        "Prompts that found no cached prefix",
    ),
];

/// Buckets of the batch histograms: prompts or tokens in one forward.
const BATCH_BUCKETS: &[f64] = &[
    1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0,
];

/// The process's recorder (installed on first use; tests start many daemons in one process).
pub fn handle() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let recorder = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), SECONDS_BUCKETS)
                .expect("the bucket list is not empty")
                .set_buckets_for_metric(Matcher::Prefix("gavel_local_batch_".into()), BATCH_BUCKETS)
                .expect("the bucket list is not empty")
                .build_recorder();
            let handle = recorder.handle();
            // Another recorder may already be installed (an embedding program's); then gavel's
            // own counters still render from this handle's registry only if installed.
            let _ = metrics::set_global_recorder(recorder);
            for (name, help) in DESCRIPTIONS
                .iter()
                .chain(LOCAL_DESCRIPTIONS)
                .chain(CASCADE_DESCRIPTIONS)
            {
                metrics::describe_counter!(*name, *help);
            }
            handle
        })
        .clone()
}

/// The names of every metric gavel exports.
pub fn names() -> impl Iterator<Item = &'static str> {
    DESCRIPTIONS.iter().map(|(n, _)| *n)
}

/// The `method` label: one of the standard methods or `other`. This layer runs before auth, so
/// a label taken from request text (HTTP allows any token as a method) would let anyone create
/// series without bound.
fn method_label(m: &Method) -> &'static str {
    match m.as_str() {
        "GET" => "GET",
        "POST" => "POST",
        "PUT" => "PUT",
        "DELETE" => "DELETE",
        "HEAD" => "HEAD",
        "OPTIONS" => "OPTIONS",
        "PATCH" => "PATCH",
        "CONNECT" => "CONNECT",
        "TRACE" => "TRACE",
        _ => "other",
    }
}

pub async fn track(req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_string(), |p| p.as_str().to_string());
    let method = method_label(req.method());
    let started = Instant::now();
    metrics::gauge!("gavel_http_requests_in_flight").increment(1.0);
    let resp = next.run(req).await;
    metrics::gauge!("gavel_http_requests_in_flight").decrement(1.0);
    let status = resp.status().as_u16().to_string();
    metrics::counter!("gavel_http_requests_total", "route" => route.clone(), "method" => method, "status" => status)
        .increment(1);
    metrics::histogram!("gavel_http_request_seconds", "route" => route)
        .record(started.elapsed().as_secs_f64());
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_standard_methods_become_labels() {
        assert_eq!(method_label(&Method::POST), "POST");
        assert_eq!(method_label(&Method::PATCH), "PATCH");
        for custom in ["FOO", "X-RANDOM-1", "get"] {
            let m = Method::from_bytes(custom.as_bytes()).unwrap();
            assert_eq!(method_label(&m), "other", "{custom}");
        }
    }
}
