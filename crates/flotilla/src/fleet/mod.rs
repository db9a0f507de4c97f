//! Building a fleet: an instance group, its scaler and a dispatcher, from a `[[runners]]`
//! entry or from the embedded default (this host, shell isolation, one slot per core).
//!
//! Which provider and which isolation level a runner uses is looked up in
//! [`crate::registry`]; what the provider is (this host or machines elsewhere, whether its
//! instances may be adopted, how they are reached) comes from its
//! [`flotilla_fleet::Capabilities`], never from its name.

pub mod embedded;
pub mod levels;
mod ready_up;
mod scaling;

pub use scaling::{scaler_config, schedule};

use crate::config::{AutoscalerConfig, RunnerConfig};
use crate::registry;
use anyhow::{Context, Result, bail};
use flotilla_dispatch::{Dispatcher, DispatcherConfig, Levels};
use flotilla_fleet::{InstanceGroup, ProviderConfig, ProviderInfo, Settings};
use flotilla_job::{ArtifactStore, CacheStore, RunOptions};
use flotilla_scaler::{Scaler, ScalerBuilder};
use levels::LevelContext;
use ready_up::ReadyUp;
use std::path::Path;
use std::sync::Arc;

/// Where builds go on instances that are other machines, unless the runner says otherwise.
const REMOTE_BUILDS_DIR: &str = "/builds";

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

impl std::fmt::Debug for Fleet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fleet")
            .field("scaler", &self.scaler)
            .field("capacity", &self.capacity)
            .field("description", &self.description)
            .finish_non_exhaustive()
    }
}

/// Durable state for a fleet: what the store knew, and where changes go.
pub struct Durable {
    /// State before this start.
    pub persisted: flotilla_scaler::Persisted,
    /// The journal of the fleet's scope.
    pub journal: Arc<dyn flotilla_scaler::Journal>,
}

impl std::fmt::Debug for Durable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Durable").finish_non_exhaustive()
    }
}

/// What every fleet needs from its user.
pub struct FleetParts {
    /// Where artifacts go.
    pub artifacts: Arc<dyn ArtifactStore>,
    /// Where caches go.
    pub cache: Arc<dyn CacheStore>,
    /// Where the `microvm` level keeps snapshots for every instance (apart from caches, so
    /// that no cache key can name a snapshot).
    pub snapshots: Option<Arc<dyn CacheStore>>,
    /// The builds directory when the instance is this host (absolute); created when used.
    /// Instances elsewhere use the runner's `builds_dir`, or `/builds`.
    pub local_builds_dir: String,
    /// The job runner's options.
    pub run_options: RunOptions,
    /// Durable ledger state, for fleets that survive restarts.
    pub durable: Option<Durable>,
    /// How many jobs this host runs at once when a runner sets no `[runners.autoscaler]`:
    /// GitLab Runner's `limit`, else `concurrent` (a shell or docker runner runs that many
    /// whatever the cores). `None`: one per core, the embedded default's rule.
    pub local_slots: Option<usize>,
    /// Other processes of this runner may use its instances at the same time (`flotilla
    /// exec` runs side by side): levels that name things per runner name them per process
    /// too, and leave those of live processes alone.
    pub shared_instances: bool,
}

impl std::fmt::Debug for FleetParts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FleetParts")
            .field("local_builds_dir", &self.local_builds_dir)
            .field("run_options", &self.run_options)
            .finish_non_exhaustive()
    }
}

/// A runner's instance group, built from the registry and initialised.
pub struct Provider {
    /// The plugin name it was built from.
    pub plugin: &'static str,
    /// The group.
    pub group: Arc<dyn InstanceGroup>,
    /// What it said about itself: its id (which keys the fleet's durable state) and
    /// capabilities.
    pub info: ProviderInfo,
}

impl std::fmt::Debug for Provider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Provider")
            .field("plugin", &self.plugin)
            .field("info", &self.info)
            .finish_non_exhaustive()
    }
}

/// The instance group `runner`'s `plugin` names, built from its `plugin_config` (read and
/// checked by the provider, nothing contacted). `config check` and every command that starts
/// a fleet go through here, so a `plugin_config` the provider refuses is refused before
/// anything runs.
pub fn group(
    runner: &RunnerConfig,
    state_dir: Option<&Path>,
) -> Result<(registry::ProviderEntry, Arc<dyn InstanceGroup>)> {
    let default_autoscaler = AutoscalerConfig::default();
    let a = runner.autoscaler.as_ref().unwrap_or(&default_autoscaler);
    let entry =
        registry::provider(&a.plugin).with_context(|| format!("runner {:?}", runner.name))?;
    let plugin_config = a.plugin_config.clone();
    let group = (entry.build)(&ProviderConfig {
        plugin_config: &plugin_config,
        runner_name: &runner.name,
        state_dir,
    })
    .with_context(|| {
        format!(
            "runner {:?}: [runners.autoscaler.plugin_config]",
            runner.name
        )
    })?;
    Ok((entry, group))
}

