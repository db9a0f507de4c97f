//! When an AWS call is tried again, and after how long: pure, with the jitter passed in.
//!
//! The SDK's own retries are turned off (see `api`), so that this policy is the only one and
//! a throttled call is never given up silently: every call either succeeds, or fails with an
//! error the caller reports (an `increase` that reports an error requested nothing; a
//! `decrease` leaves the instance out of the ids it returns), and the scaler decides again
//! on its next tick. No decision is lost.

use std::time::Duration;

/// Error codes AWS uses to say "slow down". Auto Scaling answers `Throttling` (HTTP 400,
/// Amazon EC2 Auto Scaling API Reference, "Common Errors"); EC2 answers
/// `RequestLimitExceeded` (HTTP 503, Amazon EC2 API Reference, "Error codes", "Request
/// throttling"); EC2 Instance Connect answers `ThrottlingException`. The list is the one the
/// AWS SDK for Rust classifies as throttling (`aws-runtime`, `retries/classifiers.rs`,
/// `THROTTLING_ERRORS`).
pub const THROTTLING_CODES: &[&str] = &[
    "Throttling",
    "ThrottlingException",
    "ThrottledException",
    "RequestThrottledException",
    "TooManyRequestsException",
    "ProvisionedThroughputExceededException",
    "TransactionInProgressException",
    "RequestLimitExceeded",
    "BandwidthLimitExceeded",
    "LimitExceededException",
    "RequestThrottled",
    "SlowDown",
    "PriorRequestNotComplete",
    "EC2ThrottledException",
];

/// Error codes of failures that pass by themselves: the SDK's transient ones, and Auto
/// Scaling's `ResourceContention` ("you already have a pending update to an Auto Scaling
/// resource", API Reference of `SetDesiredCapacity` and `TerminateInstanceInAutoScalingGroup`).
pub const TRANSIENT_CODES: &[&str] = &[
    "RequestTimeout",
    "RequestTimeoutException",
    "ResourceContention",
];

/// What kind of failure a call met.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// AWS asked for fewer requests: back off and try again.
    Throttling,
    /// The network, a timeout, a 5xx or a contention: try again.
    Transient,
    /// The request itself is wrong or refused (validation, permissions, not found): trying
    /// again cannot help.
    Permanent,
}

impl ErrorClass {
    /// Whether a call that failed this way is tried again.
    pub fn retryable(self) -> bool {
        self != ErrorClass::Permanent
    }
}

/// Classifies a failed call from what is known of it: the AWS error code, the HTTP status of
/// the answer, and whether there was an answer at all (`no_response`: the connection or a
/// timeout failed first).
pub fn classify(code: Option<&str>, status: Option<u16>, no_response: bool) -> ErrorClass {
    if let Some(code) = code {
        if THROTTLING_CODES.contains(&code) {
            return ErrorClass::Throttling;
        }
        if TRANSIENT_CODES.contains(&code) {
            return ErrorClass::Transient;
        }
    }
    if status == Some(429) {
        return ErrorClass::Throttling;
    }
    if no_response || status.is_some_and(|s| s >= 500) {
        return ErrorClass::Transient;
    }
    ErrorClass::Permanent
}

/// How often and how patiently a call is tried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all, the first one included (at least 1).
    pub max_attempts: u32,
    /// The backoff before the second attempt, doubled for each further one.
    pub base: Duration,
    /// The longest backoff.
    pub cap: Duration,
}

impl Default for RetryPolicy {
    /// 8 attempts, backoff from 250 ms doubling to at most 20 s: about a minute of
    /// throttling at worst before the call is reported failed. The SDK's standard mode
    /// gives up after 3 attempts and 20 s; a fleet's scaling calls are worth more patience,
    /// as nothing else is waiting on the provider's lock meanwhile but other scaling calls.
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 8,
            base: Duration::from_millis(250),
            cap: Duration::from_secs(20),
        }
    }
}

impl RetryPolicy {
    /// The wait before trying again after `failures` failed attempts (1 after the first),
    /// or `None` when the attempts are used up. `jitter` in `[0, 1]` scales the exponential
    /// backoff ("full jitter", as the AWS SDKs do), so that many callers throttled together do
    /// not come back together; 0 is tried again at once.
    pub fn backoff(&self, failures: u32, jitter: f64) -> Option<Duration> {
        if failures == 0 || failures >= self.max_attempts.max(1) {
            return None;
        }
        let exp = 2u32.saturating_pow(failures - 1);
        let full = self.base.saturating_mul(exp).min(self.cap);
        Some(full.mul_f64(jitter.clamp(0.0, 1.0)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throttling_codes_of_each_api_are_throttling() {
        assert_eq!(
            classify(Some("Throttling"), Some(400), false),
            ErrorClass::Throttling
        );
        assert_eq!(
            classify(Some("RequestLimitExceeded"), Some(503), false),
            ErrorClass::Throttling
        );
        assert_eq!(
            classify(Some("ThrottlingException"), Some(400), false),
            ErrorClass::Throttling
        );
        assert_eq!(classify(None, Some(429), false), ErrorClass::Throttling);
    }

    #[test]
    fn network_failures_and_server_errors_are_transient() {
        assert_eq!(classify(None, None, true), ErrorClass::Transient);
        assert_eq!(
            classify(Some("InternalFailure"), Some(500), false),
            ErrorClass::Transient
        );
        assert_eq!(
            classify(Some("ResourceContention"), Some(500), false),
            ErrorClass::Transient
        );
    }

    #[test]
    fn refusals_are_permanent() {
        for code in ["ValidationError", "AccessDenied", "UnauthorizedOperation"] {
            let c = classify(Some(code), Some(400), false);
            assert_eq!(c, ErrorClass::Permanent, "{code}");
            assert!(!c.retryable());
        }
    }

    #[test]
    fn backoff_doubles_to_the_cap_and_stops_after_the_last_attempt() {
        let p = RetryPolicy {
            max_attempts: 6,
            base: Duration::from_millis(100),
            cap: Duration::from_millis(500),
        };
        let full: Vec<_> = (1..6).map(|f| p.backoff(f, 1.0).unwrap()).collect();
        assert_eq!(
            full,
            [100, 200, 400, 500, 500]
                .map(Duration::from_millis)
                .to_vec()
        );
        assert_eq!(p.backoff(6, 1.0), None, "six attempts made");
        assert_eq!(p.backoff(0, 1.0), None, "nothing failed yet");
        assert_eq!(p.backoff(3, 0.5), Some(Duration::from_millis(200)));
        assert_eq!(
            p.backoff(3, 7.0),
            Some(Duration::from_millis(400)),
            "clamped"
        );
        assert_eq!(p.backoff(3, 0.0), Some(Duration::ZERO));
        let huge = RetryPolicy {
            max_attempts: u32::MAX,
            ..p
        };
        assert_eq!(huge.backoff(200, 1.0), Some(Duration::from_millis(500)));
    }
}
