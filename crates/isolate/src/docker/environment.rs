//! One job's environment under docker isolation.

use super::SlotCgroupTemplates;
use super::cleanup::remove_matching;
use super::labels::{JobLabels, Role};
use super::network::JobNetwork;
use super::services::{Target, parse_down, wait_script};
use super::spec::{HostSettings, build_container, service_container};
use super::warm::WarmShell;
use super::{DockerIsolationConfig, LiveGuard, helper, pull};
use crate::command::{SHELL_SELECT, helper_command};
use crate::exec;
use crate::layout::BuildLayout;
use crate::service::{service_env, service_ports};
use crate::{IsolateError, IsolatedEnvironment};
use async_trait::async_trait;
use bollard::Docker;
use bollard::models::{ContainerCreateBody, NetworkCreateRequest};
use bollard::query_parameters::CreateContainerOptions;
use flotilla_connect::docker_exec::DockerExecConnector;
use flotilla_connect::shell::quote;
use flotilla_connect::{Connector, ConnectorExt};
use flotilla_job::model::Image;
use flotilla_job::script::{ANSI_RESET, ANSI_YELLOW};
use flotilla_job::{
    EnvError, EnvPaths, Environment, ExecCommand, ExecSpec, ExitStatus, JobPayload, Place,
};
use futures::future::join_all;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// How often, and how far apart, a new helper container is tried before it counts as broken.
const HELPER_READY_TRIES: usize = 25;
const HELPER_READY_PAUSE: Duration = Duration::from_millis(200);
/// How long removing the job's directories in the helper container may take at cleanup.
const HELPER_CLEANUP_TIMEOUT: Duration = Duration::from_secs(20);

/// What [`DockerEnvironment::new`] is made from.
pub(crate) struct Parts<'a> {
    pub docker: Docker,
    pub helper_base: super::client::HelperBase,
    pub connector: Arc<dyn Connector>,
    pub instance: String,
    pub job: &'a JobPayload,
    pub slot: usize,
    pub layout: BuildLayout,
    pub labels: JobLabels,
    pub config: Arc<DockerIsolationConfig>,
    pub remove_project: bool,
    pub live: LiveGuard,
}

/// What the environment made, for cleanup.
#[derive(Debug, Default)]
struct Made {
    network: Option<String>,
    containers: Vec<String>,
    build: Option<String>,
    helper: Option<String>,
}

/// One job's containers (and network) on an instance's Docker daemon.
pub struct DockerEnvironment {
    docker: Docker,
    /// The instance's system paths for the helper container, found once per instance.
    helper_base: super::client::HelperBase,
    connector: Arc<dyn Connector>,
    instance: String,
    layout: BuildLayout,
    labels: JobLabels,
    config: Arc<DockerIsolationConfig>,
    remove_project: bool,
    image: Option<Image>,
    services: Vec<Image>,
    service_env: Vec<Vec<String>>,
    /// The binds of `[runners.docker] volumes` for this job.
    volume_binds: Vec<String>,
    /// The job's own cache volumes (`disable_cache`), made in `prepare` with its labels.
    own_volumes: Vec<String>,
    /// The runner's kept cache volumes, made in `prepare` (without the job's labels, so that
    /// they outlive it) when `volume_driver` or `volume_driver_ops` say how; else Docker makes
    /// them on first use.
    kept_volumes: Vec<String>,
    /// `container_labels`, their values expanded with the job's variables (GitLab's
    /// `prepareContainerLabels`).
    container_labels: std::collections::HashMap<String, String>,
    /// The registry credentials the job's pulls use.
    registry_auth: super::auth::RegistryAuth,
    /// The job's directories, its project's own ([`super::spec::job_binds`]).
    job_binds: Vec<String>,
    /// Whether `disable_entrypoint_overwrite` set aside an entrypoint the job asked for.
    entrypoint_kept: bool,
    /// How many of `services` are the runner's own (`[[runners.docker.services]]`, first).
    runner_services: usize,
    made: Arc<Mutex<Made>>,
    /// Docker calls that make something (the network, the containers). They run as tasks of
    /// their own, so that a canceled `prepare` does not abandon one half done on the daemon:
    /// cleanup waits for them before it lists what to remove.
    in_flight: TaskTracker,
    /// The first build stage's shell, started with the build container.
    warm: tokio::sync::Mutex<Option<tokio::task::JoinHandle<Result<WarmShell, String>>>>,
    _live: LiveGuard,
}

