//! Prometheus metrics: one process-wide recorder, rendered at `GET /metrics`, and a middleware
//! that counts requests by route and status and records their latency. Every name starts with
//! `gavel_`.

use std::sync::OnceLock;
use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::middleware::Next;
use axum::response::Response;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

/// The process's recorder (installed on first use; tests start many daemons in one process).
pub fn handle() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let recorder = PrometheusBuilder::new().build_recorder();
            let handle = recorder.handle();
            // Another recorder may already be installed (an embedding program's); then gavel's
            // own counters still render from this handle's registry only if installed.
            let _ = metrics::set_global_recorder(recorder);
            handle
        })
        .clone()
}

pub async fn track(req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_string(), |p| p.as_str().to_string());
    let method = req.method().to_string();
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
