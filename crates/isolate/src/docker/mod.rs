//! Docker isolation: the job's image as the build container and each service as a container
//! of its own, on the instance's Docker daemon.
//!
//! - **Reaching the daemon**: a `bollard` client per instance through the connector's
//!   `dial_stdio` (`docker system dial-stdio`, [`DockerIsolationConfig::route`]), reused by
//!   every job on that instance; the first job waits up to
//!   [`DockerIsolationConfig::daemon_wait`] for a daemon that is still starting.
//! - **Containers**: the build container runs the job's image kept alive by a no-op loop
//!   ([`spec::keepalive`]); `step_script` and `after_script` run in it through the exec API,
//!   the script piped to bash (or sh). Helper stages (sources, caches, artifacts, removing the
//!   job's directories) run in the job's helper container ([`helper`]): the instance's own
//!   programs, read-only, over an empty root, with only the job's slot directory writable:
//!   the instance's `<builds_dir>/<slot>/.project-<id>`, bound at `<builds_dir>/<slot>` in the
//!   helper and build containers alike ([`spec::slot_bind`]).
//! - **Services**: each in its own container, so its own network namespace, on a per-job
//!   user-defined bridge network with its aliases (GitLab's rules: the alias, or
//!   `name__sub` and `name-sub` from the image name). Two services listening on the same port
//!   do not clash: each has its own address. Jobs without services use the default bridge and
//!   no network is made; `network_mode` changes both ([`network`]). Before the job starts, the service ports are waited for (up to
//!   [`DockerIsolationConfig::wait_for_services_timeout`]), with a warning for a service
//!   that never listened.
//! - **Pull policies** ([`pull`]): `always`, `if-not-present`, `never`, tried in order.
//! - **Volumes** ([`volumes`]): GitLab's `volumes`, host paths and named volumes bound as
//!   written and cache volumes kept per project and slot, in the build and service containers.
//! - **Labels** ([`labels`]): everything carries `flotilla.managed`, `flotilla.owner`,
//!   `flotilla.job`, `flotilla.slot`, `flotilla.env` and the manager process's host and pid,
//!   so cleanup after success, failure or cancellation finds it, and
//!   [`crate::Isolation::cleanup_instance`] removes what a crashed manager or a dropped
//!   environment left: everything of this owner except environments still alive in this
//!   process and those of other manager processes still running on this host
//!   ([`labels::sweepable`]).

pub mod allowed;
pub mod auth;
mod cleanup;
mod client;
mod environment;
pub mod gpus;
pub mod helper;
pub mod labels;
pub mod limits;
pub mod network;
pub mod options;
pub mod pull;
pub mod security;
pub mod services;
pub mod settings;
pub mod spec;
pub mod volumes;
mod warm;

pub use environment::DockerEnvironment;
pub use pull::PullPolicy;
pub use settings::{DockerContext, DockerSettings, RunnerService};

