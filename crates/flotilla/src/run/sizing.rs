//! Per-job pod sizing on the `kubernetes` provider: a job that asks for resources with
//! GitLab's `KUBERNETES_CPU_REQUEST`, `KUBERNETES_CPU_LIMIT`, `KUBERNETES_MEMORY_REQUEST` or
//! `KUBERNETES_MEMORY_LIMIT` (bounded by the runner's `*_overwrite_max_allowed`, see
//! `flotilla_provider_kubernetes::sizing`) runs on a pod of its own shape.
//!
//! The scaler stays shape-blind: each shape gets a fleet of its own (made when a job first
//! asks for it), over the same provider for that shape's pods only, with `idle_count` 0,
//! `max_use_count` 1 (a pod serves the job it was made for, then goes) and the runner's
//! `max_instances`. The job source asks [`SizedFleets::route`] once it has a job; a job that
//! asks for nothing, or for the defaults, runs on the runner's own fleet.
//!
//! Sized fleets keep no journal: a pod of a shape outlives no process. At start, sized pods a
//! previous process left (killed before it could delete them) are deleted; on a stop, sized
//! fleets delete their pods.

use crate::config::RunnerConfig;
use crate::fleet::{self, FleetParts, Provider};
use anyhow::{Context, Result};
use async_trait::async_trait;
use flotilla_dispatch::Dispatcher;
use flotilla_fleet::{InstanceGroup, ProviderConfig, Settings};
use flotilla_gitlab::{Route, SlotExecutor};
use flotilla_job::{
    ArtifactStore, CacheStore, JobCancel, JobPayload, JobResult, JobVariables, RunOptions,
    TraceSink,
};
use flotilla_provider_kubernetes::{KubernetesGroup, PLUGIN, Shape};
use flotilla_scaler::{Acquisition, Scaler};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// What a sized fleet is built from besides its provider (each fleet gets its own copy).
pub(super) struct PartsTemplate {
    /// Where artifacts go.
    pub artifacts: Arc<dyn ArtifactStore>,
    /// Where caches go.
    pub cache: Arc<dyn CacheStore>,
    /// Where snapshots go.
    pub snapshots: Option<Arc<dyn CacheStore>>,
    /// The builds directory on this host (unused by pods, required by the fleet).
    pub local_builds_dir: String,
    /// The job runner's options.
    pub run_options: RunOptions,
}

/// The runner's executor, with a fleet per pod shape beside it.
pub(super) struct SizedFleets {
    /// The runner's own fleet.
    default: Arc<dyn SlotExecutor>,
    /// The runner as its sized fleets are built: one job per pod, no idle pods.
    runner: RunnerConfig,
    /// The provider, as its own type (for [`KubernetesGroup::sized`] and its sizing rules).
    base: KubernetesGroup,
    settings: Settings,
    parts: PartsTemplate,
    /// Sized fleets by shape hash.
    fleets: tokio::sync::Mutex<HashMap<String, Arc<Dispatcher>>>,
}

/// Sized fleets for `runner`, when its provider is `kubernetes`, it allows overwrites (some
/// `*_overwrite_max_allowed` is set) and a pod serves one job (`capacity_per_instance = 1`);
/// `None` otherwise. Sized pods left by an earlier process are deleted first.
pub(super) async fn sized_fleets(
    runner: &RunnerConfig,
    plugin: &str,
    default: Arc<dyn SlotExecutor>,
    state_dir: &Path,
    parts: PartsTemplate,
) -> Result<Option<Arc<SizedFleets>>> {
    if plugin != PLUGIN {
        return Ok(None);
    }
    let Some(a) = runner.autoscaler.as_ref() else {
        return Ok(None);
    };
    let base = flotilla_provider_kubernetes::group(&ProviderConfig {
        plugin_config: &a.plugin_config,
        runner_name: &runner.name,
        state_dir: Some(state_dir),
    })
    .with_context(|| {
        format!(
            "runner {:?}: [runners.autoscaler.plugin_config]",
            runner.name
        )
    })?;
    if !base.sizing().allows_overwrites() {
        return Ok(None);
    }
    if a.capacity_per_instance != 1 {
        tracing::warn!(
            runner = %runner.name,
            capacity_per_instance = a.capacity_per_instance,
            "*_overwrite_max_allowed is set but pods are sized per job only with \
             capacity_per_instance = 1: KUBERNETES_CPU_* and KUBERNETES_MEMORY_* job variables \
             are not applied to pods"
        );
        return Ok(None);
    }
    let settings = Settings {
        connector: a
            .connector_config
            .to_connector_config()
            .with_context(|| format!("runner {:?}: connector_config", runner.name))?,
    };
    base.init(&settings)
        .await
        .with_context(|| format!("runner {:?}: initialising pod sizing", runner.name))?;
    let leftovers = base
        .sized_pods()
        .await
        .with_context(|| format!("runner {:?}: listing sized pods", runner.name))?;
    if !leftovers.is_empty() {
        let names: Vec<String> = leftovers.iter().map(|p| p.name.clone()).collect();
        tracing::info!(runner = %runner.name, pods = ?names, "deleting sized pods an earlier process left");
        let deleted = base
            .decrease(&names)
            .await
            .with_context(|| format!("runner {:?}: deleting sized pods", runner.name))?;
        if deleted.len() != names.len() {
            tracing::warn!(runner = %runner.name, asked = ?names, deleted = ?deleted, "some sized pods could not be deleted");
        }
    }
    let mut sized_runner = runner.clone();
    if let Some(a) = sized_runner.autoscaler.as_mut() {
        a.policy.clear();
        a.max_use_count = 1;
        a.delete_instances_on_shutdown = true;
    }
    Ok(Some(Arc::new(SizedFleets {
        default,
        runner: sized_runner,
        base,
        settings,
        parts,
        fleets: tokio::sync::Mutex::new(HashMap::new()),
    })))
}

