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
    /// Answer `429 Too Many Requests` with `Retry-After` without processing the request.
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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scripted {
    /// Answer this status without processing; `retry_after` adds a `Retry-After` header.
    Status {
        /// The status.
        status: u16,
        /// `Retry-After` in seconds.
        retry_after: Option<u64>,
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
}

impl FaultConfig {
    /// `rate` of requests fail with one of 500, 429 (Retry-After 1 s), a connection dropped
    /// before processing, or one dropped after processing.
    pub fn chaos(rate: f64, seed: u64) -> FaultConfig {
        FaultConfig {
            rate,
            kinds: vec![
                FaultKind::ServerError,
                FaultKind::TooManyRequests,
                FaultKind::DropBefore,
                FaultKind::DropAfter,
            ],
            seed,
            retry_after_secs: 1,
            slow: Duration::from_millis(500),
            exempt: Vec::new(),
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
    pub fn new(config: FaultConfig) -> Faults {
        let rng = ChaCha8Rng::seed_from_u64(config.seed);
        Faults {
            config,
            rng: Mutex::new(rng),
        }
    }

    pub fn config(&self) -> &FaultConfig {
        &self.config
    }

    /// The fault for the next request to `path`, if any.
    pub fn decide(&self, path: &str) -> Option<FaultKind> {
        if self.config.kinds.is_empty() || self.config.exempt.iter().any(|p| path.starts_with(p)) {
            return None;
        }
        let mut rng = self.rng.lock().unwrap_or_else(|e| e.into_inner());
        if rng.random::<f64>() >= self.config.rate {
            return None;
        }
        let i = rng.random_range(0..self.config.kinds.len());
        Some(self.config.kinds[i])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decisions_are_deterministic_and_near_the_rate() {
        let a = Faults::new(FaultConfig::chaos(0.1, 42));
        let b = Faults::new(FaultConfig::chaos(0.1, 42));
        let da: Vec<_> = (0..2000)
            .map(|_| a.decide("/api/v4/jobs/request"))
            .collect();
        let db: Vec<_> = (0..2000)
            .map(|_| b.decide("/api/v4/jobs/request"))
            .collect();
        assert_eq!(da, db);
        let n = da.iter().filter(|d| d.is_some()).count();
        assert!((120..=280).contains(&n), "{n}");
        let mut c = FaultConfig::chaos(1.0, 1);
        c.exempt.push("/api/v4/runners".into());
        let c = Faults::new(c);
        assert_eq!(c.decide("/api/v4/runners/verify"), None);
        assert!(c.decide("/api/v4/jobs/1").is_some());
    }
}
