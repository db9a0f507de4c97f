//! `[[runners]]`: one GitLab runner registration and the fleet its jobs run on.

use super::autoscaler::{AutoscalerConfig, IsolationLevel, IsolationLevels};
use super::count;
use super::redact;
use flotilla_fleet::Secret;
use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::PathBuf;

/// How a runner's jobs are executed.
///
/// GitLab's autoscaling executors work unchanged; GitLab's single-host `shell` and `docker`
/// executors are accepted and mapped onto flotilla's model: this host as the only instance
/// (the `local` provider, no `[runners.autoscaler]` needed) with `shell` or `docker`
/// isolation respectively.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum Executor {
    /// GitLab's `docker-autoscaler`: jobs in containers on autoscaled instances
    /// (default isolation `docker`).
    #[serde(rename = "docker-autoscaler")]
    DockerAutoscaler,
    /// GitLab's `instance`: jobs straight on autoscaled instances over SSH/WinRM (default
    /// isolation `shell`, or `vm` with `vm_isolation`).
    #[serde(rename = "instance")]
    Instance,
    /// flotilla's own executor: an autoscaled fleet whose isolation level is chosen with
    /// `[runners.autoscaler] isolation` (default `shell`). Without `[runners.autoscaler]` it
    /// runs on this host. A `flotilla` runner may leave out `url` and `token`; it then serves
    /// only `flotilla exec`.
    #[serde(rename = "flotilla")]
    Flotilla,
    /// GitLab's `shell`: mapped to this host as the only instance, `shell` isolation.
    #[serde(rename = "shell")]
    Shell,
    /// GitLab's `docker`: mapped to this host as the only instance, `docker` isolation against
    /// `[runners.docker] host` (or the local daemon).
    #[serde(rename = "docker")]
    Docker,
}

impl Executor {
    /// Every executor name flotilla accepts.
    pub const NAMES: [&'static str; 5] = [
        "docker-autoscaler",
        "instance",
        "flotilla",
        "shell",
        "docker",
    ];

    /// The name used in the configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            Executor::DockerAutoscaler => "docker-autoscaler",
            Executor::Instance => "instance",
            Executor::Flotilla => "flotilla",
            Executor::Shell => "shell",
            Executor::Docker => "docker",
        }
    }

    /// Parses an executor name.
    pub fn parse(name: &str) -> Option<Executor> {
        Some(match name {
            "docker-autoscaler" => Executor::DockerAutoscaler,
            "instance" => Executor::Instance,
            "flotilla" => Executor::Flotilla,
            "shell" => Executor::Shell,
            "docker" => Executor::Docker,
            _ => return None,
        })
    }

    /// Whether this executor needs a `[runners.autoscaler]` table (GitLab's autoscaling
    /// executors do).
    pub fn requires_autoscaler(self) -> bool {
        matches!(self, Executor::DockerAutoscaler | Executor::Instance)
    }

    /// Whether a runner with this executor takes jobs from GitLab and so needs `url` and
    /// `token`. Only `flotilla` runners may be local-only.
    pub fn requires_gitlab(self) -> bool {
        !matches!(self, Executor::Flotilla)
    }

    /// The isolation level used when `[runners.autoscaler] isolation` is not set.
    pub fn default_isolation(self, vm_isolation_enabled: bool) -> IsolationLevel {
        match self {
            Executor::DockerAutoscaler | Executor::Docker => IsolationLevel::Docker,
            Executor::Instance if vm_isolation_enabled => IsolationLevel::Vm,
            Executor::Instance | Executor::Flotilla | Executor::Shell => IsolationLevel::Shell,
        }
    }
}

impl fmt::Display for Executor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// GitLab's Docker Machine executor (registered under this name in GitLab Runner's
/// `main.go`): `flotilla migrate` turns its configuration into flotilla's.
pub const DOCKER_MACHINE_EXECUTORS: [&str; 1] = ["docker+machine"];

