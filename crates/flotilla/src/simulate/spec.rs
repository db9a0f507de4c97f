//! A runner's configuration as a simulation: the scaler's settings and policies as
//! `flotilla run` builds them, and the job source's.

use super::sweep::{self, SweepKey, SweepPoint};
use crate::config::{AutoscalerConfig, Config};
use anyhow::{Result, anyhow, bail};
use chrono::{DateTime, Utc};
use flotilla_fleet::{Capabilities, ProviderInfo};
use flotilla_scaler::ScalerConfig;
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
        pending_timeout: flotilla_sim::GITLAB_PENDING_TIMEOUT,
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

/// The scaler's settings from `[runners.autoscaler]`, as `flotilla run` makes them
/// (`fleet::scaler_config`, one mapping for both) for a provider without a size limit whose
/// instances are all the scaler's (the fake provider).
fn scaler_config(a: &AutoscalerConfig) -> ScalerConfig {
    let fake = ProviderInfo {
        max_size: usize::MAX,
        capabilities: Capabilities {
            adopts_preexisting: true,
            ..Capabilities::remote()
        },
        ..ProviderInfo::default()
    };
    crate::fleet::scaler_config(a, &fake)
}

/// `base` with `key` set to `point` in `chosen`'s configuration: its scaler settings,
/// policies and job limits built again as `flotilla run` builds them.
pub(crate) fn with_sweep(
    base: &Spec,
    chosen: &Chosen,
    key: SweepKey,
    point: &SweepPoint,
) -> Result<Spec> {
    let mut a = chosen.autoscaler.clone();
    let mut spec = base.clone();
    sweep::apply(key, point, &mut a, &mut spec.runner);
    spec.scaler = scaler_config(&a);
    spec.schedule = crate::fleet::schedule(&a)?;
    Ok(spec)
}
