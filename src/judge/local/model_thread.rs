//! The local judge's model thread: it takes jobs in the order they came. A reading job (all the
//! prompts of one judging) runs whole when it reaches the front. A generation job (a listwise
//! verdict, or a group's explanations) starts when it reaches the front: each of its
//! generations is prefilled and joins the decoding batch while the batch has room
//! (`max_decode_batch`), earlier jobs' generations first; the batch steps together, one batched
//! forward a step for the generations that share an adapter (continuous batching: generations
//! join and leave between steps, so a short one never waits for a long one to end). A job is
//! answered when its last generation ends. Decoding pauses while a reading job or a newcomer's
//! prefill runs. A panic fails the jobs it hit, and the thread resets the worker and serves on,
//! up to [`MAX_PANICS`] in [`PANIC_WINDOW`].

use std::collections::{BTreeMap, VecDeque};
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch, Semaphore};

use super::generate::{Generation, Worker};
use super::job::{
    record, record_reading, Done, EngineStats, Health, Job, Work, MAX_PANICS, PANIC_WINDOW,
};
use super::request::{EngineError, Generated, ReadRequest, Request};

/// The old name of `gavel_local_reading_jobs_joined_total`, counted alongside it until dashboards
/// move (docs/production.md).
const OLD_JOINED_NAME: &str = "gavel_local_probe_jobs_joined_total";

/// What the thread keeps up to date for `/metrics` and the engine's handles.
pub(super) struct Gauges {
    pub(super) stats: Arc<EngineStats>,
    pub(super) slots: Arc<Semaphore>,
    pub(super) max_queue: usize,
    pub(super) labels: Vec<metrics::Label>,
}

/// A generation job that has started: its generations not started yet, and those done.
struct Started {
    job: Job,
    queued: Duration,
    /// Its requests not prefilled yet, with their places in the answer.
    pending: VecDeque<(usize, Request)>,
    done: Vec<Option<Generated>>,
    /// Its generations in the batch now.
    running: usize,
}

/// A generation being decoded: the job ([`ModelThread::started`]) and the place in its answer.
struct Active {
    gen: Generation,
    job: u64,
    place: usize,
}

pub(super) struct ModelThread {
    worker: Worker,
    rx: mpsc::UnboundedReceiver<Job>,
    health: watch::Sender<Health>,
    gauges: Gauges,
    /// When the panics survived within the window happened.
    panics: VecDeque<Instant>,
    /// Jobs taken from the channel, not started yet, in order.
    waiting: VecDeque<Job>,
    /// Generation jobs started and not answered yet, by id (ids grow: the order they came).
    started: BTreeMap<u64, Started>,
    next_id: u64,
    active: Vec<Active>,
}

impl ModelThread {
    pub(super) fn new(
        worker: Worker,
        rx: mpsc::UnboundedReceiver<Job>,
        health: watch::Sender<Health>,
        gauges: Gauges,
    ) -> ModelThread {
        ModelThread {
            worker,
            rx,
            health,
            gauges,
            panics: VecDeque::new(),
            waiting: VecDeque::new(),
            started: BTreeMap::new(),
            next_id: 0,
            active: Vec::new(),
        }
    }

    /// Serves until the last engine handle is gone, or too many panics stop it (the jobs left
    /// are dropped: their callers see `Stopped`).
    pub(super) fn run(mut self) {
        loop {
            if self.started.is_empty() && self.waiting.is_empty() {
                match self.rx.blocking_recv() {
                    Some(job) => self.waiting.push_back(job),
                    None => return,
                }
            }
            while let Ok(job) = self.rx.try_recv() {
                self.waiting.push_back(job);
            }
            if self.admit().is_break() || self.step().is_break() {
                return;
            }
        }
    }

    fn room(&self) -> bool {
        self.active.len() < self.worker.settings.max_decode_batch.max(1)
    }

    /// Fills the batch from the generation jobs started, oldest first, then starts waiting
    /// jobs from the front: a reading job runs whole; a generation job starts when the batch has
    /// room (else it waits, and so does everything behind it).
    fn admit(&mut self) -> ControlFlow<()> {
        self.fill()?;
        while let Some(front) = self.waiting.front() {
            let generates = matches!(front.work, Work::Generate(_));
            if !front.reply.is_closed() && generates && !self.room() {
                break;
            }
            if !front.reply.is_closed() && matches!(front.work, Work::Read(_)) {
                self.read()?;
                continue;
            }
            let mut job = self.waiting.pop_front().expect("a front job");
            if job.reply.is_closed() {
                self.answer(job, Err(EngineError::Cancelled));
                continue;
            }
            match &mut job.work {
                Work::Generate(requests) => {
                    let requests = std::mem::take(requests);
                    let id = self.next_id;
                    self.next_id += 1;
                    self.started.insert(
                        id,
                        Started {
                            done: vec![None; requests.len()],
                            pending: requests.into_iter().enumerate().collect(),
                            running: 0,
                            queued: job.enqueued.elapsed(),
                            job,
                        },
                    );
                    self.settle(id);
                    self.fill()?;
                }
                Work::Read(_) => unreachable!("reading jobs run above"),
                #[cfg(test)]
                Work::Panic => {
                    let ran = guarded(&mut self.worker, |_| panic!("injected by a test"));
                    let what: String = ran.map_or_else(|what| what, |()| unreachable!());
                    self.fail_panicked(what, vec![job])?;
                }
            }
        }
        ControlFlow::Continue(())
    }

