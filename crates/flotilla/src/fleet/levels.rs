//! Isolation levels built from a runner's configuration: one builder per level, registered
//! in [`crate::registry::isolations`].

use crate::config::{PullPolicy, RunnerConfig};
use anyhow::{Context, Result};
use flotilla_connect::docker_api::DockerRoute;
use flotilla_connect::shell::quote;
use flotilla_isolate::cgroup::{DEFAULT_ROOT, SlotLimits};
use flotilla_isolate::docker::SlotCgroupTemplates;
use flotilla_isolate::docker::allowed::AllowedImages;
use flotilla_isolate::docker::network::NetworkMode;
use flotilla_isolate::docker::options::ContainerOptions;
use flotilla_isolate::docker::security::{DeviceMapping, Security};
use flotilla_isolate::vm::{VmLevel, VmLevelConfig};
use flotilla_isolate::{
    CgroupConfig, CgroupIsolation, DockerIsolation, DockerIsolationConfig, InstanceIsolation,
    Isolation, MicrovmConfig, MicrovmIsolation, ShellIsolation,
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
///
/// Every key of `[runners.docker]` is taken apart here by name: a key added to
/// [`crate::config::DockerConfig`] and not used fails the build.
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
    let docker = runner.docker.clone().unwrap_or_default();
    let policies = docker.effective_pull_policies();
    let allowed_policies = docker.allowed_pull_policies();
    let raw_options = docker.container_options();
    let crate::config::DockerConfig {
        image,
        privileged,
        services_privileged,
        allowed_privileged_images,
        allowed_privileged_services,
        cap_add,
        cap_drop,
        security_opt,
        services_security_opt,
        devices,
        userns_mode,
        // Read through `effective_pull_policies` and `allowed_pull_policies` above.
        pull_policy: _,
        allowed_pull_policies: _,
        allowed_images,
        allowed_services,
        services_limit,
        volumes,
        disable_cache,
        cache_dir,
        cpus,
        memory,
        host,
        service_slot_cgroup_template,
        wait_for_services_timeout,
        disable_entrypoint_overwrite,
        network_mode,
        user,
        allowed_users,
        services,
        services_devices,
        // Read through `container_options` below.
        cgroup_parent: _,
        service_cgroup_parent: _,
        volumes_from: _,
        links: _,
        dns: _,
        dns_search: _,
        extra_hosts: _,
        runtime: _,
        shm_size: _,
        tmpfs: _,
        services_tmpfs: _,
        sysctls: _,
        ulimit: _,
        oom_kill_disable: _,
        oom_score_adjust: _,
        group_add: _,
        ipcmode: _,
        device_cgroup_rules: _,
        hostname: _,
        memory_swap: _,
        memory_reservation: _,
        cpuset_cpus: _,
        cpuset_mems: _,
        cpu_shares: _,
        service_memory: _,
        service_memory_swap: _,
        service_memory_reservation: _,
        service_cpus: _,
        service_cpuset_cpus: _,
        service_cpu_shares: _,
    } = docker;
    let slot_cgroups = runner.use_slot_cgroups.then(|| SlotCgroupTemplates {
        build: runner.slot_cgroup_template.clone(),
        services: service_slot_cgroup_template
            .unwrap_or_else(|| runner.slot_cgroup_template.clone()),
    });
    let volumes = volumes
        .iter()
        .map(|v| flotilla_isolate::docker::volumes::Volume::parse(v))
        .collect::<Result<Vec<_>, _>>()?;
    let build_limits =
        flotilla_isolate::docker::limits::BuildLimits::parse(cpus.as_deref(), memory.as_deref())?;
    let options = ContainerOptions::parse(&raw_options)?;
    // GitLab's `host`: the daemon `docker system dial-stdio` speaks to on the instance.
    let route = match host.as_deref().map(str::trim) {
        Some(h) if !h.is_empty() => {
            DockerRoute::DialStdio(format!("docker -H {} system dial-stdio", quote(h)))
        }
        _ => DockerRoute::default(),
    };
    Ok(DockerIsolationConfig {
        route,
        default_image: image,
        volumes,
        disable_cache,
        cache_dir: cache_dir.filter(|d| !d.trim().is_empty()),
        docker_config_file: home_docker_config(),
        build_limits,
        services_limit,
        allowed_images: AllowedImages::new(&allowed_images)?,
        allowed_services: AllowedImages::new(&allowed_services)?,
        pull_policy: policies.iter().map(pull).collect(),
        allowed_pull_policies: allowed_policies.iter().map(pull).collect(),
        owner: format!("flotilla-{}", runner.name),
        security: Security {
            privileged,
            services_privileged,
            allowed_privileged_images: AllowedImages::new(&allowed_privileged_images)?,
            allowed_privileged_services: AllowedImages::new(&allowed_privileged_services)?,
            cap_add,
            cap_drop,
            security_opt,
            services_security_opt,
            devices: devices
                .iter()
                .map(|d| DeviceMapping::parse(d))
                .collect::<Result<_, _>>()?,
            userns_mode: userns_mode.filter(|m| !m.is_empty()),
            user,
            allowed_users,
        },
        slot_cgroups,
        options,
        // GitLab's `waitForServices`: 0 (or unset) is the default 30 s, negative is no wait.
        wait_for_services_timeout: match wait_for_services_timeout {
            None | Some(0) => DockerIsolationConfig::default().wait_for_services_timeout,
            Some(secs) => std::time::Duration::from_secs(u64::try_from(secs).unwrap_or(0)),
        },
        disable_entrypoint_overwrite,
        network_mode: NetworkMode::parse(network_mode.as_deref()),
        services: services
            .into_iter()
            .map(|s| flotilla_job::model::Image {
                name: s.name,
                alias: s.alias,
                command: s.command,
                entrypoint: s.entrypoint,
                ..flotilla_job::model::Image::default()
            })
            .collect(),
        services_devices: {
            let mut patterns: Vec<(String, Vec<String>)> = services_devices.into_iter().collect();
            patterns.sort();
            patterns
                .into_iter()
                .map(|(pattern, devices)| {
                    Ok((
                        AllowedImages::new(std::slice::from_ref(&pattern))?,
                        devices
                            .iter()
                            .map(|d| DeviceMapping::parse(d))
                            .collect::<Result<Vec<_>, _>>()?,
                    ))
                })
                .collect::<Result<Vec<_>>>()?
        },
        ..DockerIsolationConfig::default()
    })
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
    let m = runner.microvm.clone().unwrap_or_default();
    let defaults = MicrovmConfig::default();
    let config = MicrovmConfig {
        default_image: m
            .image
            .clone()
            .or_else(|| runner.docker.as_ref().and_then(|d| d.image.clone())),
        kernel: m.kernel.clone(),
        qemu: m.qemu.clone().unwrap_or(defaults.qemu.clone()),
        kvm: m.kvm,
        vcpus: m.cpus.unwrap_or(defaults.vcpus),
        memory_mib: m
            .memory
            .as_ref()
            .and_then(|q| q.bytes())
            .map_or(defaults.memory_mib, |b| {
                u32::try_from(b >> 20).unwrap_or(u32::MAX)
            }),
        network: m.network.unwrap_or(defaults.network),
        disk_free_mib: m
            .disk_free
            .as_ref()
            .and_then(|q| q.bytes())
            .map_or(defaults.disk_free_mib, |b| b >> 20),
        state_dir: m.state_dir.clone().unwrap_or(defaults.state_dir.clone()),
        owner: owner_name(&runner.name),
        per_process,
        ..defaults
    };
    let level = MicrovmIsolation::new(config)
        .with_context(|| format!("runner {:?}: the microvm level", runner.name))?;
    Ok(match store {
        Some(store) if m.snapshot_store.unwrap_or(true) => level.with_snapshot_store(store.clone()),
        _ => level,
    })
}

