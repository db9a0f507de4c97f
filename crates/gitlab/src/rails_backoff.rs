//! The backoff GitLab asks of a runner repeating a final update it answered 202
//! (`lib/gitlab/ci/runner/backoff.rb`): `2 ** min(slot, 6)` seconds, `slot` being 0 during the
//! first second after the first final update and `floor(log2(elapsed)) - 1` after it: 1 s
//! up to 4 s, then 2, 4, 8, 16, 32 and at most 64 s. Rails sends it as
//! `X-GitLab-Trace-Update-Interval`; this is the fallback when an answer lacks it. Pure.

use std::time::Duration;

/// The wait before repeating a final update, `elapsed` after the first 202.
pub(crate) fn rails_backoff(elapsed: Duration) -> Duration {
    let secs = elapsed.as_secs_f64();
    let slot: i32 = if secs <= 1.0 {
        0
    } else {
        secs.log2().floor() as i32 - 1
    };
    // Ruby's `2 ** -1` is one half.
    Duration::from_secs_f64(2f64.powi(slot.min(6)))
}

#[cfg(test)]
mod tests {
    use super::rails_backoff;
    use std::time::Duration;

    #[test]
    fn follows_the_table_in_backoff_rb() {
        let at = |s: f64| rails_backoff(Duration::from_secs_f64(s)).as_secs_f64();
        assert_eq!(at(0.0), 1.0);
        assert_eq!(at(1.5), 0.5);
        for (d, want) in [
            (2.0, 1.0),
            (3.9, 1.0),
            (4.0, 2.0),
            (8.0, 4.0),
            (16.0, 8.0),
            (32.0, 16.0),
            (64.0, 32.0),
            (128.0, 64.0),
            (3600.0, 64.0),
        ] {
            assert_eq!(at(d), want, "{d} s");
        }
    }
}
