//! The local judge's serving side: the model lives on one owner thread fed by a channel (the
//! text-embeddings-inference pattern), and async code holds a cloneable [`Engine`] handle.
//!
//! Jobs run one at a time, in the order they came: a listwise verdict, an explanation, or all
//! the probes of one judging (a group's pointwise or pairwise prompts, run back to back on their
//! shared prefix and packed into batched forwards, see `probe`). So groups in flight never
//! interleave their prompts, and none overtakes another. The queue is bounded up front with
//! `Semaphore::try_acquire_owned`: a job that finds `max_queue` jobs queued or running is
//! refused at once with [`EngineError::Overloaded`] (the daemon answers 429 `overloaded`)
//! instead of waiting behind them. A job whose caller has gone (deadline, disconnect) is
//! skipped, or stopped between forwards.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot, watch, OwnedSemaphorePermit, Semaphore};

use super::generate::Worker;
use super::model::LoadedModel;
use super::request::{EngineError, EngineSettings, Generated, ProbeRequest, Probed, Request};
use crate::model::{LocalError, ModelInfo};

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
enum Work {
    Generate(Request),
    Probe(ProbeRequest),
    /// Panics the model thread (tests of the recovery).
    #[cfg(test)]
    Panic,
}

/// Panics the model thread survives within [`PANIC_WINDOW`]; one more stops it for good (a
/// model that panics on every request should take the judge out of `/readyz`, not loop).
const MAX_PANICS: usize = 3;
const PANIC_WINDOW: Duration = Duration::from_secs(600);

/// The model thread's state, for `/readyz`: the thread sends it on a watch channel whenever it
/// changes, and every [`Engine`] handle reads the latest. The channel closes when the thread
/// ends.
#[derive(Debug, Clone, Default, PartialEq)]
struct Health {
    /// Panics survived since start.
    restarts: u64,
    /// Why the thread stopped, once it has.
    stopped: Option<String>,
}

/// Joins the model thread when the last [`Engine`] handle goes (its channel closes first, so
/// the thread finishes the job in hand and ends).
struct Joiner(std::sync::Mutex<Option<std::thread::JoinHandle<()>>>);

impl Drop for Joiner {
    fn drop(&mut self) {
        let handle = self.0.lock().map(|mut h| h.take()).unwrap_or(None);
        if let Some(h) = handle {
            if h.thread().id() != std::thread::current().id() {
                let _ = h.join();
            }
        }
    }
}

/// What the model thread answers.
enum Done {
    Generated(Generated),
    Probed(Vec<Probed>),
}

struct Job {
    work: Work,
    /// The caller's span (its request id): the model thread's log lines carry it.
    span: tracing::Span,
    reply: oneshot::Sender<Result<Done, EngineError>>,
    enqueued: Instant,
    _slot: OwnedSemaphorePermit,
}

/// A cloneable handle to the model's owner thread. The thread ends when the last handle is
/// dropped.
#[derive(Clone)]
pub struct Engine {
    // Declared first so that it drops before `joiner`: the thread sees its channel close.
    tx: mpsc::UnboundedSender<Job>,
    slots: Arc<Semaphore>,
    max_queue: usize,
    info: Arc<ModelInfo>,
    /// `model` and `device`, on the metrics each engine has one of (gauges).
    labels: Vec<metrics::Label>,
    stats: Arc<EngineStats>,
    health: watch::Receiver<Health>,
    _joiner: Arc<Joiner>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("model", &self.info.path)
            .field("max_queue", &self.max_queue)
            .finish()
    }
}

