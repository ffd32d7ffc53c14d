//! A job on the local judge's model thread: what it asks ([`Work`]), what it answers
//! ([`Done`]), its place in the queue, and the totals the thread keeps. Shared by the engine's
//! handle, which sends jobs, and the model thread, which runs them.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::{oneshot, OwnedSemaphorePermit};

use super::request::{EngineError, Generated, ReadRequest, Reading, Request};

/// Totals since start, for `/metrics` and the benchmark.
#[derive(Debug, Default)]
pub struct EngineStats {
    pub requests: AtomicU64,
    pub prompt_tokens: AtomicU64,
    pub cached_prompt_tokens: AtomicU64,
    pub completion_tokens: AtomicU64,
    pub rejected: AtomicU64,
}

/// What a job asks of the model thread.
pub(super) enum Work {
    /// Generations decoded together; answered when the last ends.
    Generate(Vec<Request>),
    Read(ReadRequest),
    /// Panics the model thread (tests of the recovery).
    #[cfg(test)]
    Panic,
}

/// Panics the model thread survives within [`PANIC_WINDOW`]; one more stops it for good (a
/// model that panics on every request should take the judge out of `/readyz`, not loop).
pub(super) const MAX_PANICS: usize = 3;
pub(super) const PANIC_WINDOW: Duration = Duration::from_secs(600);

/// The model thread's state, for `/readyz`: the thread sends it on a watch channel whenever it
/// changes, and every [`Engine`] handle reads the latest. The channel closes when the thread
/// ends.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Health {
    /// Panics survived since start.
    pub(super) restarts: u64,
    /// Why the thread stopped, once it has.
    pub(super) stopped: Option<String>,
}

/// What the model thread answers.
pub(super) enum Done {
    Generated(Vec<Generated>),
    Read(Vec<Reading>),
}

pub(super) struct Job {
    pub(super) work: Work,
    /// The caller's span (its request id): the model thread's log lines carry it.
    pub(super) span: tracing::Span,
    pub(super) reply: oneshot::Sender<Result<Done, EngineError>>,
    pub(super) enqueued: Instant,
    /// Its place in the queue, given back when the job is dropped.
    pub(super) _slot: OwnedSemaphorePermit,
}

/// Counts one request's prompt side (generate and read alike).
fn record_prompt(
    stats: &EngineStats,
    prompt: u64,
    cached: u64,
    queued: Duration,
    prefill: Duration,
) {
    stats.requests.fetch_add(1, Ordering::Relaxed);
    stats.prompt_tokens.fetch_add(prompt, Ordering::Relaxed);
    stats
        .cached_prompt_tokens
        .fetch_add(cached, Ordering::Relaxed);
    metrics::counter!("gavel_local_prompt_tokens_total").increment(prompt);
    metrics::counter!("gavel_local_cached_prompt_tokens_total").increment(cached);
    metrics::histogram!("gavel_local_queue_seconds").record(queued.as_secs_f64());
    metrics::histogram!("gavel_local_prefill_seconds").record(prefill.as_secs_f64());
}

pub(super) fn record_reading(stats: &EngineStats, p: &Reading) {
    record_prompt(
        stats,
        p.prompt_tokens,
        p.cached_prompt_tokens,
        p.queued,
        p.prefill,
    );
}

pub(super) fn record(stats: &EngineStats, g: &Generated) {
    record_prompt(
        stats,
        g.prompt_tokens,
        g.cached_prompt_tokens,
        g.queued,
        g.prefill,
    );
    stats
        .completion_tokens
        .fetch_add(g.completion_tokens, Ordering::Relaxed);
    metrics::counter!("gavel_local_completion_tokens_total").increment(g.completion_tokens);
    metrics::histogram!("gavel_local_decode_seconds").record(g.decode.as_secs_f64());
}
