//! Isolation levels built from a runner's configuration: one builder per level, registered
//! in [`crate::registry::isolations`].

use crate::config::RunnerConfig;
use anyhow::{Context, Result};
use flotilla_isolate::docker::DockerContext;
use flotilla_isolate::vm::VmLevel;
use flotilla_isolate::{
    CgroupIsolation, DockerIsolation, DockerIsolationConfig, InstanceIsolation, Isolation,
    MicrovmIsolation, ShellIsolation,
};
use flotilla_job::CacheStore;
use std::sync::Arc;

/// What a level is built from.
#[derive(Clone, Copy)]
pub struct LevelContext<'a> {
    /// The runner.
    pub runner: &'a RunnerConfig,
    /// The builds directory on its instances (absolute).
    pub builds_dir: &'a str,
    /// The runner's snapshot store on the manager, where the `microvm` level keeps snapshots
    /// for every instance.
    pub snapshots: Option<&'a Arc<dyn CacheStore>>,
    /// Other processes of this runner use its instances at the same time (`flotilla exec`).
    pub shared_instances: bool,
}

impl std::fmt::Debug for LevelContext<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LevelContext")
            .field("runner", &self.runner.name)
            .field("builds_dir", &self.builds_dir)
            .finish_non_exhaustive()
    }
}

/// `shell`: a build directory per slot. With the builds directory known, a new instance's
/// first contact also stops what jobs of a crashed manager left running in its slots.
pub fn shell(cx: &LevelContext<'_>) -> Result<Arc<dyn Isolation>> {
    Ok(Arc::new(shell_stages(cx)?))
}

/// `instance`: the whole instance for one job, its stages run as shell isolation runs them.
pub fn instance(cx: &LevelContext<'_>) -> Result<Arc<dyn Isolation>> {
    Ok(Arc::new(InstanceIsolation::new(shell_stages(cx)?)))
}

/// Shell isolation as the runner configures it (builds directory, the slot cgroup the job is
/// told of): the `shell` level, and how the `instance` level runs stages.
fn shell_stages(cx: &LevelContext<'_>) -> Result<ShellIsolation> {
    let mut level = ShellIsolation::new()
        .with_builds_dir(cx.builds_dir)
        .with_context(|| format!("runner {:?}: builds_dir", cx.runner.name))?;
    if cx.runner.use_slot_cgroups {
        level = level.with_slot_cgroup_template(&cx.runner.slot_cgroup_template);
    }
    Ok(level)
}

/// `cgroup`: shell isolation with each slot's stages in a cgroup of their own, limited by
/// `[runners.cgroup]`, at `slot_cgroup_template`.
pub fn cgroup(cx: &LevelContext<'_>) -> Result<Arc<dyn Isolation>> {
    let config = cx
        .runner
        .cgroup
        .clone()
        .unwrap_or_default()
        .build(&cx.runner.slot_cgroup_template)
        .with_context(|| format!("runner {:?}: [runners.cgroup]", cx.runner.name))?;
    Ok(Arc::new(CgroupIsolation::new(config).with_context(
        || format!("runner {:?}: the cgroup level", cx.runner.name),
    )?))
}

/// `docker`: the job's image and its services as containers on the instance's daemon.
pub fn docker(cx: &LevelContext<'_>) -> Result<Arc<dyn Isolation>> {
    Ok(Arc::new(DockerIsolation::new(docker_config(cx.runner)?)))
}

/// The manager's Docker configuration, GitLab Runner's second source of registry
/// credentials: `$HOME/.docker/config.json`, else `$HOME/.dockercfg`.
fn home_docker_config() -> Option<std::path::PathBuf> {
    let home = std::path::PathBuf::from(std::env::var_os("HOME")?);
    [".docker/config.json", ".dockercfg"]
        .iter()
        .map(|f| home.join(f))
        .find(|p| p.is_file())
}

/// The docker level's settings from `runner`'s `[runners.docker]`.
fn docker_config(runner: &RunnerConfig) -> Result<DockerIsolationConfig> {
    runner
        .docker
        .clone()
        .unwrap_or_default()
        .build(&DockerContext {
            docker_config_file: home_docker_config(),
            ..runner.docker_context()
        })
        .with_context(|| format!("runner {:?}: [runners.docker]", runner.name))
}

/// `microvm`: each job's build stages in a QEMU microVM of their own, booted from the job's
/// image (`[runners.microvm]`).
pub fn microvm(cx: &LevelContext<'_>) -> Result<Arc<dyn Isolation>> {
    Ok(Arc::new(microvm_level(
        cx.runner,
        cx.snapshots,
        cx.shared_instances,
    )?))
}

/// The `microvm` level of `runner` as its own type (`flotilla debug` restores its snapshots),
/// keeping snapshots in `store` too unless `[runners.microvm] snapshot_store = false`;
/// `per_process` when other processes of the runner share its instances.
pub fn microvm_level(
    runner: &RunnerConfig,
    store: Option<&Arc<dyn CacheStore>>,
    per_process: bool,
) -> Result<MicrovmIsolation> {
    let built = runner
        .microvm
        .clone()
        .unwrap_or_default()
        .build(&runner.microvm_context(per_process))
        .with_context(|| format!("runner {:?}: [runners.microvm]", runner.name))?;
    let level = MicrovmIsolation::new(built.config)
        .with_context(|| format!("runner {:?}: the microvm level", runner.name))?;
    Ok(match store {
        Some(store) if built.snapshot_store => level.with_snapshot_store(store.clone()),
        _ => level,
    })
}

/// `vm`: a full VM per slot (QEMU `q35`) from a prepared disk, every stage in it, as GitLab's
/// VM isolation runs a job in a nesting VM (`[runners.autoscaler.vm_isolation]`,
/// `[runners.instance] allowed_images`, `[runners.vm]`).
pub fn vm(cx: &LevelContext<'_>) -> Result<Arc<dyn Isolation>> {
    let runner = cx.runner;
    let config = runner
        .vm
        .clone()
        .unwrap_or_default()
        .build(&runner.vm_context())
        .with_context(|| format!("runner {:?}: [runners.vm]", runner.name))?;
    Ok(Arc::new(VmLevel::new(config).with_context(|| {
        format!("runner {:?}: the vm level", runner.name)
    })?))
}
