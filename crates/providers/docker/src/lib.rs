//! The `docker` provider: containers that behave like VMs, reached over SSH.
//!
//! Each instance is a container of the group's image (which runs sshd, and dockerd when
//! `inner_dockerd` is on), labelled `flotilla.group=<name>` and `flotilla.managed=true`, with
//! its port 22 published on **127.0.0.1 only** at a random host port. flotilla reaches it the
//! way it reaches a cloud VM: over SSH, at `127.0.0.1:<published port>`.
//!
//! - `update` lists the group's containers by label; see [`state::instance_state`] for how a
//!   container's state maps to an instance state (`running` needs sshd to have sent its
//!   banner). A container that left the listing is reported `deleted` once.
//! - `increase(n)` creates and starts up to `n` containers (never more than `max_size`).
//! - `decrease` removes containers (forced, with their anonymous volumes).
//! - `heartbeat` checks that the container runs and that sshd answers.
//! - `shutdown` leaves every container alone.
//!
//! Credentials: without `use_static_credentials`, `init` makes one ed25519 key per group
//! (kept in `key_file` when set) and each container receives its public half as
//! `FLOTILLA_AUTHORIZED_KEY`; `connect_info` hands out the private half. With static
//! credentials the connector config's key or password is passed through as given (and a static
//! key's public half is still installed, so the stock instance image accepts it).
//!
//! The published port is bound to 127.0.0.1 of the engine's host, so the provider assumes the
//! engine runs on this host even when `docker_host` names a TCP endpoint.

mod settings;
pub mod state;

// The key and the sshd probe are the SSH-machine kind's, shared with static and qemu.
pub use flotilla_ssh_machine::{GroupKey, ProbeError, ssh_banner};
pub use settings::{DockerSettings, parse_memory};

use async_trait::async_trait;
use bollard::Docker;
use bollard::models::{ContainerCreateBody, ContainerSummary, HostConfig, PortBinding};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, ListContainersOptions, RemoveContainerOptionsBuilder,
};
use flotilla_fleet::{
    Capabilities, ConnectInfo, ConnectorConfig, FleetError, InstanceGroup, InstanceId,
    InstanceStatus, ProviderConfig, ProviderInfo, Settings, State,
};
use futures::future::join_all;
use rand::RngCore;
use std::collections::{HashMap, HashSet};
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The provider's name in configuration (`plugin = "docker"`).
pub const PLUGIN: &str = "docker";
/// The label naming a container's group.
pub const GROUP_LABEL: &str = "flotilla.group";
/// The label marking a container as made by flotilla.
pub const MANAGED_LABEL: &str = "flotilla.managed";
/// The environment variable carrying the public key into the instance.
pub const AUTHORIZED_KEY_ENV: &str = "FLOTILLA_AUTHORIZED_KEY";
/// The environment variable that starts the instance's inner dockerd.
pub const INNER_DOCKERD_ENV: &str = "FLOTILLA_INNER_DOCKERD";
/// The SSH port inside the container.
const SSH_PORT: &str = "22/tcp";
/// How long the readiness and health probes wait for sshd's banner.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// Where instances' SSH ports are published (never beyond this host).
const LOOPBACK: &str = "127.0.0.1";
/// Seconds bollard waits for one Docker API call.
const API_TIMEOUT_SECS: u64 = 120;

/// A docker instance group. Create it with [`DockerGroup::new`], then call
/// [`InstanceGroup::init`].
#[derive(Debug)]
pub struct DockerGroup {
    settings: DockerSettings,
    docker: Docker,
    state: Mutex<GroupState>,
}

/// What the provider learns while running.
#[derive(Debug, Default)]
struct GroupState {
    /// The connector config handed out by `connect_info` (set by `init`).
    connector: Option<ConnectorConfig>,
    /// The public key installed in new containers.
    authorized_key: Option<String>,
    /// Containers whose sshd has answered once (they need no more readiness probes).
    ready: HashSet<String>,
    /// The ids of the last listing, to report vanished containers as `deleted` once.
    listed: HashSet<String>,
}

/// The docker group for a runner, from its `plugin_config` (see [`DockerSettings`]).
///
/// Two defaults come from the runner: the group is named after the runner unless
/// `plugin_config` sets `name`, and, for a fleet with a state directory, the generated key is
/// kept in `<state_dir>/keys/<runner>.key` unless `key_file` is set: adopted instances after
/// a restart only accept the key they were created with.
pub fn build(config: &ProviderConfig<'_>) -> Result<Arc<dyn InstanceGroup>, FleetError> {
    Ok(Arc::new(DockerGroup::from_plugin_config(
        &plugin_settings(config),
    )?))
}