impl<'de> Deserialize<'de> for Executor {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        Executor::parse(&name).ok_or_else(|| {
            if DOCKER_MACHINE_EXECUTORS.contains(&name.as_str()) {
                return de::Error::custom(format!(
                    "executor `{name}` is GitLab's Docker Machine autoscaler, which flotilla \
                     does not run (GitLab deprecated it in 17.5); `flotilla migrate` on this \
                     file prints the equivalent flotilla configuration (its policies, limits \
                     and provider) without changing the file"
                ));
            }
            de::Error::custom(format!(
                "executor `{name}` is not supported by flotilla; supported: {}",
                Executor::NAMES.join(", ")
            ))
        })
    }
}

/// The default `slot_cgroup_template`.
pub const DEFAULT_SLOT_CGROUP_TEMPLATE: &str = "gitlab-runner/slot-${slot}";

fn default_request_concurrency() -> u32 {
    1
}

fn default_slot_cgroup_template() -> String {
    DEFAULT_SLOT_CGROUP_TEMPLATE.to_string()
}

/// `[[runners]]`. `Debug` prints the redacted form (token, environment values, credential-like
/// keys of opaque tables).
#[derive(Clone, PartialEq, Serialize, Deserialize)]
pub struct RunnerConfig {
    /// A description, shown in GitLab and in logs.
    #[serde(default)]
    pub name: String,
    /// The GitLab instance's URL. Required unless `executor = "flotilla"`. Printed without
    /// a `user:password@` or query.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "redact::url_opt"
    )]
    pub url: Option<String>,
    /// The runner authentication token (`glrt-...`). Required unless
    /// `executor = "flotilla"`. Printed as `[REDACTED]`.
    #[serde(
        default,
        serialize_with = "redact::secret_opt",
        skip_serializing_if = "Option::is_none"
    )]
    pub token: Option<Secret<String>>,
    /// The runner's id in GitLab, as `gitlab-runner register` records it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<i64>,
    /// How jobs are executed. Required.
    pub executor: Executor,
    /// Most jobs at once for this runner; 0 is no limit of its own (`concurrent` still
    /// applies).
    #[serde(default, deserialize_with = "count::deserialize")]
    pub limit: u32,
    /// Job requests in flight at once (default 1; 0 is read as 1, like GitLab).
    #[serde(
        default = "default_request_concurrency",
        deserialize_with = "count::deserialize"
    )]
    pub request_concurrency: u32,
    /// Where builds are checked out on the instance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub builds_dir: Option<String>,
    /// Where jobs fetch their sources instead of the URL GitLab gives (`https://gitlab.internal`,
    /// `ssh://gitlab.internal:2222`): GitLab Runner's `clone_url`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clone_url: Option<String>,
    /// The shell scripts are generated for (`bash`, `sh`, `pwsh`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shell: Option<String>,
    /// Commands run before the sources are fetched, ahead of the job's own
    /// `hooks:pre_get_sources_script` (one command, lines and all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pre_get_sources_script: Option<String>,
    /// GitLab's deprecated name of `pre_get_sources_script`, used when that is not set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pre_clone_script: Option<String>,
    /// Commands run after the sources are fetched, after the job's own
    /// `hooks:post_get_sources_script`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub post_get_sources_script: Option<String>,
    /// Commands run in every job's `script` step before its own (one command, lines and all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pre_build_script: Option<String>,
    /// Commands run in every job's `script` step after its own, when they succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub post_build_script: Option<String>,
    /// The most of a job's log kept, in KiB (GitLab's default 4096); what comes after is
    /// dropped with GitLab's notice and the job goes on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_limit: Option<u64>,
    /// Ignore `CI_DEBUG_TRACE` (and `CI_DEBUG_SERVICES`): no shell trace that could print
    /// secrets, whatever a pipeline asks; the job's log says so.
    #[serde(default)]
    pub debug_trace_disabled: bool,
    /// Extra job variables as `KEY=VALUE`. Values other than `FF_*` feature flags are
    /// printed as `[REDACTED]`.
    #[serde(default, serialize_with = "redact::environment")]
    pub environment: Vec<String>,
    /// Give each slot its own cgroup (`slot_cgroup_template`).
    #[serde(default)]
    pub use_slot_cgroups: bool,
    /// The slot's cgroup path; `${slot}` (or `$slot`) is replaced by the slot number.
    #[serde(default = "default_slot_cgroup_template")]
    pub slot_cgroup_template: String,
    /// `cache_dir`: where the runner's job caches are kept on the manager (default
    /// `<state_dir>/cache/<runner>`), when no distributed cache is configured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_dir: Option<PathBuf>,
    /// `tls-ca-file`: PEM certificates trusted for GitLab beside the system's, and given to
    /// jobs as `CI_SERVER_TLS_CA_FILE`.
    #[serde(
        rename = "tls-ca-file",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub tls_ca_file: Option<PathBuf>,
    /// `tls-cert-file`: the certificate presented to GitLab (with `tls-key-file`), and given
    /// to jobs as `CI_SERVER_TLS_CERT_FILE`.
    #[serde(
        rename = "tls-cert-file",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub tls_cert_file: Option<PathBuf>,
    /// `tls-key-file`: its key, given to jobs as `CI_SERVER_TLS_KEY_FILE`.
    #[serde(
        rename = "tls-key-file",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub tls_key_file: Option<PathBuf>,
    /// `[runners.feature_flags]`: GitLab Runner feature flags set for every job, deciding
    /// over the job's variables.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub feature_flags: BTreeMap<String, bool>,
    /// `[runners.cache]`: GitLab's distributed cache (the `flotilla-cache` crate reads and
    /// checks it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<flotilla_cache::CacheConfig>,
    /// `[runners.docker]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub docker: Option<DockerConfig>,
    /// `[runners.instance]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<InstanceConfig>,
    /// `[runners.autoscaler]`. Required for `docker-autoscaler` and `instance`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscaler: Option<AutoscalerConfig>,
    /// `[runners.cgroup]` (flotilla extension): the most each slot's cgroup may use, for the
    /// `cgroup` level.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<CgroupConfig>,
    /// `[runners.microvm]` (flotilla extension): the VMs of the `microvm` level.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub microvm: Option<MicrovmConfig>,
    /// `[runners.vm]` (flotilla extension): the VMs of the `vm` level (GitLab's
    /// `[runners.autoscaler.vm_isolation]` names the image).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vm: Option<VmConfig>,
}

