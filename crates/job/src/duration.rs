//! Durations as GitLab Runner writes them: Go's `time.Duration` syntax (`"20m0s"`, `"1h30m"`,
//! `"1.5h"`, `"300ms"`), in its configuration and in job variables such as
//! `RUNNER_SCRIPT_TIMEOUT`.

use std::time::Duration;

/// Why a duration string was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// The string was empty.
    #[error("empty duration")]
    Empty,
    /// A leading `-`: no duration GitLab Runner reads can be negative.
    #[error("negative duration `{0}` is not allowed")]
    Negative(String),
    /// Something other than `<number><unit>` pairs.
    #[error("invalid duration `{0}`: expected a number followed by a unit, like \"20m0s\"")]
    Invalid(String),
    /// A number without a unit (only `"0"` may omit it).
    #[error("missing unit in duration `{0}` (valid units are ns, us, ms, s, m, h)")]
    MissingUnit(String),
    /// A unit Go does not know.
    #[error("unknown unit `{unit}` in duration `{input}` (valid units are ns, us, ms, s, m, h)")]
    UnknownUnit {
        /// The unit as written.
        unit: String,
        /// The whole duration string.
        input: String,
    },
    /// More than `u64::MAX` nanoseconds.
    #[error("duration `{0}` is too large")]
    Overflow(String),
}

const NANOS_PER_SEC: u128 = 1_000_000_000;

fn unit_nanos(unit: &str) -> Option<u128> {
    Some(match unit {
        "ns" => 1,
        "us" | "\u{00b5}s" | "\u{03bc}s" => 1_000,
        "ms" => 1_000_000,
        "s" => NANOS_PER_SEC,
        "m" => 60 * NANOS_PER_SEC,
        "h" => 3_600 * NANOS_PER_SEC,
        _ => return None,
    })
}

/// Parses a duration in Go's `time.ParseDuration` syntax: one or more `<number><unit>` pairs,
/// where the number may have a fraction (`1.5h`) and the unit is `ns`, `us` (or `µs`), `ms`,
/// `s`, `m` or `h`. `"0"` alone needs no unit. A leading `+` is accepted; a leading `-` is an
/// error, because no duration GitLab Runner reads (a timeout, an interval) can be negative.
pub fn parse_go_duration(input: &str) -> Result<Duration, DurationError> {
    let mut rest = input;
    if rest.is_empty() {
        return Err(DurationError::Empty);
    }
    if rest.starts_with('-') {
        // Go accepts "-0"; a minus sign has no place in a configuration duration at all.
        return Err(DurationError::Negative(input.to_string()));
    }
    if let Some(r) = rest.strip_prefix('+') {
        rest = r;
    }
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    if rest.is_empty() {
        return Err(DurationError::Invalid(input.to_string()));
    }
    let mut total: u128 = 0;
    while !rest.is_empty() {
        // The number: digits, optionally a '.' and more digits; at least one digit overall.
        let int_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        let (int_part, after_int) = rest.split_at(int_len);
        let (frac_part, after_num) = match after_int.strip_prefix('.') {
            Some(after_dot) => {
                let frac_len = after_dot.bytes().take_while(u8::is_ascii_digit).count();
                after_dot.split_at(frac_len)
            }
            None => ("", after_int),
        };
        if int_part.is_empty() && frac_part.is_empty() {
            return Err(DurationError::Invalid(input.to_string()));
        }
        // The unit: everything up to the next digit or '.'.
        let unit_len = after_num
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after_num.len());
        let (unit, after_unit) = after_num.split_at(unit_len);
        if unit.is_empty() {
            return Err(DurationError::MissingUnit(input.to_string()));
        }
        let scale = unit_nanos(unit).ok_or_else(|| DurationError::UnknownUnit {
            unit: unit.to_string(),
            input: input.to_string(),
        })?;
        let overflow = || DurationError::Overflow(input.to_string());
        let int_value: u128 = if int_part.is_empty() {
            0
        } else {
            int_part.parse().map_err(|_| overflow())?
        };
        let mut nanos = int_value.checked_mul(scale).ok_or_else(overflow)?;
        if !frac_part.is_empty() {
            // Like Go: the fraction's contribution is truncated to whole nanoseconds. Digits
            // beyond what can matter for the largest unit (hours: 13 digits) are dropped.
            let digits = &frac_part[..frac_part.len().min(18)];
            let frac: u128 = digits.parse().map_err(|_| overflow())?;
            let denom = 10u128.pow(digits.len() as u32);
            nanos = nanos
                .checked_add(frac * scale / denom)
                .ok_or_else(overflow)?;
        }
        total = total.checked_add(nanos).ok_or_else(overflow)?;
        rest = after_unit;
    }
    let total = u64::try_from(total).map_err(|_| DurationError::Overflow(input.to_string()))?;
    Ok(Duration::from_nanos(total))
}