impl std::fmt::Debug for DockerEnvironment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DockerEnvironment")
            .field("instance", &self.instance)
            .field("labels", &self.labels)
            .field("paths", &self.layout.paths)
            .finish_non_exhaustive()
    }
}

fn io_error(source: std::io::Error) -> EnvError {
    EnvError::Io {
        context: "writing to the job log".into(),
        source,
    }
}

fn lock(made: &Mutex<Made>) -> std::sync::MutexGuard<'_, Made> {
    made.lock().unwrap_or_else(|e| e.into_inner())
}

/// How long cleanup waits for a canceled `prepare`'s docker calls to finish before it removes
/// what it can see.
const IN_FLIGHT_GRACE: Duration = Duration::from_secs(60);

async fn say(log: &mut (dyn AsyncWrite + Send + Unpin), line: &str) -> Result<(), EnvError> {
    log.write_all(format!("{line}\n").as_bytes())
        .await
        .map_err(io_error)
}

async fn warn(log: &mut (dyn AsyncWrite + Send + Unpin), line: &str) -> Result<(), EnvError> {
    say(log, &format!("{ANSI_YELLOW}WARNING: {line}{ANSI_RESET}")).await
}

impl DockerEnvironment {
    pub(crate) fn new(p: Parts<'_>) -> DockerEnvironment {
        let mut image = match p.job.image.as_ref().filter(|i| !i.name.is_empty()) {
            Some(i) => Some(i.clone()),
            None => p.config.default_image.as_ref().map(|name| Image {
                name: name.clone(),
                ..Default::default()
            }),
        };
        // The runner's own services first, then the job's (GitLab's `getServicesDefinitions`).
        let named = |s: &&Image| !s.name.is_empty();
        let runner_services = p.config.services.iter().filter(named).count();
        let mut services: Vec<Image> = p
            .config
            .services
            .iter()
            .chain(p.job.services.iter())
            .filter(named)
            .cloned()
            .collect();
        // `disable_entrypoint_overwrite`: the images' own entrypoints, whatever the job asks
        // (GitLab's `overwriteEntrypoint`).
        let mut entrypoint_kept = false;
        if p.config.disable_entrypoint_overwrite {
            for i in image.iter_mut().chain(services.iter_mut()) {
                if !i.entrypoint.is_empty() {
                    i.entrypoint.clear();
                    entrypoint_kept = true;
                }
            }
        }
        let service_env = services
            .iter()
            .map(|s| service_env(p.job, s, &p.layout.paths, p.slot, "docker"))
            .collect();
        let mut unique =
            super::volumes::unique_name(&p.config.owner, p.job.job_info.project_id, p.slot);
        if p.config.disable_cache {
            unique = super::volumes::per_job_unique_name(&unique, p.job.id);
        }
        // `disable_cache` wins over `cache_dir`, as in GitLab's `addCacheVolume`.
        let cache_dir = (!p.config.disable_cache)
            .then_some(p.config.cache_dir.as_deref())
            .flatten();
        let volume_binds = p
            .config
            .volumes
            .iter()
            .map(|v| v.bind_under(&unique, cache_dir))
            .collect();
        // Made before the containers, with the job's labels, so that the job's cleanup and a
        // later sweep find and remove them; the kept ones are made by Docker on first use.
        let own_volumes = if p.config.disable_cache {
            p.config
                .volumes
                .iter()
                .filter_map(|v| v.cache_volume(&unique))
                .collect()
        } else {
            Vec::new()
        };
        let driver_set = p.config.options.volume_driver().is_some()
            || !p.config.volume_driver_ops.expose().is_empty();
        let kept_volumes = if !p.config.disable_cache && cache_dir.is_none() && driver_set {
            p.config
                .volumes
                .iter()
                .filter_map(|v| v.cache_volume(&unique))
                .collect()
        } else {
            Vec::new()
        };
        let container_labels = p.config.options.container_labels(|value| {
            flotilla_job::vars::expand(value, |name| {
                p.job
                    .variables
                    .iter()
                    .rev()
                    .find(|v| v.key == name)
                    .map(|v| v.value.as_str())
            })
        });
        // The manager's own Docker configuration is read per job, as GitLab Runner reads it.
        let home = p.config.docker_config_file.as_ref().and_then(|path| {
            std::fs::read_to_string(path)
                .ok()
                .map(|text| (path.display().to_string(), text))
        });
        let registry_auth = super::auth::RegistryAuth::resolve(
            p.job,
            home.as_ref()
                .map(|(path, text)| (path.as_str(), text.as_str())),
        );
        let job_binds =
            super::spec::job_binds(&p.layout, p.job.job_info.project_id, &p.config.volumes);
        DockerEnvironment {
            docker: p.docker,
            helper_base: p.helper_base,
            connector: p.connector,
            instance: p.instance,
            layout: p.layout,
            labels: p.labels,
            config: p.config,
            remove_project: p.remove_project,
            image,
            services,
            service_env,
            volume_binds,
            own_volumes,
            kept_volumes,
            container_labels,
            registry_auth,
            job_binds,
            entrypoint_kept,
            runner_services,
            made: Arc::new(Mutex::new(Made::default())),
            in_flight: TaskTracker::new(),
            warm: tokio::sync::Mutex::new(None),
            _live: p.live,
        }
    }

