//! `[runners.docker]`: the `docker` level's settings as GitLab Runner's `DockerConfig` names
//! them, read, checked and turned into the level's [`DockerIsolationConfig`] here. Every key is
//! taken apart by name in [`DockerSettings::build`]: a key added to the table and not used
//! there fails the build.

use super::allowed::AllowedImages;
use super::limits::BuildLimits;
use super::network::NetworkMode;
use super::options::{ContainerOptions, RawContainerOptions};
use super::security::{DeviceMapping, Security};
use super::volumes::Volume;
use super::{DockerIsolationConfig, PullPolicy, SlotCgroupTemplates};
use crate::settings::{SettingError, SettingErrors};
use flotilla_connect::docker_api::DockerRoute;
use flotilla_connect::shell::quote;
use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;

/// `[runners.docker]`.
#[derive(Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct DockerSettings {
    /// The default job image.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Run the job's containers privileged (the build container's image must match
    /// `allowed_privileged_images`, a service's `allowed_privileged_services`).
    pub privileged: bool,
    /// Overrides `privileged` for services.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub services_privileged: Option<bool>,
    /// The build images that may run privileged (doublestar patterns); empty: all.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub allowed_privileged_images: Vec<String>,
    /// The service images that may run privileged; empty: all.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub allowed_privileged_services: Vec<String>,
    /// Capabilities added to the build container.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cap_add: Vec<String>,
    /// Capabilities dropped from the build container.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cap_drop: Vec<String>,
    /// Security options of the build container (`seccomp=...`, `no-new-privileges`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub security_opt: Vec<String>,
    /// Security options of the services.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub services_security_opt: Vec<String>,
    /// Host devices for the build container (`/dev/kvm`, `/dev/fuse:/dev/fuse:rwm`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<String>,
    /// The user namespace mode of the job's containers (`host`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub userns_mode: Option<String>,
    /// Pull policies, tried in order; written as one string or a list. Empty means GitLab's
    /// default, `always`.
    #[serde(
        deserialize_with = "pull_policies",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub pull_policy: Vec<PullPolicy>,
    /// The pull policies a job's `pull_policy` may name; empty means those of `pull_policy`
    /// (GitLab's `GetAllowedPullPolicies`), so by default a job cannot ask for more than the
    /// runner pulls with.
    #[serde(
        deserialize_with = "pull_policies",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub allowed_pull_policies: Vec<PullPolicy>,
    /// The images a job may name (doublestar patterns); empty: any. The default `image` is
    /// always allowed.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub allowed_images: Vec<String>,
    /// The services a job may name (doublestar patterns); empty: any.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub allowed_services: Vec<String>,
    /// Most services per job; -1 or unset is no limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub services_limit: Option<i64>,
    /// Extra volumes for job containers (`/cache`, `/host:/container:ro`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<String>,
    /// `disable_cache`: each job gets cache volumes of its own, removed after it.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub disable_cache: bool,
    /// `cache_dir`: cache volumes are directories under it on the instance.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_dir: Option<String>,
    /// CPU limit of job containers (`"1.5"`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpus: Option<String>,
    /// Memory limit of job containers (`"2g"`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<String>,
    /// The Docker daemon to use on the instance (`unix:///var/run/docker.sock`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// The cgroup template for service containers; falls back to the runner's
    /// `slot_cgroup_template`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service_slot_cgroup_template: Option<String>,
    /// `[[runners.docker.services]]`: services every job gets, before its own.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub services: Vec<RunnerService>,
    /// Host devices for the services whose image matches each pattern (GitLab's
    /// `services_devices`, `"postgres:*" = ["/dev/fuse"]`).
    #[serde(skip_serializing_if = "HashMap::is_empty")]
    pub services_devices: HashMap<String, Vec<String>>,
    /// The build container's user, ahead of the job's `image:docker:user`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// The users the build container may run as (empty: only `user`, or any without it).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub allowed_users: Vec<String>,
    /// The build container's cgroup parent (slot cgroups, when on, come first).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub cgroup_parent: String,
    /// The services' cgroup parent.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub service_cgroup_parent: String,
    /// Containers whose volumes the build container mounts.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub volumes_from: Vec<String>,
    /// Legacy links of the build container.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub links: Vec<String>,
    /// The network the job's containers join (`host`, `bridge`, `none`, or a network's name).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network_mode: Option<String>,
    /// Seconds to wait for services to listen (0 or unset: GitLab's default 30; negative: not
    /// waited for).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wait_for_services_timeout: Option<i64>,
    /// Keep the images' own entrypoints whatever a job's `entrypoint` asks.
    #[serde(skip_serializing_if = "is_false")]
    pub disable_entrypoint_overwrite: bool,
    /// DNS servers of the job's containers.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub dns: Vec<String>,
    /// DNS search domains of the job's containers.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub dns_search: Vec<String>,
    /// `host:ip` entries added to the job's containers' `/etc/hosts`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub extra_hosts: Vec<String>,
    /// The OCI runtime of the job's containers (`runc`, `sysbox-runc`).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub runtime: String,
    /// The size of `/dev/shm` in bytes for the job's containers (0: Docker's 64 MiB).
    #[serde(skip_serializing_if = "is_zero")]
    pub shm_size: i64,
    /// tmpfs mounts of the build container (path to options).
    #[serde(skip_serializing_if = "HashMap::is_empty")]
    pub tmpfs: HashMap<String, String>,
    /// tmpfs mounts of the services.
    #[serde(skip_serializing_if = "HashMap::is_empty")]
    pub services_tmpfs: HashMap<String, String>,
    /// Kernel parameters of the build container.
    #[serde(skip_serializing_if = "HashMap::is_empty")]
    pub sysctls: HashMap<String, String>,
    /// Resource limits of the build container (`nofile = "1024:2048"`).
    #[serde(skip_serializing_if = "HashMap::is_empty")]
    pub ulimit: HashMap<String, String>,
    /// Keep the OOM killer away from the build container.
    #[serde(skip_serializing_if = "is_false")]
    pub oom_kill_disable: bool,
    /// The build container's OOM score adjustment.
    #[serde(skip_serializing_if = "is_zero")]
    pub oom_score_adjust: i64,
    /// Extra groups of the build container's user.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub group_add: Vec<String>,
    /// The build container's IPC namespace mode (`host`, `shareable`).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub ipcmode: String,
    /// Device cgroup rules of the build container (`c 13:* rmw`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub device_cgroup_rules: Vec<String>,
    /// The build container's host name.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub hostname: String,
    /// Memory plus swap of the build container (a size as `memory`).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub memory_swap: String,
    /// The build container's soft memory limit.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub memory_reservation: String,
    /// The CPUs the build container may use (`0-3`, `0,1`).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub cpuset_cpus: String,
    /// The memory nodes the build container may use.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub cpuset_mems: String,
    /// The build container's relative CPU weight.
    #[serde(skip_serializing_if = "is_zero")]
    pub cpu_shares: i64,
    /// Memory limit of each service container.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub service_memory: String,
    /// Memory plus swap of each service container.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub service_memory_swap: String,
    /// Soft memory limit of each service container.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub service_memory_reservation: String,
    /// CPU limit of each service container (as `cpus`).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub service_cpus: String,
    /// The CPUs the service containers may use.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub service_cpuset_cpus: String,
    /// The service containers' relative CPU weight.
    #[serde(skip_serializing_if = "is_zero")]
    pub service_cpu_shares: i64,
    /// The build container's PID namespace (`host`).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub pid_mode: String,
    /// The driver of the volumes made for the job (`local` when empty).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub volume_driver: String,
    /// Options of that driver for the cache volumes (`type`, `device`, `o` for `local`);
    /// printed with every value but `type`'s and `device`'s redacted (`o` may carry a CIFS
    /// password).
    #[serde(
        skip_serializing_if = "HashMap::is_empty",
        serialize_with = "driver_options"
    )]
    pub volume_driver_ops: HashMap<String, String>,
    /// Labels of the build container (`$VARIABLES` in values expanded with the job's).
    #[serde(skip_serializing_if = "HashMap::is_empty")]
    pub container_labels: HashMap<String, String>,
    /// The build container's GPUs, as `docker run --gpus` reads them (`all`, `"device=0,1"`).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub gpus: String,
    /// The services' GPUs.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub service_gpus: String,
    /// Options of the `json-file` log driver of the job's containers (`env` and `labels`
    /// only, as GitLab Runner allows).
    #[serde(skip_serializing_if = "HashMap::is_empty")]
    pub log_options: HashMap<String, String>,
}

