//! Human durations as GitLab accepts them in `timeout`, `artifacts:expire_in` and `start_in`
//! (the ChronicDuration forms): `3600`, `1h 30m`, `90 minutes`, `1 hour and 30 minutes`,
//! `1.5h`, `2 days`, `1w`, `1:30:00`. A bare number is seconds; a month is 30 days and a year
//! 365 days.

/// Parse `text` into whole seconds; `None` if it is not a duration.
pub fn parse_duration(text: &str) -> Option<u64> {
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    if text.contains(':') {
        return parse_clock(text);
    }
    let normalized = text.to_ascii_lowercase().replace(',', " ");
    let mut total = 0f64;
    let mut pending: Option<f64> = None;
    let mut seen = false;
    let mut rest = normalized.as_str();
    loop {
        rest = rest.trim_start();
        if rest.is_empty() {
            break;
        }
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if number_len > 0 {
            if pending.is_some() {
                return None;
            }
            pending = Some(rest[..number_len].parse().ok()?);
            rest = &rest[number_len..];
            continue;
        }
        let word_len = rest
            .find(|c: char| !c.is_ascii_alphabetic())
            .unwrap_or(rest.len());
        if word_len == 0 {
            return None;
        }
        let word = &rest[..word_len];
        rest = &rest[word_len..];
        if word == "and" {
            if pending.is_some() {
                return None;
            }
            continue;
        }
        let unit = unit_seconds(word)?;
        let amount = pending.take()?;
        total += amount * unit;
        seen = true;
    }
    if let Some(seconds) = pending {
        total += seconds;
        seen = true;
    }
    if !seen || !total.is_finite() || total < 0.0 {
        return None;
    }
    Some(total.round() as u64)
}

fn unit_seconds(word: &str) -> Option<f64> {
    Some(match word {
        "s" | "sec" | "secs" | "second" | "seconds" => 1.0,
        "m" | "min" | "mins" | "minute" | "minutes" => 60.0,
        "h" | "hr" | "hrs" | "hour" | "hours" => 3600.0,
        "d" | "day" | "days" => 86_400.0,
        "w" | "wk" | "wks" | "week" | "weeks" => 604_800.0,
        "mo" | "mos" | "month" | "months" => 2_592_000.0,
        "y" | "yr" | "yrs" | "year" | "years" => 31_536_000.0,
        _ => return None,
    })
}

/// `h:mm:ss`, `m:ss` or `d:hh:mm:ss`.
fn parse_clock(text: &str) -> Option<u64> {
    let parts: Vec<u64> = text
        .split(':')
        .map(|p| {
            if p.is_empty() || !p.chars().all(|c| c.is_ascii_digit()) {
                None
            } else {
                p.parse().ok()
            }
        })
        .collect::<Option<_>>()?;
    let weights: &[u64] = match parts.len() {
        2 => &[60, 1],
        3 => &[3600, 60, 1],
        4 => &[86_400, 3600, 60, 1],
        _ => return None,
    };
    Some(parts.iter().zip(weights).map(|(p, w)| p * w).sum())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms_gitlab_accepts() {
        assert_eq!(parse_duration("3600"), Some(3600));
        assert_eq!(parse_duration("1h 30m"), Some(5400));
        assert_eq!(parse_duration("1h30m"), Some(5400));
        assert_eq!(parse_duration("90 minutes"), Some(5400));
        assert_eq!(parse_duration("1 hour and 30 minutes"), Some(5400));
        assert_eq!(parse_duration("3 hours 30 minutes"), Some(12_600));
        assert_eq!(parse_duration("1.5h"), Some(5400));
        assert_eq!(parse_duration("2 days"), Some(172_800));
        assert_eq!(parse_duration("1 week"), Some(604_800));
        assert_eq!(parse_duration("10 mins"), Some(600));
        assert_eq!(parse_duration("1:30:00"), Some(5400));
        assert_eq!(parse_duration("45 s"), Some(45));
        assert_eq!(parse_duration("1 Day, 2 Hours"), Some(93_600));
    }

    #[test]
    fn rejects_nonsense() {
        for bad in ["", "soon", "1 fortnight", "h", "1 2 h", "1::2", "-5m"] {
            assert_eq!(parse_duration(bad), None, "{bad:?}");
        }
    }
}
