//! The daemon: axum over the scorer. Handlers are thin; all logic is in `score`.

pub mod auth;
pub mod config;
pub mod error;
pub mod extract;
pub mod handlers;
mod listen;
pub mod metrics;
pub mod openapi;
pub mod openrlhf;
pub mod ready;

use std::collections::BTreeMap;
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{Method, Request};
use axum::routing::{get, post, MethodRouter};
use axum::Router;
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::sync::Semaphore;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::trace::{DefaultOnResponse, TraceLayer};
use utoipa::OpenApi;

use crate::openrlhf::config::OpenRlhfConfig;
use crate::score::Scorer;
pub use config::ServerConfig;

/// The OpenAPI document of the HTTP API (JSON), served at `/openapi.json`: generated from the
/// handlers and types (see [`openapi`]); a test checks that it documents exactly the routes of
/// [`routes`] and that its examples are accepted.
pub fn openapi() -> &'static str {
    static DOCUMENT: LazyLock<String> = LazyLock::new(|| openapi::document(RouteDocs::openapi()));
    &DOCUMENT
}

/// The operations of [`routes`], from their handlers' `#[utoipa::path]` attributes. Kept here,
/// beside the routes, so that the document's part (`openapi`) never imports the handlers that
/// import it.
#[derive(utoipa::OpenApi)]
#[openapi(paths(
    handlers::score_group,
    handlers::score_group_alias,
    handlers::score_groups,
    handlers::render,
    handlers::rubrics,
    handlers::healthz,
    handlers::readyz,
    handlers::metrics,
    handlers::openapi,
    openrlhf::get_reward,
))]
struct RouteDocs;

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
    pub keys: Arc<auth::ApiKeys>,
    pub ready: Arc<ready::Readiness>,
}

impl AppState {
    pub fn new(scorer: Arc<Scorer>, server: ServerConfig) -> AppState {
        let deadline = Duration::from_secs_f64(server.request_timeout_s);
        let openrlhf = openrlhf::OpenRlhf::new(scorer.clone(), OpenRlhfConfig::default(), deadline)
            .expect("the shipped rubric \"default\" is always loaded");
        AppState {
            openrlhf: Arc::new(openrlhf),
            scorer,
            in_flight: Arc::new(Semaphore::new(server.max_in_flight)),
            keys: Arc::new(auth::ApiKeys::new(&server.api_keys, &server.open_paths)),
            ready: Arc::new(ready::Readiness::new(Duration::from_secs_f64(
                server.ready_cache_s,
            ))),
            server: Arc::new(server),
            started: Instant::now(),
            metrics: metrics::handle(),
        }
    }

    /// Serves `POST /get_reward` as `[openrlhf]` says; fails when it names an unknown rubric.
    pub fn with_openrlhf(
        mut self,
        cfg: OpenRlhfConfig,
    ) -> Result<AppState, crate::domain::rubric::RubricError> {
        let deadline = Duration::from_secs_f64(self.server.request_timeout_s);
        self.openrlhf = Arc::new(openrlhf::OpenRlhf::new(self.scorer.clone(), cfg, deadline)?);
        Ok(self)
    }
}

/// Every route the daemon serves. The router is built from this list alone, and the OpenAPI
/// test compares it with the generated document, so an undocumented route fails the tests.
fn routes() -> Vec<(Method, &'static str, MethodRouter<AppState>)> {
    vec![
        (Method::POST, "/v1/score_group", post(handlers::score_group)),
        (
            Method::POST,
            "/score_group",
            post(handlers::score_group_alias),
        ),
        (
            Method::POST,
            "/v1/score_groups",
            post(handlers::score_groups),
        ),
        (Method::POST, "/v1/render", post(handlers::render)),
        (Method::GET, "/v1/rubrics", get(handlers::rubrics)),
        (Method::POST, "/get_reward", post(openrlhf::get_reward)),
        (Method::GET, "/healthz", get(handlers::healthz)),
        (Method::GET, "/readyz", get(handlers::readyz)),
        (Method::GET, "/metrics", get(handlers::metrics)),
        (Method::GET, "/openapi.json", get(handlers::openapi)),
    ]
}

/// `(method, path)` of every route, for the OpenAPI test.
pub fn route_list() -> Vec<(Method, &'static str)> {
    routes().into_iter().map(|(m, p, _)| (m, p)).collect()
}

/// The request's span: every log line written while handling it carries its request id.
fn request_span(req: &Request<Body>) -> tracing::Span {
    let id = req
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    tracing::info_span!("request", method = %req.method(), path = %req.uri().path(), request_id = %id)
}