impl SizedFleets {
    /// The fleet of `shape`, made on first use.
    async fn fleet(&self, shape: &Shape) -> Result<Arc<Dispatcher>> {
        let mut fleets = self.fleets.lock().await;
        if let Some(d) = fleets.get(&shape.hash()) {
            return Ok(d.clone());
        }
        let group = Arc::new(self.base.sized(shape.clone()));
        let info = group.init(&self.settings).await?;
        let provider = Provider {
            plugin: PLUGIN,
            group,
            info,
        };
        let parts = FleetParts {
            artifacts: self.parts.artifacts.clone(),
            cache: self.parts.cache.clone(),
            snapshots: self.parts.snapshots.clone(),
            local_builds_dir: self.parts.local_builds_dir.clone(),
            run_options: self.parts.run_options.clone(),
            durable: None,
            local_slots: None,
            shared_instances: false,
        };
        let fleet = fleet::from_runner(&self.runner, provider, parts).await?;
        tracing::info!(runner = %self.runner.name, shape = %shape, "a fleet of pods sized {shape}");
        fleets.insert(shape.hash(), fleet.dispatcher.clone());
        Ok(fleet.dispatcher)
    }

    /// Shuts every sized fleet down (their pods are deleted).
    pub(super) async fn shutdown(&self, drain: Duration) {
        let fleets: Vec<Arc<Dispatcher>> = self.fleets.lock().await.values().cloned().collect();
        for d in fleets {
            let report = d.scaler().shutdown(drain).await;
            tracing::info!(runner = %self.runner.name, ?report, "sized fleet shut down");
        }
    }
}

#[async_trait]
impl SlotExecutor for SizedFleets {
    fn scaler(&self) -> &Scaler {
        self.default.scaler()
    }

    async fn route(&self, job: &JobPayload) -> Result<Route, String> {
        // GitLab expands the job's variables before reading them (`createOverwrites`).
        let variables = JobVariables::new(job.variables.iter().cloned(), "/tmp");
        let sizing = self
            .base
            .sizing()
            .for_job(|key| variables.value(key).map(str::to_string))
            // `executors/kubernetes/executor_kubernetes.go`, `Prepare`.
            .map_err(|e| format!("couldn't prepare overwrites: {e}"))?;
        if !sizing.overwritten {
            return Ok(Route {
                executor: None,
                notes: sizing.notes,
            });
        }
        let dispatcher = self
            .fleet(&sizing.shape)
            .await
            .map_err(|e| format!("no pod sized {} can be made: {e:#}", sizing.shape))?;
        let mut notes = sizing.notes;
        notes.push(format!(
            "Running on a pod sized for this job: {}",
            sizing.shape
        ));
        Ok(Route {
            executor: Some(dispatcher),
            notes,
        })
    }

    async fn run(
        &self,
        acquisition: Acquisition,
        job: &JobPayload,
        sink: &mut dyn TraceSink,
        cancel: &JobCancel,
    ) -> JobResult {
        self.default.run(acquisition, job, sink, cancel).await
    }
}
