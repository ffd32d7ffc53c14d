//! `gavel serve`: the daemon.

use std::process::ExitCode;

use anyhow::Context;
use clap::Args;

use gavel::cli::open_scorer;

use super::Common;
use gavel::server::{self, AppState};

#[derive(Args)]
pub struct ServeArgs {
    /// Address to listen on (overrides `[server] addr`; default 127.0.0.1:8080).
    #[arg(long, env = "GAVEL_ADDR")]
    addr: Option<String>,
}

/// Installs the SIGTERM and SIGINT handlers now (before the daemon announces itself, so a
/// supervisor that stops it at once still gets a graceful shutdown) and returns the future that
/// resolves on either signal.
fn shutdown_signal() -> std::io::Result<impl std::future::Future<Output = ()> + Send + 'static> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {},
            _ = int.recv() => {},
        }
        tracing::info!("shutdown signal received; finishing in-flight requests");
    })
}

pub async fn run(common: Common, args: ServeArgs) -> anyhow::Result<ExitCode> {
    let mut cfg = common.load_config()?;
    if let Some(addr) = args.addr {
        cfg.server.addr = addr;
    }
    let shutdown = shutdown_signal()?;
    let scorer = open_scorer(&cfg).await?;
    for j in scorer.judges() {
        let settings = j.settings();
        let name = &settings.info.name;
        match &settings.unconfigured {
            None => tracing::info!(judge = %name, model = %settings.info.model, "judge ready"),
            Some(why) => tracing::warn!(judge = %name, "{why}"),
        }
    }
    let listener = tokio::net::TcpListener::bind(&cfg.server.addr)
        .await
        .with_context(|| format!("cannot listen on {}", cfg.server.addr))?;
    let local = listener.local_addr()?;
    server::check_exposure(local, &cfg.server).map_err(anyhow::Error::msg)?;
    tracing::info!(addr = %local, store = %cfg.store.describe(), "gavel listening");
    println!("gavel listening on http://{local}");
    let state = AppState::new(scorer, cfg.server.clone()).with_openrlhf(cfg.openrlhf.clone())?;
    server::serve(listener, state, shutdown).await?;
    tracing::info!("stopped");
    Ok(ExitCode::SUCCESS)
}
