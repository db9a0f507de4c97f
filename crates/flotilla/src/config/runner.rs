//! `[[runners]]`: one GitLab runner registration and the fleet its jobs run on.

use super::autoscaler::{AutoscalerConfig, IsolationLevel, IsolationLevels};
use super::count;
use super::redact;
use flotilla_fleet::Secret;
use flotilla_isolate::cgroup::CgroupSettings;
use flotilla_isolate::docker::{DockerContext, DockerSettings};
use flotilla_isolate::microvm::settings::{MicrovmContext, MicrovmSettings};
use flotilla_isolate::vm::settings::{VmContext, VmSettings};
use serde::de::{self, Deserializer};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
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
    #[serde(default, serialize_with = "flotilla_fleet::serialize_environment")]
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
    /// `[runners.custom_build_dir]`: whether jobs may name their project directory with
    /// `GIT_CLONE_PATH`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub custom_build_dir: Option<CustomBuildDir>,
    /// `[runners.cache]`: GitLab's distributed cache (the `flotilla-cache` crate reads and
    /// checks it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<flotilla_cache::CacheConfig>,
    /// `[runners.docker]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub docker: Option<DockerSettings>,
    /// `[runners.instance]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<InstanceConfig>,
    /// `[runners.autoscaler]`. Required for `docker-autoscaler` and `instance`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscaler: Option<AutoscalerConfig>,
    /// `[runners.cgroup]` (flotilla extension): the most each slot's cgroup may use, for the
    /// `cgroup` level.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<CgroupSettings>,
    /// `[runners.microvm]` (flotilla extension): the VMs of the `microvm` level.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub microvm: Option<MicrovmSettings>,
    /// `[runners.vm]` (flotilla extension): the VMs of the `vm` level (GitLab's
    /// `[runners.autoscaler.vm_isolation]` names the image).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vm: Option<VmSettings>,
}

impl fmt::Debug for RunnerConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        flotilla_fleet::debug_redacted("RunnerConfig", self, f)
    }
}

impl RunnerConfig {
    /// What the docker level takes from this runner besides its `[runners.docker]` table
    /// (the manager's Docker configuration file is the caller's to find).
    pub fn docker_context(&self) -> DockerContext {
        DockerContext {
            owner: format!("flotilla-{}", self.name),
            slot_cgroup_template: self
                .use_slot_cgroups
                .then(|| self.slot_cgroup_template.clone()),
            docker_config_file: None,
        }
    }

    /// What the microvm level takes from this runner besides its `[runners.microvm]` table;
    /// `per_process` when other processes of the runner share its instances.
    pub fn microvm_context(&self, per_process: bool) -> MicrovmContext {
        MicrovmContext {
            fallback_image: self.docker.as_ref().and_then(|d| d.image.clone()),
            owner: self.owner_name(),
            per_process,
        }
    }

    /// What the vm level takes from this runner besides its `[runners.vm]` table.
    pub fn vm_context(&self) -> VmContext {
        VmContext {
            default_image: self
                .autoscaler
                .as_ref()
                .map(|a| a.vm_isolation.image.clone()),
            allowed_images: self
                .instance
                .as_ref()
                .map(|i| i.allowed_images.clone())
                .unwrap_or_default(),
            owner: self.owner_name(),
        }
    }

    /// The runner's name as part of a path on its instances: `flotilla-<name>` with anything
    /// but letters, digits and `._-` replaced by `_`.
    fn owner_name(&self) -> String {
        let name: String = self
            .name
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
            custom_build_dir: None,
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

/// `[runners.custom_build_dir]` (GitLab's `CustomBuildDir`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CustomBuildDir {
    /// Whether a job's `GIT_CLONE_PATH` may name its project directory (within `builds_dir`).
    /// Unset: GitLab's default for the executor each isolation level stands for, on for
    /// `docker`, off for the others.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
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
}
