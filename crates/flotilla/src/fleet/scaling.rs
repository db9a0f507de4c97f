//! A runner's autoscaler table as the scaler's configuration and schedule.

use crate::config::AutoscalerConfig;
use anyhow::{Context, Result};
use flotilla_fleet::ProviderInfo;
use flotilla_scaler::{
    Policy, Preexisting, ScaleThrottle, ScalerConfig, Schedule, ScheduledPolicy,
};

/// The scaler's configuration for `a`, within what the provider said it can do: never more
/// instances than its `max_size`, and instances it holds without our record adopted only
/// where it says they may be.
pub fn scaler_config(a: &AutoscalerConfig, info: &ProviderInfo) -> ScalerConfig {
    let configured = a.max_instances as usize;
    let max_instances = match configured {
        // Unlimited in the config: the provider's size, if it has one.
        0 if info.max_size != usize::MAX => info.max_size,
        n => n.min(info.max_size),
    };
    ScalerConfig {
        capacity_per_instance: info
            .capabilities
            .slots_per_instance(a.capacity_per_instance as usize),
        max_instances,
        max_use_count: a.max_use_count,
        instance_acquire_timeout: a.instance_acquire_timeout,
        ready_up_timeout: a.instance_ready_timeout,
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
        preexisting: if info.capabilities.adopts_preexisting {
            Preexisting::Adopt
        } else {
            Preexisting::Ignore
        },
        ..ScalerConfig::default()
    }
}

/// The runner's policies as a schedule.
pub fn schedule(a: &AutoscalerConfig) -> Result<Schedule> {
    let mut policies = Vec::with_capacity(a.policy.len());
    for (i, p) in a.policy.iter().enumerate() {
        let policy = Policy {
            idle_count: p.idle_count as usize,
            idle_time: p.idle_time,
            scale_factor: p.scale_factor,
            scale_factor_limit: p.scale_factor_limit as usize,
            preemptive_mode: p.preemptive_mode,
        };
        policies.push(
            ScheduledPolicy::new(policy, &p.periods, p.timezone.as_deref())
                .with_context(|| format!("[[runners.autoscaler.policy]] #{}", i + 1))?,
        );
    }
    Ok(Schedule::new(policies))
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_fleet::Capabilities;

    fn info(max_size: usize, capabilities: Capabilities) -> ProviderInfo {
        ProviderInfo {
            id: "p".into(),
            max_size,
            capabilities,
            ..ProviderInfo::default()
        }
    }

    #[test]
    fn the_provider_bounds_max_instances() {
        let mut a = AutoscalerConfig {
            max_instances: 10,
            ..AutoscalerConfig::default()
        };
        assert_eq!(
            scaler_config(&a, &info(1, Capabilities::this_host())).max_instances,
            1
        );
        assert_eq!(
            scaler_config(&a, &info(usize::MAX, Capabilities::remote())).max_instances,
            10
        );
        a.max_instances = 0;
        assert_eq!(
            scaler_config(&a, &info(3, Capabilities::remote())).max_instances,
            3
        );
        assert_eq!(
            scaler_config(&a, &info(usize::MAX, Capabilities::remote())).max_instances,
            0
        );
    }

    #[test]
    fn the_provider_caps_the_slots_per_instance() {
        let a = AutoscalerConfig {
            capacity_per_instance: 4,
            ..AutoscalerConfig::default()
        };
        let mut capabilities = Capabilities::remote();
        assert_eq!(
            scaler_config(&a, &info(5, capabilities.clone())).capacity_per_instance,
            4
        );
        capabilities.max_slots_per_instance = Some(2);
        assert_eq!(
            scaler_config(&a, &info(5, capabilities)).capacity_per_instance,
            2
        );
    }

    #[test]
    fn only_a_provider_that_says_so_has_its_instances_adopted() {
        let a = AutoscalerConfig::default();
        assert_eq!(
            scaler_config(&a, &info(1, Capabilities::this_host())).preexisting,
            Preexisting::Adopt
        );
        assert_eq!(
            scaler_config(&a, &info(5, Capabilities::remote())).preexisting,
            Preexisting::Ignore
        );
    }

    /// The listing intervals and the shutdown deletion checks reach the scaler as written.
    #[test]
    fn intervals_and_shutdown_checks_reach_the_scaler() {
        let a: AutoscalerConfig = toml::from_str(
            "plugin = \"docker\"\nupdate_interval = \"30s\"\n\
             update_interval_when_expecting = \"1s\"\nshutdown_deletion_interval = \"5s\"\n\
             shutdown_deletion_retries = 7\n",
        )
        .expect("an autoscaler table");
        let c = scaler_config(&a, &info(5, Capabilities::remote()));
        let secs = std::time::Duration::from_secs;
        assert_eq!(c.update_interval, secs(30));
        assert_eq!(c.update_interval_when_expecting, secs(1));
        assert_eq!(c.shutdown_deletion_interval, secs(5));
        assert_eq!(c.shutdown_deletion_retries, 7);
        let defaults = scaler_config(
            &AutoscalerConfig::default(),
            &info(5, Capabilities::remote()),
        );
        assert_eq!(defaults.update_interval, secs(60), "GitLab's 1m");
        assert_eq!(
            defaults.update_interval_when_expecting,
            secs(2),
            "GitLab's 2s"
        );
    }
}
