//! Autoscaling policies (`[[runners.autoscaler.policy]]`) and the schedule that picks one.

use chrono::{DateTime, Timelike, Utc};
use chrono_tz::Tz;
use croner::Cron;
use std::str::FromStr;
use std::time::Duration;

/// One autoscaling policy: how much idle capacity to keep and for how long.
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    /// Idle job *slots* (not instances) to keep ready.
    pub idle_count: usize,
    /// How long an instance may stay unused before it is removed (unless needed to keep
    /// `idle_count`).
    pub idle_time: Duration,
    /// Extra idle capacity as a factor of the slots in use (0 disables it).
    pub scale_factor: f64,
    /// Upper bound of the idle capacity `scale_factor` asks for (0 means no bound).
    pub scale_factor_limit: usize,
    /// Only hand out slots that are idle and ready now (reserve fails fast otherwise);
    /// `None` means GitLab's default, `idle_count > 0`.
    pub preemptive_mode: Option<bool>,
}

impl Default for Policy {
    /// The policy in force when no period of any configured policy matches: no idle
    /// capacity, unused instances removed after five minutes.
    fn default() -> Self {
        Policy {
            idle_count: 0,
            idle_time: Duration::from_secs(300),
            scale_factor: 0.0,
            scale_factor_limit: 0,
            preemptive_mode: None,
        }
    }
}

impl Policy {
    /// Whether preemptive mode is on (explicitly, or by default when `idle_count > 0`).
    pub fn preemptive(&self) -> bool {
        self.preemptive_mode.unwrap_or(self.idle_count > 0)
    }

    /// The idle slots to keep given `in_use` busy slots: `idle_count`, raised by
    /// `scale_factor × in_use`, whose contribution is capped by `scale_factor_limit`.
    pub fn idle_target(&self, in_use: usize) -> usize {
        if self.scale_factor <= 0.0 {
            return self.idle_count;
        }
        let mut by_factor = (self.scale_factor * in_use as f64).ceil() as usize;
        if self.scale_factor_limit > 0 {
            by_factor = by_factor.min(self.scale_factor_limit);
        }
        self.idle_count.max(by_factor)
    }
}

/// Why a period or time zone was rejected.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum PolicyError {
    /// A period is not a 5-field cron expression.
    #[error("invalid period `{period}`: {reason}")]
    Period {
        /// The period as written.
        period: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The time zone is not in the tz database.
    #[error("unknown time zone `{0}`")]
    TimeZone(String),
}

/// A policy with the periods in which it applies.
#[derive(Debug, Clone)]
pub struct ScheduledPolicy {
    /// The policy.
    pub policy: Policy,
    periods: Vec<(String, Cron)>,
    /// `None`: the system's local time.
    timezone: Option<Tz>,
    /// A period matches every minute: no need to look at the clock.
    always: bool,
}

impl ScheduledPolicy {
    /// A policy active during `periods` (5-field cron expressions read as minute ranges, such
    /// as `* 8-15 * * mon-fri`) in `timezone`. Unset, empty or `Local` is the system's local
    /// time, as in GitLab's configuration ("timezone: default: system local"); any other
    /// name must be in the tz database.
    pub fn new(
        policy: Policy,
        periods: &[String],
        timezone: Option<&str>,
    ) -> Result<Self, PolicyError> {
        let timezone = match timezone {
            None | Some("" | "Local") => None,
            Some(name) => {
                Some(Tz::from_str(name).map_err(|_| PolicyError::TimeZone(name.to_string()))?)
            }
        };
        let periods = if periods.is_empty() {
            vec!["* * * * *".to_string()]
        } else {
            periods.to_vec()
        };
        let mut parsed = Vec::with_capacity(periods.len());
        for p in periods {
            if p.split_whitespace().count() != 5 {
                return Err(PolicyError::Period {
                    period: p.clone(),
                    reason: "expected 5 fields: minute hour day-of-month month day-of-week".into(),
                });
            }
            let cron = Cron::from_str(&p).map_err(|e| PolicyError::Period {
                period: p.clone(),
                reason: e.to_string(),
            })?;
            parsed.push((p, cron));
        }
        let always = parsed
            .iter()
            .any(|(p, _)| p.split_whitespace().all(|f| f == "*"));
        Ok(ScheduledPolicy {
            policy,
            periods: parsed,
            timezone,
            always,
        })
    }

    /// A policy that is always active.
    pub fn always(policy: Policy) -> Self {
        // "* * * * *" always parses.
        ScheduledPolicy {
            policy,
            periods: Cron::from_str("* * * * *")
                .map(|c| vec![("* * * * *".to_string(), c)])
                .unwrap_or_default(),
            timezone: None,
            always: true,
        }
    }