impl Engine {
    /// Moves `model` onto its owner thread. Building the token mask (a sort of the vocabulary)
    /// happens here, before the first request.
    pub fn start(model: LoadedModel, settings: EngineSettings) -> Result<Engine, LocalError> {
        let info = Arc::new(model.info().clone());
        let stats = Arc::new(EngineStats::default());
        let max_queue = settings.max_queue.max(1);
        let mut worker = Worker::new(model, settings);
        let (tx, mut rx) = mpsc::unbounded_channel::<Job>();
        let thread_stats = stats.clone();
        let (health_tx, health) = watch::channel(Health::default());
        let slots = Arc::new(Semaphore::new(max_queue));
        let thread_slots = slots.clone();
        let labels = metric_labels(&info);
        let thread_labels = labels.clone();
        worker.record_prefix_cache(&labels);
        let handle = std::thread::Builder::new()
            .name("gavel-local-judge".into())
            .spawn(move || {
                let mut panics: std::collections::VecDeque<Instant> = Default::default();
                while let Some(job) = rx.blocking_recv() {
                    if job.reply.is_closed() {
                        continue;
                    }
                    let queued = job.enqueued.elapsed();
                    let _span = job.span.clone().entered();
                    let run = || run_job(&mut worker, &job, queued, &thread_stats);
                    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(run)) {
                        Ok(result) => {
                            let _ = job.reply.send(result);
                            worker.record_prefix_cache(&thread_labels);
                            drop(job._slot);
                            let depth = max_queue - thread_slots.available_permits();
                            metrics::gauge!("gavel_local_queue_depth", thread_labels.clone())
                                .set(depth as f64);
                        }
                        Err(payload) => {
                            panics.push_back(Instant::now());
                            while panics.front().is_some_and(|t| t.elapsed() > PANIC_WINDOW) {
                                panics.pop_front();
                            }
                            let what = panic_message(payload.as_ref());
                            if panics.len() > MAX_PANICS {
                                let why = format!(
                                    "the local judge's model thread stopped after {} panics in \
                                     {} s; the last: {what}",
                                    panics.len(),
                                    PANIC_WINDOW.as_secs()
                                );
                                tracing::error!("{why}");
                                health_tx.send_modify(|h| h.stopped = Some(why));
                                let _ = job.reply.send(Err(EngineError::Panicked));
                                // Queued jobs are dropped with the channel: their callers see
                                // `Stopped`.
                                break;
                            }
                            tracing::error!(panic = %what, "the local judge panicked; resetting it");
                            health_tx.send_modify(|h| h.restarts += 1);
                            metrics::counter!("gavel_local_restarts_total").increment(1);
                            worker.reset();
                            // Answered after the state is updated, so a caller that sees the
                            // error sees the restart counted.
                            let _ = job.reply.send(Err(EngineError::Panicked));
                        }
                    }
                }
            })
            .map_err(|e| LocalError::Forward(format!("cannot start the model thread: {e}")))?;
        Ok(Engine {
            tx,
            slots,
            max_queue,
            info,
            labels,
            stats,
            health,
            _joiner: Arc::new(Joiner(std::sync::Mutex::new(Some(handle)))),
        })
    }

    /// `Err` once the model thread has stopped (for `/readyz`).
    pub fn health(&self) -> Result<(), String> {
        match &self.health.borrow().stopped {
            Some(why) => Err(why.clone()),
            None => Ok(()),
        }
    }

    /// Panics the model thread survived since start.
    pub fn restarts(&self) -> u64 {
        self.health.borrow().restarts
    }

    pub fn info(&self) -> &ModelInfo {
        &self.info
    }

    pub fn stats(&self) -> &EngineStats {
        &self.stats
    }

    /// Requests queued or running now.
    pub fn queued(&self) -> usize {
        self.max_queue - self.slots.available_permits()
    }

    /// Completes `request` on the owner thread; refused at once when the queue is full.
    pub async fn generate(&self, request: Request) -> Result<Generated, EngineError> {
        match self.submit(Work::Generate(request)).await? {
            Done::Generated(g) => Ok(g),
            Done::Probed(_) => unreachable!("a generate job answers Generated"),
        }
    }

    /// Reads the choices' probabilities after each of `request`'s prompts (no decoding), as
    /// one job: a group's prompts run back to back on their shared prefix. Queued (one place,
    /// however many prompts) and refused like [`Engine::generate`].
    pub async fn probe(&self, request: ProbeRequest) -> Result<Vec<Probed>, EngineError> {
        match self.submit(Work::Probe(request)).await? {
            Done::Probed(p) => Ok(p),
            Done::Generated(_) => unreachable!("a probe job answers Probed"),
        }
    }

    async fn submit(&self, work: Work) -> Result<Done, EngineError> {
        if self.health().is_err() {
            return Err(EngineError::Stopped);
        }
        let slot = self.slots.clone().try_acquire_owned().map_err(|_| {
            self.stats.rejected.fetch_add(1, Ordering::Relaxed);
            metrics::counter!("gavel_local_rejected_total").increment(1);
            EngineError::Overloaded(self.max_queue)
        })?;
        metrics::gauge!("gavel_local_queue_depth", self.labels.clone()).set(self.queued() as f64);
        let (reply, answer) = oneshot::channel();
        self.tx
            .send(Job {
                work,
                span: tracing::Span::current(),
                reply,
                enqueued: Instant::now(),
                _slot: slot,
            })
            .map_err(|_| EngineError::Stopped)?;
        answer.await.map_err(|_| EngineError::Stopped)?
    }
}

