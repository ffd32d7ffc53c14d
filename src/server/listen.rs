//! The accept loop. `axum::serve` gives hyper no timer, so hyper's header-read timeout never
//! fires: a client sending its headers one byte a minute holds a connection (and a task) for
//! ever, and graceful shutdown waits for it. This loop is axum's with that one thing added, on
//! hyper's own HTTP/1 connection builder and hyper-util's graceful-shutdown watcher.

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;

/// How long the loop backs off after a failed `accept` (e.g. out of file descriptors), so a
/// persistent failure does not spin a core.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// Serves `app` on `listener` until `shutdown` resolves; then stops accepting and waits for the
/// open connections to finish their requests.
pub async fn serve_connections(
    listener: tokio::net::TcpListener,
    app: Router,
    header_read_timeout: Duration,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let graceful = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        // Small JSON answers: do not hold them back for Nagle.
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(app.clone());
        let conn = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(header_read_timeout)
            .serve_connection(TokioIo::new(stream), service);
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                log_connection_end(peer, &e);
            }
        });
    }
    drop(listener);
    graceful.shutdown().await;
}

/// A connection that ended in an error: a slow or broken client, logged at debug level (it is
/// the client's problem, and a flood of them must not flood the log).
fn log_connection_end(peer: SocketAddr, e: &hyper::Error) {
    tracing::debug!(%peer, error = %e, "connection closed with an error");
}
