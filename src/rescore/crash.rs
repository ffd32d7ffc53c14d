//! TEST-ONLY crash points. `tests/rescore.rs` proves that a rescore killed between any two
//! durable steps of the ledger resumes to every group exactly once; a kill -9 from outside lands
//! wherever the scheduler puts it, so to reach each step deterministically the test sets
//! `GAVEL_TEST_CRASH_AT=<phase>[:<n>]` and the process aborts (as abruptly as kill -9: no
//! destructors, no flushes) the `n`-th time (default the first) it reaches `phase`.
//!
//! Unset — always, outside those tests — every call here is one read of a cached `None` and does
//! nothing. It is an environment variable rather than a cargo feature because the integration
//! tests run the ordinary `gavel` binary as a child process.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

const VAR: &str = "GAVEL_TEST_CRASH_AT";

/// The phases the ledger reports, in the order a run meets them.
pub(super) const PHASES: &[&str] = &[
    // --retry-rejects: half of the new rejects file written to the temporary file.
    "retry-temp-partial",
    // --retry-rejects: the new rejects file written and synced, the store not yet told.
    "retry-temp-written",
    // --retry-rejects: the store has reopened the retried units; the new file not yet renamed.
    "retry-reopened",
    // --retry-rejects: the new file renamed over the old one; not yet reopened for appending.
    "retry-renamed",
    // Half of a result line appended.
    "mid-line",
    // A whole result line appended, its checkpoint not yet written.
    "before-checkpoint",
    // A result line's checkpoint written.
    "after-checkpoint",
];

/// The requested phase and occurrence, parsed once.
fn target() -> Option<&'static (String, u64)> {
    static TARGET: OnceLock<Option<(String, u64)>> = OnceLock::new();
    TARGET
        .get_or_init(|| {
            let v = std::env::var(VAR).ok()?;
            let (phase, n) = match v.split_once(':') {
                Some((p, n)) => (p, n.parse().ok().filter(|&n| n > 0)),
                None => (v.as_str(), Some(1)),
            };
            // A typo would make a crash test pass vacuously or hang on the wrong step; refuse it.
            match n {
                Some(n) if PHASES.contains(&phase) => Some((phase.to_string(), n)),
                _ => panic!("{VAR}={v:?}: expected PHASE[:N] with N >= 1, PHASE one of {PHASES:?}"),
            }
        })
        .as_ref()
}

/// Whether this is the requested occurrence of `phase` (counting every call for it). The caller
/// must then abort, after doing whatever partial work the phase names.
pub(super) fn reached(phase: &str) -> bool {
    debug_assert!(PHASES.contains(&phase), "unknown crash phase {phase}");
    static SEEN: AtomicU64 = AtomicU64::new(0);
    match target() {
        Some((p, n)) if p == phase => SEEN.fetch_add(1, Ordering::SeqCst) + 1 == *n,
        _ => false,
    }
}

/// Aborts the process when this is the requested occurrence of `phase`.
pub(super) fn point(phase: &str) {
    if reached(phase) {
        std::process::abort();
    }
}
