//! Policy periods: 5-field cron expressions that denote minute-resolution time ranges.

use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};

/// Parses one policy period (`minute hour day-of-month month day-of-week`, names like
/// `mon-fri` and `jan` allowed, day-of-week 0 or 7 for Sunday). The error says what is wrong
/// in words fit for a `config check` line.
pub(crate) fn parse_period(period: &str) -> Result<Cron, String> {
    let fields = period.split_whitespace().count();
    if fields != 5 {
        return Err(format!(
            "period `{period}` must have 5 fields (minute hour day-of-month month day-of-week), \
             found {fields}"
        ));
    }
    CronParser::builder()
        .seconds(Seconds::Disallowed)
        .year(Year::Disallowed)
        .build()
        .parse(period)
        .map_err(|e| format!("period `{period}` is not a valid cron expression: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn gitlab_examples_parse_and_match_ranges() {
        let c = parse_period("* 8-15 * * mon-fri").unwrap();
        // Wednesday 2026-11-18.
        let inside = chrono::Utc
            .with_ymd_and_hms(2026, 11, 18, 15, 59, 0)
            .unwrap();
        let after = chrono::Utc
            .with_ymd_and_hms(2026, 11, 18, 16, 0, 0)
            .unwrap();
        let saturday = chrono::Utc
            .with_ymd_and_hms(2026, 11, 21, 10, 0, 0)
            .unwrap();
        assert!(c.is_time_matching(&inside).unwrap());
        assert!(!c.is_time_matching(&after).unwrap());
        assert!(!c.is_time_matching(&saturday).unwrap());
        assert!(parse_period("* * * * *").is_ok());
        assert!(parse_period("* * * * sat,sun").is_ok());
        assert!(parse_period("*/5 0-6 1 jan 0").is_ok());
        assert!(parse_period("* * * * 7").is_ok());
    }

    #[test]
    fn rejects_bad_periods() {
        let e = parse_period("* * * *").unwrap_err();
        assert!(
            e.contains("must have 5 fields") && e.contains("found 4"),
            "{e}"
        );
        let e = parse_period("0 * * * * *").unwrap_err();
        assert!(e.contains("found 6"), "{e}");
        let e = parse_period("* 25 * * *").unwrap_err();
        assert!(e.contains("not a valid cron expression"), "{e}");
        assert!(parse_period("* * * * funday").is_err());
        assert!(parse_period("@daily").is_err());
    }
}
