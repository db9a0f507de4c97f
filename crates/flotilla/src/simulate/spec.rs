//! A runner's configuration as a simulation: the scaler's settings and policies as
//! `flotilla run` builds them, and the job source's.

use super::SweepKey;
use crate::config::{AutoscalerConfig, Config};
use anyhow::{Result, anyhow, bail};
use chrono::{DateTime, Utc};
use flotilla_scaler::{Preexisting, ScaleThrottle, ScalerConfig};
use flotilla_sim::{ProviderProfile, RunnerModel, Spec};
use std::time::Duration;

/// The simulated runner, for the printout.
pub(crate) struct Chosen {
    pub(crate) name: String,
    pub(crate) summary: String,
    /// Its `[runners.autoscaler]`, for sweeps.
    pub(crate) autoscaler: AutoscalerConfig,
}

/// The simulation of runner `name` (default: the first with `[runners.autoscaler]`).
pub(crate) fn from_config(
    config: &Config,
    name: Option<&str>,
    provider: ProviderProfile,
    start: DateTime<Utc>,
    seed: u64,
) -> Result<(Chosen, Spec)> {
    let runner = match name {
        Some(n) => config
            .runners
            .iter()
            .find(|r| r.name == n)
            .ok_or_else(|| anyhow!("no runner named {n:?}"))?,
        None => config
            .runners
            .iter()
            .find(|r| r.autoscaler.is_some())
            .ok_or_else(|| anyhow!("no runner has a [runners.autoscaler] table to simulate"))?,
    };
    let Some(a) = runner.autoscaler.as_ref() else {
        bail!(
            "runner {:?} has no [runners.autoscaler]: it runs on this host and has nothing to scale",
            runner.name
        );
    };
    let schedule = crate::fleet::schedule(a)?;
    let summary = format!(
        "{} job slot(s) per instance, max_instances {}, max_use_count {}, {} polic{}; provider `{}` simulated",
        a.capacity_per_instance,
        if a.max_instances == 0 {
            "unlimited".to_string()
        } else {
            a.max_instances.to_string()
        },
        a.max_use_count,
        a.policy.len(),
        if a.policy.len() == 1 { "y" } else { "ies" },
        a.plugin
    );
    let spec = Spec {
        scaler: scaler_config(a),
        schedule,
        provider,
        runner: RunnerModel {
            request_concurrency: runner.request_concurrency.max(1) as usize,
            check_interval: config.check_interval,
            limit: runner.limit as usize,
            concurrent: config.concurrent as usize,
        },
        start,
        sample_every: Duration::from_secs(10),
        seed,
    };
    Ok((
        Chosen {
            name: runner.name.clone(),
            summary,
            autoscaler: a.clone(),
        },
        spec,
    ))
}

/// The scaler's settings from `[runners.autoscaler]`, as `flotilla run` makes them for a
/// provider without a size limit whose instances are all the scaler's (the fake provider);
/// the same rules as `fleet::scaling`, which keys them to a real provider's capabilities.
fn scaler_config(a: &AutoscalerConfig) -> ScalerConfig {
    ScalerConfig {
        capacity_per_instance: (a.capacity_per_instance as usize).max(1),
        max_instances: a.max_instances as usize,
        max_use_count: a.max_use_count,
        instance_acquire_timeout: a.instance_acquire_timeout,
        update_interval: a.update_interval,
        update_interval_when_expecting: a.update_interval_when_expecting,
        deletion_retry_interval: a.deletion_retry_interval,
        shutdown_deletion_interval: a.shutdown_deletion_interval,
        shutdown_deletion_retries: a.shutdown_deletion_retries,
        failure_threshold: a.failure_threshold.max(1),
        scale_throttle: match a.scale_throttle.rate_per_second() {
            None => ScaleThrottle {
                limit: -1.0,
                burst: 1,
            },
            Some(rate) => ScaleThrottle {
                limit: f64::from(rate),
                burst: a.scale_throttle.burst_size(a.max_instances).unwrap_or(rate) as usize,
            },
        },
        delete_instances_on_shutdown: a.delete_instances_on_shutdown,
        keep_instance_with_acquisitions: a.state_storage.keep_instance_with_acquisitions,
        preexisting: Preexisting::Adopt,
        ..ScalerConfig::default()
    }
}

/// `base` with `key` set to `value` in every policy of `chosen` (or in one always-active
/// policy when it has none).
pub(crate) fn with_sweep(base: &Spec, chosen: &Chosen, key: SweepKey, value: f64) -> Result<Spec> {
    let mut a = chosen.autoscaler.clone();
    if a.policy.is_empty() {
        a.policy.push(crate::config::Policy::default());
    }
    for p in &mut a.policy {
        match key {
            SweepKey::IdleCount => p.idle_count = value as u32,
            SweepKey::ScaleFactor => p.scale_factor = value,
        }
    }
    let mut spec = base.clone();
    spec.schedule = crate::fleet::schedule(&a)?;
    Ok(spec)
}