    /// The build container's `body` with `container_labels` (flotilla's own labels, which its
    /// cleanup goes by, are not among them: refused at load).
    fn with_container_labels(&self, mut body: ContainerCreateBody) -> ContainerCreateBody {
        if !self.container_labels.is_empty() {
            body.labels
                .get_or_insert_with(Default::default)
                .extend(self.container_labels.clone());
        }
        body
    }

    fn made(&self) -> std::sync::MutexGuard<'_, Made> {
        lock(&self.made)
    }

    /// The build container's id, once it runs.
    pub fn build_container(&self) -> Option<String> {
        self.made().build.clone()
    }

    /// The environment's labels (and so its unique id).
    pub fn labels(&self) -> &JobLabels {
        &self.labels
    }

    /// The policies for `image`, or a configuration error.
    fn policies(&self, image: &Image) -> Result<Vec<pull::PullPolicy>, EnvError> {
        pull::effective(
            &image.pull_policy,
            &self.config.pull_policy,
            &self.config.allowed_pull_policies,
        )
        .map_err(|e| EnvError::Configuration(format!("image {}: {e}", image.name)))
    }

    async fn create_and_start(
        &self,
        role: Role,
        body: ContainerCreateBody,
    ) -> Result<String, EnvError> {
        let what = match role {
            Role::Build => "the build container".to_string(),
            Role::Service(i) => format!("service container {i}"),
            Role::Helper => "the helper container".to_string(),
        };
        let options = CreateContainerOptions {
            name: Some(self.labels.container_name(role)),
            ..Default::default()
        };
        let (docker, made) = (self.docker.clone(), self.made.clone());
        self.tracked(&what.clone(), async move {
            let created = docker
                .create_container(Some(options), body)
                .await
                .map_err(|e| EnvError::System(format!("creating {what}: {e}")))?;
            lock(&made).containers.push(created.id.clone());
            docker
                .start_container(&created.id, None)
                .await
                .map_err(|e| EnvError::System(format!("starting {what}: {e}")))?;
            Ok(created.id)
        })
        .await
    }

    /// Runs `call` (Docker calls that make `what`) as a task of [`Self::in_flight`]: a
    /// canceled `prepare` stops waiting for it, but it finishes, and cleanup waits for it.
    async fn tracked<T: Send + 'static>(
        &self,
        what: &str,
        call: impl std::future::Future<Output = Result<T, EnvError>> + Send + 'static,
    ) -> Result<T, EnvError> {
        self.in_flight
            .spawn(call)
            .await
            .map_err(|e| EnvError::System(format!("making {what}: {e}")))?
    }

    /// Everything `prepare` does, without the cancellation.
    async fn start(&self, log: &mut (dyn AsyncWrite + Send + Unpin)) -> Result<(), EnvError> {
        let Some(image) = self.image.as_ref() else {
            return Err(EnvError::Configuration(
                "the job names no image and docker isolation has no default image".into(),
            ));
        };
        let mut unsupported = image.executor_opts.unsupported();
        for s in &self.services {
            unsupported.extend(s.executor_opts.unsupported());
        }
        if !unsupported.is_empty() {
            return Err(EnvError::Configuration(format!(
                "unsupported executor options: {}",
                unsupported.join(", ")
            )));
        }
        // The runner's own services count too: GitLab Runner appends them first and compares
        // the whole list with `services_limit` (`getServicesDefinitions`,
        // executors/docker/docker.go).
        if let Some(refused) =
            super::limits::too_many_services(self.services.len(), self.config.services_limit)
        {
            return Err(EnvError::Configuration(refused));
        }
        // allowed_images and allowed_services; the runner's own default image is always
        // allowed (GitLab's internal images).
        let default = self.config.default_image.as_deref();
        self.config
            .allowed_images
            .verify(&image.name, "images", default.as_slice())
            .map_err(EnvError::Configuration)?;
        // The runner's own services are allowed whatever the list says (GitLab's internal
        // images); the job's must be on it.
        let internal: Vec<&str> = self.services[..self.runner_services]
            .iter()
            .map(|s| s.name.as_str())
            .collect();
        for s in &self.services[self.runner_services..] {
            self.config
                .allowed_services
                .verify(&s.name, "services", &internal)
                .map_err(EnvError::Configuration)?;
        }
        let docker_opts = image.executor_opts.docker.clone().unwrap_or_default();
        let build_user = self
            .config
            .security
            .build_user(&docker_opts.user)
            .map_err(EnvError::Configuration)?;
        let build_policies = self.policies(image)?;
        let service_policies = self
            .services
            .iter()
            .map(|s| self.policies(s))
            .collect::<Result<Vec<_>, _>>()?;

        say(
            log,
            &format!(
                "Using docker isolation with image {} on instance {}",
                image.name, self.instance
            ),
        )
        .await?;
        if self.entrypoint_kept {
            // GitLab's words.
            warn(log, "Entrypoint override disabled").await?;
        }
        for w in &self.registry_auth.warnings {
            warn(log, w).await?;
        }
        let inspected = pull::ensure_image(
            &self.docker,
            &image.name,
            &docker_opts.platform,
            &build_policies,
            &self.registry_auth,
            log,
        )
        .await?;
        let image_entrypoint = inspected
            .config
            .and_then(|c| c.entrypoint)
            .unwrap_or_default();
        let mut exposed = Vec::new();
        for (s, policies) in self.services.iter().zip(&service_policies) {
            let platform = s
                .executor_opts
                .docker
                .as_ref()
                .map(|d| d.platform.clone())
                .unwrap_or_default();
            let found = pull::ensure_image(
                &self.docker,
                &s.name,
                &platform,
                policies,
                &self.registry_auth,
                log,
            )
            .await?;
            exposed.push(
                found
                    .config
                    .and_then(|c| c.exposed_ports)
                    .unwrap_or_default(),
            );
        }

        let own = self.own_volumes.iter().map(|n| (n, true));
        let kept = self.kept_volumes.iter().map(|n| (n, false));
        for (name, own) in own.chain(kept) {
            let request = bollard::models::VolumeCreateRequest {
                name: Some(name.clone()),
                labels: own.then(|| self.labels.labels(None)),
                driver: self.config.options.volume_driver().map(str::to_string),
                driver_opts: (!self.config.volume_driver_ops.expose().is_empty())
                    .then(|| self.config.volume_driver_ops.expose().clone()),
                ..Default::default()
            };
            let docker = self.docker.clone();
            self.tracked("the job's cache volume", async move {
                docker
                    .create_volume(request)
                    .await
                    .map_err(|e| EnvError::System(format!("creating the job's cache volume: {e}")))
            })
            .await?;
        }
        let (placement, placement_warning) =
            super::network::plan(&self.config.network_mode, !self.services.is_empty());
        if let Some(w) = placement_warning {
            warn(log, &w).await?;
        }
        // The network the services are on (and the build container with them).
        let network = match &placement {
            JobNetwork::Alone(_) => None,
            JobNetwork::Shared(name) => Some(name.clone()),
            JobNetwork::OwnNetwork => {
                let name = self.labels.network_name();
                let request = NetworkCreateRequest {
                    name: name.clone(),
                    driver: Some("bridge".into()),
                    labels: Some(self.labels.labels(None)),
                    ..Default::default()
                };
                let (docker, made) = (self.docker.clone(), self.made.clone());
                let created = self
                    .tracked("the job's network", async move {
                        docker.create_network(request).await.map_err(|e| {
                            EnvError::System(format!("creating the job's network: {e}"))
                        })?;
                        lock(&made).network = Some(name.clone());
                        Ok(name)
                    })
                    .await?;
                Some(created)
            }
        };
        let build_network = match &placement {
            JobNetwork::Alone(mode) => mode.clone(),
            JobNetwork::OwnNetwork | JobNetwork::Shared(_) => network.clone(),
        };

        for s in &self.services {
            say(
                log,
                &format!(
                    "Starting service {} as {} ...",
                    s.name,
                    s.aliases().join(", ")
                ),
            )
            .await?;
        }
        let security = &self.config.security;
        let settings = |template: fn(&SlotCgroupTemplates) -> &String| HostSettings {
            cgroup_parent: self
                .config
                .slot_cgroups
                .as_ref()
                .map(|t| SlotCgroupTemplates::parent(template(t), self.labels.slot)),
            binds: self.volume_binds.clone(),
            userns_mode: security.userns_mode.clone(),
            ..HostSettings::default()
        };
        let build_settings = HostSettings {
            privileged: security.build_privileged(&image.name),
            cap_add: security.cap_add.clone(),
            cap_drop: security.cap_drop.clone(),
            security_opt: security.security_opt.clone(),
            devices: security.devices.clone(),
            limits: self.config.build_limits,
            ..settings(|t| &t.build)
        };
        let service_settings = |service: &Image| HostSettings {
            privileged: security.service_privileged(&service.name),
            security_opt: security.services_security_opt.clone(),
            devices: self
                .config
                .services_devices
                .iter()
                .filter(|(pattern, _)| pattern.matches(&service.name))
                .flat_map(|(_, devices)| devices.iter().cloned())
                .collect(),
            ..settings(|t| &t.services)
        };
        if let Some(parent) = &build_settings.cgroup_parent {
            say(
                log,
                &format!("The job's containers run in the slot's cgroup {parent}"),
            )
            .await?;
        }
        let build_body = self.config.options.build(build_container(
            image,
            &image_entrypoint,
            &build_user,
            &self.job_binds,
            build_network.as_deref(),
            &self.labels,
            &build_settings,
        ));
        let build_body = self.with_container_labels(build_body);
        let helper = self.start_helper(build_settings.cgroup_parent.clone());
        let build = self.create_and_start(Role::Build, build_body);
        let service_labels =
            super::options::ContainerOptions::service_labels(&self.container_labels);
        let services = join_all(self.services.iter().enumerate().map(|(i, s)| {
            let mut body = self.config.options.service(service_container(
                s,
                i,
                self.service_env[i].clone(),
                network.as_deref().unwrap_or_default(),
                &self.labels,
                &service_settings(s),
            ));
            if !service_labels.is_empty() {
                body.labels
                    .get_or_insert_with(Default::default)
                    .extend(service_labels.clone());
            }
            self.create_and_start(Role::Service(i), body)
        }));
        let (helper, build, services) = tokio::join!(helper, build, services);
        self.made().helper = Some(helper?);
        let build = build?;
        let services = services.into_iter().collect::<Result<Vec<_>, _>>()?;
        *self.warm.lock().await = Some(tokio::spawn(WarmShell::start(
            self.docker.clone(),
            build.clone(),
        )));
        self.made().build = Some(build);

        if let Some(network) = network
            && !self.config.wait_for_services_timeout.is_zero()
        {
            self.wait_for_services(log, &network, &services, &exposed)
                .await?;
        }
        Ok(())
    }

    /// Makes and starts the job's helper container ([`helper`]): the instance's system paths
    /// found, the empty root image imported when missing.
    async fn start_helper(&self, cgroup_parent: Option<String>) -> Result<String, EnvError> {
        let system = self
            .helper_base
            .get_or_try_init(|| async {
                let probe = self
                    .connector
                    .output(&helper_command(&helper::probe_command()))
                    .await
                    .map_err(|e| {
                        EnvError::System(format!("looking for the instance's programs: {e}"))
                    })?;
                let system = helper::existing_paths(&probe.stdout_str());
                if !system.iter().any(|p| p == "/usr" || p == "/bin") {
                    return Err(EnvError::System(
                        "the instance has neither /usr nor /bin for the helper container".into(),
                    ));
                }
                helper::ensure_root_image(&self.docker)
                    .await
                    .map_err(EnvError::System)?;
                Ok(system)
            })
            .await?;
        let body = helper::helper_container(&self.job_binds, system, &self.labels, cgroup_parent);
        let id = self.create_and_start(Role::Helper, body).await?;
        self.helper_ready(&id).await?;
        Ok(id)
    }

    /// Waits until the helper container takes execs. Under load, an inner Docker 20.10 refused
    /// the first exec right after the start ("error executing setns process") now and then.
    async fn helper_ready(&self, id: &str) -> Result<(), EnvError> {
        let container = DockerExecConnector::new(self.docker.clone(), id);
        let mut last = String::new();
        for tries in 1..=HELPER_READY_TRIES {
            match container.output("true").await {
                Ok(out) if out.status.success() => {
                    if tries > 1 {
                        tracing::info!(instance = %self.instance, tries, error = %last, "the helper container took a command after refusing");
                    }
                    return Ok(());
                }
                Ok(out) => last = format!("{}: {}", out.status, out.stderr_str().trim()),
                Err(e) => last = e.to_string(),
            }
            tokio::time::sleep(HELPER_READY_PAUSE).await;
        }
        Err(EnvError::System(format!(
            "the helper container never took a command: {last}"
        )))
    }

    /// Waits until the services listen on their ports (from the instance, which reaches the
    /// job's network), warning about those that never did.
    async fn wait_for_services(
        &self,
        log: &mut (dyn AsyncWrite + Send + Unpin),
        network: &str,
        ids: &[String],
        exposed: &[Vec<String>],
    ) -> Result<(), EnvError> {
        let mut targets = Vec::new();
        for (i, (id, exposed)) in ids.iter().zip(exposed).enumerate() {
            let ports = service_ports(&self.services[i], exposed);
            if ports.is_empty() {
                continue;
            }
            let inspect =
                self.docker.inspect_container(id, None).await.map_err(|e| {
                    EnvError::System(format!("inspecting service container {i}: {e}"))
                })?;
            let ip = inspect
                .network_settings
                .and_then(|n| n.networks)
                .and_then(|mut n| n.remove(network))
                .and_then(|e| e.ip_address)
                .filter(|ip| !ip.is_empty());
            match ip {
                Some(ip) => targets.extend(ports.into_iter().map(|port| Target {
                    service: i,
                    ip: ip.clone(),
                    port,
                })),
                None => {
                    warn(
                        log,
                        &format!(
                            "service {} has no address on the job's network (did it exit?)",
                            self.services[i].name
                        ),
                    )
                    .await?;
                }
            }
        }
        if targets.is_empty() {
            return Ok(());
        }
        let timeout = self.config.wait_for_services_timeout;
        say(
            log,
            &format!(
                "Waiting for services to be up and running (timeout {} seconds)...",
                timeout.as_secs()
            ),
        )
        .await?;
        let mut out: Vec<u8> = Vec::new();
        let spec = ExecSpec {
            place: Place::Helper,
            command: ExecCommand::Script(wait_script(&targets, timeout.as_secs())),
            stdin: None,
            stdout: Box::new(&mut out),
            stderr: Box::new(tokio::io::sink()),
            cancel: CancellationToken::new(),
        };
        let run = exec::run(&*self.connector, "waiting for services", spec);
        match tokio::time::timeout(timeout + Duration::from_secs(10), run).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return Err(e),
            Err(_) => {
                return Err(EnvError::System(
                    "waiting for services did not end in time".into(),
                ));
            }
        }
        for (i, port) in parse_down(&String::from_utf8_lossy(&out)) {
            warn(
                log,
                &format!(
                    "service {} probably didn't start properly: nothing listens on port {port}",
                    self.services[i].name
                ),
            )
            .await?;
        }
        Ok(())
    }

    /// The shell started ahead for the first build stage, once (`None` when it is used up
    /// or failed to start; the stage then starts its own).
    async fn warm_shell(&self) -> Option<WarmShell> {
        let handle = self.warm.lock().await.take()?;
        match handle.await {
            Ok(Ok(shell)) => Some(shell),
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "the build stage shell did not start ahead");
                None
            }
            Err(_) => None,
        }
    }

    fn helper_cleanup_line(&self) -> String {
        let mut line = format!("rm -rf {}", quote(&self.layout.paths.tmp_dir));
        if self.remove_project {
            line.push(' ');
            line.push_str(&quote(&self.layout.paths.project_dir));
        }
        line
    }
}

