//! Conversions between Unix timestamps (tar) and zip's MS-DOS date-times (UTC; zip keeps no
//! zone), pure.

/// The civil date (year, month, day) of a day count since 1970-01-01.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// Days since 1970-01-01 of a civil date.
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// A zip timestamp for `unix` seconds, clamped to zip's range (1980..=2107).
pub fn zip_time(unix: u64) -> zip::DateTime {
    let secs = i64::try_from(unix).unwrap_or(i64::MAX);
    let (y, mo, d) = civil_from_days(secs.div_euclid(86_400));
    let rem = secs.rem_euclid(86_400);
    let (h, mi, s) = (rem / 3600, (rem % 3600) / 60, rem % 60);
    if y < 1980 {
        return zip::DateTime::default();
    }
    let built = zip::DateTime::from_date_and_time(
        u16::try_from(y).unwrap_or(2107),
        mo as u8,
        d as u8,
        h as u8,
        mi as u8,
        s as u8,
    );
    built.unwrap_or_else(|_| {
        zip::DateTime::from_date_and_time(2107, 12, 31, 23, 59, 58).unwrap_or_default()
    })
}

/// Unix seconds of a zip timestamp.
pub fn unix_time(t: zip::DateTime) -> u64 {
    let days = days_from_civil(
        i64::from(t.year()),
        u32::from(t.month()),
        u32::from(t.day()),
    );
    let secs = days * 86_400
        + i64::from(t.hour()) * 3600
        + i64::from(t.minute()) * 60
        + i64::from(t.second());
    u64::try_from(secs).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_at_two_second_resolution() {
        for unix in [315_532_800u64, 1_700_000_000, 951_782_400, 4_102_444_798] {
            assert_eq!(unix_time(zip_time(unix)), unix - unix % 2, "{unix}");
        }
        let t = zip_time(1_700_000_000); // 2023-11-14 22:13:20 UTC
        assert_eq!((t.year(), t.month(), t.day()), (2023, 11, 14));
        assert_eq!((t.hour(), t.minute(), t.second()), (22, 13, 20));
        assert_eq!(zip_time(0), zip::DateTime::default());
    }
}
