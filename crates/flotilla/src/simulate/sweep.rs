//! `--sweep KEY=V1,V2,...`: which setting a sweep varies, its values, and how each is put in
//! a copy of the runner's configuration (pure; the runs are `simulate`'s).
//!
//! Any setting that shapes cost or waits can be swept: a policy's (set in every policy of the
//! runner), a limit of `[runners.autoscaler]`, or the job limits of the runner and of the
//! process.

use crate::config::{AutoscalerConfig, Policy, parse_go_duration};
use anyhow::{Result, anyhow, bail};
use flotilla_sim::RunnerModel;
use std::time::Duration;

/// A setting a sweep varies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SweepKey {
    /// `[[runners.autoscaler.policy]] idle_count`.
    IdleCount,
    /// `[[runners.autoscaler.policy]] idle_time` (a Go duration).
    IdleTime,
    /// `[[runners.autoscaler.policy]] scale_factor`.
    ScaleFactor,
    /// `[[runners.autoscaler.policy]] scale_factor_limit`.
    ScaleFactorLimit,
    /// `[[runners.autoscaler.policy]] preemptive_mode` (`true` or `false`).
    PreemptiveMode,
    /// `[runners.autoscaler] max_instances` (0: unlimited).
    MaxInstances,
    /// `[runners.autoscaler] capacity_per_instance`.
    CapacityPerInstance,
    /// `[runners.autoscaler] max_use_count` (0: unlimited).
    MaxUseCount,
    /// `[runners.autoscaler] instance_acquire_timeout` (a Go duration).
    InstanceAcquireTimeout,
    /// `[[runners]] limit` (0: none).
    Limit,
    /// `[[runners]] request_concurrency`.
    RequestConcurrency,
    /// The global `concurrent`.
    Concurrent,
}

/// Every key, by its name in `config.toml`.
const KEYS: [(SweepKey, &str); 12] = [
    (SweepKey::IdleCount, "idle_count"),
    (SweepKey::IdleTime, "idle_time"),
    (SweepKey::ScaleFactor, "scale_factor"),
    (SweepKey::ScaleFactorLimit, "scale_factor_limit"),
    (SweepKey::PreemptiveMode, "preemptive_mode"),
    (SweepKey::MaxInstances, "max_instances"),
    (SweepKey::CapacityPerInstance, "capacity_per_instance"),
    (SweepKey::MaxUseCount, "max_use_count"),
    (SweepKey::InstanceAcquireTimeout, "instance_acquire_timeout"),
    (SweepKey::Limit, "limit"),
    (SweepKey::RequestConcurrency, "request_concurrency"),
    (SweepKey::Concurrent, "concurrent"),
];

impl SweepKey {
    /// Its name in `config.toml`.
    pub(crate) fn name(self) -> &'static str {
        KEYS.iter()
            .find(|(k, _)| *k == self)
            .map_or("?", |(_, n)| n)
    }

    fn named(name: &str) -> Option<SweepKey> {
        KEYS.iter().find(|(_, n)| *n == name).map(|(k, _)| *k)
    }

    /// The least value that means something (a slot per instance, a request at a time, a
    /// job at a time: `concurrent = 0` runs no job, as `config check` says).
    fn least(self) -> u32 {
        match self {
            SweepKey::CapacityPerInstance | SweepKey::RequestConcurrency | SweepKey::Concurrent => {
                1
            }
            _ => 0,
        }
    }
}

/// One value of a sweep: as written, and as read.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SweepPoint {
    /// As given on the command line (`5m`, `0.5`, `4`).
    pub(crate) text: String,
    value: Value,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Value {
    Count(u32),
    Factor(f64),
    Duration(Duration),
    Flag(bool),
}