    /// Runs the reading job at the front of the queue, and the reading jobs right behind it whose
    /// groups fit the room its last packed forward leaves ([`Worker::read_jobs`]), and
    /// answers those read.
    fn read(&mut self) -> ControlFlow<()> {
        let jobs: Vec<&Job> = self
            .waiting
            .iter()
            .take_while(|j| !j.reply.is_closed())
            .map_while(|j| matches!(j.work, Work::Read(_)).then_some(j))
            .collect();
        let reqs: Vec<&ReadRequest> = jobs
            .iter()
            .map(|j| match &j.work {
                Work::Read(req) => req,
                _ => unreachable!("reading jobs only"),
            })
            .collect();
        let queued: Vec<Duration> = jobs.iter().map(|j| j.enqueued.elapsed()).collect();
        let span = jobs[0].span.clone();
        let _entered = span.enter();
        let cancelled = || jobs.iter().all(|j| j.reply.is_closed());
        let ran = guarded(&mut self.worker, |w| w.read_jobs(&reqs, &cancelled));
        let read = ran.as_ref().map_or(1, Vec::len);
        let taken: Vec<Job> = self.waiting.drain(..read).collect();
        if read > 1 {
            let labels = self.gauges.labels.clone();
            metrics::counter!("gavel_local_reading_jobs_joined_total", labels.clone())
                .increment(read as u64 - 1);
            // Under its old name too (deprecated), for dashboards that read it.
            metrics::counter!(OLD_JOINED_NAME, labels).increment(read as u64 - 1);
        }
        match ran {
            Ok(answers) => {
                for ((job, answer), queued) in taken.into_iter().zip(answers).zip(queued) {
                    let answer = answer.map(|mut readings| {
                        for p in &mut readings {
                            p.queued = queued;
                            record_reading(&self.gauges.stats, p);
                        }
                        Done::Read(readings)
                    });
                    self.answer(job, answer);
                }
                ControlFlow::Continue(())
            }
            Err(what) => self.fail_panicked(what, taken),
        }
    }

    /// Prefills generations of the started jobs, oldest job first, while the batch has room.
    fn fill(&mut self) -> ControlFlow<()> {
        while self.room() {
            let Some((&id, _)) = self.started.iter().find(|(_, s)| !s.pending.is_empty()) else {
                return ControlFlow::Continue(());
            };
            let started = self.started.get_mut(&id).expect("found");
            if started.job.reply.is_closed() {
                self.fail(id, EngineError::Cancelled);
                continue;
            }
            let (place, request) = started.pending.pop_front().expect("pending");
            started.running += 1;
            let span = started.job.span.clone();
            let _entered = span.enter();
            match guarded(&mut self.worker, |w| w.start(&request)) {
                Ok(Ok(gen)) => {
                    self.active.push(Active {
                        gen,
                        job: id,
                        place,
                    });
                }
                Ok(Err(e)) => self.fail(id, e),
                Err(what) => {
                    let flow = self.panicked(what);
                    self.fail(id, EngineError::Panicked);
                    flow?;
                }
            }
        }
        ControlFlow::Continue(())
    }

    /// One decoding step: each generation plans its next tokens (or ends), then those that
    /// share an adapter run them in one forward.
    fn step(&mut self) -> ControlFlow<()> {
        let mut running: Vec<Active> = Vec::with_capacity(self.active.len());
        for mut a in std::mem::take(&mut self.active) {
            let Some(job) = self.started.get(&a.job) else {
                continue; // its job failed meanwhile
            };
            let (closed, span) = (job.job.reply.is_closed(), job.job.span.clone());
            if closed {
                self.fail(a.job, EngineError::Cancelled);
                continue;
            }
            let _entered = span.entered();
            match guarded(&mut self.worker, |w| w.plan(&mut a.gen)) {
                Ok(Ok(true)) => running.push(a),
                Ok(Ok(false)) => match guarded(&mut self.worker, |w| w.finish(a.gen)) {
                    Ok(Ok(g)) => {
                        if let Some(s) = self.started.get_mut(&a.job) {
                            s.done[a.place] = Some(g);
                            s.running -= 1;
                        }
                        self.settle(a.job);
                    }
                    Ok(Err(e)) => self.fail(a.job, e),
                    Err(what) => self.fail_panicked_jobs(what, &[a.job])?,
                },
                Ok(Err(e)) => self.fail(a.job, e),
                Err(what) => self.fail_panicked_jobs(what, &[a.job])?,
            }
        }
        // Generations of jobs that failed while the others planned are dropped.
        running.retain(|a| self.started.contains_key(&a.job));
        while let Some(first) = running.first() {
            let adapter = first.gen.adapter();
            let (mut group, rest): (Vec<Active>, Vec<Active>) = std::mem::take(&mut running)
                .into_iter()
                .partition(|a| a.gen.adapter() == adapter);
            running = rest;
            let mut gens: Vec<&mut Generation> = group.iter_mut().map(|a| &mut a.gen).collect();
            let stepped = guarded(&mut self.worker, |w| w.step(&mut gens));
            let jobs: Vec<u64> = group.iter().map(|a| a.job).collect();
            match stepped {
                Ok(Ok(())) => {
                    if group.len() > 1 {
                        let labels = self.gauges.labels.clone();
                        metrics::counter!("gavel_local_decode_batches_total", labels).increment(1);
                    }
                    self.active.extend(group);
                }
                Ok(Err(e)) => {
                    for id in jobs {
                        self.fail(id, e.clone());
                    }
                }
                Err(what) => self.fail_panicked_jobs(what, &jobs)?,
            }
        }
        ControlFlow::Continue(())
    }

