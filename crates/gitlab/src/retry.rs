//! Retries of runner API calls: which answers are worth retrying, and how long to wait.
//! Pure logic; the client applies it.

use std::time::{Duration, SystemTime};

/// How the client retries a call that failed in transit or was answered 408, 429, 500, 502,
/// 503, 504 or ≥ 512 (GitLab Runner's `retry_requester.go`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts per call, the first included (GitLab Runner: 5).
    pub attempts: u32,
    /// The first delay; doubles per attempt.
    pub base: Duration,
    /// The longest delay, also the cap on a server's `Retry-After`.
    pub max: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            attempts: 5,
            base: Duration::from_millis(500),
            max: Duration::from_secs(60),
        }
    }
}

impl RetryPolicy {
    /// The delay before attempt `attempt + 1` after attempt `attempt` (1-based) failed, given
    /// the server's hint if it sent one. A hint wins over the computed backoff (capped at
    /// `max`); otherwise the delay is `base × 2^(attempt-1)` with ±25 % jitter from `jitter`
    /// (a number in `0.0..1.0`), capped at `max`.
    pub fn delay(&self, attempt: u32, hint: Option<Duration>, jitter: f64) -> Duration {
        if let Some(h) = hint {
            return h.min(self.max);
        }
        let exp = attempt.saturating_sub(1).min(20);
        let raw = self.base.saturating_mul(1u32 << exp).min(self.max);
        let factor = 0.75 + 0.5 * jitter.clamp(0.0, 1.0);
        raw.mul_f64(factor).min(self.max)
    }
}

/// Whether an answer with this status is worth another attempt.
pub(crate) fn retryable_status(status: u16) -> bool {
    matches!(status, 408 | 429 | 500 | 502 | 503 | 504) || status >= 512
}

/// The wait a server asked for: `Retry-After` (seconds or an HTTP date), else
/// `RateLimit-ResetTime` (an HTTP date).
pub(crate) fn server_hint(
    retry_after: Option<&str>,
    reset_time: Option<&str>,
    now: SystemTime,
) -> Option<Duration> {
    if let Some(v) = retry_after {
        let v = v.trim();
        if let Ok(secs) = v.parse::<u64>() {
            return Some(Duration::from_secs(secs));
        }
        if let Some(at) = parse_http_date(v) {
            return Some(at.duration_since(now).unwrap_or(Duration::ZERO));
        }
    }
    let at = parse_http_date(reset_time?.trim())?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// Parses an IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`), the form HTTP servers send.
fn parse_http_date(s: &str) -> Option<SystemTime> {
    let dt = chrono::DateTime::parse_from_rfc2822(s).ok()?;
    let secs = u64::try_from(dt.timestamp()).ok()?;
    Some(SystemTime::UNIX_EPOCH + Duration::from_secs(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retryable_statuses_are_gitlab_runners() {
        for s in [408, 429, 500, 502, 503, 504, 512, 599] {
            assert!(retryable_status(s), "{s}");
        }
        for s in [200, 201, 204, 400, 403, 404, 409, 412, 416, 501, 511] {
            assert!(!retryable_status(s), "{s}");
        }
    }

    #[test]
    fn backoff_doubles_and_is_capped_and_hints_win() {
        let p = RetryPolicy {
            attempts: 5,
            base: Duration::from_secs(1),
            max: Duration::from_secs(10),
        };
        assert_eq!(p.delay(1, None, 0.5), Duration::from_secs(1));
        assert_eq!(p.delay(2, None, 0.5), Duration::from_secs(2));
        assert_eq!(p.delay(3, None, 0.5), Duration::from_secs(4));
        assert_eq!(p.delay(9, None, 0.5), Duration::from_secs(10));
        assert_eq!(p.delay(1, None, 0.0), Duration::from_millis(750));
        assert_eq!(p.delay(1, None, 1.0), Duration::from_millis(1250));
        assert_eq!(
            p.delay(1, Some(Duration::from_secs(3)), 0.5),
            Duration::from_secs(3)
        );
        assert_eq!(
            p.delay(1, Some(Duration::from_secs(300)), 0.5),
            Duration::from_secs(10)
        );
    }

    #[test]
    fn retry_after_in_seconds_or_as_a_date() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(784_111_777);
        assert_eq!(
            server_hint(Some("7"), None, now),
            Some(Duration::from_secs(7))
        );
        // Sun, 06 Nov 1994 08:49:37 GMT is 784111777.
        assert_eq!(
            server_hint(Some("Sun, 06 Nov 1994 08:49:47 GMT"), None, now),
            Some(Duration::from_secs(10))
        );
        assert_eq!(
            server_hint(None, Some("Sun, 06 Nov 1994 08:49:40 GMT"), now),
            Some(Duration::from_secs(3))
        );
        assert_eq!(server_hint(Some("soon"), None, now), None);
        assert_eq!(server_hint(None, None, now), None);
    }
}
