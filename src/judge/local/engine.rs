//! The local judge's serving side: the model lives on one owner thread fed by a channel (the
//! text-embeddings-inference pattern), and async code holds a cloneable [`Engine`] handle.
//!
//! Requests are queued, not batched: one sequence runs at a time, which is what lets a
//! permutation reuse the KV cache of the one before it. The queue is bounded up front with
//! `Semaphore::try_acquire_owned`: a request that finds `max_queue` requests queued or running
//! is refused at once with [`EngineError::Overloaded`] (the daemon answers 429 `overloaded`)
//! instead of waiting behind them. A request whose caller has gone (deadline, disconnect) is
//! skipped, or stopped between tokens.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, Semaphore};

use super::error::LocalError;
use super::generate::Worker;
use super::loader::ModelInfo;
use super::model::LoadedModel;
use crate::prompt::ChatMessage;

/// How the engine generates and queues.
#[derive(Debug, Clone, PartialEq)]
pub struct EngineSettings {
    /// Requests queued or running at once; more are refused with [`EngineError::Overloaded`].
    pub max_queue: usize,
    /// Constrain generation to the verdict JSON for the prompt's ids (the default).
    pub constrained: bool,
    /// Cap on each explanation, bytes (constrained generation).
    pub max_explanation_bytes: usize,
    /// Cap on completion tokens without constraints (constrained output is bounded by the
    /// grammar and only by the context).
    pub max_tokens: usize,
    /// Write each score as the model's expected score rather than its most likely digits: the
    /// probabilities of `1` vs `0`, of `0.` vs `0`, and of the first decimal digit, read at the
    /// score's position (constrained output only).
    pub expected_score: bool,
    /// 0 = greedy.
    pub temperature: f64,
    /// Seed of sampling when `temperature` > 0 (mixed with the prompt, so a prompt always
    /// draws the same tokens).
    pub seed: u64,
    /// Prefilled sequences kept for prefix reuse; 0 turns reuse off.
    pub prefix_cache_entries: usize,
}

impl Default for EngineSettings {
    fn default() -> Self {
        EngineSettings {
            max_queue: 64,
            constrained: true,
            max_explanation_bytes: 400,
            max_tokens: 4096,
            expected_score: true,
            temperature: 0.0,
            seed: 0,
            prefix_cache_entries: 4,
        }
    }
}

/// One judge prompt to complete.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    pub messages: Vec<ChatMessage>,
    /// Trajectory ids the verdict must score, in order.
    pub ids: Vec<String>,
    /// Checklist item ids each trajectory's verdict lists (empty: no checklist).
    pub items: Vec<String>,
    /// Free text of at most this many bytes instead of a verdict: no grammar, greedy, ends at
    /// the model's end of turn or the cap (explanations in the probability modes).
    pub free_text_bytes: Option<usize>,
}

/// A prompt whose next-token distribution is read instead of decoded: how likely each choice
/// is as the answer's first token (pointwise and pairwise judging).
#[derive(Debug, Clone, PartialEq)]
pub struct ProbeRequest {
    pub messages: Vec<ChatMessage>,
    /// Each choice's spellings (`["yes", "Yes"]`); a choice's probability is that of the first
    /// tokens of its spellings (each token counted once).
    pub choices: Vec<Vec<String>>,
}

/// The choices' probabilities and what reading them took.
#[derive(Debug, Clone, PartialEq)]
pub struct Probed {
    /// Each choice's probability, renormalised over the choices (they sum to 1).
    pub shares: Vec<f64>,
    /// The probability of any choice before renormalising: how much of its mass the model put
    /// on the answers it was offered.
    pub coverage: f64,
    pub prompt_tokens: u64,
    /// Prompt tokens whose KV came from an earlier sequence (not prefilled again).
    pub cached_prompt_tokens: u64,
    /// Forward passes of the model this took (prefill chunks count as one pass).
    pub forward_passes: u64,
    pub queued: Duration,
    pub prefill: Duration,
}

