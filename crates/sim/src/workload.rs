//! Workloads: job arrivals with durations, from a CSV file or generated (a rate, bursts
//! and a daily pattern), seeded so a run replays exactly.

use chrono::{DateTime, Datelike, Timelike, Utc};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::time::Duration;

/// One job: when it reaches GitLab's queue (from the start of the simulation) and how long
/// it runs once it has a slot.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct JobSpec {
    /// Time from the start to its arrival.
    pub arrival: Duration,
    /// How long it runs.
    pub duration: Duration,
}

/// Why a workload file cannot be read.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum WorkloadError {
    /// A line does not parse.
    #[error("line {line}: {message}")]
    Line {
        /// 1-based.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// The file has no job.
    #[error("the workload has no job")]
    Empty,
}

/// Reads a CSV of `arrival,duration` lines. `arrival` is seconds from the start
/// (`12.5`) or an RFC 3339 time (made relative to the earliest); `duration` is seconds or a
/// Go duration (`5m30s`). A first line that does not parse as numbers is a header; empty
/// lines and `#` comments are skipped. Jobs come back sorted by arrival.
pub fn parse_csv(text: &str) -> Result<Vec<JobSpec>, WorkloadError> {
    enum At {
        Offset(f64),
        Time(DateTime<Utc>),
    }
    let mut rows: Vec<(At, Duration)> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let err = |message: String| WorkloadError::Line { line: n, message };
        let mut cols = line.split(',').map(str::trim);
        let (Some(a), Some(d)) = (cols.next(), cols.next()) else {
            return Err(err("expected `arrival,duration`".into()));
        };
        let arrival = if let Ok(s) = a.parse::<f64>() {
            if !(s.is_finite() && s >= 0.0) {
                return Err(err(format!("arrival `{a}` must be 0 or more seconds")));
            }
            At::Offset(s)
        } else if let Ok(t) = DateTime::parse_from_rfc3339(a) {
            At::Time(t.with_timezone(&Utc))
        } else if rows.is_empty() {
            // A header.
            continue;
        } else {
            return Err(err(format!(
                "arrival `{a}` is neither seconds nor an RFC 3339 time"
            )));
        };
        let duration = parse_duration(d).ok_or_else(|| {
            err(format!(
                "duration `{d}` is neither seconds nor a duration such as 5m30s"
            ))
        })?;
        rows.push((arrival, duration));
    }
    let earliest = rows
        .iter()
        .filter_map(|(a, _)| match a {
            At::Time(t) => Some(*t),
            At::Offset(_) => None,
        })
        .min();
    let mut jobs: Vec<JobSpec> = rows
        .into_iter()
        .map(|(a, duration)| JobSpec {
            arrival: match (a, earliest) {
                (At::Offset(s), _) => Duration::from_secs_f64(s),
                (At::Time(t), Some(e)) => (t - e).to_std().unwrap_or_default(),
                (At::Time(_), None) => Duration::ZERO,
            },
            duration,
        })
        .collect();
    if jobs.is_empty() {
        return Err(WorkloadError::Empty);
    }
    jobs.sort_by_key(|j| j.arrival);
    Ok(jobs)
}

/// Seconds (`90`, `1.5`) or a Go-style duration (`1h30m`, `45s`, `250ms`).
fn parse_duration(s: &str) -> Option<Duration> {
    if let Ok(secs) = s.parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs));
    }
    let mut total = 0.0;
    let mut rest = s;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let num_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let value: f64 = rest[..num_end].parse().ok()?;
        rest = &rest[num_end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let factor = match &rest[..unit_end] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 0.001,
            _ => return None,
        };
        total += value * factor;
        rest = &rest[unit_end..];
    }
    Some(Duration::from_secs_f64(total))
}

/// How job arrivals vary over a day.
#[derive(Debug, Clone, PartialEq)]
pub enum DailyPattern {
    /// The same rate all day, every day.
    Flat,
    /// Office hours: weekdays 08:00-18:00 busy, nights quiet, weekends at a tenth.
    Office,
    /// A weight per hour of the day (UTC), 24 of them; weekends as weekdays.
    Hourly([f64; 24]),
}

impl DailyPattern {
    /// The relative rate at `at` (mean 1 over a week for `Flat` and `Office`, as given for
    /// `Hourly`).
    pub fn weight(&self, at: DateTime<Utc>) -> f64 {
        match self {
            DailyPattern::Flat => 1.0,
            DailyPattern::Hourly(w) => w[at.hour() as usize],
            DailyPattern::Office => {
                let weekend = at.weekday().number_from_monday() >= 6;
                let busy = (8..18).contains(&at.hour());
                // Weekday busy hours carry most of the work; normalised so a week's mean
                // is 1: 5 days x (10 h x 3.0 + 14 h x 0.3) + 2 days x 24 h x 0.1 = 175.8.
                let w = match (weekend, busy) {
                    (true, _) => 0.1,
                    (false, true) => 3.0,
                    (false, false) => 0.3,
                };
                w * 168.0 / 175.8
            }
        }
    }

    /// The largest weight.
    fn max(&self) -> f64 {
        match self {
            DailyPattern::Flat => 1.0,
            DailyPattern::Office => 3.0 * 168.0 / 175.8,
            DailyPattern::Hourly(w) => w.iter().copied().fold(0.0, f64::max),
        }
    }
}

