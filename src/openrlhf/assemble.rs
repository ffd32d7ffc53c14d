//! Group assembly: samples that arrive one by one (or a few per request) are collected by group
//! key until a group has `group_size` samples, or until `wait` has passed since its first sample;
//! then the group is judged once and every sample's waiter gets its own result.
//!
//! Relative judging needs the whole group in one judge call, but trainers such as OpenRLHF send
//! samples in whatever batches their workers produce. The assembler bridges the two without
//! knowing what a sample or a verdict is: the judging function is supplied by the caller.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::oneshot;

/// What the judging function returns for one group: one result per sample, in the order given.
pub type GroupFuture<T, E> = Pin<Box<dyn Future<Output = Result<Vec<T>, E>> + Send>>;

type JudgeFn<S, T, E> = dyn Fn(Vec<S>) -> GroupFuture<T, E> + Send + Sync;

/// A sample's result: its own value, or the group's error (shared by every sample of it).
pub type Answer<T, E> = oneshot::Receiver<Result<T, E>>;

/// Collects samples into groups and judges each group once.
pub struct Assembler<S, T, E> {
    inner: Arc<Inner<S, T, E>>,
}

impl<S, T, E> Clone for Assembler<S, T, E> {
    fn clone(&self) -> Self {
        Assembler {
            inner: self.inner.clone(),
        }
    }
}

/// The refusal of a submit that would take the assembler past its group limit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{open} groups are filling up or being judged and these samples would start {new} more (limit {max})")]
pub struct TooManyGroups {
    pub open: usize,
    pub new: usize,
    pub max: usize,
}

struct Inner<S, T, E> {
    group_size: usize,
    /// Most groups pending or being judged at once.
    max_groups: usize,
    wait: Duration,
    judge: Box<JudgeFn<S, T, E>>,
    state: Mutex<State<S, T, E>>,
}

struct State<S, T, E> {
    next_id: u64,
    pending: HashMap<String, Pending<S, T, E>>,
    /// Groups handed to the judging function and not yet answered.
    judging: usize,
}

/// A group still filling up. `id` tells a timer whether the group it was started for is still
/// the one pending under its key.
struct Pending<S, T, E> {
    id: u64,
    samples: Vec<S>,
    waiters: Vec<oneshot::Sender<Result<T, E>>>,
}

