//! Time, injected: a monotonic instant for durations and a calendar time for policy periods.

use chrono::{DateTime, Utc};
use tokio::time::Instant;

/// The scaler's source of time.
///
/// Monotonic time is tokio's [`Instant`], so a runtime with paused time (tests, the
/// simulation) drives the scaler in virtual time. Calendar time, needed to match policy
/// periods such as `* 8-15 * * mon-fri`, is either the system's or anchored: a fixed start
/// plus the monotonic time elapsed since, so virtual time moves the calendar too.
#[derive(Debug, Clone)]
pub struct Clock {
    anchor: Option<(Instant, DateTime<Utc>)>,
}

impl Clock {
    /// The real clock: tokio's instant and the system's calendar.
    pub fn system() -> Self {
        Clock { anchor: None }
    }

    /// A clock whose calendar starts at `start` now and advances with tokio's (possibly
    /// paused) instant.
    pub fn anchored(start: DateTime<Utc>) -> Self {
        Clock {
            anchor: Some((Instant::now(), start)),
        }
    }

    /// Monotonic now.
    pub fn now(&self) -> Instant {
        Instant::now()
    }

    /// Calendar now.
    pub fn utc(&self) -> DateTime<Utc> {
        match self.anchor {
            None => Utc::now(),
            Some((at, start)) => {
                let elapsed = Instant::now().saturating_duration_since(at);
                start
                    + chrono::Duration::from_std(elapsed)
                        .unwrap_or_else(|_| chrono::Duration::zero())
            }
        }
    }
}

impl Default for Clock {
    fn default() -> Self {
        Clock::system()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn anchored_calendar_follows_virtual_time() {
        let start = Utc.with_ymd_and_hms(2026, 11, 21, 23, 59, 0).unwrap();
        let c = Clock::anchored(start);
        assert_eq!(c.utc(), start);
        tokio::time::sleep(Duration::from_secs(120)).await;
        assert_eq!(
            c.utc(),
            Utc.with_ymd_and_hms(2026, 11, 22, 0, 1, 0).unwrap()
        );
    }
}