/// `plugin_config` with the defaults [`build`] takes from the runner filled in.
fn plugin_settings(config: &ProviderConfig<'_>) -> serde_json::Value {
    let mut settings = match config.plugin_config {
        serde_json::Value::Null => serde_json::Value::Object(serde_json::Map::new()),
        other => other.clone(),
    };
    if let serde_json::Value::Object(map) = &mut settings {
        if !map.contains_key("name") {
            map.insert("name".into(), config.runner_name.into());
        }
        if !map.contains_key("key_file")
            && let Some(file) = config.state_file("keys", "key")
        {
            map.insert(
                "key_file".into(),
                file.to_string_lossy().into_owned().into(),
            );
        }
    }
    settings
}

impl DockerGroup {
    /// A group for `settings`, with a client for its Docker engine (nothing is contacted
    /// until [`InstanceGroup::init`]).
    pub fn new(settings: DockerSettings) -> Result<Self, FleetError> {
        settings.validate()?;
        let docker = connect(settings.docker_host.as_deref())?;
        Ok(DockerGroup {
            settings,
            docker,
            state: Mutex::new(GroupState::default()),
        })
    }

    /// A group from a `plugin_config` JSON value (see [`DockerSettings`]).
    pub fn from_plugin_config(config: &serde_json::Value) -> Result<Self, FleetError> {
        Self::new(DockerSettings::from_plugin_config(config)?)
    }

    /// The group's settings.
    pub fn settings(&self) -> &DockerSettings {
        &self.settings
    }

    /// The provider id: `docker/<name>`.
    pub fn provider_id(&self) -> String {
        format!("docker/{}", self.settings.name)
    }