use crate::layout::{BuildLayout, cleanup_requested};
use crate::{IsolateError, IsolatedEnvironment, Isolation, PrepareRequest};
use async_trait::async_trait;
use client::Clients;
use flotilla_connect::Connector;
use flotilla_connect::docker_api::DockerRoute;
use labels::JobLabels;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How docker isolation works.
#[derive(Debug, Clone)]
pub struct DockerIsolationConfig {
    /// How each Docker API connection is opened through the connector.
    pub route: DockerRoute,
    /// Seconds one Docker API call may take.
    pub api_timeout_secs: u64,
    /// How long the first job on an instance waits for its daemon to answer.
    pub daemon_wait: Duration,
    /// The image for jobs that name none (`None`: such jobs fail with a configuration error).
    pub default_image: Option<String>,
    /// The pull policies used when a job names none (empty: `if-not-present`).
    pub pull_policy: Vec<PullPolicy>,
    /// The pull policies a job may ask for (empty: those of `pull_policy`).
    pub allowed_pull_policies: Vec<PullPolicy>,
    /// How long to wait for services to listen on their ports (zero: not waited for,
    /// GitLab's `wait_for_services_timeout = -1`).
    pub wait_for_services_timeout: Duration,
    /// `[runners.docker] disable_entrypoint_overwrite`: the images' own entrypoints, whatever
    /// a job's `entrypoint` asks.
    pub disable_entrypoint_overwrite: bool,
    /// The owner label of everything this manager makes; give every manager sharing a fleet
    /// its own (e.g. the runner's id).
    pub owner: String,
    /// Privileges, capabilities, security options and devices of the job's containers
    /// ([`security`]).
    pub security: security::Security,
    /// Slot cgroups (GitLab's `use_slot_cgroups`): the templates of the build container's and
    /// the services' cgroup parents, `${slot}` replaced by the slot; `None` when off.
    pub slot_cgroups: Option<SlotCgroupTemplates>,
    /// `[runners.docker] volumes`: bound into the build container and every service
    /// container ([`volumes`]).
    pub volumes: Vec<volumes::Volume>,
    /// `[runners.docker] disable_cache`: each job gets cache volumes of its own, labelled as
    /// the job's and removed with its containers, instead of the project's kept ones
    /// (GitLab Runner's `addCacheVolume` with `reusable` false).
    pub disable_cache: bool,
    /// `[runners.docker] cache_dir`: cache volumes are directories under it on the instance
    /// rather than Docker volumes ([`volumes::Volume::bind_under`]).
    pub cache_dir: Option<String>,
    /// The manager's Docker configuration (`~/.docker/config.json`, else `~/.dockercfg`),
    /// the second source of registry credentials ([`auth`]); the binary names it from `$HOME`.
    pub docker_config_file: Option<std::path::PathBuf>,
    /// `[runners.docker] cpus` and `memory`: the build container's limits ([`limits`]).
    pub build_limits: limits::BuildLimits,
    /// `[runners.docker] services_limit`: most services a job may start (`None` or negative:
    /// no limit); a job with more fails, in GitLab's words.
    pub services_limit: Option<i64>,
    /// `[runners.docker] allowed_images`: the images a job may name ([`allowed`]).
    pub allowed_images: allowed::AllowedImages,
    /// `[runners.docker] allowed_services`: the services a job may name.
    pub allowed_services: allowed::AllowedImages,
    /// `[[runners.docker.services]]`: services every job gets, started before its own (and
    /// allowed whatever `allowed_services` says, as GitLab's internal images are).
    pub services: Vec<flotilla_job::model::Image>,
    /// `[runners.docker] services_devices`: host devices for the services whose image
    /// matches each pattern.
    pub services_devices: Vec<(allowed::AllowedImages, Vec<security::DeviceMapping>)>,
    /// `[runners.docker] network_mode` ([`network`]).
    pub network_mode: network::NetworkMode,
    /// `[runners.docker] dns`, `shm_size`, `tmpfs`, `ulimit` and the other container options
    /// ([`options`]).
    pub options: options::ContainerOptions,
    /// `volume_driver_ops`: options of `volume_driver` for the cache volumes; with either set,
    /// the cache volumes are made with them before the containers, as GitLab's volumes
    /// manager makes them.
    /// (In a `Secret`: the options may carry a password, and this configuration is debugged.)
    pub volume_driver_ops: flotilla_fleet::Secret<std::collections::HashMap<String, String>>,
}

/// Where a job's containers go in the cgroup tree when slot cgroups are on (GitLab's
/// `slot_cgroup_template` and `[runners.docker] service_slot_cgroup_template`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotCgroupTemplates {
    /// The build container's parent.
    pub build: String,
    /// The service containers' parent.
    pub services: String,
}

impl SlotCgroupTemplates {
    /// The absolute cgroup parent of `template` on `slot`: `/gitlab-runner/slot-3`. Docker
    /// 20.10 with the cgroupfs driver puts only the memory controller under a *relative*
    /// parent and the others at the root; an absolute one keeps them together.
    pub fn parent(template: &str, slot: usize) -> String {
        format!(
            "/{}",
            crate::cgroup::expand_template(template, slot).trim_start_matches('/')
        )
    }
}

impl Default for DockerIsolationConfig {
    fn default() -> Self {
        DockerIsolationConfig {
            route: DockerRoute::default(),
            api_timeout_secs: 120,
            daemon_wait: Duration::from_secs(60),
            default_image: None,
            pull_policy: vec![PullPolicy::IfNotPresent],
            allowed_pull_policies: PullPolicy::ALL.to_vec(),
            wait_for_services_timeout: Duration::from_secs(30),
            disable_entrypoint_overwrite: false,
            owner: "flotilla".into(),
            security: security::Security::default(),
            slot_cgroups: None,
            volumes: Vec::new(),
            disable_cache: false,
            cache_dir: None,
            docker_config_file: None,
            build_limits: limits::BuildLimits::default(),
            services_limit: None,
            allowed_images: allowed::AllowedImages::default(),
            allowed_services: allowed::AllowedImages::default(),
            options: options::ContainerOptions::default(),
            volume_driver_ops: flotilla_fleet::Secret::default(),
            network_mode: network::NetworkMode::Default,
            services: Vec::new(),
            services_devices: Vec::new(),
        }
    }
}

/// The environments of this process that are prepared and not yet dropped (by
/// `flotilla.env` id), whichever [`DockerIsolation`] made them: what `cleanup_instance` must
/// not touch.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct LiveEnvs;

