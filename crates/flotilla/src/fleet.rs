//! Building a fleet: an instance group, its scaler and a dispatcher, from a `[[runners]]`
//! entry or from the embedded default (this host, shell isolation, one slot per core).

use crate::config::{AutoscalerConfig, IsolationLevel, PullPolicy, RunnerConfig};
use anyhow::{Context, Result, anyhow, bail};
use async_trait::async_trait;
use flotilla_connect::ConnectorExt;
use flotilla_dispatch::{
    ConnectorFactory, Dispatcher, DispatcherConfig, LocalConnectors, SshConnectors,
};
use flotilla_fleet::local::LocalGroup;
use flotilla_fleet::{InstanceGroup, Settings};
use flotilla_isolate::{DockerIsolation, DockerIsolationConfig, Isolation, ShellIsolation};
use flotilla_job::{ArtifactStore, CacheStore, RunOptions};
use flotilla_scaler::{
    Cause, Hooks, Policy, Preexisting, ScaleThrottle, Scaler, ScalerBuilder, ScalerConfig,
    Schedule, ScheduledPolicy,
};
use std::sync::Arc;
use std::time::Duration;

/// A fleet ready to run jobs.
pub struct Fleet {
    /// The scaler.
    pub scaler: Scaler,
    /// The dispatcher over it.
    pub dispatcher: Arc<Dispatcher>,
    /// Most jobs it can run at once (`None`: unbounded).
    pub capacity: Option<usize>,
    /// One line saying what it is.
    pub description: String,
}

/// Durable state for a fleet: what the store knew, and where changes go.
pub struct Durable {
    /// State before this start.
    pub persisted: flotilla_scaler::Persisted,
    /// The journal of the fleet's scope.
    pub journal: Arc<dyn flotilla_scaler::Journal>,
}

/// What every fleet needs from its user.
pub struct FleetParts {
    /// Where artifacts go.
    pub artifacts: Arc<dyn ArtifactStore>,
    /// Where caches go.
    pub cache: Arc<dyn CacheStore>,
    /// The base builds directory on instances (absolute).
    pub builds_dir: String,
    /// The job runner's options.
    pub run_options: RunOptions,
    /// Where providers keep what must survive a restart (generated keys); `None` for
    /// throw-away fleets.
    pub state_dir: Option<std::path::PathBuf>,
    /// Durable ledger state, for fleets that survive restarts.
    pub durable: Option<Durable>,
}

/// The stable id of the instance group a runner uses (part of the store's identity).
pub fn provider_id(runner: &RunnerConfig) -> String {
    match runner.autoscaler.as_ref().map(|a| a.plugin.as_str()) {
        None | Some("") | Some("local") => "local".into(),
        Some(plugin) => {
            let name = runner
                .autoscaler
                .as_ref()
                .and_then(|a| a.plugin_config.get("name"))
                .and_then(|n| n.as_str())
                .unwrap_or(&runner.name);
            format!("{plugin}/{name}")
        }
    }
}

/// Slots of the embedded default: one per core.
pub fn default_slots() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// The embedded default: this host as the only instance, shell isolation, one slot per core.
pub async fn embedded_default(parts: FleetParts) -> Result<Fleet> {
    let slots = default_slots();
    let config = ScalerConfig {
        capacity_per_instance: slots,
        max_instances: 1,
        update_interval: Duration::from_secs(60),
        ..ScalerConfig::default()
    };
    let scaler = ScalerBuilder::new(Arc::new(LocalGroup::new()), config)
        .schedule(Schedule::single(Policy::default()))
        .start()
        .await
        .context("starting the local fleet")?;
    let dispatcher = Dispatcher::new(
        scaler.clone(),
        DispatcherConfig {
            isolation: Arc::new(ShellIsolation::new()),
            connectors: Arc::new(LocalConnectors),
            artifacts: parts.artifacts,
            cache: parts.cache,
            run_options: parts.run_options,
            builds_dir: parts.builds_dir,
        },
    );
    Ok(Fleet {
        scaler,
        dispatcher: Arc::new(dispatcher),
        capacity: Some(slots),
        description: format!("this host, shell isolation, {slots} slots"),
    })
}

/// The instance group a runner's `plugin` names.
fn provider(
    runner: &RunnerConfig,
    state_dir: Option<&std::path::Path>,
) -> Result<(Arc<dyn InstanceGroup>, bool)> {
    let plugin = runner
        .autoscaler
        .as_ref()
        .map(|a| a.plugin.as_str())
        .unwrap_or("local");
    match plugin {
        "" | "local" => Ok((Arc::new(LocalGroup::new()), true)),
        flotilla_fleet::docker::PLUGIN => {
            let a = runner
                .autoscaler
                .as_ref()
                .ok_or_else(|| anyhow!("plugin docker needs [runners.autoscaler]"))?;
            let mut settings = a.plugin_config.clone();
            // Name the group after the runner when the plugin config does not.
            if let serde_json::Value::Object(map) = &mut settings
                && !map.contains_key("name")
            {
                map.insert(
                    "name".into(),
                    serde_json::Value::String(runner.name.clone()),
                );
            }
            // A generated key must survive a restart, or adopted instances are unreachable.
            if let (serde_json::Value::Object(map), Some(dir)) = (&mut settings, state_dir)
                && !map.contains_key("key_file")
            {
                let file = dir
                    .join("keys")
                    .join(format!("{}.key", file_name(&runner.name)));
                map.insert(
                    "key_file".into(),
                    serde_json::Value::String(file.to_string_lossy().into_owned()),
                );
            }
            let group = flotilla_fleet::docker::DockerGroup::from_plugin_config(&settings)
                .with_context(|| {
                    format!(
                        "runner {:?}: [runners.autoscaler.plugin_config]",
                        runner.name
                    )
                })?;
            Ok((Arc::new(group), false))
        }
        other => bail!(
            "runner {:?}: plugin {other:?} is not available in this build of flotilla \
             (available: local, docker)",
            runner.name
        ),
    }
}