    /// The label filter that selects this group's containers (`flotilla.group=<name>`).
    pub fn label_filter(&self) -> String {
        format!("{GROUP_LABEL}={}", self.settings.name)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, GroupState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Every container of the group, in any state.
    async fn list(&self, op: &'static str) -> Result<Vec<ContainerSummary>, FleetError> {
        let filters = HashMap::from([(
            "label".to_string(),
            vec![self.label_filter(), format!("{MANAGED_LABEL}=true")],
        )]);
        let options = ListContainersOptions {
            all: true,
            filters: Some(filters),
            ..Default::default()
        };
        let containers = self
            .docker
            .list_containers(Some(options))
            .await
            .map_err(|e| FleetError::provider(op, e))?;
        // The engine filtered by label already; check again so a label typo in a filter can
        // never make one group see another's containers.
        Ok(containers
            .into_iter()
            .filter(|c| {
                c.labels
                    .as_ref()
                    .and_then(|l| l.get(GROUP_LABEL))
                    .is_some_and(|g| *g == self.settings.name)
            })
            .collect())
    }

    /// The body of a new container.
    fn container_body(&self, authorized_key: Option<&str>) -> ContainerCreateBody {
        let s = &self.settings;
        let mut labels: HashMap<String, String> = s.labels.clone().into_iter().collect();
        labels.insert(GROUP_LABEL.into(), s.name.clone());
        labels.insert(MANAGED_LABEL.into(), "true".into());
        let mut env = Vec::new();
        if let Some(key) = authorized_key {
            env.push(format!("{AUTHORIZED_KEY_ENV}={key}"));
        }
        let mut host = HostConfig {
            port_bindings: Some(HashMap::from([(
                SSH_PORT.to_string(),
                Some(vec![PortBinding {
                    host_ip: Some(Ipv4Addr::LOCALHOST.to_string()),
                    host_port: Some(String::new()),
                }]),
            )])),
            nano_cpus: s.nano_cpus(),
            memory: s.memory_bytes(),
            network_mode: s.network.clone(),
            ..Default::default()
        };
        let mut volumes = None;
        if s.inner_dockerd {
            env.push(format!("{INNER_DOCKERD_ENV}=1"));
            // Privileged mode fails on cgroup-v1 hosts like this one; these are what an inner
            // dockerd needs instead. SYS_PTRACE: runc joins a container's namespaces through
            // /proc/<pid>/ns, which for a container running as another user (`user = "1000"`)
            // needs it; without it every exec into such a container failed ("error executing
            // setns process").
            host.cap_add = Some(vec![
                "SYS_ADMIN".into(),
                "NET_ADMIN".into(),
                "SYS_PTRACE".into(),
            ]);
            host.security_opt = Some(vec![
                "seccomp=unconfined".into(),
                "apparmor=unconfined".into(),
            ]);
            host.binds = Some(vec!["/sys/fs/cgroup:/sys/fs/cgroup:rw".into()]);
            // The inner daemon's storage must not be on the container's overlay.
            volumes = Some(vec!["/var/lib/docker".into()]);
        }
        ContainerCreateBody {
            image: Some(s.image.clone()),
            env: Some(env),
            labels: Some(labels),
            exposed_ports: Some(vec![SSH_PORT.into()]),
            volumes,
            host_config: Some(host),
            ..Default::default()
        }
    }

    /// Creates and starts one container; on a failed start it removes what it created.
    async fn create_one(&self, body: ContainerCreateBody) -> Result<String, FleetError> {
        let name = format!(
            "flotilla-{}-{:08x}",
            self.settings.name,
            rand::rng().next_u32()
        );
        let options = CreateContainerOptionsBuilder::new().name(&name).build();
        let created = self
            .docker
            .create_container(Some(options), body)
            .await
            .map_err(|e| FleetError::provider("increase", e))?;
        if let Err(e) = self.docker.start_container(&created.id, None).await {
            let _ = self.remove(&created.id).await;
            return Err(FleetError::provider("increase", e));
        }
        Ok(created.id)
    }

    /// Removes a container with its anonymous volumes; a container already gone counts as
    /// removed.
    async fn remove(&self, id: &str) -> Result<(), bollard::errors::Error> {
        let options = RemoveContainerOptionsBuilder::new()
            .force(true)
            .v(true)
            .build();
        match self.docker.remove_container(id, Some(options)).await {
            Ok(()) => Ok(()),
            Err(e) if status_of(&e) == Some(404) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Inspects one of the group's containers: its state word and published SSH port.
    async fn inspect(&self, op: &'static str, id: &str) -> Result<Inspected, FleetError> {
        let c = match self.docker.inspect_container(id, None).await {
            Ok(c) => c,
            Err(e) if status_of(&e) == Some(404) => {
                return Err(FleetError::InstanceNotFound(id.into()));
            }
            Err(e) => return Err(FleetError::provider(op, e)),
        };
        let group = c
            .config
            .as_ref()
            .and_then(|cfg| cfg.labels.as_ref())
            .and_then(|l| l.get(GROUP_LABEL));
        if group != Some(&self.settings.name) {
            // Another group's (or nobody's) container: not ours to show.
            return Err(FleetError::InstanceNotFound(id.into()));
        }
        let state = c
            .state
            .as_ref()
            .and_then(|s| s.status)
            .map(|s| s.to_string())
            .unwrap_or_default();
        let port = c
            .network_settings
            .as_ref()
            .and_then(|n| n.ports.as_ref())
            .and_then(|p| p.get(SSH_PORT))
            .and_then(|b| b.as_ref())
            .and_then(|b| {
                b.iter()
                    .find_map(|b| b.host_port.as_deref().and_then(|p| p.parse::<u16>().ok()))
            });
        Ok(Inspected { state, port })
    }
}

/// The parts of an inspected container the provider uses.
struct Inspected {
    state: String,
    port: Option<u16>,
}

/// The published SSH port of a listed container.
fn published_ssh_port(c: &ContainerSummary) -> Option<u16> {
    c.ports
        .as_ref()?
        .iter()
        .find(|p| p.private_port == 22 && p.public_port.is_some())
        .and_then(|p| p.public_port)
}

fn ssh_addr(port: u16) -> SocketAddr {
    SocketAddr::from((Ipv4Addr::LOCALHOST, port))
}

/// The HTTP status of a Docker API error, if the engine answered.
fn status_of(e: &bollard::errors::Error) -> Option<u16> {
    match e {
        bollard::errors::Error::DockerResponseServerError { status_code, .. } => Some(*status_code),
        _ => None,
    }
}

/// A client for the engine at `host` (`None`: the local default).
fn connect(host: Option<&str>) -> Result<Docker, FleetError> {
    let r = match host {
        None => Docker::connect_with_local_defaults(),
        Some(h) if h.starts_with("unix://") || h.starts_with('/') => {
            Docker::connect_with_unix(h, API_TIMEOUT_SECS, bollard::API_DEFAULT_VERSION)
        }
        Some(h) if h.starts_with("tcp://") || h.starts_with("http://") => {
            Docker::connect_with_http(h, API_TIMEOUT_SECS, bollard::API_DEFAULT_VERSION)
        }
        Some(h) => {
            return Err(FleetError::Config(format!(
                "docker plugin_config: docker_host {h:?} must start with unix://, tcp:// or http://"
            )));
        }
    };
    r.map_err(|e| FleetError::Config(format!("docker plugin_config: docker_host: {e}")))
}

#[async_trait]
impl InstanceGroup for DockerGroup {
    async fn init(&self, settings: &Settings) -> Result<ProviderInfo, FleetError> {
        // The engine here speaks API 1.41 while bollard defaults to a newer one: negotiate.
        let docker = self
            .docker
            .clone()
            .negotiate_version()
            .await
            .map_err(|e| FleetError::provider("init", format!("docker engine: {e}")))?;
        let engine = docker
            .version()
            .await
            .map_err(|e| FleetError::provider("init", format!("docker engine: {e}")))?;

        let mut connector = settings.connector.clone();
        if connector.username.is_empty() {
            connector.username = "root".into();
        }
        let authorized_key = if connector.use_static_credentials {
            // Pass the user's credentials through; install a static key's public half so the
            // stock instance image accepts it.
            match &connector.key {
                Some(key) => Some(GroupKey::parse(key.expose())?.public_openssh),
                None => None,
            }
        } else {
            let comment = format!("flotilla/{}", self.provider_id());
            let key = match &self.settings.key_file {
                Some(path) => GroupKey::load_or_create(path, &comment)?,
                None => GroupKey::generate(&comment)?,
            };
            connector.key = Some(key.private_openssh.clone());
            connector.password = None;
            Some(key.public_openssh)
        };
        // The provider knows what its instances are.
        connector.protocol = flotilla_fleet::Protocol::Ssh;
        connector.protocol_port = None;
        {
            let mut st = self.lock();
            st.connector = Some(connector);
            st.authorized_key = authorized_key;
        }
        let api = docker.client_version();
        Ok(ProviderInfo {
            id: self.provider_id(),
            max_size: self.settings.max_size,
            version: env!("CARGO_PKG_VERSION").into(),
            build_info: format!(
                "docker engine {} (API {api})",
                engine.version.unwrap_or_default()
            ),
            capabilities: Capabilities::remote(),
        })
    }

    async fn update(&self) -> Result<Vec<InstanceStatus>, FleetError> {
        let containers = self.list("update").await?;
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs() as i64;
        let known_ready = self.lock().ready.clone();
        let startup_timeout = self.settings.startup_timeout();

        // Probe sshd (concurrently) only on running containers not yet seen ready.
        let probes = containers.iter().map(|c| {
            let id = c.id.clone().unwrap_or_default();
            let running = c.state.map(|s| s.to_string()).as_deref() == Some("running");
            let port = published_ssh_port(c);
            let already = known_ready.contains(&id);
            async move {
                let ready = match (running, already, port) {
                    (false, _, _) => false,
                    (true, true, _) => true,
                    (true, false, Some(port)) => {
                        ssh_banner(LOOPBACK, port, PROBE_TIMEOUT).await.is_ok()
                    }
                    (true, false, None) => false,
                };
                (id, ready)
            }
        });
        let readiness: HashMap<String, bool> = join_all(probes).await.into_iter().collect();

        let mut out = Vec::with_capacity(containers.len());
        let mut ids = HashSet::new();
        let mut ready_now = HashSet::new();
        for c in &containers {
            let Some(id) = c.id.clone() else { continue };
            let docker_state = c.state.map(|s| s.to_string()).unwrap_or_default();
            let ssh_ready = readiness.get(&id).copied().unwrap_or(false);
            let age =
                Duration::from_secs(now.saturating_sub(c.created.unwrap_or(now)).max(0) as u64);
            let st = state::instance_state(
                &state::Observed {
                    docker_state: &docker_state,
                    ssh_ready,
                    age,
                },
                startup_timeout,
            );
            if ssh_ready {
                ready_now.insert(id.clone());
            }
            ids.insert(id.clone());
            out.push(InstanceStatus::new(id, st));
        }
        let mut st = self.lock();
        for gone in st.listed.difference(&ids) {
            out.push(InstanceStatus::new(gone.clone(), State::Deleted));
        }
        st.listed = ids;
        st.ready = ready_now;
        Ok(out)
    }

    async fn increase(&self, n: usize) -> Result<usize, FleetError> {
        if n == 0 {
            return Ok(0);
        }
        let authorized_key = {
            let st = self.lock();
            if st.connector.is_none() {
                return Err(FleetError::NotInitialized);
            }
            st.authorized_key.clone()
        };
        let existing = self
            .list("increase")
            .await?
            .iter()
            .filter(|c| {
                !matches!(
                    c.state.map(|s| s.to_string()).as_deref(),
                    Some("removing" | "dead")
                )
            })
            .count();
        let room = self.settings.max_size.saturating_sub(existing);
        let want = n.min(room);
        let body = self.container_body(authorized_key.as_deref());
        let results = join_all((0..want).map(|_| self.create_one(body.clone()))).await;
        let mut created = 0;
        let mut first_error = None;
        for r in results {
            match r {
                Ok(id) => {
                    tracing::debug!(group = %self.settings.name, container = %id, "instance created");
                    created += 1;
                }
                Err(e) => {
                    tracing::warn!(group = %self.settings.name, error = %e, "creating an instance failed");
                    first_error.get_or_insert(e);
                }
            }
        }
        match first_error {
            Some(e) if created == 0 => Err(e),
            _ => Ok(created),
        }
    }

    async fn decrease(&self, ids: &[InstanceId]) -> Result<Vec<InstanceId>, FleetError> {
        // Only containers of this group may be removed through it.
        let ours: HashSet<String> = self
            .list("decrease")
            .await?
            .into_iter()
            .filter_map(|c| c.id)
            .collect();
        let ours = &ours;
        let removals = ids.iter().map(|id| async move {
            if !ours.contains(id) {
                // A container already gone counts as deleted; another group's is refused.
                return match self.docker.inspect_container(id, None).await {
                    Err(e) if status_of(&e) == Some(404) => Some(id.clone()),
                    _ => None,
                };
            }
            match self.remove(id).await {
                Ok(()) => Some(id.clone()),
                Err(e) => {
                    tracing::warn!(group = %self.settings.name, container = %id, error = %e, "removing an instance failed");
                    None
                }
            }
        });
        let done: Vec<InstanceId> = join_all(removals).await.into_iter().flatten().collect();
        let mut st = self.lock();
        for id in &done {
            st.ready.remove(id);
        }
        Ok(done)
    }

    async fn connect_info(&self, id: &str) -> Result<ConnectInfo, FleetError> {
        let connector = self
            .lock()
            .connector
            .clone()
            .ok_or(FleetError::NotInitialized)?;
        let c = self.inspect("connect_info", id).await?;
        let port = c.port.ok_or_else(|| FleetError::InstanceUnhealthy {
            id: id.into(),
            reason: format!("no published SSH port (container is {})", c.state),
        })?;
        let addr = ssh_addr(port).to_string();
        Ok(ConnectInfo {
            config: connector,
            id: id.into(),
            external_addr: addr.clone(),
            internal_addr: addr,
            expires: None,
        })
    }

    async fn heartbeat(&self, id: &str) -> Result<(), FleetError> {
        let c = self.inspect("heartbeat", id).await?;
        let unhealthy = |reason: String| FleetError::InstanceUnhealthy {
            id: id.into(),
            reason,
        };
        if c.state != "running" {
            return Err(unhealthy(format!("container is {}", c.state)));
        }
        let port = c
            .port
            .ok_or_else(|| unhealthy("no published SSH port".into()))?;
        ssh_banner(LOOPBACK, port, PROBE_TIMEOUT)
            .await
            .map_err(|e| unhealthy(format!("sshd does not answer: {e}")))
    }

    async fn shutdown(&self) -> Result<(), FleetError> {
        // Containers outlive the provider; there is nothing else to release.
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_runner_names_the_group_and_its_key_file_unless_plugin_config_does() {
        let given = serde_json::json!({"image": "img:1"});
        let config = ProviderConfig {
            plugin_config: &given,
            runner_name: "fleet one",
            state_dir: Some(std::path::Path::new("/state")),
        };
        let s = plugin_settings(&config);
        assert_eq!(s["name"], "fleet one");
        assert_eq!(s["key_file"], "/state/keys/fleet_one.key");
        let given = serde_json::json!({"image": "img:1", "name": "g", "key_file": "/k"});
        let s = plugin_settings(&ProviderConfig {
            plugin_config: &given,
            state_dir: None,
            ..config
        });
        assert_eq!(
            (s["name"].as_str(), s["key_file"].as_str()),
            (Some("g"), Some("/k"))
        );
        let none = serde_json::Value::Null;
        let s = plugin_settings(&ProviderConfig {
            plugin_config: &none,
            state_dir: None,
            ..config
        });
        assert_eq!(s, serde_json::json!({"name": "fleet one"}));
    }

    #[test]
    fn container_body_isolates_and_publishes_on_loopback() {
        let mut s = DockerSettings::new("g1", "img:1");
        s.labels.insert("team".into(), "ci".into());
        s.cpus = Some(2.0);
        s.memory = Some("1g".into());
        let g = DockerGroup::new(s).unwrap();
        let b = g.container_body(Some("ssh-ed25519 AAAA"));
        let labels = b.labels.as_ref().unwrap();
        assert_eq!(labels[GROUP_LABEL], "g1");
        assert_eq!(labels[MANAGED_LABEL], "true");
        assert_eq!(labels["team"], "ci");
        let host = b.host_config.as_ref().unwrap();
        let binding = &host.port_bindings.as_ref().unwrap()[SSH_PORT]
            .as_ref()
            .unwrap()[0];
        assert_eq!(binding.host_ip.as_deref(), Some("127.0.0.1"));
        assert_eq!(binding.host_port.as_deref(), Some(""), "a random port");
        assert_eq!(host.nano_cpus, Some(2_000_000_000));
        assert_eq!(host.memory, Some(1 << 30));
        assert!(
            host.cap_add.is_none(),
            "no extra capabilities without inner dockerd"
        );
        let env = b.env.as_ref().unwrap();
        assert!(env.contains(&format!("{AUTHORIZED_KEY_ENV}=ssh-ed25519 AAAA")));
        assert!(!env.iter().any(|e| e.starts_with(INNER_DOCKERD_ENV)));
    }

    #[test]
    fn inner_dockerd_gets_what_it_needs() {
        let mut s = DockerSettings::new("g1", "img:1");
        s.inner_dockerd = true;
        let g = DockerGroup::new(s).unwrap();
        let b = g.container_body(None);
        let host = b.host_config.as_ref().unwrap();
        assert_eq!(
            host.cap_add.as_deref().unwrap(),
            ["SYS_ADMIN", "NET_ADMIN", "SYS_PTRACE"]
        );
        assert!(host.privileged.is_none());
        assert!(
            host.binds
                .as_ref()
                .unwrap()
                .contains(&"/sys/fs/cgroup:/sys/fs/cgroup:rw".to_string())
        );
        assert_eq!(b.volumes.as_deref().unwrap(), ["/var/lib/docker"]);
        assert!(
            b.env
                .as_ref()
                .unwrap()
                .contains(&format!("{INNER_DOCKERD_ENV}=1"))
        );
    }

    #[test]
    fn docker_hosts() {
        for host in [
            "unix:///var/run/docker.sock",
            "tcp://127.0.0.1:2375",
            "http://127.0.0.1:2375",
        ] {
            let mut s = DockerSettings::new("g1", "img:1");
            s.docker_host = Some(host.into());
            assert!(DockerGroup::new(s).is_ok(), "{host}");
        }
        let g = DockerGroup::from_plugin_config(&serde_json::json!({"name": "g2", "image": "i"}))
            .unwrap();
        assert_eq!(g.provider_id(), "docker/g2");
        assert_eq!(g.label_filter(), "flotilla.group=g2");
    }

    #[test]
    fn bad_docker_host_is_a_config_error() {
        let mut s = DockerSettings::new("g1", "img:1");
        s.docker_host = Some("ftp://x".into());
        assert!(matches!(DockerGroup::new(s), Err(FleetError::Config(_))));
    }

    #[tokio::test]
    async fn unusable_before_init() {
        let g = DockerGroup::new(DockerSettings::new("g1", "img:1")).unwrap();
        assert!(matches!(
            g.increase(1).await,
            Err(FleetError::NotInitialized)
        ));
        assert!(matches!(
            g.connect_info("x").await,
            Err(FleetError::NotInitialized)
        ));
    }
}