/// Formats a duration the way Go's `Duration.String()` does: `"0s"`, `"300ms"`, `"2s"`,
/// `"1.5s"`, `"20m0s"`, `"1h30m0s"`. The output parses back with [`parse_go_duration`] to the
/// same value.
pub fn format_go_duration(d: Duration) -> String {
    let nanos = d.as_nanos();
    if nanos == 0 {
        return "0s".to_string();
    }
    if nanos < NANOS_PER_SEC {
        let (unit_nanos, unit) = if nanos < 1_000 {
            (1, "ns")
        } else if nanos < 1_000_000 {
            (1_000, "\u{00b5}s")
        } else {
            (1_000_000, "ms")
        };
        return format!("{}{unit}", fixed_point(nanos, unit_nanos));
    }
    let hours = nanos / (3_600 * NANOS_PER_SEC);
    let rem = nanos % (3_600 * NANOS_PER_SEC);
    let minutes = rem / (60 * NANOS_PER_SEC);
    let sec_nanos = rem % (60 * NANOS_PER_SEC);
    let seconds = fixed_point(sec_nanos, NANOS_PER_SEC);
    let mut out = String::new();
    if hours > 0 {
        out.push_str(&format!("{hours}h"));
    }
    if hours > 0 || minutes > 0 {
        out.push_str(&format!("{minutes}m"));
    }
    out.push_str(&format!("{seconds}s"));
    out
}