#[async_trait]
impl Environment for DockerEnvironment {
    fn paths(&self) -> &EnvPaths {
        &self.layout.paths
    }

    fn disposable(&self) -> bool {
        true
    }

    async fn prepare(
        &self,
        log: &mut (dyn AsyncWrite + Send + Unpin),
        cancel: CancellationToken,
    ) -> Result<(), EnvError> {
        tokio::select! {
            r = self.start(log) => r,
            () = cancel.cancelled() => Err(EnvError::Canceled),
        }
    }

    async fn exec(&self, spec: ExecSpec<'_>) -> Result<ExitStatus, EnvError> {
        match spec.place {
            Place::Helper => {
                let Some(id) = self.made().helper.clone() else {
                    return Err(EnvError::System(
                        "the helper container is not running (preparing the environment did not finish)"
                            .into(),
                    ));
                };
                let container = DockerExecConnector::new(self.docker.clone(), id);
                exec::run(&container, "running in the helper container", spec).await
            }
            Place::Build => {
                if let ExecCommand::Script(script) = &spec.command
                    && let Some(shell) = self.warm_shell().await
                {
                    let ExecSpec {
                        mut stdout,
                        mut stderr,
                        cancel,
                        ..
                    } = spec;
                    return shell
                        .run(script.clone(), stdout.as_mut(), stderr.as_mut(), cancel)
                        .await;
                }
                let Some(id) = self.build_container() else {
                    return Err(EnvError::System(
                        "the build container is not running (preparing the environment did not finish)"
                            .into(),
                    ));
                };
                let container = DockerExecConnector::new(self.docker.clone(), id);
                exec::run_with(
                    &container,
                    "running in the build container",
                    spec,
                    SHELL_SELECT,
                    str::to_string,
                )
                .await
            }
        }
    }
}

