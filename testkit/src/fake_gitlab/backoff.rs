//! Rails' runner backoff (`lib/gitlab/ci/runner/backoff.rb`), the
//! `X-GitLab-Trace-Update-Interval` of a 202 to a final update: `2 ** min(slot, 6)` seconds,
//! where `slot` is 0 for the first second after the pending state was created and
//! `floor(log2(duration)) - 1` after it. Ruby's `2 ** -1` is the `Rational` `1/2`, which
//! Grape writes into the header as `"1/2"`; so does this.

use std::time::Duration;

/// The header value Rails sends `elapsed` after the build's pending state was created.
pub(crate) fn header_value(elapsed: Duration) -> String {
    let duration = elapsed.as_secs_f64();
    let slot: i32 = if duration <= 1.0 {
        0
    } else {
        duration.log2().floor() as i32 - 1
    };
    match slot.min(6) {
        s if s < 0 => "1/2".to_string(),
        s => (1u64 << s).to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::header_value;
    use std::time::Duration;

    #[test]
    fn follows_the_table_in_backoff_rb() {
        let at = |s: f64| header_value(Duration::from_secs_f64(s));
        assert_eq!(at(0.0), "1");
        assert_eq!(at(1.0), "1");
        assert_eq!(at(1.5), "1/2");
        for (d, want) in [
            (2.0, "1"),
            (3.0, "1"),
            (4.0, "2"),
            (6.0, "2"),
            (8.0, "4"),
            (12.0, "4"),
            (16.0, "8"),
            (24.0, "8"),
            (32.0, "16"),
            (48.0, "16"),
            (64.0, "32"),
            (96.0, "32"),
            (128.0, "64"),
            (300.0, "64"),
        ] {
            assert_eq!(at(d), want, "{d} s");
        }
    }
}