impl fmt::Debug for RunnerConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        redact::debug_redacted("RunnerConfig", self, f)
    }
}

impl RunnerConfig {
    /// The runner `flotilla exec` uses when no configuration is given: flotilla's own
    /// executor with no autoscaler, so this host is the only instance and jobs get shell
    /// isolation, one slot per core.
    pub fn embedded_default() -> RunnerConfig {
        RunnerConfig {
            name: String::new(),
            url: None,
            token: None,
            id: None,
            executor: Executor::Flotilla,
            limit: 0,
            request_concurrency: default_request_concurrency(),
            builds_dir: None,
            clone_url: None,
            shell: None,
            pre_get_sources_script: None,
            pre_clone_script: None,
            post_get_sources_script: None,
            pre_build_script: None,
            post_build_script: None,
            output_limit: None,
            debug_trace_disabled: false,
            environment: Vec::new(),
            use_slot_cgroups: false,
            slot_cgroup_template: default_slot_cgroup_template(),
            cache_dir: None,
            tls_ca_file: None,
            tls_cert_file: None,
            tls_key_file: None,
            feature_flags: BTreeMap::new(),
            cache: None,
            docker: None,
            instance: None,
            autoscaler: None,
            cgroup: None,
            microvm: None,
            vm: None,
        }
    }