/// A completion and what producing it took.
#[derive(Debug, Clone, PartialEq)]
pub struct Generated {
    pub text: String,
    pub prompt_tokens: u64,
    /// Prompt tokens whose KV came from an earlier sequence (not prefilled again).
    pub cached_prompt_tokens: u64,
    /// Generated tokens, forced ones included.
    pub completion_tokens: u64,
    /// Of them, tokens the grammar forced and that were run as one batch each.
    pub forced_tokens: u64,
    /// Forward passes of the model this took: the prefill, each decoded token, each batch of
    /// forced tokens.
    pub forward_passes: u64,
    pub queued: Duration,
    pub prefill: Duration,
    pub decode: Duration,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EngineError {
    #[error("local judge busy: {0} requests queued or running (max_queue); retry later")]
    Overloaded(usize),
    #[error("prompt of {prompt} tokens leaves no room in the model's context of {context}")]
    TooLong { prompt: usize, context: usize },
    #[error("the caller gave up")]
    Cancelled,
    #[error("the local judge's model thread stopped")]
    Stopped,
    #[error(transparent)]
    Local(#[from] LocalError),
}

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
}

/// What the model thread answers.
enum Done {
    Generated(Generated),
    Probed(Probed),
}

struct Job {
    work: Work,
    reply: oneshot::Sender<Result<Done, EngineError>>,
    enqueued: Instant,
    _slot: OwnedSemaphorePermit,
}

/// A cloneable handle to the model's owner thread. The thread ends when the last handle is
/// dropped.
#[derive(Clone)]
pub struct Engine {
    tx: mpsc::UnboundedSender<Job>,
    slots: Arc<Semaphore>,
    max_queue: usize,
    info: Arc<ModelInfo>,
    stats: Arc<EngineStats>,
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
        std::thread::Builder::new()
            .name("gavel-local-judge".into())
            .spawn(move || {
                while let Some(job) = rx.blocking_recv() {
                    if job.reply.is_closed() {
                        continue;
                    }
                    let queued = job.enqueued.elapsed();
                    let reply = &job.reply;
                    let result = match &job.work {
                        Work::Generate(request) => {
                            worker.run(request, &|| reply.is_closed()).map(|mut g| {
                                g.queued = queued;
                                record(&thread_stats, &g);
                                Done::Generated(g)
                            })
                        }
                        Work::Probe(request) => worker.probe(request).map(|mut p| {
                            p.queued = queued;
                            record_probe(&thread_stats, &p);
                            Done::Probed(p)
                        }),
                    };
                    let _ = job.reply.send(result);
                }
            })
            .map_err(|e| LocalError::Forward(format!("cannot start the model thread: {e}")))?;
        Ok(Engine {
            tx,
            slots: Arc::new(Semaphore::new(max_queue)),
            max_queue,
            info,
            stats,
        })
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

    /// Reads the choices' probabilities after `request`'s prompt (no decoding); queued and
    /// refused like [`Engine::generate`].
    pub async fn probe(&self, request: ProbeRequest) -> Result<Probed, EngineError> {
        match self.submit(Work::Probe(request)).await? {
            Done::Probed(p) => Ok(p),
            Done::Generated(_) => unreachable!("a probe job answers Probed"),
        }
    }

    async fn submit(&self, work: Work) -> Result<Done, EngineError> {
        let slot = self.slots.clone().try_acquire_owned().map_err(|_| {
            self.stats.rejected.fetch_add(1, Ordering::Relaxed);
            metrics::counter!("gavel_local_rejected_total").increment(1);
            EngineError::Overloaded(self.max_queue)
        })?;
        let (reply, answer) = oneshot::channel();
        self.tx
            .send(Job {
                work,
                reply,
                enqueued: Instant::now(),
                _slot: slot,
            })
            .map_err(|_| EngineError::Stopped)?;
        answer.await.map_err(|_| EngineError::Stopped)?
    }
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
