//! When a dead plugin may be started again (pure: the caller gives the time).

use std::time::{Duration, Instant};

/// How long a plugin must have run for its death to count as a fresh failure rather than
/// one more in a row.
pub(crate) const STABLE: Duration = Duration::from_secs(60);

/// Restart backoff: the first restart after a plugin that ran well is immediate, each
/// further failure in a row doubles the wait from `min`, up to `max`.
#[derive(Debug, Clone)]
pub(crate) struct Backoff {
    min: Duration,
    max: Duration,
    failures: u32,
    not_before: Option<Instant>,
}

impl Backoff {
    pub(crate) fn new(min: Duration, max: Duration) -> Backoff {
        Backoff {
            min,
            max: max.max(min),
            failures: 0,
            not_before: None,
        }
    }

    /// A plugin that had run for `uptime` (`None`: it never became healthy) failed at `now`.
    pub(crate) fn failed(&mut self, now: Instant, uptime: Option<Duration>) {
        if uptime.is_some_and(|u| u >= STABLE) {
            self.failures = 0;
        }
        self.failures = self.failures.saturating_add(1);
        let wait = if self.failures == 1 {
            Duration::ZERO
        } else {
            let doublings = (self.failures - 2).min(30);
            self.min.saturating_mul(1 << doublings).min(self.max)
        };
        self.not_before = Some(now + wait);
    }

    /// How long until a start may be tried; zero when it may be now.
    pub(crate) fn wait(&self, now: Instant) -> Duration {
        self.not_before
            .map_or(Duration::ZERO, |t| t.saturating_duration_since(now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_failure_restarts_at_once_then_doubles_up_to_the_cap() {
        let t0 = Instant::now();
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_millis(500));
        assert_eq!(b.wait(t0), Duration::ZERO);
        b.failed(t0, Some(Duration::from_secs(1)));
        assert_eq!(b.wait(t0), Duration::ZERO);
        let waits: Vec<Duration> = (0..5)
            .map(|_| {
                b.failed(t0, None);
                b.wait(t0)
            })
            .collect();
        let ms = |n| Duration::from_millis(n);
        assert_eq!(waits, vec![ms(100), ms(200), ms(400), ms(500), ms(500)]);
        assert_eq!(b.wait(t0 + ms(300)), ms(200));
        assert_eq!(b.wait(t0 + ms(600)), Duration::ZERO);
    }

    #[test]
    fn a_plugin_that_ran_well_starts_a_fresh_series() {
        let t0 = Instant::now();
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_secs(30));
        for _ in 0..4 {
            b.failed(t0, Some(Duration::from_secs(1)));
        }
        assert!(b.wait(t0) > Duration::ZERO);
        b.failed(t0, Some(STABLE));
        assert_eq!(b.wait(t0), Duration::ZERO);
    }
}