/// The settings `runner`'s instance group is initialised with: its connector, with the
/// private key of `key_path` read (from this machine).
pub fn group_settings(runner: &RunnerConfig) -> Result<Settings> {
    let default_autoscaler = AutoscalerConfig::default();
    let a = runner.autoscaler.as_ref().unwrap_or(&default_autoscaler);
    Ok(Settings {
        connector: a
            .connector_config
            .to_connector_config()
            .with_context(|| format!("runner {:?}: connector_config", runner.name))?,
    })
}

/// Builds and initialises the instance group `runner`'s `plugin` names. `state_dir` is where
/// the provider may keep what must survive a restart (`None` for a throw-away fleet).
pub async fn provider(runner: &RunnerConfig, state_dir: Option<&Path>) -> Result<Provider> {
    let (entry, group) = group(runner, state_dir)?;
    let settings = group_settings(runner)?;
    let info = group.init(&settings).await.with_context(|| {
        format!(
            "runner {:?}: initialising the {} instance group",
            runner.name, entry.name
        )
    })?;
    Ok(Provider {
        plugin: entry.name,
        group,
        info,
    })
}

/// How the runner's `[[runners]]` settings shape every job it runs: `output_limit` (KiB),
/// `debug_trace_disabled` and the runner's scripts around the fetch and the script step;
/// archives are staged under `scratch_dir`.
pub fn run_options(runner: &RunnerConfig, scratch_dir: std::path::PathBuf) -> RunOptions {
    let defaults = RunOptions::default();
    RunOptions {
        scratch_dir: Some(scratch_dir),
        output_limit: runner
            .output_limit
            .map_or(defaults.output_limit, |kib| kib.saturating_mul(1024)),
        debug_trace_disabled: runner.debug_trace_disabled,
        pre_build_script: runner.pre_build_script.clone(),
        post_build_script: runner.post_build_script.clone(),
        // GitLab Runner's GetPreGetSourcesScript: the deprecated pre_clone_script when the
        // new key is not set.
        pre_get_sources_script: runner
            .pre_get_sources_script
            .clone()
            .or_else(|| runner.pre_clone_script.clone()),
        post_get_sources_script: runner.post_get_sources_script.clone(),
        ..defaults
    }
}

/// Slots of the embedded default: one per core.
pub fn default_slots() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// Where `flotilla run` keeps the snapshots of runner `name` (`<state_dir>/snapshots/<name>`).
pub fn snapshot_store_dir(state_dir: &Path, name: &str) -> std::path::PathBuf {
    state_dir.join("snapshots").join(file_name(name))
}

/// A name made safe for a file name.
pub fn file_name(name: &str) -> String {
    flotilla_fleet::safe_file_name(name)
}

/// Every isolation level `runner` offers, built; the default first.
fn levels(
    runner: &RunnerConfig,
    builds_dir: &str,
    snapshots: Option<&Arc<dyn CacheStore>>,
    shared_instances: bool,
) -> Result<Levels> {
    let cx = LevelContext {
        runner,
        builds_dir,
        snapshots,
        shared_instances,
    };
    let mut built = Vec::new();
    for level in runner.isolation_levels().all() {
        let entry =
            registry::isolation(*level).with_context(|| format!("runner {:?}", runner.name))?;
        built.push((entry.build)(&cx)?);
    }
    let default = built.remove(0);
    let levels = Levels::new(default, built);
    match runner.image_isolation() {
        None => Ok(levels),
        Some(level) => levels.with_image_level(level.as_str()).with_context(|| {
            format!(
                "runner {:?}: image_isolation = {level} is not one of its isolation levels",
                runner.name
            )
        }),
    }
}