#[async_trait]
impl IsolatedEnvironment for DockerEnvironment {
    async fn cleanup(&self) -> Result<(), IsolateError> {
        if let Some(unused) = self.warm.lock().await.take() {
            unused.abort();
        }
        self.in_flight.close();
        if tokio::time::timeout(IN_FLIGHT_GRACE, self.in_flight.wait())
            .await
            .is_err()
        {
            tracing::warn!(
                instance = %self.instance,
                "docker calls of a canceled prepare still run after {}s; removing what is there",
                IN_FLIGHT_GRACE.as_secs()
            );
        }
        let (extra, network, helper) = {
            let made = self.made();
            (
                made.containers.clone(),
                made.network.clone(),
                made.helper.clone(),
            )
        };
        let mut errors = Vec::new();
        // The job's directories go first, from inside the helper container, where a link the
        // job left in them can lead nowhere but the slot directory; the build container is
        // killed before, so nothing the job left running writes there meanwhile. Without a
        // helper container nothing of the job was written there.
        if let Some(build) = self.build_container()
            && let Err(e) = self
                .docker
                .kill_container(
                    &build,
                    None::<bollard::query_parameters::KillContainerOptions>,
                )
                .await
            && !super::client::is_not_found(&e)
        {
            tracing::debug!(instance = %self.instance, error = %e, "killing the build container before cleanup");
        }
        if let Some(id) = helper {
            let container = DockerExecConnector::new(self.docker.clone(), id);
            let line = helper_command(&self.helper_cleanup_line());
            let removal = container.output(&line);
            // Bounded, so that the containers are removed below whatever the exec does.
            match tokio::time::timeout(HELPER_CLEANUP_TIMEOUT, removal).await {
                Ok(Ok(out)) if out.status.success() => {}
                Ok(Ok(out)) => errors.push(format!(
                    "removing the job's directories failed with {}: {}",
                    out.status,
                    out.stderr_str().trim()
                )),
                Ok(Err(e)) => errors.push(format!("removing the job's directories: {e}")),
                Err(_) => errors.push(format!(
                    "removing the job's directories did not end within {}s",
                    HELPER_CLEANUP_TIMEOUT.as_secs()
                )),
            }
        }
        let removed =
            remove_matching(&self.docker, self.labels.env_filter(), &extra, &|_| false).await;
        errors.extend(removed.errors);
        if errors.is_empty() {
            // A container whose start raced its removal can be listed again afterwards; one
            // more pass makes "cleaned up" mean that nothing of the job is listed.
            let again =
                remove_matching(&self.docker, self.labels.env_filter(), &[], &|_| false).await;
            if again.count > 0 {
                tracing::warn!(
                    instance = %self.instance,
                    count = again.count,
                    "containers or networks of the job were listed again after removal; removed them again"
                );
            }
            errors.extend(again.errors);
        }
        if let Some(network) = network
            && let Err(e) = self.docker.remove_network(&network).await
            && !super::client::is_not_found(&e)
        {
            errors.push(format!("removing network {network}: {e}"));
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(IsolateError::Cleanup {
                instance: self.instance.clone(),
                message: errors.join("; "),
            })
        }
    }
}
