//! Times as the store keeps them: milliseconds since the Unix epoch, from the `SystemTime`
//! the caller passes in (so tests control the clock).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// `t` as milliseconds since the epoch (0 before it, saturating far in the future).
pub(crate) fn to_millis(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// The inverse of [`to_millis`] (negative values clamp to the epoch).
pub(crate) fn from_millis(ms: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

/// A duration in milliseconds, saturating.
pub(crate) fn duration_millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_to_the_millisecond() {
        let t = UNIX_EPOCH + Duration::from_millis(1_732_288_000_123);
        assert_eq!(from_millis(to_millis(t)), t);
        assert_eq!(to_millis(UNIX_EPOCH - Duration::from_secs(5)), 0);
        assert_eq!(from_millis(-7), UNIX_EPOCH);
        assert_eq!(duration_millis(Duration::MAX), i64::MAX);
    }
}