/// `vm`: a full VM per slot (QEMU `q35`) from a prepared disk, every stage in it, as GitLab's
/// VM isolation runs a job in a nesting VM (`[runners.autoscaler.vm_isolation]`,
/// `[runners.instance] allowed_images`, `[runners.vm]`).
pub fn vm(cx: &LevelContext<'_>) -> Result<Arc<dyn Isolation>> {
    let runner = cx.runner;
    let v = runner.vm.clone().unwrap_or_default();
    let defaults = VmLevelConfig::default();
    let isolation = runner
        .autoscaler
        .as_ref()
        .map(|a| a.vm_isolation.clone())
        .unwrap_or_default();
    let config = VmLevelConfig {
        default_image: Some(isolation.image).filter(|i| !i.is_empty()),
        allowed_images: runner
            .instance
            .as_ref()
            .map(|i| i.allowed_images.clone())
            .unwrap_or_default(),
        images_dir: v.images_dir.clone(),
        kernel: v.kernel.clone(),
        qemu: v.qemu.clone().unwrap_or(defaults.qemu.clone()),
        kvm: v.kvm,
        vcpus: v.cpus.unwrap_or(defaults.vcpus),
        memory_mib: v
            .memory
            .as_ref()
            .and_then(|q| q.bytes())
            .map_or(defaults.memory_mib, |b| {
                u32::try_from(b >> 20).unwrap_or(u32::MAX)
            }),
        network: v.network.unwrap_or(defaults.network),
        state_dir: v.state_dir.clone().unwrap_or(defaults.state_dir.clone()),
        owner: owner_name(&runner.name),
        ..defaults
    };
    Ok(Arc::new(VmLevel::new(config).with_context(|| {
        format!("runner {:?}: the vm level", runner.name)
    })?))
}