    /// The isolation level of this runner's jobs that name none: the first of
    /// [`RunnerConfig::isolation_levels`].
    pub fn isolation(&self) -> IsolationLevel {
        self.isolation_levels().default_level()
    }

    /// The isolation levels this runner's jobs may run at: `[runners.autoscaler] isolation`,
    /// or the executor's default alone.
    pub fn isolation_levels(&self) -> IsolationLevels {
        let vm = self
            .autoscaler
            .as_ref()
            .is_some_and(|a| a.vm_isolation.enabled);
        self.autoscaler
            .as_ref()
            .and_then(|a| a.isolation.clone())
            .unwrap_or_else(|| self.executor.default_isolation(vm).into())
    }

    /// The level of jobs that name an image and no level (`image_isolation`), if set.
    pub fn image_isolation(&self) -> Option<IsolationLevel> {
        self.autoscaler.as_ref().and_then(|a| a.image_isolation)
    }

    /// The environment entries split at the first `=` (entries without one are skipped;
    /// loading rejects them).
    pub fn environment_pairs(&self) -> Vec<(&str, &str)> {
        self.environment
            .iter()
            .filter_map(|e| e.split_once('='))
            .collect()
    }

    /// How GitLab's certificate is checked and how this runner proves who it is.
    pub fn tls_files(&self) -> flotilla_gitlab::TlsFiles {
        flotilla_gitlab::TlsFiles {
            ca_file: self.tls_ca_file.clone(),
            cert_file: self.tls_cert_file.clone(),
            key_file: self.tls_key_file.clone(),
        }
    }

    /// The URL and token to reach GitLab with, when both are set.
    pub fn gitlab_credentials(&self) -> Option<(&str, &Secret<String>)> {
        Some((self.url.as_deref()?, self.token.as_ref()?))
    }

    /// `slot_cgroup_template` with the slot number filled in.
    pub fn slot_cgroup(&self, slot: u32) -> String {
        expand_slot(&self.slot_cgroup_template, slot)
    }
}

/// Replaces `${slot}` and `$slot` in a cgroup template.
pub fn expand_slot(template: &str, slot: u32) -> String {
    flotilla_isolate::cgroup::expand_template(template, slot as usize)
}

/// When to pull a job's image.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PullPolicy {
    /// Pull every time.
    Always,
    /// Pull when the image is not present.
    IfNotPresent,
    /// Never pull; the image must be present.
    Never,
}

/// `[runners.docker]`: settings of the `docker` isolation level.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct DockerConfig {
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
}

/// One `[[runners.docker.services]]` entry (GitLab's `Service`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
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

impl DockerConfig {
    /// The container options of this table as the docker level reads them
    /// ([`flotilla_isolate::docker::options`]).
    pub fn container_options(&self) -> flotilla_isolate::docker::options::RawContainerOptions {
        flotilla_isolate::docker::options::RawContainerOptions {
            dns: self.dns.clone(),
            dns_search: self.dns_search.clone(),
            extra_hosts: self.extra_hosts.clone(),
            runtime: self.runtime.clone(),
            shm_size: self.shm_size,
            tmpfs: self.tmpfs.clone(),
            services_tmpfs: self.services_tmpfs.clone(),
            sysctls: self.sysctls.clone(),
            ulimit: self.ulimit.clone(),
            oom_kill_disable: self.oom_kill_disable,
            oom_score_adjust: self.oom_score_adjust,
            group_add: self.group_add.clone(),
            ipcmode: self.ipcmode.clone(),
            device_cgroup_rules: self.device_cgroup_rules.clone(),
            hostname: self.hostname.clone(),
            memory_swap: self.memory_swap.clone(),
            memory_reservation: self.memory_reservation.clone(),
            cpuset_cpus: self.cpuset_cpus.clone(),
            cpuset_mems: self.cpuset_mems.clone(),
            cpu_shares: self.cpu_shares,
            service_memory: self.service_memory.clone(),
            service_memory_swap: self.service_memory_swap.clone(),
            service_memory_reservation: self.service_memory_reservation.clone(),
            service_cpus: self.service_cpus.clone(),
            service_cpuset_cpus: self.service_cpuset_cpus.clone(),
            service_cpu_shares: self.service_cpu_shares,
            cgroup_parent: self.cgroup_parent.clone(),
            service_cgroup_parent: self.service_cgroup_parent.clone(),
            volumes_from: self.volumes_from.clone(),
            links: self.links.clone(),
        }
    }

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

/// `[runners.cgroup]` (flotilla extension): what each slot's cgroup may use. A job lowers
/// these with `KUBERNETES_CPU_LIMIT`, `KUBERNETES_MEMORY_LIMIT` and `FLOTILLA_PIDS_LIMIT`, and
/// never raises them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CgroupConfig {
    /// CPUs, as a number (`1.5`) or a Kubernetes quantity (`"500m"`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuQuantity>,
    /// Memory, as a Kubernetes quantity (`"512Mi"`, `"1G"`) or bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryQuantity>,
    /// Processes and threads.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pids: Option<u64>,
    /// Where cgroup file systems are mounted on the instances (default `/sys/fs/cgroup`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub root: Option<String>,
}

