//! Retries with exponential backoff and full jitter, for errors a provider
//! marks retryable.

use std::future::Future;
use std::time::Duration;

use flow_providers::ProviderError;
use rand::Rng;

/// How retries back off.
#[derive(Debug, Clone, Copy)]
pub struct Backoff {
    /// The first delay's upper bound.
    pub base: Duration,
    /// No delay is longer than this.
    pub cap: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            base: Duration::from_millis(250),
            cap: Duration::from_secs(30),
        }
    }
}

impl Backoff {
    /// The delay before retry number `n` (1-based): uniform in
    /// `[bound/2, bound]` with `bound = min(cap, base · 2^(n-1))`.
    pub fn delay(&self, n: u32) -> Duration {
        let bound = self
            .base
            .saturating_mul(1u32 << (n.saturating_sub(1)).min(16))
            .min(self.cap);
        let half = bound / 2;
        let jitter = rand::rng().random_range(0..=half.as_millis() as u64);
        half + Duration::from_millis(jitter)
    }
}

/// Run `op` until it succeeds, fails for good, or `retries` retries are used.
/// `on_retry(attempt, delay, error)` is told before each wait. Returns the
/// result and the number of attempts made.
pub async fn with_retries<T, F, Fut>(
    retries: u32,
    backoff: Backoff,
    mut op: F,
    mut on_retry: impl FnMut(u32, Duration, &ProviderError),
) -> (Result<T, ProviderError>, u32)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, ProviderError>>,
{
    let mut attempt = 0;
    loop {
        attempt += 1;
        match op().await {
            Ok(v) => return (Ok(v), attempt),
            Err(e) if e.is_retryable() && attempt <= retries => {
                let delay = backoff.delay(attempt);
                on_retry(attempt, delay, &e);
                tokio::time::sleep(delay).await;
            }
            Err(e) => return (Err(e), attempt),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[test]
    fn delays_grow_and_stay_under_the_cap() {
        let b = Backoff {
            base: Duration::from_millis(100),
            cap: Duration::from_millis(1000),
        };
        for n in 1..20 {
            let d = b.delay(n);
            let bound = (100u64 << (n - 1).min(16)).min(1000);
            assert!(d.as_millis() as u64 <= bound, "{n}: {d:?}");
            assert!(d.as_millis() as u64 >= bound / 2, "{n}: {d:?}");
        }
    }

    #[tokio::test]
    async fn retries_only_retryable_errors_and_counts_attempts() {
        let fast = Backoff {
            base: Duration::from_millis(1),
            cap: Duration::from_millis(2),
        };
        let calls = AtomicU32::new(0);
        let mut told = 0;
        let (res, attempts) = with_retries(
            3,
            fast,
            || async {
                if calls.fetch_add(1, Ordering::SeqCst) < 2 {
                    Err(ProviderError::retryable("throttled"))
                } else {
                    Ok(7)
                }
            },
            |_, _, _| told += 1,
        )
        .await;
        assert_eq!(res.unwrap(), 7);
        assert_eq!((attempts, told), (3, 2));

        let (res, attempts) = with_retries::<(), _, _>(
            3,
            fast,
            || async { Err(ProviderError::fatal("no")) },
            |_, _, _| {},
        )
        .await;
        assert!(res.is_err());
        assert_eq!(attempts, 1);

        let (res, attempts) = with_retries::<(), _, _>(
            2,
            fast,
            || async { Err(ProviderError::retryable("again")) },
            |_, _, _| {},
        )
        .await;
        assert!(res.is_err());
        assert_eq!(attempts, 3);
    }
}
