//! The daemon: axum over the scorer. Handlers are thin; all logic is in `score`.

pub mod error;
pub mod handlers;
pub mod metrics;
pub mod openrlhf;

use std::sync::Arc;
use std::time::Instant;

use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use axum::Router;
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::sync::Semaphore;
use tower_http::trace::TraceLayer;

use crate::config::{OpenRlhfConfig, ServerConfig};
use crate::score::Scorer;

#[derive(Clone)]
pub struct AppState {
    pub scorer: Arc<Scorer>,
    pub server: Arc<ServerConfig>,
    pub started: Instant,
    /// Scoring requests in progress; beyond `max_in_flight` the daemon answers 429 at once.
    pub in_flight: Arc<Semaphore>,
    pub metrics: PrometheusHandle,
    /// `POST /get_reward` (OpenRLHF): its configuration and pending groups.
    pub openrlhf: Arc<openrlhf::OpenRlhf>,
}

impl AppState {
    pub fn new(scorer: Arc<Scorer>, server: ServerConfig) -> AppState {
        let openrlhf = openrlhf::OpenRlhf::new(scorer.clone(), OpenRlhfConfig::default())
            .expect("the shipped rubric \"default\" is always loaded");
        AppState {
            openrlhf: Arc::new(openrlhf),
            scorer,
            in_flight: Arc::new(Semaphore::new(server.max_in_flight)),
            server: Arc::new(server),
            started: Instant::now(),
            metrics: metrics::handle(),
        }
    }

    /// Serves `POST /get_reward` as `[openrlhf]` says; fails when it names an unknown rubric.
    pub fn with_openrlhf(
        mut self,
        cfg: OpenRlhfConfig,
    ) -> Result<AppState, crate::rubric::RubricError> {
        self.openrlhf = Arc::new(openrlhf::OpenRlhf::new(self.scorer.clone(), cfg)?);
        Ok(self)
    }
}

pub fn router(state: AppState) -> Router {
    let score = post(handlers::score_group).fallback(handlers::method_not_allowed);
    Router::new()
        .route("/v1/score_group", score.clone())
        .route("/score_group", score)
        .route(
            "/v1/score_groups",
            post(handlers::score_groups).fallback(handlers::method_not_allowed),
        )
        .route(
            "/v1/render",
            post(handlers::render).fallback(handlers::method_not_allowed),
        )
        .route(
            "/v1/rubrics",
            get(handlers::rubrics).fallback(handlers::method_not_allowed),
        )
        .route(
            "/get_reward",
            post(openrlhf::get_reward).fallback(handlers::method_not_allowed),
        )
        .route(
            "/healthz",
            get(handlers::healthz).fallback(handlers::method_not_allowed),
        )
        .route(
            "/metrics",
            get(handlers::metrics).fallback(handlers::method_not_allowed),
        )
        .fallback(handlers::not_found)
        .layer(axum::middleware::from_fn(metrics::track))
        .layer(DefaultBodyLimit::max(state.server.max_body_bytes))
        .layer(TraceLayer::new_for_http())
        .with_state(state)
}

/// Serves until `shutdown` resolves, then finishes in-flight requests and flushes the store.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: AppState,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let store = state.scorer.store().clone();
    axum::serve(listener, router(state))
        .with_graceful_shutdown(shutdown)
        .await?;
    if let Err(e) = store.flush().await {
        tracing::error!(error = %e, "flushing the verdict store at shutdown failed");
    }
    Ok(())
}
