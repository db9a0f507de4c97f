//! Docker Machine's autoscaling periods as taskscaler's.
//!
//! Docker Machine reads `Periods` with gorhill/cronexpr (GitLab Runner
//! `docs/configuration/advanced-configuration.md`, "Periods syntax":
//! `[second] [minute] [hour] [day of month] [month] [day of week] [year]`), and a period is
//! in force whenever the expression's next match is within a second of now
//! (`helpers/timeperiod/period.go`, `InPeriod`). cronexpr also takes 5 fields (minute to
//! day of week) and 6 (with a year), and then reads the second as `0`: such a period is in
//! force only around the first second of each matching minute. taskscaler's periods are the
//! 5-field form and cover whole minutes. So a period converts by dropping its second and
//! year fields; a restricted second or year, or a 5- or 6-field period, is converted to
//! what it was most likely meant to say, and reported.

use crate::config::cron::parse_period;

/// A period converted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Converted {
    /// The 5-field period.
    pub(crate) period: String,
    /// What was lost, if anything (a restricted second or year field).
    pub(crate) approximation: Option<String>,
}

/// Converts one Docker Machine period; an error says why it cannot be.
pub(crate) fn convert(period: &str) -> Result<Converted, String> {
    let fields: Vec<&str> = period.split_whitespace().collect();
    let (five, second, year): (&[&str], Option<&str>, Option<&str>) = match fields.len() {
        5 => (&fields[..], Some("0"), None),
        6 => (&fields[..5], Some("0"), Some(fields[5])),
        7 => (&fields[1..6], Some(fields[0]), Some(fields[6])),
        n => {
            return Err(format!(
                "period `{period}` has {n} fields; Docker Machine periods have 5 to 7"
            ));
        }
    };
    let mut lost = Vec::new();
    if let Some(s) = second.filter(|s| !is_any(s)) {
        lost.push(if fields.len() == 7 {
            format!("its seconds field `{s}` (taskscaler periods are whole minutes)")
        } else {
            format!(
                "with {} fields Docker Machine reads the second as 0, so it was in force only \
                 about one second a minute; converted to whole minutes",
                fields.len()
            )
        });
    }
    if let Some(y) = year.filter(|y| !is_any(y)) {
        lost.push(format!(
            "its year field `{y}` (taskscaler periods repeat every year)"
        ));
    }
    let converted = five.join(" ");
    parse_period(&converted).map_err(|e| format!("period `{period}` converts to {e}"))?;
    Ok(Converted {
        period: converted,
        approximation: (!lost.is_empty()).then(|| lost.join(" and ")),
    })
}

fn is_any(field: &str) -> bool {
    matches!(field, "*" | "?")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gitlab_documented_periods_convert() {
        // GitLab Runner docs/configuration/autoscale.md, "Configure autoscaling periods".
        assert_eq!(
            convert("* * 9-17 * * mon-fri *").unwrap(),
            Converted {
                period: "* 9-17 * * mon-fri".into(),
                approximation: None
            }
        );
        assert_eq!(
            convert("* * * * * sat,sun *").unwrap().period,
            "* * * * sat,sun"
        );
        assert_eq!(
            convert("* * 0-7,18-23 * * mon-fri *").unwrap().period,
            "* 0-7,18-23 * * mon-fri"
        );
        let five = convert("* 9-17 * * 1-5").unwrap();
        assert_eq!(five.period, "* 9-17 * * 1-5");
        assert!(five.approximation.unwrap().contains("one second a minute"));
        assert_eq!(
            convert("* 9-17 * * 1-5 *").unwrap().period,
            "* 9-17 * * 1-5"
        );
    }

    #[test]
    fn what_cannot_be_expressed_is_said() {
        let c = convert("0 * 9-17 * * mon-fri 2027").unwrap();
        assert_eq!(c.period, "* 9-17 * * mon-fri");
        let why = c.approximation.unwrap();
        assert!(
            why.contains("seconds field `0`") && why.contains("year field `2027`"),
            "{why}"
        );
        assert!(convert("* * *").is_err());
        assert!(
            convert("* * 25 * * * *")
                .unwrap_err()
                .contains("converts to")
        );
    }
}
