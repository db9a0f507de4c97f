//! Whether a fleet can keep up with a workload at all (pure): the numbers `simulate` prints
//! beside the wait percentiles and the jobs GitLab failed in its queue, so that an overloaded
//! fleet is said to be one.

use flotilla_sim::{JobSpec, Spec};

/// The most jobs `spec` runs at once, and the setting that says so: the fleet's slots
/// (`max_instances x capacity_per_instance`), the runner's `limit` or the process's
/// `concurrent`, whichever is least; `None` when nothing bounds it.
pub(super) fn most_at_once(spec: &Spec) -> Option<(u32, &'static str)> {
    let to_u32 = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
    [
        spec.scaler
            .max_slots()
            .map(|n| (to_u32(n), "max_instances x capacity_per_instance")),
        (spec.runner.limit > 0).then(|| (to_u32(spec.runner.limit), "limit")),
        (spec.runner.concurrent > 0).then(|| (to_u32(spec.runner.concurrent), "concurrent")),
    ]
    .into_iter()
    .flatten()
    .min_by_key(|(n, _)| *n)
}

/// The workload's demand against the most the limits allow.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Throughput {
    /// Jobs arriving per hour, over the span from the first arrival to the last.
    pub(super) arriving_per_hour: f64,
    /// Jobs the fleet can finish per hour with every slot busy: `max_instances ×
    /// capacity_per_instance` slots over the mean job duration.
    pub(super) most_per_hour: f64,
}

impl Throughput {
    /// The demand of `jobs` against `slots` (0 when there are fewer than two jobs or no
    /// duration to speak of).
    pub(super) fn of(jobs: &[JobSpec], slots: u32) -> Throughput {
        let n = jobs.len() as f64;
        let first = jobs.iter().map(|j| j.arrival).min().unwrap_or_default();
        let last = jobs.iter().map(|j| j.arrival).max().unwrap_or_default();
        let span_hours = last.saturating_sub(first).as_secs_f64() / 3600.0;
        let mean_duration = if jobs.is_empty() {
            0.0
        } else {
            jobs.iter().map(|j| j.duration.as_secs_f64()).sum::<f64>() / n
        };
        Throughput {
            arriving_per_hour: if span_hours > 0.0 {
                n / span_hours
            } else {
                0.0
            },
            most_per_hour: if mean_duration > 0.0 {
                f64::from(slots) * 3600.0 / mean_duration
            } else {
                f64::INFINITY
            },
        }
    }

    /// Whether the jobs come faster than the fleet could ever run them.
    pub(super) fn overloaded(&self) -> bool {
        self.arriving_per_hour > self.most_per_hour
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn jobs(n: u64, every: Duration, duration: Duration) -> Vec<JobSpec> {
        (0..n)
            .map(|i| JobSpec {
                arrival: every * u32::try_from(i).unwrap(),
                duration,
            })
            .collect()
    }

    #[test]
    fn arrival_rate_against_the_most_the_slots_run() {
        // 200 jobs an hour of 10 minutes each need 34 slots; 4 × 2 slots run 48 an hour.
        let t = Throughput::of(
            &jobs(2001, Duration::from_secs(18), Duration::from_secs(600)),
            8,
        );
        assert!((t.arriving_per_hour - 200.1).abs() < 0.2, "{t:?}");
        assert!((t.most_per_hour - 48.0).abs() < 1e-9, "{t:?}");
        assert!(t.overloaded());
        let t = Throughput::of(
            &jobs(2001, Duration::from_secs(18), Duration::from_secs(600)),
            40,
        );
        assert!(!t.overloaded(), "{t:?}");
        assert!(!Throughput::of(&[], 1).overloaded());
    }
}