/// One `[[runners.docker.services]]` entry (GitLab's `Service`).
#[derive(Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RunnerService {
    /// The image.
    pub name: String,
    /// The host name jobs reach it by (besides those derived from the image name).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub alias: String,
    /// The command (the image's when empty).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub command: Vec<String>,
    /// The entrypoint (the image's when empty).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub entrypoint: Vec<String>,
    /// Variables of the service (`KEY=value`), beside the job's; printed with their values
    /// redacted, as `[[runners]] environment` is.
    #[serde(
        skip_serializing_if = "Vec::is_empty",
        serialize_with = "flotilla_fleet::serialize_environment"
    )]
    pub environment: Vec<String>,
}

impl fmt::Debug for DockerSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        flotilla_fleet::debug_redacted("DockerSettings", self, f)
    }
}

impl fmt::Debug for RunnerService {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        flotilla_fleet::debug_redacted("RunnerService", self, f)
    }
}

/// Serialises a volume driver's options with every value but `type`'s and `device`'s
/// redacted, in key order.
fn driver_options<S: serde::Serializer>(
    options: &HashMap<String, String>,
    s: S,
) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap;
    let mut keys: Vec<&String> = options.keys().collect();
    keys.sort();
    let mut map = s.serialize_map(Some(keys.len()))?;
    for key in keys {
        if matches!(key.as_str(), "type" | "device") {
            map.serialize_entry(key, &options[key])?;
        } else {
            map.serialize_entry(key, flotilla_fleet::REDACTED)?;
        }
    }
    map.end()
}

