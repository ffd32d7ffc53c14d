//! Per-key locks: the first request that misses the cache for a key asks the judge while the
//! others wait, then find the verdict in the store.
//!
//! An entry lives while anyone holds or awaits its lock, counted explicitly: a waiter whose
//! request is cancelled (client gone, timeout) gives its place back when it is dropped, so the
//! map never keeps keys nobody uses (it used to, when a waiter was cancelled between the
//! holder's release and its own acquisition).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

type Lock = Arc<tokio::sync::Mutex<()>>;

#[derive(Debug, Default)]
pub(super) struct KeyLocks {
    /// Each key's lock and how many holders and waiters it has.
    map: Mutex<HashMap<String, (Lock, usize)>>,
}

/// One holder or waiter of a key's lock; dropping it gives its place back.
struct User<'a> {
    locks: &'a KeyLocks,
    key: String,
}

impl Drop for User<'_> {
    fn drop(&mut self) {
        let mut map = self.locks.map.lock().expect("lock map poisoned");
        if let Some(entry) = map.get_mut(&self.key) {
            entry.1 -= 1;
            if entry.1 == 0 {
                map.remove(&self.key);
            }
        }
    }
}

/// A held key lock. Fields drop in order: the lock is released before the place is given back,
/// so an entry is never removed while its lock is held.
pub(super) struct KeyGuard<'a> {
    _guard: tokio::sync::OwnedMutexGuard<()>,
    _user: User<'a>,
}

impl KeyLocks {
    pub(super) async fn lock(&self, key: &str) -> KeyGuard<'_> {
        let lock = {
            let mut map = self.map.lock().expect("lock map poisoned");
            let entry = map.entry(key.to_string()).or_default();
            entry.1 += 1;
            entry.0.clone()
        };
        // Registered before the wait, so a cancelled wait also gives its place back.
        let user = User {
            locks: self,
            key: key.to_string(),
        };
        let guard = lock.lock_owned().await;
        KeyGuard {
            _guard: guard,
            _user: user,
        }
    }

    #[cfg(test)]
    fn keys(&self) -> usize {
        self.map.lock().unwrap().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn one_holder_at_a_time_and_no_entry_is_left_behind() {
        let locks = Arc::new(KeyLocks::default());
        let held = locks.lock("k").await;
        assert_eq!(locks.keys(), 1);
        // A waiter, cancelled while it waits.
        let l = locks.clone();
        let waiter = tokio::spawn(async move {
            let _g = l.lock("k").await;
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiter.is_finished(), "the waiter got a held lock");
        waiter.abort();
        let _ = waiter.await;
        drop(held);
        assert_eq!(locks.keys(), 0, "a cancelled waiter left its key behind");

        // Released and then cancelled: the holder releases, the waiter is cancelled before it
        // runs again (the case that leaked).
        let held = locks.lock("k").await;
        let l = locks.clone();
        let waiter = tokio::spawn(async move {
            let _g = l.lock("k").await;
            tokio::time::sleep(Duration::from_secs(60)).await;
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(held);
        waiter.abort();
        let _ = waiter.await;
        assert_eq!(locks.keys(), 0);

        // Distinct keys do not wait for each other.
        let a = locks.lock("a").await;
        let b = tokio::time::timeout(Duration::from_secs(5), locks.lock("b")).await;
        assert!(b.is_ok());
        drop((a, b));
        assert_eq!(locks.keys(), 0);
    }
}