/// The fleet of one `[[runners]]` entry on its initialised `provider`.
pub async fn from_runner(
    runner: &RunnerConfig,
    provider: Provider,
    parts: FleetParts,
) -> Result<Fleet> {
    let Provider {
        plugin,
        group,
        info,
    } = provider;
    let capabilities = info.capabilities.clone();
    let default_autoscaler = AutoscalerConfig::default();
    let a = runner.autoscaler.as_ref().unwrap_or(&default_autoscaler);
    if a.max_use_count > 0 && !capabilities.can_retire_instances() {
        bail!(
            "runner {:?}: max_use_count = {} cannot be used with plugin {plugin:?}: its \
             instances ({}) cannot be thrown away and replaced after their jobs; remove \
             max_use_count",
            runner.name,
            a.max_use_count,
            if capabilities.single_host {
                "this host"
            } else {
                "machines of a fixed pool"
            }
        );
    }
    let mut config = scaling::scaler_config(a, &info);
    if config.capacity_per_instance < (a.capacity_per_instance as usize).max(1) {
        tracing::warn!(
            runner = %runner.name,
            capacity_per_instance = a.capacity_per_instance,
            slots = config.capacity_per_instance,
            "the provider allows fewer slots per instance than capacity_per_instance; running that many"
        );
    }
    if capabilities.single_host && runner.autoscaler.is_none() {
        config.capacity_per_instance = parts.local_slots.unwrap_or_else(default_slots).max(1);
    }
    let connectors = registry::connectors(capabilities.connector, group.clone());
    let builds_dir = match &runner.builds_dir {
        Some(dir) => dir.clone(),
        None if capabilities.single_host => {
            std::fs::create_dir_all(&parts.local_builds_dir).with_context(|| {
                format!("creating the builds directory {}", parts.local_builds_dir)
            })?;
            parts.local_builds_dir.clone()
        }
        None => REMOTE_BUILDS_DIR.to_string(),
    };
    let isolation = levels(
        runner,
        &builds_dir,
        parts.snapshots.as_ref(),
        parts.shared_instances,
    )?;
    let hooks = Arc::new(ReadyUp {
        command: a.instance_ready_command.clone(),
        connectors: connectors.clone(),
        check: capabilities.needs_reachability_check(),
    });
    let capacity = config.max_slots();
    let description = if capabilities.single_host && runner.name.is_empty() {
        format!(
            "this host, {} isolation, {} slots",
            isolation.names().join(" | "),
            config.capacity_per_instance
        )
    } else {
        format!(
            "runner {:?}: plugin {plugin}, {} isolation, {} slot(s) per instance, max {} \
             instance(s)",
            runner.name,
            isolation.names().join(" | "),
            config.capacity_per_instance,
            if config.max_instances == 0 {
                "unlimited".to_string()
            } else {
                config.max_instances.to_string()
            }
        )
    };
    let schedule = schedule(a)?;
    let mut builder = ScalerBuilder::new(group, config)
        .initialized(info)
        .schedule(schedule)
        .hooks(hooks);
    if let Some(durable) = parts.durable {
        builder = builder.restore(durable.persisted).journal(durable.journal);
    }
    let scaler = builder
        .start()
        .await
        .with_context(|| format!("starting the fleet of runner {:?}", runner.name))?;
    let mut run_options = parts.run_options;
    // A job's log says `on <runner>`: the embedded default has no name, it is this host.
    run_options.runner.description = if runner.name.is_empty() {
        "this host (flotilla exec)".to_string()
    } else {
        runner.name.clone()
    };
    let dispatcher = Dispatcher::new(
        scaler.clone(),
        DispatcherConfig {
            isolation,
            connectors,
            artifacts: parts.artifacts,
            cache: parts.cache,
            run_options,
            builds_dir,
            custom_build_dir: runner.custom_build_dir.and_then(|c| c.enabled),
            log_addresses: log_addresses(runner),
        },
    );
    Ok(Fleet {
        scaler,
        dispatcher: Arc::new(dispatcher),
        capacity,
        description,
    })
}

/// Which of its instance's addresses a job's log names: `log_internal_ip` and
/// `log_external_ip` of `[runners.autoscaler]`.
fn log_addresses(runner: &RunnerConfig) -> flotilla_dispatch::LogAddresses {
    let autoscaler = runner.autoscaler.as_ref();
    flotilla_dispatch::LogAddresses {
        internal: autoscaler.is_some_and(|a| a.log_internal_ip),
        external: autoscaler.is_some_and(|a| a.log_external_ip),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_limit_and_debug_trace_disabled_reach_every_job() {
        let runner: RunnerConfig = toml::from_str(
            "executor = \"shell\"\noutput_limit = 16\ndebug_trace_disabled = true\n\
             pre_build_script = \"echo a\\necho b\"\npost_build_script = \"echo c\"\n",
        )
        .unwrap();
        let o = run_options(&runner, "/s".into());
        assert_eq!(o.output_limit, 16 * 1024);
        assert!(o.debug_trace_disabled);
        assert_eq!(o.pre_build_script.as_deref(), Some("echo a\necho b"));
        assert_eq!(o.post_build_script.as_deref(), Some("echo c"));
        // GitLab's deprecated pre_clone_script stands in for pre_get_sources_script.
        let old: RunnerConfig =
            toml::from_str("executor = \"shell\"\npre_clone_script = \"echo old\"\n").unwrap();
        let o = run_options(&old, "/s".into());
        assert_eq!(o.pre_get_sources_script.as_deref(), Some("echo old"));
        let both: RunnerConfig = toml::from_str(
            "executor = \"shell\"\npre_clone_script = \"echo old\"\n\
             pre_get_sources_script = \"echo new\"\n",
        )
        .unwrap();
        let o = run_options(&both, "/s".into());
        assert_eq!(o.pre_get_sources_script.as_deref(), Some("echo new"));
        let plain: RunnerConfig = toml::from_str("executor = \"shell\"\n").unwrap();
        let o = run_options(&plain, "/s".into());
        assert_eq!(o.output_limit, RunOptions::default().output_limit);
        assert!(!o.debug_trace_disabled);
        assert_eq!(
            log_addresses(&plain),
            flotilla_dispatch::LogAddresses::default()
        );
    }

    #[test]
    fn log_internal_ip_and_log_external_ip_reach_the_dispatcher() {
        let runner: RunnerConfig = toml::from_str(
            "executor = \"docker-autoscaler\"\n[autoscaler]\nplugin = \"docker\"\n\
             log_internal_ip = true\n",
        )
        .unwrap();
        assert_eq!(
            log_addresses(&runner),
            flotilla_dispatch::LogAddresses {
                internal: true,
                external: false
            }
        );
    }
}