/// A CPU amount: `1.5` or `"500m"`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum CpuQuantity {
    /// CPUs.
    Cpus(f64),
    /// A Kubernetes quantity.
    Quantity(String),
}

impl CpuQuantity {
    /// In thousandths of a CPU; `None` when it does not parse or is not positive.
    pub fn millis(&self) -> Option<u64> {
        let millis = match self {
            CpuQuantity::Cpus(c) => flotilla_isolate::cgroup::limits::parse_cpu(&c.to_string()),
            CpuQuantity::Quantity(q) => flotilla_isolate::cgroup::limits::parse_cpu(q),
        }?;
        (millis > 0).then_some(millis)
    }
}

/// A memory amount: `"512Mi"` or a number of bytes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum MemoryQuantity {
    /// Bytes.
    Bytes(u64),
    /// A Kubernetes quantity.
    Quantity(String),
}

impl MemoryQuantity {
    /// In bytes; `None` when it does not parse or is zero.
    pub fn bytes(&self) -> Option<u64> {
        let bytes = match self {
            MemoryQuantity::Bytes(b) => Some(*b),
            MemoryQuantity::Quantity(q) => flotilla_isolate::cgroup::limits::parse_memory(q),
        }?;
        (bytes > 0).then_some(bytes)
    }
}

/// `[runners.microvm]` (flotilla extension): each job's microVM at the `microvm` level.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MicrovmConfig {
    /// The image of jobs that name none (else `[runners.docker] image`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// The guest kernel on the instances (default: the newest `/boot/vmlinuz-*`, cloud
    /// kernels first).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel: Option<String>,
    /// The emulator on the instances (default `qemu-system-x86_64`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub qemu: Option<String>,
    /// Use KVM; without it QEMU emulates (TCG).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub kvm: bool,
    /// Virtual CPUs per VM (default 1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpus: Option<u32>,
    /// Guest memory per VM, as a Kubernetes quantity (`"512Mi"`) or bytes (default 512 MiB).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryQuantity>,
    /// Outbound network for jobs (QEMU user-mode networking; default on).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network: Option<bool>,
    /// Free space in each VM's root file system beyond the image's files (default 1 GiB;
    /// sparse).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disk_free: Option<MemoryQuantity>,
    /// Where the level keeps its files on the instances (default `/var/lib/flotilla/microvm`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state_dir: Option<String>,
    /// Also keep each snapshot, self-contained, in the runner's cache store on the manager,
    /// so a job on any instance (and `flotilla debug`) can start from it (default on; the
    /// embedded default of `flotilla exec`, whose only instance is this host, turns it off).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub snapshot_store: Option<bool>,
}

