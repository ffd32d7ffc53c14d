//! Per-judge admission control: requests per minute and tokens per minute (governor), and a cap
//! on concurrent calls. Every attempt — first tries and retries alike — is admitted here, so a
//! judge never sees more than its configured rates however many groups are in flight.
//!
//! A call's token cost is not known until the judge answers, so it is estimated before sending
//! (prompt tokens plus the completion budget) and corrected after: a shortfall is taken from the
//! bucket at once, a surplus is kept as credit and subtracted from the next estimates.

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

#[derive(Debug)]
pub struct JudgeLimits {
    rpm: Option<DefaultDirectRateLimiter>,
    tpm: Option<(DefaultDirectRateLimiter, NonZeroU32)>,
    concurrency: Option<Arc<Semaphore>>,
    /// Tokens over-estimated by earlier calls, not yet given back.
    credit: AtomicU64,
}

/// Held while a call is in flight.
#[derive(Debug)]
pub struct Admission {
    _permit: Option<OwnedSemaphorePermit>,
    /// The token estimate charged for this call, to settle against the actual usage.
    pub charged: u32,
}

impl JudgeLimits {
    pub fn new(
        requests_per_minute: Option<u32>,
        tokens_per_minute: Option<u32>,
        max_concurrency: Option<usize>,
    ) -> Self {
        JudgeLimits {
            rpm: requests_per_minute
                .and_then(NonZeroU32::new)
                .map(|n| RateLimiter::direct(Quota::per_minute(n).allow_burst(NonZeroU32::MIN))),
            tpm: tokens_per_minute
                .and_then(NonZeroU32::new)
                .map(|n| (RateLimiter::direct(Quota::per_minute(n)), n)),
            concurrency: max_concurrency
                .filter(|n| *n > 0)
                .map(|n| Arc::new(Semaphore::new(n))),
            credit: AtomicU64::new(0),
        }
    }

    /// Whether a tokens-per-minute limit is configured (only then are estimates needed).
    pub fn has_token_limit(&self) -> bool {
        self.tpm.is_some()
    }

    /// Waits until one call estimated at `estimated_tokens` may be sent.
    pub async fn admit(&self, estimated_tokens: u32) -> Admission {
        let permit = match &self.concurrency {
            Some(s) => Some(
                s.clone()
                    .acquire_owned()
                    .await
                    .expect("the semaphore is never closed"),
            ),
            None => None,
        };
        if let Some(rpm) = &self.rpm {
            rpm.until_ready().await;
        }
        let mut charged = 0;
        if let Some((tpm, cap)) = &self.tpm {
            let credit = self.take_credit(u64::from(estimated_tokens));
            charged = (u64::from(estimated_tokens) - credit) as u32;
            take_tokens(tpm, *cap, charged).await;
        }
        Admission {
            _permit: permit,
            charged,
        }
    }

    /// Corrects the token bucket once the judge has reported what the call really cost.
    pub async fn settle(&self, admission: &Admission, actual_tokens: u64) {
        let Some((tpm, cap)) = &self.tpm else { return };
        let charged = u64::from(admission.charged);
        if actual_tokens > charged {
            take_tokens(
                tpm,
                *cap,
                u32::try_from(actual_tokens - charged).unwrap_or(u32::MAX),
            )
            .await;
        } else {
            self.credit
                .fetch_add(charged - actual_tokens, Ordering::Relaxed);
        }
    }

    fn take_credit(&self, want: u64) -> u64 {
        let mut cur = self.credit.load(Ordering::Relaxed);
        loop {
            let take = cur.min(want);
            match self.credit.compare_exchange_weak(
                cur,
                cur - take,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return take,
                Err(now) => cur = now,
            }
        }
    }
}

/// Takes `n` tokens from the bucket, waiting as needed; a cost above the bucket's capacity takes
/// the whole capacity (it could never be granted at once).
async fn take_tokens(bucket: &DefaultDirectRateLimiter, cap: NonZeroU32, n: u32) {
    let Some(n) = NonZeroU32::new(n.min(cap.get())) else {
        return;
    };
    // `n <= cap` is checked above, so capacity is always sufficient.
    let _ = bucket.until_n_ready(n).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[tokio::test]
    async fn concurrency_is_capped() {
        let limits = Arc::new(JudgeLimits::new(None, None, Some(2)));
        let a = limits.admit(0).await;
        let _b = limits.admit(0).await;
        let l2 = limits.clone();
        let third = tokio::spawn(async move { l2.admit(0).await });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(
            !third.is_finished(),
            "a third call waits while two are in flight"
        );
        drop(a);
        tokio::time::timeout(Duration::from_secs(1), third)
            .await
            .unwrap()
            .unwrap();
    }

    #[tokio::test]
    async fn requests_per_minute_spaces_calls() {
        // 600/min = one every 100 ms, no burst: 4 calls take at least 300 ms.
        let limits = JudgeLimits::new(Some(600), None, None);
        let start = Instant::now();
        for _ in 0..4 {
            limits.admit(0).await;
        }
        assert!(
            start.elapsed() >= Duration::from_millis(280),
            "{:?}",
            start.elapsed()
        );
    }

    #[tokio::test]
    async fn token_estimates_are_corrected_by_credit() {
        let limits = JudgeLimits::new(None, Some(60_000), None);
        let a = limits.admit(1000).await;
        assert_eq!(a.charged, 1000);
        limits.settle(&a, 400).await;
        // 600 tokens of credit make the next 1000-token estimate cost 400.
        let b = limits.admit(1000).await;
        assert_eq!(b.charged, 400);
        let c = limits.admit(1000).await;
        assert_eq!(c.charged, 1000);
    }
}