fn scaler_config(a: &AutoscalerConfig, local: bool) -> ScalerConfig {
    let max_instances = a.max_instances as usize;
    ScalerConfig {
        capacity_per_instance: (a.capacity_per_instance as usize).max(1),
        max_instances: if local { 1 } else { max_instances },
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
        preexisting: if local {
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

/// Runs `instance_ready_command` (or a reachability check) on every new or adopted instance
/// before its slots are offered.
struct ReadyUp {
    command: Option<String>,
    connectors: Arc<dyn ConnectorFactory>,
    check: bool,
}

#[async_trait]
impl Hooks for ReadyUp {
    async fn ready_up(
        &self,
        group: &dyn InstanceGroup,
        instance: &str,
        cause: Cause,
    ) -> Result<(), String> {
        if !self.check && self.command.is_none() {
            return Ok(());
        }
        let info = group
            .connect_info(instance)
            .await
            .map_err(|e| format!("connect info: {e}"))?;
        let connector = self
            .connectors
            .connector(&info)
            .map_err(|e| format!("connector: {e}"))?;
        let command = self.command.clone().unwrap_or_else(|| "true".to_string());
        let output = connector
            .output(&command)
            .await
            .map_err(|e| format!("{cause:?} instance not reachable: {e}"))?;
        if !output.status.success() {
            return Err(format!(
                "instance_ready_command failed with {}: {}",
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            ));
        }
        Ok(())
    }
}

fn pull(p: &PullPolicy) -> flotilla_isolate::docker::PullPolicy {
    match p {
        PullPolicy::Always => flotilla_isolate::docker::PullPolicy::Always,
        PullPolicy::IfNotPresent => flotilla_isolate::docker::PullPolicy::IfNotPresent,
        PullPolicy::Never => flotilla_isolate::docker::PullPolicy::Never,
    }
}

/// A name made safe for a file name.
pub fn file_name(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The fleet of one `[[runners]]` entry.
pub async fn from_runner(runner: &RunnerConfig, parts: FleetParts) -> Result<Fleet> {
    let (group, local) = provider(runner, parts.state_dir.as_deref())?;
    let default_autoscaler = AutoscalerConfig::default();
    let a = runner.autoscaler.as_ref().unwrap_or(&default_autoscaler);
    let mut config = scaler_config(a, local);
    if local && runner.autoscaler.is_none() {
        config.capacity_per_instance = default_slots();
    }
    let connectors: Arc<dyn ConnectorFactory> = if local {
        Arc::new(LocalConnectors)
    } else {
        Arc::new(SshConnectors::new(group.clone()))
    };
    let level = runner.isolation();
    let builds_dir = runner
        .builds_dir
        .clone()
        .unwrap_or_else(|| parts.builds_dir.clone());
    let isolation: Arc<dyn Isolation> = match level {
        // With the builds directory known, a new instance's first contact also stops what
        // jobs of a crashed manager left running in its slots.
        IsolationLevel::Shell => Arc::new(
            ShellIsolation::new()
                .with_builds_dir(&builds_dir)
                .with_context(|| format!("runner {:?}: builds_dir", runner.name))?,
        ),
        IsolationLevel::Docker => {
            let docker = runner.docker.clone().unwrap_or_default();
            let policies = docker.effective_pull_policies();
            Arc::new(DockerIsolation::new(DockerIsolationConfig {
                default_image: docker.image.clone(),
                pull_policy: policies.iter().map(pull).collect(),
                owner: format!("flotilla-{}", runner.name),
                ..DockerIsolationConfig::default()
            }))
        }
        other => bail!(
            "runner {:?}: isolation {} is not available yet (available: shell, docker)",
            runner.name,
            other.as_str()
        ),
    };
    let settings = Settings {
        connector: a
            .connector_config
            .to_connector_config()
            .with_context(|| format!("runner {:?}: connector_config", runner.name))?,
    };
    let hooks = Arc::new(ReadyUp {
        command: a.instance_ready_command.clone(),
        connectors: connectors.clone(),
        check: !local,
    });
    let capacity = config.max_slots();
    let description = format!(
        "runner {:?}: plugin {}, {} isolation, {} slot(s) per instance, max {} instance(s)",
        runner.name,
        if local { "local" } else { a.plugin.as_str() },
        isolation.name(),
        config.capacity_per_instance,
        if config.max_instances == 0 {
            "unlimited".to_string()
        } else {
            config.max_instances.to_string()
        }
    );
    let schedule = schedule(a)?;
    let mut builder = ScalerBuilder::new(group, config)
        .schedule(schedule)
        .settings(settings)
        .hooks(hooks);
    if let Some(durable) = parts.durable {
        builder = builder.restore(durable.persisted).journal(durable.journal);
    }
    let scaler = builder
        .start()
        .await
        .with_context(|| format!("starting the fleet of runner {:?}", runner.name))?;
    let mut run_options = parts.run_options;
    run_options.runner.description = runner.name.clone();
    let dispatcher = Dispatcher::new(
        scaler.clone(),
        DispatcherConfig {
            isolation,
            connectors,
            artifacts: parts.artifacts,
            cache: parts.cache,
            run_options,
            builds_dir,
        },
    );
    Ok(Fleet {
        scaler,
        dispatcher: Arc::new(dispatcher),
        capacity,
        description,
    })
}