/// For `skip_serializing_if`: GitLab's zero default.
#[allow(clippy::trivially_copy_pass_by_ref)]
fn is_zero(n: &i64) -> bool {
    *n == 0
}

/// For `skip_serializing_if`.
#[allow(clippy::trivially_copy_pass_by_ref)]
fn is_false(b: &bool) -> bool {
    !*b
}

impl DockerSettings {
    /// The pull policies in effect (`[always]` when none is configured).
    pub fn effective_pull_policies(&self) -> Vec<PullPolicy> {
        if self.pull_policy.is_empty() {
            vec![PullPolicy::Always]
        } else {
            self.pull_policy.clone()
        }
    }

    /// The pull policies a job may ask for: `allowed_pull_policies`, else those in effect.
    pub fn allowed_pull_policies(&self) -> Vec<PullPolicy> {
        if self.allowed_pull_policies.is_empty() {
            self.effective_pull_policies()
        } else {
            self.allowed_pull_policies.clone()
        }
    }
}

fn pull_policies<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<PullPolicy>, D::Error> {
    struct PullPolicyVisitor;

    fn one<E: de::Error>(s: &str) -> Result<PullPolicy, E> {
        match s {
            "always" => Ok(PullPolicy::Always),
            "if-not-present" => Ok(PullPolicy::IfNotPresent),
            "never" => Ok(PullPolicy::Never),
            other => Err(E::custom(format!(
                "unknown pull_policy `{other}`; expected `always`, `if-not-present` or `never`"
            ))),
        }
    }

    impl<'de> Visitor<'de> for PullPolicyVisitor {
        type Value = Vec<PullPolicy>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a pull policy or a list of pull policies")
        }

        fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
            one(v).map(|p| vec![p])
        }

        fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let mut out = Vec::new();
            while let Some(s) = seq.next_element::<String>()? {
                out.push(one(&s)?);
            }
            Ok(out)
        }
    }

    d.deserialize_any(PullPolicyVisitor)
}