/// A generated workload: bursts of jobs (a pipeline starts several at once) arriving as a
/// Poisson process whose rate follows a daily pattern, with log-normal job durations.
#[derive(Debug, Clone, PartialEq)]
pub struct Synthetic {
    /// Mean jobs per hour (over the pattern's week).
    pub jobs_per_hour: f64,
    /// Mean jobs per burst (1: no bursts).
    pub burstiness: f64,
    /// The daily pattern.
    pub daily: DailyPattern,
    /// Median job duration.
    pub median_duration: Duration,
    /// Spread of durations: the log-normal's sigma (0: every job takes the median).
    pub duration_sigma: f64,
    /// How long jobs keep arriving.
    pub span: Duration,
    /// The seed.
    pub seed: u64,
}

impl Synthetic {
    /// The jobs, sorted by arrival, for a simulation starting at `start` (the calendar the
    /// daily pattern follows).
    pub fn generate(&self, start: DateTime<Utc>) -> Vec<JobSpec> {
        let mut rng = ChaCha8Rng::seed_from_u64(self.seed);
        let burst = self.burstiness.max(1.0);
        let burst_rate = self.jobs_per_hour / 3600.0 / burst;
        let max_rate = burst_rate * self.daily.max();
        let mut out = Vec::with_capacity(
            (self.jobs_per_hour * self.span.as_secs_f64() / 3600.0) as usize + 16,
        );
        if max_rate.is_nan() || max_rate <= 0.0 {
            return out;
        }
        let span = self.span.as_secs_f64();
        let mut t = 0.0f64;
        loop {
            // Thinning: candidates at the peak rate, kept in proportion to the rate now.
            t += -(1.0 - rng.random::<f64>()).ln() / max_rate;
            if t >= span {
                break;
            }
            let at = start + chrono::Duration::milliseconds((t * 1000.0) as i64);
            if rng.random::<f64>() * max_rate > burst_rate * self.daily.weight(at) {
                continue;
            }
            // Geometric burst size with mean `burst`, jobs spread over 30 s.
            let p = 1.0 / burst;
            let mut n = 1;
            while rng.random::<f64>() > p {
                n += 1;
            }
            for _ in 0..n {
                let offset = if n == 1 {
                    0.0
                } else {
                    rng.random::<f64>() * 30.0
                };
                out.push(JobSpec {
                    arrival: Duration::from_secs_f64(t + offset),
                    duration: self.duration(&mut rng),
                });
            }
        }
        out.sort_by_key(|j| j.arrival);
        out
    }

    fn duration(&self, rng: &mut ChaCha8Rng) -> Duration {
        // Box-Muller: one standard normal from two uniforms.
        let u1: f64 = 1.0 - rng.random::<f64>();
        let u2: f64 = rng.random::<f64>();
        let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
        let secs = self.median_duration.as_secs_f64() * (self.duration_sigma * z).exp();
        Duration::from_secs_f64(secs.clamp(1.0, 24.0 * 3600.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn csv_with_offsets_times_and_durations() {
        let jobs =
            parse_csv("arrival,duration\n# a comment\n10,60\n2.5,1m30s\n\n0,250ms\n").unwrap();
        assert_eq!(
            jobs.iter()
                .map(|j| j.arrival.as_secs_f64())
                .collect::<Vec<_>>(),
            [0.0, 2.5, 10.0]
        );
        assert_eq!(jobs[1].duration, Duration::from_secs(90));
        assert_eq!(jobs[0].duration, Duration::from_millis(250));
        let jobs = parse_csv("2026-11-23T10:00:05Z,30\n2026-11-23T10:00:00Z,10\n").unwrap();
        assert_eq!(jobs[1].arrival, Duration::from_secs(5));
        assert_eq!(
            parse_csv("0,60\nsoon,60\n").unwrap_err(),
            WorkloadError::Line {
                line: 2,
                message: "arrival `soon` is neither seconds nor an RFC 3339 time".into()
            }
        );
        assert!(matches!(
            parse_csv("0,forever"),
            Err(WorkloadError::Line { line: 1, .. })
        ));
        assert_eq!(parse_csv("a,b\n"), Err(WorkloadError::Empty));
    }

    #[test]
    fn synthetic_rate_bursts_and_pattern() {
        let monday = Utc.with_ymd_and_hms(2026, 11, 23, 0, 0, 0).unwrap();
        let s = Synthetic {
            jobs_per_hour: 600.0,
            burstiness: 4.0,
            daily: DailyPattern::Office,
            median_duration: Duration::from_secs(300),
            duration_sigma: 0.5,
            span: Duration::from_secs(7 * 24 * 3600),
            seed: 1,
        };
        let jobs = s.generate(monday);
        let expected = 600.0 * 168.0;
        let n = jobs.len() as f64;
        assert!(
            (n - expected).abs() / expected < 0.05,
            "{n} jobs, expected ~{expected}"
        );
        assert!(jobs.windows(2).all(|w| w[0].arrival <= w[1].arrival));
        // Office hours: a weekday afternoon sees far more than a Sunday afternoon.
        let in_hour = |day: u64, hour: u64| {
            let from = Duration::from_secs((day * 24 + hour) * 3600);
            let to = from + Duration::from_secs(3600);
            jobs.iter()
                .filter(|j| j.arrival >= from && j.arrival < to)
                .count()
        };
        assert!(in_hour(2, 14) > 10 * in_hour(6, 14).max(1));
        // Same seed, same jobs.
        assert_eq!(s.generate(monday), jobs);
        let median = {
            let mut d: Vec<f64> = jobs.iter().map(|j| j.duration.as_secs_f64()).collect();
            d.sort_by(f64::total_cmp);
            d[d.len() / 2]
        };
        assert!((median - 300.0).abs() < 15.0, "median {median}");
    }
}
