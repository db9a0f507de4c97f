//! Isolation levels built from a runner's configuration: one builder per level, registered
//! in [`crate::registry::isolations`].

use crate::config::{PullPolicy, RunnerConfig};
use anyhow::{Context, Result};
use flotilla_isolate::cgroup::{DEFAULT_ROOT, SlotLimits};
use flotilla_isolate::docker::SlotCgroupTemplates;
use flotilla_isolate::{
    CgroupConfig, CgroupIsolation, DockerIsolation, DockerIsolationConfig, InstanceIsolation,
    Isolation, ShellIsolation,
};
use std::sync::Arc;

/// What a level is built from.
#[derive(Debug, Clone, Copy)]
pub struct LevelContext<'a> {
    /// The runner.
    pub runner: &'a RunnerConfig,
    /// The builds directory on its instances (absolute).
    pub builds_dir: &'a str,
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
    let limits = cx.runner.cgroup.clone().unwrap_or_default();
    let config = CgroupConfig {
        template: cx.runner.slot_cgroup_template.clone(),
        root: limits
            .root
            .clone()
            .unwrap_or_else(|| DEFAULT_ROOT.to_string()),
        limits: SlotLimits {
            cpu_millis: limits.cpu.as_ref().and_then(|c| c.millis()),
            memory_bytes: limits.memory.as_ref().and_then(|m| m.bytes()),
            pids: limits.pids.filter(|p| *p > 0),
        },
    };
    Ok(Arc::new(CgroupIsolation::new(config).with_context(
        || format!("runner {:?}: the cgroup level", cx.runner.name),
    )?))
}

/// `docker`: the job's image and its services as containers on the instance's daemon.
pub fn docker(cx: &LevelContext<'_>) -> Result<Arc<dyn Isolation>> {
    let docker = cx.runner.docker.clone().unwrap_or_default();
    let policies = docker.effective_pull_policies();
    let slot_cgroups = cx.runner.use_slot_cgroups.then(|| SlotCgroupTemplates {
        build: cx.runner.slot_cgroup_template.clone(),
        services: docker
            .service_slot_cgroup_template
            .clone()
            .unwrap_or_else(|| cx.runner.slot_cgroup_template.clone()),
    });
    Ok(Arc::new(DockerIsolation::new(DockerIsolationConfig {
        default_image: docker.image.clone(),
        pull_policy: policies.iter().map(pull).collect(),
        owner: format!("flotilla-{}", cx.runner.name),
        privileged: docker.privileged,
        slot_cgroups,
        ..DockerIsolationConfig::default()
    })))
}

fn pull(p: &PullPolicy) -> flotilla_isolate::docker::PullPolicy {
    match p {
        PullPolicy::Always => flotilla_isolate::docker::PullPolicy::Always,
        PullPolicy::IfNotPresent => flotilla_isolate::docker::PullPolicy::IfNotPresent,
        PullPolicy::Never => flotilla_isolate::docker::PullPolicy::Never,
    }
}