/// What the level's configuration takes from outside its table.
#[derive(Debug, Clone, Default)]
pub struct DockerContext {
    /// Names the runner's containers, networks and volumes (`flotilla-<runner>`).
    pub owner: String,
    /// The runner's `slot_cgroup_template`, when `use_slot_cgroups` is on.
    pub slot_cgroup_template: Option<String>,
    /// The manager's Docker configuration (`~/.docker/config.json`), GitLab Runner's second
    /// source of registry credentials.
    pub docker_config_file: Option<PathBuf>,
}

impl DockerSettings {
    /// The level's configuration; every value that cannot be used is named.
    pub fn build(&self, cx: &DockerContext) -> Result<DockerIsolationConfig, SettingErrors> {
        let policies = self.effective_pull_policies();
        let allowed_policies = self.allowed_pull_policies();
        let DockerSettings {
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
            cgroup_parent,
            service_cgroup_parent,
            volumes_from,
            links,
            dns,
            dns_search,
            extra_hosts,
            runtime,
            shm_size,
            tmpfs,
            services_tmpfs,
            sysctls,
            ulimit,
            oom_kill_disable,
            oom_score_adjust,
            group_add,
            ipcmode,
            device_cgroup_rules,
            hostname,
            memory_swap,
            memory_reservation,
            cpuset_cpus,
            cpuset_mems,
            cpu_shares,
            service_memory,
            service_memory_swap,
            service_memory_reservation,
            service_cpus,
            service_cpuset_cpus,
            service_cpu_shares,
            pid_mode,
            volume_driver,
            volume_driver_ops,
            container_labels,
            gpus,
            service_gpus,
            log_options,
        } = self.clone();
        let mut errors = SettingErrors::default();

        let patterns = |errors: &mut SettingErrors, key: &str, list: &[String]| {
            for (j, pattern) in list.iter().enumerate() {
                errors.check(AllowedImages::new(std::slice::from_ref(pattern)), |m| {
                    SettingError::new(key, m).index(j)
                });
            }
            AllowedImages::new(list).unwrap_or_default()
        };
        let allowed_images = patterns(&mut errors, "allowed_images", &allowed_images);
        let allowed_services = patterns(&mut errors, "allowed_services", &allowed_services);
        let allowed_privileged_images = patterns(
            &mut errors,
            "allowed_privileged_images",
            &allowed_privileged_images,
        );
        let allowed_privileged_services = patterns(
            &mut errors,
            "allowed_privileged_services",
            &allowed_privileged_services,
        );
        let volumes: Vec<Volume> = volumes
            .iter()
            .enumerate()
            .filter_map(|(j, v)| {
                errors.check(Volume::parse(v), |m| {
                    SettingError::new("volumes", m).index(j)
                })
            })
            .collect();
        let devices = device_list(&mut errors, SettingError::new("devices", ""), &devices);
        let mut by_pattern: Vec<(String, Vec<String>)> = services_devices.into_iter().collect();
        by_pattern.sort();
        let services_devices = by_pattern
            .into_iter()
            .filter_map(|(pattern, list)| {
                let at = SettingError::new("services_devices", "").key(&pattern);
                let devices = device_list(&mut errors, at.clone(), &list);
                errors
                    .check(AllowedImages::new(std::slice::from_ref(&pattern)), |m| {
                        SettingError { message: m, ..at }
                    })
                    .map(|p| (p, devices))
            })
            .collect();
        let build_limits = match BuildLimits::parse(cpus.as_deref(), memory.as_deref()) {
            Ok(limits) => limits,
            Err(e) => {
                errors.push(SettingError::new(e.key, &e));
                BuildLimits::default()
            }
        };
        if services_limit.is_some_and(|l| l < -1) {
            errors.push(SettingError::new(
                "services_limit",
                "services_limit must be -1 (no limit) or more",
            ));
        }
        for (j, service) in services.iter().enumerate() {
            if service.name.trim().is_empty() {
                errors.push(
                    SettingError::new(
                        "services",
                        "a [[runners.docker.services]] entry needs a `name` (its image)",
                    )
                    .index(j),
                );
            }
            for (k, entry) in service.environment.iter().enumerate() {
                if !entry.contains('=') {
                    errors.push(
                        SettingError::new(
                            "services",
                            format!("environment entry `{entry}` is not KEY=VALUE"),
                        )
                        .index(j)
                        .key("environment")
                        .index(k),
                    );
                }
            }
        }
        let raw_options = RawContainerOptions {
            dns,
            dns_search,
            extra_hosts,
            runtime,
            shm_size,
            tmpfs,
            services_tmpfs,
            sysctls,
            ulimit,
            oom_kill_disable,
            oom_score_adjust,
            group_add,
            ipcmode,
            device_cgroup_rules,
            hostname,
            memory_swap,
            memory_reservation,
            cpuset_cpus,
            cpuset_mems,
            cpu_shares,
            service_memory,
            service_memory_swap,
            service_memory_reservation,
            service_cpus,
            service_cpuset_cpus,
            service_cpu_shares,
            cgroup_parent,
            service_cgroup_parent,
            volumes_from,
            links,
            pid_mode,
            volume_driver,
            container_labels,
            gpus,
            service_gpus,
            log_options,
        };
        let options = match ContainerOptions::parse(&raw_options) {
            Ok(o) => o,
            Err(e) => {
                errors.push(SettingError::new(e.key(), &e));
                ContainerOptions::default()
            }
        };
        // GitLab's `host`: the daemon `docker system dial-stdio` speaks to on the instance.
        let route = match host.as_deref().map(str::trim) {
            Some(h) if !h.is_empty() => {
                DockerRoute::DialStdio(format!("docker -H {} system dial-stdio", quote(h)))
            }
            _ => DockerRoute::default(),
        };
        let slot_cgroups = cx
            .slot_cgroup_template
            .as_ref()
            .map(|build| SlotCgroupTemplates {
                build: build.clone(),
                services: service_slot_cgroup_template.unwrap_or_else(|| build.clone()),
            });
        errors.or(|| DockerIsolationConfig {
            route,
            default_image: image,
            volumes,
            disable_cache,
            cache_dir: cache_dir.filter(|d| !d.trim().is_empty()),
            docker_config_file: cx.docker_config_file.clone(),
            build_limits,
            services_limit,
            allowed_images,
            allowed_services,
            pull_policy: policies,
            allowed_pull_policies: allowed_policies,
            owner: cx.owner.clone(),
            security: Security {
                privileged,
                services_privileged,
                allowed_privileged_images,
                allowed_privileged_services,
                cap_add,
                cap_drop,
                security_opt,
                services_security_opt,
                devices,
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
                    variables: s
                        .environment
                        .iter()
                        .filter_map(|e| e.split_once('='))
                        // Not public: a service's password stays out of `Debug`.
                        .map(|(k, v)| flotilla_job::Variable {
                            public: false,
                            ..flotilla_job::Variable::new(k, v)
                        })
                        .collect(),
                    ..flotilla_job::model::Image::default()
                })
                .collect(),
            services_devices,
            volume_driver_ops: flotilla_fleet::Secret::new(volume_driver_ops),
            ..DockerIsolationConfig::default()
        })
    }
}

