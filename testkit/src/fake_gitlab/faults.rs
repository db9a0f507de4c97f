//! Fault injection: a seeded, deterministic choice of which requests fail and how.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::Mutex;
use std::time::Duration;

/// One kind of fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FaultKind {
    /// Answer `500 Internal Server Error` without processing the request.
    ServerError,
    /// Answer `502 Bad Gateway` without processing the request (Workhorse or a load balancer
    /// in front of a Rails that is down).
    BadGateway,
    /// Answer `429 Too Many Requests` with `Retry-After` without processing the request
    /// (Rails' `check_if_backoff_required!` answers so while migrations run,
    /// `lib/api/ci/runner.rb`; rack-attack throttles likewise).
    TooManyRequests,
    /// Close the connection without processing the request or answering.
    DropBefore,
    /// Process the request, then close the connection without answering (the client cannot
    /// know whether it was applied).
    DropAfter,
    /// Process the request after a delay.
    Slow,
}

/// A planned answer for the next request to a path ([`super::FakeGitLab::script`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scripted {
    /// Answer this status without processing; `retry_after` adds a `Retry-After` header.
    Status {
        /// The status.
        status: u16,
        /// `Retry-After` in seconds.
        retry_after: Option<u64>,
    },
    /// Answer this status with a `Location` header, without processing.
    Redirect {
        /// The status (301, 302, 307, 308).
        status: u16,
        /// The `Location`.
        location: String,
    },
    /// Apply this fault.
    Fault(FaultKind),
}

/// Which requests fail and how.
#[derive(Debug, Clone)]
pub struct FaultConfig {
    /// Fraction of requests (`0.0..=1.0`) that get a fault.
    pub rate: f64,
    /// The kinds to choose from, uniformly.
    pub kinds: Vec<FaultKind>,
    /// Seed of the choice: the same seed gives the same sequence of decisions.
    pub seed: u64,
    /// The `Retry-After` of 429 answers, in seconds.
    pub retry_after_secs: u64,
    /// The delay of slow answers.
    pub slow: Duration,
    /// Path prefixes never faulted (e.g. `/api/v4/runners/verify`).
    pub exempt: Vec<String>,
    /// Path prefixes never given [`FaultKind::DropAfter`]; another kind is chosen instead.
    pub no_drop_after: Vec<String>,
}

impl FaultConfig {
    /// `rate` of requests fail with one of 500, 502, 429 (Retry-After 1 s), a connection
    /// dropped before processing, or one dropped after processing.
    ///
    /// A job request is never dropped after processing: GitLab would have assigned the job
    /// (it is `running` from the moment Rails builds the 201) and the runner never learns of
    /// it. Nothing in the runner API recovers such a job; GitLab fails it when it is stuck
    /// (GitLab Runner has the same gap). Tests that want it clear
    /// [`FaultConfig::no_drop_after`].
    pub fn chaos(rate: f64, seed: u64) -> FaultConfig {
        FaultConfig {
            rate,
            kinds: vec![
                FaultKind::ServerError,
                FaultKind::BadGateway,
                FaultKind::TooManyRequests,
                FaultKind::DropBefore,
                FaultKind::DropAfter,
            ],
            seed,
            retry_after_secs: 1,
            slow: Duration::from_millis(500),
            exempt: Vec::new(),
            no_drop_after: vec!["/api/v4/jobs/request".into()],
        }
    }
}

/// The decision maker.
#[derive(Debug)]
pub(crate) struct Faults {
    config: FaultConfig,
    rng: Mutex<ChaCha8Rng>,
}

impl Faults {
    pub(super) fn new(config: FaultConfig) -> Faults {
        let rng = ChaCha8Rng::seed_from_u64(config.seed);
        Faults {
            config,
            rng: Mutex::new(rng),
        }
    }

    pub(super) fn config(&self) -> &FaultConfig {
        &self.config
    }

    /// The fault for the next request to `path`, if any.
    pub(super) fn decide(&self, path: &str) -> Option<FaultKind> {
        if self.config.kinds.is_empty() || self.config.exempt.iter().any(|p| path.starts_with(p)) {
            return None;
        }
        let no_drop_after = self
            .config
            .no_drop_after
            .iter()
            .any(|p| path.starts_with(p));
        let kinds: Vec<FaultKind> = self
            .config
            .kinds
            .iter()
            .copied()
            .filter(|k| !(no_drop_after && *k == FaultKind::DropAfter))
            .collect();
        let mut rng = self.rng.lock().unwrap_or_else(|e| e.into_inner());
        if rng.random::<f64>() >= self.config.rate || kinds.is_empty() {
            return None;
        }
        let i = rng.random_range(0..kinds.len());
        Some(kinds[i])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decisions_are_deterministic_and_near_the_rate() {
        let a = Faults::new(FaultConfig::chaos(0.1, 42));
        let b = Faults::new(FaultConfig::chaos(0.1, 42));
        let da: Vec<_> = (0..2000).map(|_| a.decide("/api/v4/jobs/7")).collect();
        let db: Vec<_> = (0..2000).map(|_| b.decide("/api/v4/jobs/7")).collect();
        assert_eq!(da, db);
        let n = da.iter().filter(|d| d.is_some()).count();
        assert!((120..=280).contains(&n), "{n}");
        assert!(da.contains(&Some(FaultKind::DropAfter)));
        let requests: Vec<_> = (0..2000)
            .map(|_| a.decide("/api/v4/jobs/request"))
            .collect();
        assert!(requests.iter().any(|d| d.is_some()));
        assert!(!requests.contains(&Some(FaultKind::DropAfter)));
        let mut c = FaultConfig::chaos(1.0, 1);
        c.exempt.push("/api/v4/runners".into());
        let c = Faults::new(c);
        assert_eq!(c.decide("/api/v4/runners/verify"), None);
        assert!(c.decide("/api/v4/jobs/1").is_some());
    }
}
