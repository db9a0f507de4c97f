//! What holds instance creation back: the `scale_throttle` token bucket, and a backoff per
//! cause of failure.
//!
//! Each cause backs off on its own, and failures that happen together (instances created
//! together failing their ready-up together) count once: nine instances failing at once
//! double the delay once, not nine times. Only failures of instances this scaler just
//! created count; restored or pre-existing instances failing their ready-up say nothing
//! about whether creating a new one will work, so they never hold creation back.

use crate::config::ScalerConfig;
use crate::throttle::{Backoff, TokenBucket};
use tokio::time::Instant;

/// Why a creation attempt failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failure {
    /// The provider's `increase` failed.
    Increase,
    /// A requested instance ended in `Timeout`.
    Timeout,
    /// A requested instance failed its ready-up.
    ReadyUp,
}

/// The provider's `increase` failing again and again: how many times in a row, and its last
/// error (for a caller that can give up, such as `flotilla exec`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreationTrouble {
    /// Failures in a row.
    pub failures: u32,
    /// The last one's error.
    pub error: String,
}

/// The creation throttle and backoffs.
pub(crate) struct Creation {
    pub(crate) throttle: TokenBucket,
    increase: Backoff,
    timeout: Backoff,
    ready_up: Backoff,
    /// `increase` failures since its last success.
    trouble: Option<CreationTrouble>,
}

impl Creation {
    pub(crate) fn new(config: &ScalerConfig, now: Instant) -> Self {
        let backoff = || Backoff::new(config.backoff_base, config.backoff_max);
        Creation {
            throttle: TokenBucket::new(
                config.scale_throttle.limit,
                config.scale_throttle.burst,
                now,
            ),
            increase: backoff(),
            timeout: backoff(),
            ready_up: backoff(),
            trouble: None,
        }
    }

    fn of(&mut self, cause: Failure) -> &mut Backoff {
        match cause {
            Failure::Increase => &mut self.increase,
            Failure::Timeout => &mut self.timeout,
            Failure::ReadyUp => &mut self.ready_up,
        }
    }

    /// Records a failure; returns the delay in force for its cause.
    pub(crate) fn failure(&mut self, cause: Failure, now: Instant) -> std::time::Duration {
        self.of(cause).failure_once(now)
    }

    /// Records a success: that cause's backoff resets.
    pub(crate) fn success(&mut self, cause: Failure) {
        if cause == Failure::Increase {
            self.trouble = None;
        }
        self.of(cause).success();
    }

    /// Records a failed `increase` and its error; returns the delay in force.
    pub(crate) fn increase_failed(&mut self, error: String, now: Instant) -> std::time::Duration {
        let failures = self.trouble.as_ref().map_or(0, |t| t.failures) + 1;
        self.trouble = Some(CreationTrouble { failures, error });
        self.failure(Failure::Increase, now)
    }

    /// The `increase` failures since its last success, if any.
    pub(crate) fn trouble(&self) -> Option<CreationTrouble> {
        self.trouble.clone()
    }

    /// Until when creation is held back, if it is.
    pub(crate) fn blocked_until(&self, now: Instant) -> Option<Instant> {
        [&self.increase, &self.timeout, &self.ready_up]
            .into_iter()
            .filter_map(|b| b.blocked_until(now))
            .max()
    }
}