/// `value / unit` as a decimal number without trailing zeros (`1500, 1000` -> `"1.5"`).
fn fixed_point(value: u128, unit: u128) -> String {
    let whole = value / unit;
    let frac = value % unit;
    if frac == 0 {
        return whole.to_string();
    }
    let width = unit.ilog10() as usize;
    let digits = format!("{frac:0width$}");
    format!("{whole}.{}", digits.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn parses_go_examples() {
        assert_eq!(parse_go_duration("20m0s"), Ok(Duration::from_secs(1200)));
        assert_eq!(parse_go_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_go_duration("1.5h"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_go_duration("300ms"), Ok(ms(300)));
        assert_eq!(parse_go_duration("2s"), Ok(ms(2000)));
        assert_eq!(parse_go_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_go_duration("0s"), Ok(Duration::ZERO));
        assert_eq!(parse_go_duration("+5s"), Ok(ms(5000)));
        assert_eq!(
            parse_go_duration("1h2m3s4ms5us6ns"),
            Ok(Duration::new(3723, 4_005_006))
        );
        assert_eq!(parse_go_duration("10µs"), Ok(Duration::from_micros(10)));
        assert_eq!(
            parse_go_duration("10\u{03bc}s"),
            Ok(Duration::from_micros(10))
        );
        assert_eq!(parse_go_duration(".5s"), Ok(ms(500)));
        assert_eq!(parse_go_duration("1.s"), Ok(ms(1000)));
        assert_eq!(parse_go_duration("24h"), Ok(Duration::from_secs(86_400)));
        // Fractions are truncated to whole nanoseconds, like Go.
        assert_eq!(
            parse_go_duration("0.3333333333s"),
            Ok(Duration::from_nanos(333_333_333))
        );
    }

    #[test]
    fn rejects_bad_durations() {
        assert_eq!(parse_go_duration(""), Err(DurationError::Empty));
        assert_eq!(
            parse_go_duration("-1s"),
            Err(DurationError::Negative("-1s".into()))
        );
        assert_eq!(
            parse_go_duration("5"),
            Err(DurationError::MissingUnit("5".into()))
        );
        assert_eq!(
            parse_go_duration("1h5"),
            Err(DurationError::MissingUnit("1h5".into()))
        );
        assert_eq!(
            parse_go_duration("3d"),
            Err(DurationError::UnknownUnit {
                unit: "d".into(),
                input: "3d".into()
            })
        );
        assert_eq!(
            parse_go_duration("s"),
            Err(DurationError::Invalid("s".into()))
        );
        assert_eq!(
            parse_go_duration("."),
            Err(DurationError::Invalid(".".into()))
        );
        assert_eq!(
            parse_go_duration("+"),
            Err(DurationError::Invalid("+".into()))
        );
        assert!(
            parse_go_duration("1 s")
                .unwrap_err()
                .to_string()
                .contains("unknown unit ` s`")
        );
        assert!(matches!(
            parse_go_duration("99999999999999999999h"),
            Err(DurationError::Overflow(_))
        ));
        assert!(matches!(
            parse_go_duration("6000000h"),
            Err(DurationError::Overflow(_))
        ));
    }

    #[test]
    fn formats_like_go() {
        assert_eq!(format_go_duration(Duration::ZERO), "0s");
        assert_eq!(format_go_duration(Duration::from_secs(1200)), "20m0s");
        assert_eq!(format_go_duration(Duration::from_secs(5400)), "1h30m0s");
        assert_eq!(format_go_duration(Duration::from_secs(7200)), "2h0m0s");
        assert_eq!(format_go_duration(ms(300)), "300ms");
        assert_eq!(format_go_duration(ms(1500)), "1.5s");
        assert_eq!(format_go_duration(ms(2000)), "2s");
        assert_eq!(format_go_duration(Duration::from_micros(1500)), "1.5ms");
        assert_eq!(
            format_go_duration(Duration::from_nanos(1500)),
            "1.5\u{00b5}s"
        );
        assert_eq!(format_go_duration(Duration::from_nanos(7)), "7ns");
        assert_eq!(format_go_duration(Duration::new(61, 1)), "1m1.000000001s");
    }

    #[test]
    fn format_then_parse_round_trips() {
        for d in [
            Duration::ZERO,
            Duration::from_nanos(1),
            Duration::from_nanos(999),
            Duration::from_micros(1),
            Duration::from_micros(123_456),
            ms(999),
            ms(1001),
            Duration::new(3723, 4_005_006),
            Duration::from_secs(86_400 * 400),
        ] {
            assert_eq!(parse_go_duration(&format_go_duration(d)), Ok(d), "{d:?}");
        }
    }

    #[test]
    fn job_variable_durations() {
        let ok = |s| parse_go_duration(s).ok();
        assert_eq!(ok("90s"), Some(Duration::from_secs(90)));
        assert_eq!(ok("10m"), Some(Duration::from_secs(600)));
        assert_eq!(ok("1h30m"), Some(Duration::from_secs(5400)));
        assert_eq!(ok("1.5h"), Some(Duration::from_secs(5400)));
        assert_eq!(ok("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(ok("0"), Some(Duration::ZERO));
        for bad in ["", "10", "m", "-5s", "5x", "1h-2m"] {
            assert_eq!(ok(bad), None, "{bad}");
        }
    }
}