    /// Whether one of the periods contains the minute of `at`.
    pub fn is_active(&self, at: DateTime<Utc>) -> bool {
        if self.always || self.periods.is_empty() {
            return true;
        }
        let minute = at
            .with_second(0)
            .and_then(|t| t.with_nanosecond(0))
            .unwrap_or(at);
        self.periods.iter().any(|(_, cron)| match self.timezone {
            Some(tz) => cron
                .is_time_matching(&minute.with_timezone(&tz))
                .unwrap_or(false),
            None => cron
                .is_time_matching(&minute.with_timezone(&chrono::Local))
                .unwrap_or(false),
        })
    }

    /// The periods as written.
    pub fn periods(&self) -> impl Iterator<Item = &str> {
        self.periods.iter().map(|(p, _)| p.as_str())
    }
}

/// The configured policies; the last one whose period matches wins.
#[derive(Debug, Clone, Default)]
pub struct Schedule {
    policies: Vec<ScheduledPolicy>,
}

impl Schedule {
    /// A schedule of `policies`, in configuration order.
    pub fn new(policies: Vec<ScheduledPolicy>) -> Self {
        Schedule { policies }
    }

    /// A schedule with one always-active policy.
    pub fn single(policy: Policy) -> Self {
        Schedule {
            policies: vec![ScheduledPolicy::always(policy)],
        }
    }

    /// The policy in force at `at` and its index in the configuration (`None`: no period
    /// matched and [`Policy::default`] applies).
    pub fn active(&self, at: DateTime<Utc>) -> (Option<usize>, Policy) {
        self.policies
            .iter()
            .enumerate()
            .rev()
            .find(|(_, p)| p.is_active(at))
            .map(|(i, p)| (Some(i), p.policy.clone()))
            .unwrap_or_else(|| (None, Policy::default()))
    }

    /// Number of configured policies.
    pub fn len(&self) -> usize {
        self.policies.len()
    }

    /// Whether no policy is configured.
    pub fn is_empty(&self) -> bool {
        self.policies.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn p(idle: usize) -> Policy {
        Policy {
            idle_count: idle,
            ..Policy::default()
        }
    }

    #[test]
    fn idle_target_with_scale_factor() {
        let mut pol = p(2);
        assert_eq!(pol.idle_target(100), 2);
        pol.scale_factor = 0.5;
        assert_eq!(pol.idle_target(1), 2, "idle_count is the minimum");
        assert_eq!(pol.idle_target(10), 5);
        pol.scale_factor_limit = 4;
        assert_eq!(pol.idle_target(10), 4, "limited");
        pol.idle_count = 6;
        assert_eq!(pol.idle_target(10), 6, "idle_count wins over the limit");
    }

    #[test]
    fn preemptive_defaults_to_idle_count() {
        assert!(!p(0).preemptive());
        assert!(p(1).preemptive());
        let forced = Policy {
            preemptive_mode: Some(false),
            ..p(3)
        };
        assert!(!forced.preemptive());
    }

    #[test]
    fn last_matching_policy_wins() {
        let weekday =
            ScheduledPolicy::new(p(6), &["* 8-17 * * mon-fri".into()], Some("Europe/Berlin"))
                .unwrap();
        // Explicit zones: an unset one is the host's local time, which tests must not read.
        let weekend = ScheduledPolicy::new(p(0), &["* * * * sat,sun".into()], Some("UTC")).unwrap();
        let base = ScheduledPolicy::new(p(1), &[], Some("UTC")).unwrap();
        let s = Schedule::new(vec![base, weekday, weekend]);
        // Monday 2026-11-23 09:30 Berlin = 08:30 UTC.
        let mon = Utc.with_ymd_and_hms(2026, 11, 23, 8, 30, 0).unwrap();
        assert_eq!(s.active(mon), (Some(1), p(6)));
        // Monday 07:30 Berlin: outside the weekday window, base applies.
        let early = Utc.with_ymd_and_hms(2026, 11, 23, 6, 30, 0).unwrap();
        assert_eq!(s.active(early), (Some(0), p(1)));
        // Saturday.
        let sat = Utc.with_ymd_and_hms(2026, 11, 21, 12, 0, 59).unwrap();
        assert_eq!(s.active(sat), (Some(2), p(0)));
    }

    #[test]
    fn no_match_uses_default() {
        let only_jan = ScheduledPolicy::new(p(5), &["* * * jan *".into()], Some("UTC")).unwrap();
        let s = Schedule::new(vec![only_jan]);
        let nov = Utc.with_ymd_and_hms(2026, 11, 23, 8, 30, 0).unwrap();
        assert_eq!(s.active(nov), (None, Policy::default()));
    }

    #[test]
    fn bad_periods_and_zones() {
        assert!(matches!(
            ScheduledPolicy::new(p(1), &["* * *".into()], None),
            Err(PolicyError::Period { .. })
        ));
        assert!(matches!(
            ScheduledPolicy::new(p(1), &["61 * * * *".into()], None),
            Err(PolicyError::Period { .. })
        ));
        assert_eq!(
            ScheduledPolicy::new(p(1), &[], Some("Mars/Olympus")).unwrap_err(),
            PolicyError::TimeZone("Mars/Olympus".into())
        );
    }
}