/// Parses `--sweep KEY=V1,V2,...`.
pub(crate) fn parse(s: &str) -> Result<(SweepKey, Vec<SweepPoint>)> {
    let (key, values) = s
        .split_once('=')
        .ok_or_else(|| anyhow!("--sweep `{s}` is not KEY=V1,V2,..."))?;
    let key = SweepKey::named(key.trim()).ok_or_else(|| {
        anyhow!(
            "--sweep varies one of {}, not `{}`",
            KEYS.map(|(_, n)| n).join(", "),
            key.trim()
        )
    })?;
    let mut points = Vec::new();
    for v in values.split(',') {
        let text = v.trim();
        let bad = || anyhow!("--sweep value `{text}` is not a valid {}", key.name());
        let value = match key {
            SweepKey::IdleTime | SweepKey::InstanceAcquireTimeout => {
                let d = parse_go_duration(text).map_err(|_| bad())?;
                // An acquire timeout of nothing fails every job that waits at all.
                if key == SweepKey::InstanceAcquireTimeout && d.is_zero() {
                    return Err(bad());
                }
                Value::Duration(d)
            }
            SweepKey::PreemptiveMode => Value::Flag(text.parse().map_err(|_| bad())?),
            SweepKey::ScaleFactor => {
                let x: f64 = text.parse().map_err(|_| bad())?;
                if !(x.is_finite() && x >= 0.0) {
                    return Err(bad());
                }
                Value::Factor(x)
            }
            _ => {
                let n: u32 = text.parse().map_err(|_| bad())?;
                if n < key.least() {
                    return Err(bad());
                }
                Value::Count(n)
            }
        };
        points.push(SweepPoint {
            text: text.to_string(),
            value,
        });
    }
    if points.is_empty() {
        bail!("--sweep needs at least one value");
    }
    Ok((key, points))
}