impl<S, T, E> Assembler<S, T, E>
where
    S: Send + 'static,
    T: Send + 'static,
    E: Clone + Send + 'static,
{
    /// `group_size` ≥ 1 samples make a full group; a group not full `wait` after its first
    /// sample is judged as it is. `judge` must return one result per sample, in order.
    /// At most `max_groups` groups are filling up or being judged at once (every group costs a
    /// timer, memory, and a judge call).
    pub fn new(
        group_size: usize,
        max_groups: usize,
        wait: Duration,
        judge: impl Fn(Vec<S>) -> GroupFuture<T, E> + Send + Sync + 'static,
    ) -> Self {
        assert!(group_size >= 1, "group_size must be at least 1");
        Assembler {
            inner: Arc::new(Inner {
                group_size,
                max_groups,
                wait,
                judge: Box::new(judge),
                state: Mutex::new(State {
                    next_id: 0,
                    pending: HashMap::new(),
                    judging: 0,
                }),
            }),
        }
    }

    /// Adds samples, each under its group key, in order; returns one answer per sample. Samples
    /// of one call may complete groups (and several groups) at once. Must run inside a tokio
    /// runtime. Judging runs in its own task, so it finishes even if this caller goes away — the
    /// other samples of the group are waiting for it too.
    ///
    /// All or nothing: when the samples would open more groups than the limit allows, none is
    /// added and the caller gets [`TooManyGroups`].
    pub fn submit(&self, samples: Vec<(String, S)>) -> Result<Vec<Answer<T, E>>, TooManyGroups> {
        let mut answers = Vec::with_capacity(samples.len());
        let mut full = Vec::new();
        {
            let mut state = self.inner.state.lock().unwrap();
            let new: HashSet<&str> = samples
                .iter()
                .map(|(k, _)| k.as_str())
                .filter(|k| !state.pending.contains_key(*k))
                .collect();
            let open = state.pending.len() + state.judging;
            // A key can also reopen after its group fills within this call; the bound stays
            // within one group_size-th of the samples of this call, which max_samples bounds.
            if open + new.len() > self.inner.max_groups {
                return Err(TooManyGroups {
                    open,
                    new: new.len(),
                    max: self.inner.max_groups,
                });
            }
            for (key, sample) in samples {
                let (tx, rx) = oneshot::channel();
                answers.push(rx);
                let group = match state.pending.get_mut(&key) {
                    Some(g) => g,
                    None => {
                        let id = state.next_id;
                        state.next_id += 1;
                        self.start_timer(key.clone(), id);
                        state.pending.entry(key.clone()).or_insert(Pending {
                            id,
                            samples: Vec::new(),
                            waiters: Vec::new(),
                        })
                    }
                };
                group.samples.push(sample);
                group.waiters.push(tx);
                if group.samples.len() >= self.inner.group_size {
                    full.extend(state.pending.remove(&key));
                    state.judging += 1;
                }
            }
        }
        for group in full {
            self.judge(group);
        }
        Ok(answers)
    }

    /// Groups being judged now.
    pub fn judging(&self) -> usize {
        self.inner.state.lock().unwrap().judging
    }

    /// Groups still filling up, and the samples in them.
    pub fn pending(&self) -> (usize, usize) {
        let state = self.inner.state.lock().unwrap();
        let samples = state.pending.values().map(|p| p.samples.len()).sum();
        (state.pending.len(), samples)
    }

    /// After `wait`, judges the group `id` as it is if it is still pending under `key`.
    fn start_timer(&self, key: String, id: u64) {
        let this = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(this.inner.wait).await;
            this.flush(&key, id);
        });
    }

    /// Judges group `id` now if it is still pending under `key` (it may have filled up and been
    /// judged already, and a later group may be pending under the same key: that one has its
    /// own timer).
    fn flush(&self, key: &str, id: u64) {
        let group = {
            let mut state = self.inner.state.lock().unwrap();
            match state.pending.get(key) {
                Some(p) if p.id == id => {
                    state.judging += 1;
                    state.pending.remove(key)
                }
                _ => None,
            }
        };
        if let Some(group) = group {
            self.judge(group);
        }
    }

    /// Judges a group already counted in `judging` (by whoever took it out of `pending`).
    fn judge(&self, group: Pending<S, T, E>) {
        let fut = (self.inner.judge)(group.samples);
        let waiters = group.waiters;
        let inner = self.inner.clone();
        tokio::spawn(async move {
            let result = fut.await;
            inner.state.lock().unwrap().judging -= 1;
            match result {
                // A result list of the wrong length is a bug in the judging function; the
                // waiters left without a result see their channel closed, never a wrong value.
                Ok(results) if results.len() == waiters.len() => {
                    for (w, r) in waiters.into_iter().zip(results) {
                        let _ = w.send(Ok(r));
                    }
                }
                Ok(results) => {
                    tracing::error!(
                        samples = waiters.len(),
                        results = results.len(),
                        "group judging returned the wrong number of results"
                    );
                }
                Err(e) => {
                    for w in waiters {
                        let _ = w.send(Err(e.clone()));
                    }
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    type Seen = Arc<Mutex<Vec<Vec<i64>>>>;

    /// An assembler whose "judge" records each group and answers each sample with
    /// `sample * 10 + group size`, or fails groups containing a negative sample.
    fn recording(group_size: usize, wait_ms: u64) -> (Assembler<i64, i64, String>, Seen) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        let a = Assembler::new(
            group_size,
            usize::MAX,
            Duration::from_millis(wait_ms),
            move |samples: Vec<i64>| {
                log.lock().unwrap().push(samples.clone());
                Box::pin(async move {
                    if samples.iter().any(|s| *s < 0) {
                        return Err(format!("bad group {samples:?}"));
                    }
                    let n = samples.len() as i64;
                    Ok(samples.iter().map(|s| s * 10 + n).collect())
                }) as GroupFuture<i64, String>
            },
        );
        (a, seen)
    }

    async fn wait_all(answers: Vec<Answer<i64, String>>) -> Vec<Result<i64, String>> {
        let mut out = Vec::new();
        for a in answers {
            out.push(a.await.expect("answered"));
        }
        out
    }

    #[tokio::test]
    async fn single_samples_fill_a_group_and_each_gets_its_own_result() {
        let (a, seen) = recording(3, 60_000);
        let answers: Vec<_> = [1, 2, 3]
            .into_iter()
            .map(|s| a.submit(vec![("p".into(), s)]).unwrap().remove(0))
            .collect();
        assert_eq!(wait_all(answers).await, vec![Ok(13), Ok(23), Ok(33)]);
        assert_eq!(*seen.lock().unwrap(), vec![vec![1, 2, 3]]);
        assert_eq!(a.pending(), (0, 0));
    }

    #[tokio::test]
    async fn one_request_is_split_by_key_and_can_complete_several_groups() {
        let (a, seen) = recording(2, 60_000);
        let first = a.submit(vec![("x".into(), 1), ("y".into(), 5)]).unwrap();
        assert_eq!(a.pending(), (2, 2));
        let second = a
            .submit(vec![
                ("y".into(), 6),
                ("x".into(), 2),
                ("x".into(), 3),
                ("x".into(), 4),
            ])
            .unwrap();
        let all: Vec<_> = first.into_iter().chain(second).collect();
        assert_eq!(
            wait_all(all).await,
            vec![Ok(12), Ok(52), Ok(62), Ok(22), Ok(32), Ok(42)]
        );
        let mut groups = seen.lock().unwrap().clone();
        groups.sort();
        assert_eq!(groups, vec![vec![1, 2], vec![3, 4], vec![5, 6]]);
    }

    #[tokio::test]
    async fn a_partial_group_waits_then_is_judged_as_it_is() {
        let (slow, seen) = recording(4, 60_000);
        let waiting = slow.submit(vec![("p".into(), 1), ("q".into(), 2)]).unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(
            seen.lock().unwrap().is_empty(),
            "judged before the group filled or waited"
        );
        assert_eq!(slow.pending(), (2, 2));
        drop(waiting);

        let (quick, seen) = recording(4, 100);
        let first = quick.submit(vec![("p".into(), 1)]).unwrap();
        let second = quick
            .submit(vec![("p".into(), 2), ("q".into(), 7)])
            .unwrap();
        let all = first.into_iter().chain(second).collect();
        let results = tokio::time::timeout(Duration::from_secs(30), wait_all(all)).await;
        assert_eq!(results.unwrap(), vec![Ok(12), Ok(22), Ok(71)]);
        let mut groups = seen.lock().unwrap().clone();
        groups.sort();
        assert_eq!(groups, vec![vec![1, 2], vec![7]]);
        assert_eq!(quick.pending(), (0, 0));
    }

    #[tokio::test]
    async fn a_timer_never_flushes_a_later_group_under_the_same_key() {
        let (a, seen) = recording(2, 60_000);
        let full = a.submit(vec![("p".into(), 1), ("p".into(), 2)]).unwrap(); // group 0, judged at once
        let late = a.submit(vec![("p".into(), 3)]).unwrap(); // group 1
        a.flush("p", 0); // group 0's timer ending
        assert_eq!(a.pending(), (1, 1));
        a.flush("p", 1);
        assert_eq!(
            wait_all(full.into_iter().chain(late).collect()).await,
            vec![Ok(12), Ok(22), Ok(31)]
        );
        assert_eq!(*seen.lock().unwrap(), vec![vec![1, 2], vec![3]]);
    }

    #[tokio::test]
    async fn a_failed_group_fails_every_sample_of_it_and_no_other() {
        let (a, _) = recording(2, 60_000);
        let answers = a
            .submit(vec![
                ("bad".into(), -1),
                ("ok".into(), 1),
                ("bad".into(), 2),
                ("ok".into(), 2),
            ])
            .unwrap();
        let err = Err("bad group [-1, 2]".to_string());
        assert_eq!(
            wait_all(answers).await,
            vec![err.clone(), Ok(12), err, Ok(22)]
        );
    }

    #[tokio::test]
    async fn judging_finishes_when_a_waiter_has_gone() {
        let calls = Arc::new(AtomicUsize::new(0));
        let c = calls.clone();
        let a: Assembler<i64, i64, String> = Assembler::new(
            2,
            usize::MAX,
            Duration::from_secs(60),
            move |s: Vec<i64>| {
                let c = c.clone();
                Box::pin(async move {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    c.fetch_add(1, Ordering::SeqCst);
                    Ok(s)
                }) as GroupFuture<i64, String>
            },
        );
        drop(a.submit(vec![("p".into(), 1)]).unwrap()); // the first caller disconnects
        let second = a.submit(vec![("p".into(), 2)]).unwrap().remove(0);
        assert_eq!(second.await.unwrap(), Ok(2));
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn groups_past_the_limit_are_refused_whole() {
        let (a, seen) = recording(2, 60_000);
        let a = Assembler {
            inner: Arc::new(Inner {
                max_groups: 2,
                ..Arc::try_unwrap(a.inner).ok().expect("only handle")
            }),
        };
        let first = a.submit(vec![("x".into(), 1), ("y".into(), 5)]).unwrap();
        assert_eq!(a.pending(), (2, 2));
        // A third key is refused, and nothing of that call is added, not even its known key.
        let e = a
            .submit(vec![("x".into(), 2), ("z".into(), 9)])
            .unwrap_err();
        assert_eq!(
            e,
            TooManyGroups {
                open: 2,
                new: 1,
                max: 2
            }
        );
        assert_eq!(a.pending(), (2, 2));
        // Samples of pending groups are still welcome; a group being judged still counts.
        let mut first = first.into_iter();
        let x = first.next().unwrap();
        let second = a.submit(vec![("x".into(), 2)]).unwrap();
        assert_eq!((a.pending(), a.judging()), ((1, 1), 1));
        assert!(a.submit(vec![("z".into(), 9)]).is_err());
        // Once x is judged, its place is free.
        let xs = wait_all(std::iter::once(x).chain(second).collect()).await;
        assert_eq!(xs, vec![Ok(12), Ok(22)]);
        assert_eq!(a.judging(), 0);
        a.submit(vec![("z".into(), 9)]).unwrap();
        assert_eq!(seen.lock().unwrap().clone(), vec![vec![1, 2]]);
        drop(first);
    }
}
