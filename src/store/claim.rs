//! The guard [`VerdictStore::claim`](super::VerdictStore::claim) returns.

/// Held while this process asks the judge for a key; dropping it releases the claim. Empty when
/// there was nothing to hold (a single-process store, or the verdict was already stored).
#[must_use = "the claim is released when this guard drops"]
pub struct Claim {
    release: Option<Box<dyn FnOnce() + Send>>,
}

impl Claim {
    /// A guard that holds nothing.
    pub fn empty() -> Claim {
        Claim { release: None }
    }

    /// A guard that runs `release` when dropped. `release` must not block: it is called from
    /// `Drop`, typically inside an async task.
    pub fn new(release: impl FnOnce() + Send + 'static) -> Claim {
        Claim {
            release: Some(Box::new(release)),
        }
    }

    /// Whether this guard holds a claim.
    pub fn is_held(&self) -> bool {
        self.release.is_some()
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        if let Some(release) = self.release.take() {
            release();
        }
    }
}

impl std::fmt::Debug for Claim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Claim")
            .field("held", &self.is_held())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    #[test]
    fn release_runs_once_on_drop() {
        let n = Arc::new(AtomicUsize::new(0));
        let m = n.clone();
        let c = Claim::new(move || {
            m.fetch_add(1, Ordering::SeqCst);
        });
        assert!(c.is_held());
        assert_eq!(n.load(Ordering::SeqCst), 0);
        drop(c);
        assert_eq!(n.load(Ordering::SeqCst), 1);
        assert!(!Claim::empty().is_held());
    }
}
