//! Rate limits on instance creation: a token bucket and an exponential backoff.

use std::time::Duration;
use tokio::time::Instant;

/// How far ahead "never" is for a bucket that does not refill: far beyond any listing
/// interval, so the driver's own schedule wakes it first.
pub const NEVER: Duration = Duration::from_secs(365 * 24 * 3600);

/// A token bucket: `limit` tokens per second, at most `burst` stored.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    limit: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    /// A full bucket. A negative `limit` means unlimited.
    pub fn new(limit: f64, burst: usize, now: Instant) -> Self {
        let burst = burst.max(1) as f64;
        TokenBucket {
            limit,
            burst,
            tokens: burst,
            last: now,
        }
    }

    fn refill(&mut self, now: Instant) {
        let dt = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + dt * self.limit).min(self.burst);
        self.last = now;
    }

    /// How many of `wanted` may go now.
    pub fn available(&mut self, wanted: usize, now: Instant) -> usize {
        if self.limit < 0.0 {
            return wanted;
        }
        self.refill(now);
        // A hair of slack so float rounding (0.999999…) never withholds a whole token.
        ((self.tokens + 1e-9).floor().max(0.0) as usize).min(wanted)
    }

    /// Spends `n` tokens (call with at most what [`Self::available`] returned).
    pub fn take(&mut self, n: usize, now: Instant) {
        if self.limit < 0.0 {
            return;
        }
        self.refill(now);
        self.tokens = (self.tokens - n as f64).max(0.0);
    }

    /// When at least one token will be available (now, if one is). A limit of 0 never
    /// refills: then it is [`NEVER`] from now, so a caller sleeping until then does not spin.
    pub fn next_token_at(&mut self, now: Instant) -> Instant {
        if self.limit < 0.0 {
            return now;
        }
        self.refill(now);
        if self.tokens + 1e-9 >= 1.0 {
            now
        } else if self.limit == 0.0 {
            now + NEVER
        } else {
            // Never "now" when no token is there: a caller sleeping until then must not spin.
            let wait = Duration::from_secs_f64((1.0 - self.tokens) / self.limit);
            now + wait.max(Duration::from_millis(1))
        }
    }
}

/// Exponential backoff after consecutive failures.
#[derive(Debug, Clone)]
pub struct Backoff {
    base: Duration,
    max: Duration,
    failures: u32,
    until: Option<Instant>,
}

impl Backoff {
    /// A backoff starting at `base` and doubling up to `max`.
    pub fn new(base: Duration, max: Duration) -> Self {
        Backoff {
            base,
            max,
            failures: 0,
            until: None,
        }
    }

    /// Records a failure at `now`; returns the delay imposed.
    pub fn failure(&mut self, now: Instant) -> Duration {
        self.failures = self.failures.saturating_add(1);
        let exp = self.failures.saturating_sub(1).min(30);
        let delay = self.base.saturating_mul(1u32 << exp).min(self.max);
        self.until = Some(now + delay);
        delay
    }

    /// Records a failure at `now` unless the backoff is already holding attempts back: then
    /// the failure belongs to the same round (instances created together failing
    /// together) and the delay does not double again. Returns the delay in force.
    pub fn failure_once(&mut self, now: Instant) -> Duration {
        match self.blocked_until(now) {
            Some(until) => until - now,
            None => self.failure(now),
        }
    }

    /// Records a success: the backoff resets.
    pub fn success(&mut self) {
        self.failures = 0;
        self.until = None;
    }

    /// Whether attempts are held back at `now`, and until when.
    pub fn blocked_until(&self, now: Instant) -> Option<Instant> {
        self.until.filter(|u| *u > now)
    }

    /// Consecutive failures so far.
    pub fn failures(&self) -> u32 {
        self.failures
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn bucket_bursts_then_refills() {
        let now = Instant::now();
        let mut b = TokenBucket::new(1.0, 60, now);
        assert_eq!(b.available(100, now), 60);
        b.take(60, now);
        assert_eq!(b.available(10, now), 0);
        assert_eq!(b.next_token_at(now), now + Duration::from_secs(1));
        let later = now + Duration::from_secs(5);
        assert_eq!(b.available(10, later), 5);
        let much_later = now + Duration::from_secs(500);
        assert_eq!(b.available(100, much_later), 60, "capped at burst");
        let mut unlimited = TokenBucket::new(-1.0, 1, now);
        assert_eq!(unlimited.available(1000, now), 1000);
    }

    #[tokio::test(start_paused = true)]
    async fn rounding_never_yields_a_zero_wait_without_a_token() {
        let now = Instant::now();
        let mut b = TokenBucket::new(1.0, 1, now);
        b.take(1, now);
        // Refill to just under one token through many tiny steps.
        let mut t = now;
        for _ in 0..999 {
            t += Duration::from_millis(1);
            b.available(1, t);
        }
        let got = b.available(1, t);
        let next = b.next_token_at(t);
        assert!(
            got == 1 || next > t,
            "got {got}, next token at {next:?} vs now {t:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn backoff_doubles_and_resets() {
        let now = Instant::now();
        let mut b = Backoff::new(Duration::from_secs(1), Duration::from_secs(10));
        assert_eq!(b.failure(now), Duration::from_secs(1));
        assert_eq!(b.failure(now), Duration::from_secs(2));
        assert_eq!(b.failure(now), Duration::from_secs(4));
        assert_eq!(b.failure(now), Duration::from_secs(8));
        assert_eq!(b.failure(now), Duration::from_secs(10));
        assert!(b.blocked_until(now).is_some());
        assert!(b.blocked_until(now + Duration::from_secs(11)).is_none());
        b.success();
        assert!(b.blocked_until(now).is_none());
        assert_eq!(b.failure(now), Duration::from_secs(1));
    }
}
