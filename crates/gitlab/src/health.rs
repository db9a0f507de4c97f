//! Whether a runner's job requests may go out, like GitLab Runner's
//! `commands/health_helper.go`: a request that GitLab refuses (403: the token is invalid or
//! the runner was deleted; 422: the runner is orphaned; another client error) counts as a
//! failure; after `unhealthy_requests_limit` failures in a row the runner is unhealthy and
//! asks again only after `unhealthy_interval` (GitLab Runner: 3 and 60 minutes). Any answer
//! GitLab gives otherwise (a job, no job, a server error) makes it healthy again. A runner is
//! never disabled for good. Pure: the caller passes the time.

use std::time::Duration;
use tokio::time::Instant;

/// GitLab Runner's `DefaultUnhealthyRequestsLimit` (`common/consts.go`).
pub const DEFAULT_UNHEALTHY_REQUESTS_LIMIT: u32 = 3;
/// GitLab Runner's `DefaultUnhealthyInterval` (`common/consts.go`).
pub const DEFAULT_UNHEALTHY_INTERVAL: Duration = Duration::from_secs(60 * 60);

/// The health of one runner's requests.
#[derive(Debug, Clone)]
pub(crate) struct Health {
    limit: u32,
    interval: Duration,
    failures: u32,
    last_check: Instant,
}

/// What to do before the next request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Ask.
    Ask,
    /// Wait this long first (the runner is unhealthy).
    WaitFor(Duration),
}

impl Health {
    pub(crate) fn new(limit: u32, interval: Duration, now: Instant) -> Health {
        Health {
            limit: limit.max(1),
            interval,
            failures: 0,
            last_check: now,
        }
    }

    /// Whether the next request may go out now.
    pub(crate) fn verdict(&mut self, now: Instant) -> Verdict {
        if self.failures < self.limit {
            return Verdict::Ask;
        }
        let since = now.saturating_duration_since(self.last_check);
        if since >= self.interval {
            // Forced check after the interval (`isHealthy`).
            self.failures = 0;
            self.last_check = now;
            return Verdict::Ask;
        }
        Verdict::WaitFor(self.interval.checked_sub(since).unwrap())
    }

    /// Records how a request went; true when this failure made the runner unhealthy.
    pub(crate) fn record(&mut self, healthy: bool, now: Instant) -> bool {
        if healthy {
            self.failures = 0;
            self.last_check = now;
            return false;
        }
        self.failures += 1;
        self.failures == self.limit
    }

    #[cfg(test)]
    pub(crate) fn failures(&self) -> u32 {
        self.failures
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_runner_is_disabled_after_the_limit_and_asks_again_after_the_interval() {
        let t0 = Instant::now();
        let mut h = Health::new(3, Duration::from_secs(60), t0);
        assert_eq!(h.verdict(t0), Verdict::Ask);
        assert!(!h.record(false, t0));
        assert!(!h.record(false, t0));
        assert_eq!(h.verdict(t0), Verdict::Ask);
        assert!(h.record(false, t0), "the third failure makes it unhealthy");
        assert_eq!(
            h.verdict(t0 + Duration::from_secs(20)),
            Verdict::WaitFor(Duration::from_secs(40))
        );
        assert_eq!(h.verdict(t0 + Duration::from_secs(61)), Verdict::Ask);
        assert_eq!(h.failures(), 0);
        // A success resets the count.
        h.record(false, t0);
        h.record(true, t0);
        h.record(false, t0);
        h.record(false, t0);
        assert_eq!(h.verdict(t0), Verdict::Ask);
    }
}