/// The device mappings of `list`, each one that does not parse named under `at`.
fn device_list(
    errors: &mut SettingErrors,
    at: SettingError,
    list: &[String],
) -> Vec<DeviceMapping> {
    list.iter()
        .enumerate()
        .filter_map(|(j, d)| {
            errors.check(DeviceMapping::parse(d), |m| {
                SettingError {
                    message: m,
                    ..at.clone()
                }
                .index(j)
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn build(text: &str) -> Result<DockerIsolationConfig, SettingErrors> {
        let settings: DockerSettings = toml::from_str(text).expect("a [runners.docker] table");
        settings.build(&DockerContext::default())
    }

    #[test]
    fn pull_policy_string_or_list() {
        let d: DockerSettings = toml::from_str("pull_policy = \"if-not-present\"").unwrap();
        assert_eq!(d.pull_policy, vec![PullPolicy::IfNotPresent]);
        let d: DockerSettings = toml::from_str("pull_policy = [\"never\", \"always\"]").unwrap();
        assert_eq!(d.pull_policy, vec![PullPolicy::Never, PullPolicy::Always]);
        let d = DockerSettings::default();
        assert_eq!(d.effective_pull_policies(), vec![PullPolicy::Always]);
        let e = toml::from_str::<DockerSettings>("pull_policy = [\"sometimes\"]").unwrap_err();
        assert!(
            e.message().contains("unknown pull_policy `sometimes`"),
            "{e}"
        );
    }

    /// Issue 32 (3): a job may ask only for what `allowed_pull_policies` lists, or else for
    /// what the runner's `pull_policy` is (GitLab's `GetAllowedPullPolicies`); before, it
    /// could ask for any.
    #[test]
    fn a_job_chooses_among_the_runners_pull_policies() {
        let d: DockerSettings = toml::from_str("pull_policy = \"if-not-present\"").unwrap();
        assert_eq!(d.allowed_pull_policies(), vec![PullPolicy::IfNotPresent]);
        assert_eq!(
            DockerSettings::default().allowed_pull_policies(),
            vec![PullPolicy::Always]
        );
        let d: DockerSettings = toml::from_str(
            "pull_policy = \"if-not-present\"\nallowed_pull_policies = [\"always\", \"if-not-present\"]",
        )
        .unwrap();
        assert_eq!(
            d.allowed_pull_policies(),
            vec![PullPolicy::Always, PullPolicy::IfNotPresent]
        );
        let config = build("pull_policy = \"if-not-present\"").unwrap();
        assert_eq!(config.pull_policy, [PullPolicy::IfNotPresent]);
        assert_eq!(config.allowed_pull_policies, [PullPolicy::IfNotPresent]);
    }

    /// GitLab's `host`: the daemon on the instance `dial-stdio` speaks to (`docker -H host
    /// system dial-stdio`, as GitLab's docker-autoscaler runs it); unset, the instance's
    /// default daemon. It was accepted and ignored.
    #[test]
    fn host_names_the_daemon_dial_stdio_reaches() {
        assert_eq!(build("").unwrap().route, DockerRoute::default());
        assert_eq!(
            build("host = \"unix:///run/user/1000/docker.sock\"")
                .unwrap()
                .route,
            DockerRoute::DialStdio(
                "docker -H unix:///run/user/1000/docker.sock system dial-stdio".into()
            )
        );
    }

    /// `wait_for_services_timeout`: seconds, GitLab's 30 when unset or 0, -1 not waited for.
    #[test]
    fn wait_for_services_timeout_as_gitlab_reads_it() {
        let wait = |text: &str| build(text).unwrap().wait_for_services_timeout;
        assert_eq!(wait(""), std::time::Duration::from_secs(30));
        assert_eq!(
            wait("wait_for_services_timeout = 0"),
            std::time::Duration::from_secs(30)
        );
        assert_eq!(
            wait("wait_for_services_timeout = 45"),
            std::time::Duration::from_secs(45)
        );
        assert_eq!(
            wait("wait_for_services_timeout = -1"),
            std::time::Duration::ZERO
        );
    }

    /// The container options, the context and the slot cgroups reach the level.
    #[test]
    fn options_and_context_reach_the_level() {
        let settings: DockerSettings =
            toml::from_str("shm_size = 268435456\nservice_slot_cgroup_template = \"svc-${slot}\"")
                .unwrap();
        let config = settings
            .build(&DockerContext {
                owner: "flotilla-r".into(),
                slot_cgroup_template: Some("slot-${slot}".into()),
                docker_config_file: Some("/root/.docker/config.json".into()),
            })
            .unwrap();
        let host = config
            .options
            .build(bollard::models::ContainerCreateBody::default())
            .host_config
            .unwrap();
        assert_eq!(host.shm_size, Some(1 << 28));
        assert_eq!(config.owner, "flotilla-r");
        assert_eq!(
            config.slot_cgroups,
            Some(SlotCgroupTemplates {
                build: "slot-${slot}".into(),
                services: "svc-${slot}".into(),
            })
        );
        assert!(config.docker_config_file.is_some());
        let without: DockerSettings =
            toml::from_str("service_slot_cgroup_template = \"svc-${slot}\"").unwrap();
        let config = without.build(&DockerContext::default()).unwrap();
        assert_eq!(
            config.slot_cgroups, None,
            "slot cgroups only when the runner uses them"
        );
    }

    /// A service's variables and a driver's options may hold passwords: printed and debugged
    /// redacted, used as written.
    #[test]
    fn secrets_in_the_table_are_printed_redacted() {
        let settings: DockerSettings = toml::from_str(
            "volume_driver = \"local\"\n[volume_driver_ops]\ntype = \"cifs\"\n\
             o = \"username=ci,password=cifs-secret\"\n[[services]]\nname = \"postgres:16\"\n\
             environment = [\"POSTGRES_PASSWORD=pg-secret\", \"FF_X=true\"]\n",
        )
        .unwrap();
        let printed = toml::to_string(&settings).unwrap();
        let debug = format!("{settings:?}");
        for text in [&printed, &debug] {
            assert!(
                !text.contains("cifs-secret") && !text.contains("pg-secret"),
                "{text}"
            );
            assert!(
                text.contains("cifs") && text.contains("FF_X=true"),
                "{text}"
            );
        }
        let config = settings.build(&DockerContext::default()).unwrap();
        assert_eq!(
            config.volume_driver_ops.expose()["o"],
            "username=ci,password=cifs-secret"
        );
        assert_eq!(config.services[0].variables[0].value, "pg-secret");
        let debug = format!("{config:?}");
        assert!(
            !debug.contains("cifs-secret") && !debug.contains("pg-secret"),
            "{debug}"
        );
    }

    /// Every value that cannot be used is named at its place, all at once.
    #[test]
    fn every_bad_value_is_named_at_its_place() {
        let e = build(
            "volumes = [\"/ok\", \"\"]\ndevices = [\"/dev/a:b:c:d\"]\n\
             allowed_images = [\"[\"]\ncpus = \"lots\"\nservices_limit = -2\n\
             shm_size = -1\n[[services]]\nalias = \"db\"\n\
             [services_devices]\n\"pg*\" = [\"/dev/x:y:z:w\"]",
        )
        .unwrap_err();
        let places: Vec<String> =
            e.0.iter()
                .map(|e| {
                    e.to_string()
                        .split(':')
                        .next()
                        .unwrap_or_default()
                        .to_string()
                })
                .collect();
        assert_eq!(
            places,
            [
                "allowed_images[0]",
                "volumes[1]",
                "devices[0]",
                "services_devices.pg*[0]",
                "cpus",
                "services_limit",
                "services[0]",
                "shm_size",
            ],
            "{e}"
        );
    }
}