/// A runner's name as part of a path: `flotilla-<name>` with anything but letters, digits
/// and `._-` replaced by `_`.
fn owner_name(runner: &str) -> String {
    let name: String = runner
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    if name.is_empty() {
        "flotilla".into()
    } else {
        format!("flotilla-{name}")
    }
}

fn pull(p: &PullPolicy) -> flotilla_isolate::docker::PullPolicy {
    match p {
        PullPolicy::Always => flotilla_isolate::docker::PullPolicy::Always,
        PullPolicy::IfNotPresent => flotilla_isolate::docker::PullPolicy::IfNotPresent,
        PullPolicy::Never => flotilla_isolate::docker::PullPolicy::Never,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::DockerConfig;

    fn with_docker(docker: DockerConfig) -> RunnerConfig {
        RunnerConfig {
            docker: Some(docker),
            ..RunnerConfig::embedded_default()
        }
    }

    /// GitLab's `host`: the daemon on the instance `dial-stdio` speaks to (`docker -H host
    /// system dial-stdio`, as GitLab's docker-autoscaler runs it); unset, the instance's
    /// default daemon. It was accepted and ignored.
    #[test]
    fn host_names_the_daemon_dial_stdio_reaches() {
        let plain = docker_config(&with_docker(DockerConfig::default())).unwrap();
        assert_eq!(plain.route, DockerRoute::default());
        let set = docker_config(&with_docker(DockerConfig {
            host: Some("unix:///run/user/1000/docker.sock".into()),
            ..DockerConfig::default()
        }))
        .unwrap();
        assert_eq!(
            set.route,
            DockerRoute::DialStdio(
                "docker -H unix:///run/user/1000/docker.sock system dial-stdio".into()
            )
        );
    }

    /// `wait_for_services_timeout`: seconds, GitLab's 30 when unset or 0, -1 not waited for.
    #[test]
    fn wait_for_services_timeout_as_gitlab_reads_it() {
        let wait = |v: Option<i64>| {
            docker_config(&with_docker(DockerConfig {
                wait_for_services_timeout: v,
                ..DockerConfig::default()
            }))
            .unwrap()
            .wait_for_services_timeout
        };
        assert_eq!(wait(None), std::time::Duration::from_secs(30));
        assert_eq!(wait(Some(0)), std::time::Duration::from_secs(30));
        assert_eq!(wait(Some(45)), std::time::Duration::from_secs(45));
        assert_eq!(wait(Some(-1)), std::time::Duration::ZERO);
    }

    /// The container options reach the level's settings.
    #[test]
    fn container_options_reach_the_level() {
        let config = docker_config(&with_docker(DockerConfig {
            shm_size: 1 << 28,
            ..DockerConfig::default()
        }))
        .unwrap();
        let host = config
            .options
            .build(bollard::models::ContainerCreateBody::default())
            .host_config
            .unwrap();
        assert_eq!(host.shm_size, Some(1 << 28));
    }
}