pub fn router(state: AppState) -> Router {
    let mut by_path: BTreeMap<&str, MethodRouter<AppState>> = BTreeMap::new();
    for (_, path, route) in routes() {
        let merged = match by_path.remove(path) {
            Some(existing) => existing.merge(route),
            None => route,
        };
        by_path.insert(path, merged);
    }
    let mut router = Router::new();
    for (path, route) in by_path {
        router = router.route(path, route.fallback(handlers::method_not_allowed));
    }
    // Layers run outside in, last added first: request id, trace span, id copied to the
    // response, metrics (so refused requests count too), auth.
    router
        .fallback(handlers::not_found)
        .layer(axum::middleware::from_fn_with_state(
            state.keys.clone(),
            auth::require_key,
        ))
        // A panic in a handler is a typed 500 and the daemon serves on.
        .layer(CatchPanicLayer::custom(panic_response))
        .layer(axum::middleware::from_fn(metrics::track))
        .layer(PropagateRequestIdLayer::x_request_id())
        .layer(
            TraceLayer::new_for_http()
                .make_span_with(request_span)
                .on_response(DefaultOnResponse::new().level(tracing::Level::INFO)),
        )
        .layer(SetRequestIdLayer::x_request_id(MakeRequestUuid))
        .with_state(state)
}

/// The answer to a request whose handler panicked: `500 internal`, the panic logged (its
/// message may quote request data, so it goes to the log, not to the client).
fn panic_response(err: Box<dyn std::any::Any + Send + 'static>) -> axum::response::Response {
    let what = err
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| err.downcast_ref::<&str>().copied())
        .unwrap_or("(no message)");
    tracing::error!(panic = %what, "a request handler panicked");
    axum::response::IntoResponse::into_response(error::ApiError::Internal(
        "internal error while handling this request (logged); the daemon is still serving".into(),
    ))
}

/// Refuses an address other than loopback when no API key is configured, unless `[server]
/// allow_unauthenticated` says so: auth must fail closed.
pub fn check_exposure(addr: std::net::SocketAddr, server: &ServerConfig) -> Result<(), String> {
    if addr.ip().is_loopback() || !server.api_keys.is_empty() || server.allow_unauthenticated {
        return Ok(());
    }
    Err(format!(
        "refusing to serve on {addr} without API keys: anyone who can reach it could spend the \
         judges' budget. Set GAVEL_API_KEYS or [server] api_keys_file, listen on 127.0.0.1, or \
         set [server] allow_unauthenticated = true if a proxy in front authenticates callers"
    ))
}

/// Serves until `shutdown` resolves, then finishes in-flight requests and flushes the store.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: AppState,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let store = state.scorer.store().clone();
    let header_timeout = Duration::from_secs_f64(state.server.header_read_timeout_s);
    listen::serve_connections(listener, router(state), header_timeout, shutdown).await;
    if let Err(e) = store.flush().await {
        tracing::error!(error = %e, "flushing the verdict store at shutdown failed");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower::ServiceExt;

    #[tokio::test]
    async fn a_panicking_handler_is_a_typed_500_and_the_service_serves_on() {
        async fn boom() -> &'static str {
            panic!("bug: index out of bounds")
        }
        async fn fine() -> &'static str {
            "ok"
        }
        let app = Router::new()
            .route("/boom", get(boom))
            .route("/fine", get(fine))
            .layer(CatchPanicLayer::custom(panic_response));
        let req = |p: &str| Request::builder().uri(p).body(Body::empty()).unwrap();
        let resp = app.clone().oneshot(req("/boom")).await.unwrap();
        assert_eq!(resp.status(), 500);
        let body = axum::body::to_bytes(resp.into_body(), 1 << 16)
            .await
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["error"]["type"], "internal");
        // The panic message (which could quote request data) stays in the log.
        assert!(!v.to_string().contains("index out of bounds"), "{v}");
        let resp = app.oneshot(req("/fine")).await.unwrap();
        assert_eq!(resp.status(), 200);
    }

    #[test]
    fn only_loopback_may_serve_without_keys() {
        let cfg = ServerConfig::default();
        let at = |a: &str| a.parse::<std::net::SocketAddr>().unwrap();
        assert!(check_exposure(at("127.0.0.1:8080"), &cfg).is_ok());
        assert!(check_exposure(at("[::1]:8080"), &cfg).is_ok());
        for open in ["0.0.0.0:8080", "10.1.2.3:80", "[::]:8080"] {
            let e = check_exposure(at(open), &cfg).unwrap_err();
            assert!(e.contains("refusing to serve"), "{e}");
        }
        let keyed = ServerConfig {
            api_keys: vec![crate::domain::secret::Secret::new("k")],
            ..ServerConfig::default()
        };
        assert!(check_exposure(at("0.0.0.0:8080"), &keyed).is_ok());
        let opted = ServerConfig {
            allow_unauthenticated: true,
            ..ServerConfig::default()
        };
        assert!(check_exposure(at("0.0.0.0:8080"), &opted).is_ok());
    }
}
