//! The local judge's serving side: the model lives on one owner thread fed by a channel (the
//! text-embeddings-inference pattern), and async code holds a cloneable [`Engine`] handle.
//!
//! Jobs start in the order they came (see `model_thread`). All the questions of one judging (a
//! group's pointwise or pairwise prompts) are one job, run whole on their shared prefix and
//! packed into batched forwards (see `reading`): groups in flight never interleave their prompts,
//! and none overtakes another. Generations (listwise verdicts, explanations) are decoded
//! together, up to `max_decode_batch` at once, one batched forward a step. The queue is bounded
//! up front with
//! `Semaphore::try_acquire_owned`: a job that finds `max_queue` jobs queued or running is
//! refused at once with [`EngineError::Overloaded`] (the daemon answers 429 `overloaded`)
//! instead of waiting behind them. A job whose caller has gone (deadline, disconnect) is
//! skipped, or stopped between forwards.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::{mpsc, oneshot, watch, Semaphore};

use super::generate::Worker;
pub use super::job::EngineStats;
use super::job::{Done, Health, Job, Work};
use super::model::LoadedModel;
use super::model_thread::{Gauges, ModelThread};
use super::request::{EngineError, EngineSettings, Generated, ReadRequest, Reading, Request};
use crate::model::{LocalError, ModelInfo};

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
        let worker = Worker::new(model, settings);
        let (tx, rx) = mpsc::unbounded_channel::<Job>();
        let (health_tx, health) = watch::channel(Health::default());
        let slots = Arc::new(Semaphore::new(max_queue));
        let labels = metric_labels(&info);
        worker.record_prefix_cache(&labels);
        let thread = ModelThread::new(
            worker,
            rx,
            health_tx,
            Gauges {
                stats: stats.clone(),
                slots: slots.clone(),
                max_queue,
                labels: labels.clone(),
            },
        );
        let handle = std::thread::Builder::new()
            .name("gavel-local-judge".into())
            .spawn(move || thread.run())
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
        let mut g = self.generate_many(vec![request]).await?;
        Ok(g.pop().expect("one request, one answer"))
    }

    /// Completes `requests` as one job (one place in the queue): they are decoded together,
    /// and answered, in order, when the last ends. Refused like [`Engine::generate`].
    pub async fn generate_many(
        &self,
        requests: Vec<Request>,
    ) -> Result<Vec<Generated>, EngineError> {
        if requests.is_empty() {
            return Ok(Vec::new());
        }
        match self.submit(Work::Generate(requests)).await? {
            Done::Generated(g) => Ok(g),
            Done::Read(_) => unreachable!("a generate job answers Generated"),
        }
    }

    /// Reads the choices' probabilities after each of `request`'s prompts (no decoding), as
    /// one job: a group's prompts run back to back on their shared prefix. Queued (one place,
    /// however many prompts) and refused like [`Engine::generate`].
    pub async fn read(&self, request: ReadRequest) -> Result<Vec<Reading>, EngineError> {
        match self.submit(Work::Read(request)).await? {
            Done::Read(p) => Ok(p),
            Done::Generated(_) => unreachable!("a reading job answers Read"),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::prompt::ChatMessage;
    use crate::judge::local::job::MAX_PANICS;
    use crate::judge::local::model::LocalModelSpec;
    use crate::model::testkit::{self, TinyOptions};
    use crate::model::Arch;

    fn engine(dir: &std::path::Path) -> Engine {
        let folder = dir.join("tiny");
        testkit::write_folder(&folder, &TinyOptions::new(Arch::Qwen2)).unwrap();
        let model = LoadedModel::load(&LocalModelSpec::new(&folder, "cpu")).unwrap();
        Engine::start(model, EngineSettings::default()).unwrap()
    }

    fn question() -> ReadRequest {
        ReadRequest {
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
        let before = e.read(question()).await.unwrap();
        for n in 1..=MAX_PANICS {
            assert!(matches!(
                e.submit(Work::Panic).await,
                Err(EngineError::Panicked)
            ));
            assert_eq!(e.restarts(), n as u64);
            // Reset, not dead: the next request is answered, and exactly as before.
            assert_eq!(
                e.read(question()).await.unwrap()[0].shares,
                before[0].shares
            );
            assert!(e.health().is_ok());
        }
        // One more within the window: the thread stops, /readyz will say so, requests fail.
        assert!(matches!(
            e.submit(Work::Panic).await,
            Err(EngineError::Panicked)
        ));
        let why = e.health().unwrap_err();
        assert!(why.contains("stopped after 4 panics"), "{why}");
        assert!(matches!(
            e.read(question()).await,
            Err(EngineError::Stopped)
        ));
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
        clone.read(question()).await.unwrap();
        drop(clone);
        // The thread held the health channel's sender; joined, the channel is closed.
        assert!(
            watcher.has_changed().is_err(),
            "the model thread outlived its engine"
        );
    }
}