static LIVE: Mutex<Option<HashSet<String>>> = Mutex::new(None);

impl LiveEnvs {
    fn lock(&self) -> std::sync::MutexGuard<'static, Option<HashSet<String>>> {
        LIVE.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers an environment; it stays registered until the guard is dropped.
    pub(crate) fn register(&self, id: &str) -> LiveGuard {
        self.lock()
            .get_or_insert_with(HashSet::new)
            .insert(id.to_string());
        LiveGuard {
            envs: *self,
            id: id.to_string(),
        }
    }

    pub(crate) fn contains(&self, id: &str) -> bool {
        self.lock().as_ref().is_some_and(|s| s.contains(id))
    }
}

/// Keeps an environment registered as live.
#[derive(Debug)]
pub(crate) struct LiveGuard {
    envs: LiveEnvs,
    id: String,
}

impl Drop for LiveGuard {
    fn drop(&mut self) {
        if let Some(s) = self.envs.lock().as_mut() {
            s.remove(&self.id);
        }
    }
}

/// Whether process `pid` of this host is running.
fn process_alive(pid: u32) -> bool {
    let Ok(pid) = i32::try_from(pid) else {
        return false;
    };
    match nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None) {
        Ok(()) => true,
        Err(e) => e != nix::errno::Errno::ESRCH,
    }
}

/// The `docker` isolation level.
pub struct DockerIsolation {
    config: Arc<DockerIsolationConfig>,
    clients: Clients,
    live: LiveEnvs,
}

impl std::fmt::Debug for DockerIsolation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DockerIsolation")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Default for DockerIsolation {
    fn default() -> Self {
        DockerIsolation::new(DockerIsolationConfig::default())
    }
}

impl DockerIsolation {
    /// Docker isolation configured by `config`.
    pub fn new(config: DockerIsolationConfig) -> DockerIsolation {
        DockerIsolation {
            config: Arc::new(config),
            clients: Clients::default(),
            live: LiveEnvs,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &DockerIsolationConfig {
        &self.config
    }

    /// The Docker client this isolation uses for `instance` through `connector` (made and
    /// cached on first use). Benchmarks and tests use it to talk to the same daemon.
    pub async fn docker(
        &self,
        instance: &str,
        connector: &Arc<dyn Connector>,
    ) -> Result<bollard::Docker, IsolateError> {
        self.clients.get(instance, connector, &self.config).await
    }
}

#[async_trait]
impl Isolation for DockerIsolation {
    fn name(&self) -> &'static str {
        "docker"
    }

    async fn prepare(
        &self,
        req: PrepareRequest<'_>,
    ) -> Result<Box<dyn IsolatedEnvironment>, IsolateError> {
        let layout = BuildLayout::new(
            &req.builds_dir,
            req.slot,
            req.job,
            req.custom_build_dir.unwrap_or(true),
        )?;
        let (docker, helper_base) = self
            .clients
            .get_with_helper(req.instance_id, &req.connector, &self.config)
            .await?;
        let labels = JobLabels {
            owner: self.config.owner.clone(),
            job_id: req.job.id,
            slot: req.slot,
            env_id: uuid::Uuid::new_v4().simple().to_string(),
            manager: labels::Manager::current(),
        };
        let live = self.live.register(&labels.env_id);
        Ok(Box::new(DockerEnvironment::new(environment::Parts {
            docker,
            helper_base,
            connector: req.connector.clone(),
            instance: req.instance_id.to_string(),
            job: req.job,
            slot: req.slot,
            layout,
            labels,
            config: self.config.clone(),
            remove_project: cleanup_requested(req.job),
            live,
        })))
    }

    async fn cleanup_instance(
        &self,
        connector: Arc<dyn Connector>,
        instance_id: &str,
    ) -> Result<usize, IsolateError> {
        let docker = self
            .clients
            .get(instance_id, &connector, &self.config)
            .await?;
        let live = self.live;
        let me = labels::Manager::current();
        let keep = |l: &std::collections::HashMap<String, String>| {
            !labels::sweepable(l, &me, &|env| live.contains(env), &process_alive)
        };
        let removed = cleanup::remove_matching(
            &docker,
            labels::owner_filter(&self.config.owner),
            &[],
            &keep,
        )
        .await;
        if removed.count > 0 {
            tracing::info!(instance = %instance_id, removed = removed.count, "removed leftovers of earlier jobs");
        }
        if removed.errors.is_empty() {
            Ok(removed.count)
        } else {
            Err(IsolateError::Cleanup {
                instance: instance_id.to_string(),
                message: removed.errors.join("; "),
            })
        }
    }
}