/// `[runners.vm]` (flotilla extension): the full VMs of the `vm` level, one per slot.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct VmConfig {
    /// Where VM image names are looked up on the instances (default `<state_dir>/images`):
    /// raw ext4 root file systems, or qcow2 files holding one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub images_dir: Option<String>,
    /// The guest kernel on the instances (default: the newest `/boot/vmlinuz-*`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel: Option<String>,
    /// The emulator on the instances (default `qemu-system-x86_64`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub qemu: Option<String>,
    /// Use KVM; without it QEMU emulates (TCG).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub kvm: bool,
    /// Virtual CPUs per VM (default 1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpus: Option<u32>,
    /// Guest memory per VM (default 1 GiB).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryQuantity>,
    /// Outbound network for jobs (QEMU user-mode networking; default on).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network: Option<bool>,
    /// Where the level keeps its files on the instances (default `/var/lib/flotilla/vm`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state_dir: Option<String>,
}

/// `[runners.instance]`: settings of the `instance` executor.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct InstanceConfig {
    /// Job images allowed as VM images (with `vm_isolation`); glob patterns.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub allowed_images: Vec<String>,
    /// Use one build directory for all jobs of an instance (only with VM isolation or
    /// `max_use_count = 1`).
    pub use_common_build_dir: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn executor_names_round_trip() {
        for name in Executor::NAMES {
            assert_eq!(Executor::parse(name).unwrap().as_str(), name);
        }
        assert_eq!(Executor::parse("docker+machine"), None);
    }

    #[test]
    fn default_isolation_per_executor() {
        assert_eq!(
            Executor::DockerAutoscaler.default_isolation(false),
            IsolationLevel::Docker
        );
        assert_eq!(
            Executor::Instance.default_isolation(false),
            IsolationLevel::Shell
        );
        assert_eq!(
            Executor::Instance.default_isolation(true),
            IsolationLevel::Vm
        );
        assert_eq!(
            Executor::Shell.default_isolation(false),
            IsolationLevel::Shell
        );
        assert_eq!(
            Executor::Docker.default_isolation(false),
            IsolationLevel::Docker
        );
        assert_eq!(
            Executor::Flotilla.default_isolation(false),
            IsolationLevel::Shell
        );
    }

    #[test]
    fn slot_templates_expand_both_spellings() {
        assert_eq!(
            expand_slot(DEFAULT_SLOT_CGROUP_TEMPLATE, 3),
            "gitlab-runner/slot-3"
        );
        assert_eq!(
            expand_slot("runner-slot-$slot.slice", 0),
            "runner-slot-0.slice"
        );
    }

    #[test]
    fn pull_policy_string_or_list() {
        let d: DockerConfig = toml::from_str("pull_policy = \"if-not-present\"").unwrap();
        assert_eq!(d.pull_policy, vec![PullPolicy::IfNotPresent]);
        let d: DockerConfig = toml::from_str("pull_policy = [\"never\", \"always\"]").unwrap();
        assert_eq!(d.pull_policy, vec![PullPolicy::Never, PullPolicy::Always]);
        let d = DockerConfig::default();
        assert_eq!(d.effective_pull_policies(), vec![PullPolicy::Always]);
        let e = toml::from_str::<DockerConfig>("pull_policy = [\"sometimes\"]").unwrap_err();
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
        let d: DockerConfig = toml::from_str("pull_policy = \"if-not-present\"").unwrap();
        assert_eq!(d.allowed_pull_policies(), vec![PullPolicy::IfNotPresent]);
        assert_eq!(
            DockerConfig::default().allowed_pull_policies(),
            vec![PullPolicy::Always]
        );
        let d: DockerConfig = toml::from_str(
            "pull_policy = \"if-not-present\"\nallowed_pull_policies = [\"always\", \"if-not-present\"]",
        )
        .unwrap();
        assert_eq!(
            d.allowed_pull_policies(),
            vec![PullPolicy::Always, PullPolicy::IfNotPresent]
        );
    }
}