/// Puts `point` of `key` in `autoscaler` and `runner` (a policy key in every policy, or in
/// one always-active policy when there is none).
pub(crate) fn apply(
    key: SweepKey,
    point: &SweepPoint,
    autoscaler: &mut AutoscalerConfig,
    runner: &mut RunnerModel,
) {
    let count = match point.value {
        Value::Count(n) => n,
        _ => 0,
    };
    let policies = |a: &mut AutoscalerConfig, set: &dyn Fn(&mut Policy)| {
        if a.policy.is_empty() {
            a.policy.push(Policy::default());
        }
        a.policy.iter_mut().for_each(set);
    };
    match (key, point.value) {
        (SweepKey::IdleCount, _) => policies(autoscaler, &|p| p.idle_count = count),
        (SweepKey::IdleTime, Value::Duration(d)) => policies(autoscaler, &|p| p.idle_time = d),
        (SweepKey::ScaleFactor, Value::Factor(x)) => policies(autoscaler, &|p| p.scale_factor = x),
        (SweepKey::ScaleFactorLimit, _) => {
            policies(autoscaler, &|p| p.scale_factor_limit = count);
        }
        (SweepKey::PreemptiveMode, Value::Flag(on)) => {
            policies(autoscaler, &|p| p.preemptive_mode = Some(on));
        }
        (SweepKey::InstanceAcquireTimeout, Value::Duration(d)) => {
            autoscaler.instance_acquire_timeout = d;
        }
        (SweepKey::MaxInstances, _) => autoscaler.max_instances = count,
        (SweepKey::CapacityPerInstance, _) => autoscaler.capacity_per_instance = count,
        (SweepKey::MaxUseCount, _) => autoscaler.max_use_count = count,
        (SweepKey::Limit, _) => runner.limit = count as usize,
        (SweepKey::RequestConcurrency, _) => runner.request_concurrency = count as usize,
        (SweepKey::Concurrent, _) => runner.concurrent = count as usize,
        // `parse` reads each key's values in its own kind.
        (
            SweepKey::IdleTime
            | SweepKey::ScaleFactor
            | SweepKey::PreemptiveMode
            | SweepKey::InstanceAcquireTimeout,
            _,
        ) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(points: &[SweepPoint]) -> Vec<&str> {
        points.iter().map(|p| p.text.as_str()).collect()
    }

    #[test]
    fn every_key_parses_in_its_own_kind() {
        let (k, p) = parse("idle_count=0,2,4").unwrap();
        assert_eq!((k, texts(&p)), (SweepKey::IdleCount, vec!["0", "2", "4"]));
        let (k, p) = parse("idle_time=5m, 30m,1h").unwrap();
        assert_eq!(k, SweepKey::IdleTime);
        assert_eq!(p[1].value, Value::Duration(Duration::from_secs(1800)));
        assert_eq!(
            parse("scale_factor=0.5,1").unwrap().1[0].value,
            Value::Factor(0.5)
        );
        for (key, name) in KEYS {
            let one = match key {
                SweepKey::IdleTime | SweepKey::InstanceAcquireTimeout => "1s",
                SweepKey::PreemptiveMode => "true",
                _ => "1",
            };
            assert!(parse(&format!("{name}={one}")).is_ok(), "{name}");
        }
        assert!(parse("idle_count=1.5").is_err());
        assert!(parse("idle_time=10").is_err(), "a Go duration has a unit");
        assert!(parse("scale_factor=-1").is_err());
        assert!(parse("capacity_per_instance=0").is_err());
        assert!(parse("concurrent=0").is_err(), "run would take no job");
        assert!(parse("max_instances=-1").is_err());
        assert!(parse("idle_count").is_err());
        assert!(parse("preemptive_mode=yes").is_err());
        assert!(parse("instance_acquire_timeout=0s").is_err());
        let unknown = parse("idle_tim=1").unwrap_err().to_string();
        assert!(
            unknown.contains("idle_time") && unknown.contains("max_instances"),
            "{unknown}"
        );
    }

    #[test]
    fn each_key_lands_where_the_runner_reads_it() {
        let model = RunnerModel {
            request_concurrency: 1,
            check_interval: Duration::from_secs(3),
            limit: 0,
            concurrent: 10,
        };
        let mut seen = Vec::new();
        for (key, name) in KEYS {
            let mut a = AutoscalerConfig {
                policy: vec![Policy::default(), Policy::default()],
                ..AutoscalerConfig::default()
            };
            let mut r = model.clone();
            let value = match key {
                SweepKey::IdleTime | SweepKey::InstanceAcquireTimeout => "7s",
                SweepKey::PreemptiveMode => "true",
                _ => "7",
            };
            let (_, points) = parse(&format!("{name}={value}")).unwrap();
            apply(key, &points[0], &mut a, &mut r);
            let got = match key {
                SweepKey::IdleCount => a.policy.iter().all(|p| p.idle_count == 7),
                SweepKey::IdleTime => a
                    .policy
                    .iter()
                    .all(|p| p.idle_time == Duration::from_secs(7)),
                SweepKey::ScaleFactor => a.policy.iter().all(|p| p.scale_factor == 7.0),
                SweepKey::ScaleFactorLimit => a.policy.iter().all(|p| p.scale_factor_limit == 7),
                SweepKey::PreemptiveMode => {
                    a.policy.iter().all(|p| p.preemptive_mode == Some(true))
                }
                SweepKey::InstanceAcquireTimeout => {
                    a.instance_acquire_timeout == Duration::from_secs(7)
                }
                SweepKey::MaxInstances => a.max_instances == 7,
                SweepKey::CapacityPerInstance => a.capacity_per_instance == 7,
                SweepKey::MaxUseCount => a.max_use_count == 7,
                SweepKey::Limit => r.limit == 7,
                SweepKey::RequestConcurrency => r.request_concurrency == 7,
                SweepKey::Concurrent => r.concurrent == 7,
            };
            assert!(got, "{name}");
            seen.push(name);
        }
        assert_eq!(seen.len(), KEYS.len());
        // No policy: one always-active policy carries the value.
        let mut a = AutoscalerConfig::default();
        a.policy.clear();
        let mut r = model;
        let (_, p) = parse("idle_count=3").unwrap();
        apply(SweepKey::IdleCount, &p[0], &mut a, &mut r);
        assert_eq!(a.policy.len(), 1);
        assert_eq!(a.policy[0].idle_count, 3);
    }
}