/// Runs one job on the model thread.
fn run_job(
    worker: &mut Worker,
    job: &Job,
    queued: Duration,
    stats: &EngineStats,
) -> Result<Done, EngineError> {
    let reply = &job.reply;
    match &job.work {
        Work::Generate(request) => worker.run(request, &|| reply.is_closed()).map(|mut g| {
            g.queued = queued;
            record(stats, &g);
            Done::Generated(g)
        }),
        Work::Probe(request) => worker
            .probe(request, &|| reply.is_closed())
            .map(|mut probed| {
                for p in &mut probed {
                    p.queued = queued;
                    record_probe(stats, p);
                }
                Done::Probed(probed)
            }),
        #[cfg(test)]
        Work::Panic => panic!("injected by a test"),
    }
}

/// The labels of an engine's own gauges: its model's file name and its device (several local
/// models in one daemon each have their own queue and prefix cache).
fn metric_labels(info: &ModelInfo) -> Vec<metrics::Label> {
    let file = info.path.file_name().map_or_else(
        || info.path.display().to_string(),
        |f| f.to_string_lossy().into_owned(),
    );
    vec![
        metrics::Label::new("model", file),
        metrics::Label::new("device", info.device.clone()),
    ]
}

/// The text of a panic's payload.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "(no message)".into())
}

/// Counts one request's prompt side (generate and probe alike).
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

fn record_probe(stats: &EngineStats, p: &Probed) {
    record_prompt(
        stats,
        p.prompt_tokens,
        p.cached_prompt_tokens,
        p.queued,
        p.prefill,
    );
}

fn record(stats: &EngineStats, g: &Generated) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::judge::local::model::LocalModelSpec;
    use crate::model::testkit::{self, TinyOptions};
    use crate::model::Arch;
    use crate::prompt::ChatMessage;

    fn engine(dir: &std::path::Path) -> Engine {
        let folder = dir.join("tiny");
        testkit::write_folder(&folder, &TinyOptions::new(Arch::Qwen2)).unwrap();
        let model = LoadedModel::load(&LocalModelSpec::new(&folder, "cpu")).unwrap();
        Engine::start(model, EngineSettings::default()).unwrap()
    }

    fn probe() -> ProbeRequest {
        ProbeRequest {
            prompts: vec![vec![ChatMessage {
                role: "user".into(),
                content: "Is this right? Answer yes or no.".into(),
            }]],
            choices: vec![vec!["yes".into()], vec!["no".into()]],
            adapter: None,
        }
    }

    #[tokio::test]
    async fn a_panic_fails_its_request_the_engine_resets_and_repeated_panics_stop_it() {
        let dir = tempfile::tempdir().unwrap();
        let e = engine(dir.path());
        let before = e.probe(probe()).await.unwrap();
        for n in 1..=MAX_PANICS {
            assert!(matches!(
                e.submit(Work::Panic).await,
                Err(EngineError::Panicked)
            ));
            assert_eq!(e.restarts(), n as u64);
            // Reset, not dead: the next request is answered, and exactly as before.
            assert_eq!(e.probe(probe()).await.unwrap()[0].shares, before[0].shares);
            assert!(e.health().is_ok());
        }
        // One more within the window: the thread stops, /readyz will say so, requests fail.
        assert!(matches!(
            e.submit(Work::Panic).await,
            Err(EngineError::Panicked)
        ));
        let why = e.health().unwrap_err();
        assert!(why.contains("stopped after 4 panics"), "{why}");
        assert!(matches!(e.probe(probe()).await, Err(EngineError::Stopped)));
        // Dropping the last handle joins the (already ended) thread without hanging.
        drop(e);
    }

    #[tokio::test]
    async fn dropping_the_last_handle_joins_the_model_thread() {
        let dir = tempfile::tempdir().unwrap();
        let e = engine(dir.path());
        let watcher = e.health.clone();
        let clone = e.clone();
        drop(e);
        assert!(watcher.has_changed().is_ok(), "a handle is still alive");
        clone.probe(probe()).await.unwrap();
        drop(clone);
        // The thread held the health channel's sender; joined, the channel is closed.
        assert!(
            watcher.has_changed().is_err(),
            "the model thread outlived its engine"
        );
    }
}