    /// Answers generation job `id` when all its generations are done.
    fn settle(&mut self, id: u64) {
        let whole = self
            .started
            .get(&id)
            .is_some_and(|s| s.pending.is_empty() && s.running == 0);
        if !whole {
            return;
        }
        let s = self.started.remove(&id).expect("checked");
        let generated: Vec<Generated> = s
            .done
            .into_iter()
            .map(|g| {
                let mut g = g.expect("every generation done");
                g.queued = s.queued;
                record(&self.gauges.stats, &g);
                g
            })
            .collect();
        self.answer(s.job, Ok(Done::Generated(generated)));
    }

    /// Fails generation job `id` (if it is still open): its other generations stop.
    fn fail(&mut self, id: u64, e: EngineError) {
        if let Some(s) = self.started.remove(&id) {
            self.active.retain(|a| a.job != id);
            self.answer(s.job, Err(e));
        }
    }

    /// Fails the generation jobs `ids`, which a panic interrupted, after the thread has reset
    /// (or stopped).
    fn fail_panicked_jobs(&mut self, what: String, ids: &[u64]) -> ControlFlow<()> {
        let flow = self.panicked(what);
        for &id in ids {
            self.fail(id, EngineError::Panicked);
        }
        flow
    }

    /// Answers `job` and gives its queue place back.
    fn answer(&self, job: Job, result: Result<Done, EngineError>) {
        let Job { reply, _slot, .. } = job;
        let _ = reply.send(result);
        drop(_slot);
        self.worker.record_prefix_cache(&self.gauges.labels);
        let depth = self.gauges.max_queue - self.gauges.slots.available_permits();
        metrics::gauge!("gavel_local_queue_depth", self.gauges.labels.clone()).set(depth as f64);
    }

    /// Fails `jobs`, which a panic interrupted, after the thread has reset (or stopped).
    fn fail_panicked(&mut self, what: String, jobs: Vec<Job>) -> ControlFlow<()> {
        let flow = self.panicked(what);
        for job in jobs {
            self.answer(job, Err(EngineError::Panicked));
        }
        flow
    }

    /// Counts a panic: the worker is reset and the thread serves on, unless this is one more
    /// than [`MAX_PANICS`] within [`PANIC_WINDOW`] (a model that panics on every request
    /// should take the judge out of `/readyz`, not loop). Done before the jobs it hit are
    /// answered, so a caller that sees the error sees the restart counted.
    fn panicked(&mut self, what: String) -> ControlFlow<()> {
        self.panics.push_back(Instant::now());
        while self
            .panics
            .front()
            .is_some_and(|t| t.elapsed() > PANIC_WINDOW)
        {
            self.panics.pop_front();
        }
        if self.panics.len() > MAX_PANICS {
            let why = format!(
                "the local judge's model thread stopped after {} panics in {} s; the last: {what}",
                self.panics.len(),
                PANIC_WINDOW.as_secs()
            );
            tracing::error!("{why}");
            self.health.send_modify(|h| h.stopped = Some(why));
            return ControlFlow::Break(());
        }
        tracing::error!(panic = %what, "the local judge panicked; resetting it");
        self.health.send_modify(|h| h.restarts += 1);
        metrics::counter!("gavel_local_restarts_total").increment(1);
        // Generations in flight keep their own KV caches and go on.
        self.worker.reset();
        ControlFlow::Continue(())
    }
}

/// `f` on the worker, a panic caught and turned into its message.
fn guarded<T>(worker: &mut Worker, f: impl FnOnce(&mut Worker) -> T) -> Result<T, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(worker)))
        .map_err(|payload| panic_message(payload.as_ref()))
}

/// The text of a panic's payload.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "(no message)".into())
}
