//! The `kubernetes` provider: pods as instances, each running a Docker daemon, reached with
//! the `kube-exec` connector (no SSH).
//!
//! - Instances are pods made from a PodTemplate ([`template`]) in one namespace, labelled
//!   `flotilla.group=<name>` and `flotilla.managed=true`, named `flotilla-<name>-<random>`
//!   by the API server (`generateName`).
//! - `increase(n)` creates `n` pods (never beyond `max_size`); `decrease` deletes pods by
//!   name (a pod already gone counts as deleted); nothing is ever chosen by ordinal.
//! - `update` lists the group's pods by label and maps phase and conditions to states
//!   ([`state`]); a pod `Pending` (or not ready) past `pending_timeout` becomes `timeout`,
//!   and its conditions, container states and events are logged, so the reason it did not
//!   start is never lost. A pod that left the listing is reported `deleted` once.
//! - `heartbeat` reads the pod: running and ready, or unhealthy with the reasons.
//! - Credentials: a kubeconfig (file and context), or the in-cluster service account
//!   ([`target::client`]).
//! - `connect_info` names the pod for [`connector`]: exec and port-forward through the API
//!   server ([`KubeExecConnector`]).
//!
//! - Per-job sizing ([`sizing`], [`shape`]): [`KubernetesGroup::sized`] is the same provider
//!   for pods of one [`Shape`]: they carry the label `flotilla.shape=<hash>` and the shape in
//!   an annotation, their job container's `resources` are the shape's, its listing selects
//!   only them, and its `ProviderInfo::id` ends in `/shape-<hash>`. The default group's pods
//!   have no shape label (its selector says `!flotilla.shape`) and get the configured
//!   defaults (`cpu_request`, ...), if any.
//!
//! Tested against the fake API server in `flotilla-testkit` (pods are Docker containers,
//! exec is Docker exec over the WebSocket channel protocol), never against a real cluster.

pub mod connector;
pub mod quantity;
pub mod settings;
pub mod shape;
pub mod sizing;
pub mod state;
mod target;
pub mod template;

pub use connector::KubeExecConnector;
pub use quantity::Quantity;
pub use settings::KubernetesSettings;
pub use shape::{SHAPE_ANNOTATION, SHAPE_LABEL, Shape};
pub use sizing::{JobSizing, OverwriteError, Sizing};
pub use target::{SCHEME, connector};

use async_trait::async_trait;
use flotilla_fleet::{
    Capabilities, ConnectInfo, ConnectorConfig, ConnectorKind, FleetError, InstanceGroup,
    InstanceId, InstanceStatus, ProviderConfig, ProviderInfo, Settings, State,
};
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

/// The provider's name in configuration (`plugin = "kubernetes"`).
pub const PLUGIN: &str = "kubernetes";
/// The label naming a pod's group.
pub const GROUP_LABEL: &str = "flotilla.group";
/// The label marking a pod as made by flotilla.
pub const MANAGED_LABEL: &str = "flotilla.managed";

/// A group of pods. Create it with [`KubernetesGroup::new`], then call
/// [`InstanceGroup::init`].
pub struct KubernetesGroup {
    settings: KubernetesSettings,
    template: Pod,
    sizing: Sizing,
    /// The shape of this group's pods; `None` for the default group.
    shape: Option<Shape>,
    clock: fn() -> SystemTime,
    state: Mutex<GroupState>,
}

impl std::fmt::Debug for KubernetesGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubernetesGroup")
            .field("name", &self.settings.name)
            .field("shape", &self.shape)
            .finish_non_exhaustive()
    }
}

#[derive(Default)]
struct GroupState {
    target: Option<target::Target>,
    provider_id: String,
    connector: Option<ConnectorConfig>,
    /// Pod names of the last listing, to report vanished pods as `deleted` once.
    listed: HashSet<String>,
    /// Why each timed-out pod did not start (logged once, kept for callers).
    timeouts: HashMap<String, String>,
}

/// A sized pod found in the cluster: its name and the shape its annotation says (or why it
/// says none).
#[derive(Debug, Clone, PartialEq)]
pub struct SizedPod {
    /// The pod's name.
    pub name: String,
    /// Its shape, or why the annotation is not one.
    pub shape: Result<Shape, String>,
}

/// The kubernetes group for a runner, from its `plugin_config` (see [`KubernetesSettings`]);
/// the group is named after the runner unless `plugin_config` sets `name`.
pub fn build(config: &ProviderConfig<'_>) -> Result<Arc<dyn InstanceGroup>, FleetError> {
    Ok(Arc::new(group(config)?))
}

/// The kubernetes group for a runner, as its own type (for [`KubernetesGroup::sized`]).
pub fn group(config: &ProviderConfig<'_>) -> Result<KubernetesGroup, FleetError> {
    let mut settings = match config.plugin_config {
        serde_json::Value::Null => serde_json::Value::Object(serde_json::Map::new()),
        other => other.clone(),
    };
    if let serde_json::Value::Object(map) = &mut settings
        && !map.contains_key("name")
    {
        map.insert("name".into(), config.runner_name.into());
    }
    KubernetesGroup::new(KubernetesSettings::from_plugin_config(&settings)?)
}

/// A name made fit for a pod name prefix: lowercase letters, digits and `-`.
fn dns_label(name: &str) -> String {
    let cleaned: String = name
        .to_ascii_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    cleaned.trim_matches('-').chars().take(40).collect()
}

impl KubernetesGroup {
    /// A group for `settings` (the template is read now; the cluster is contacted by `init`).
    pub fn new(settings: KubernetesSettings) -> Result<Self, FleetError> {
        settings.validate()?;
        let template = template::parse(&settings.template_text()?)?;
        let sizing = Sizing::from_settings(&settings)?;
        Ok(KubernetesGroup {
            settings,
            template,
            sizing,
            shape: None,
            clock: SystemTime::now,
            state: Mutex::new(GroupState::default()),
        })
    }

    /// The group's settings.
    pub fn settings(&self) -> &KubernetesSettings {
        &self.settings
    }

    /// The same provider for pods of `shape` (not initialised: call
    /// [`InstanceGroup::init`]). Its pods are apart from the default group's and from other
    /// shapes': their own label, listing and provider id.
    pub fn sized(&self, shape: Shape) -> KubernetesGroup {
        KubernetesGroup {
            settings: self.settings.clone(),
            template: self.template.clone(),
            sizing: self.sizing.clone(),
            shape: Some(shape),
            clock: self.clock,
            state: Mutex::new(GroupState::default()),
        }
    }

    /// The runner's sizing rules (defaults and maxima from `plugin_config`).
    pub fn sizing(&self) -> &Sizing {
        &self.sizing
    }

    /// The shape of this group's pods (`None`: the default group).
    pub fn shape(&self) -> Option<&Shape> {
        self.shape.as_ref()
    }

    /// The label selector of the group's pods: the default group's exclude every sized pod.
    pub fn label_selector(&self) -> String {
        let base = format!("{GROUP_LABEL}={},{MANAGED_LABEL}=true", self.settings.name);
        match &self.shape {
            None => format!("{base},!{SHAPE_LABEL}"),
            Some(shape) => format!("{base},{SHAPE_LABEL}={}", shape.hash()),
        }
    }

    /// Whether `pod` is one of this group's (the check made again on what the server
    /// listed).
    fn owns(&self, pod: &Pod) -> bool {
        let labels = pod.metadata.labels.as_ref();
        let label = |key: &str| labels.and_then(|l| l.get(key));
        label(GROUP_LABEL).is_some_and(|g| *g == self.settings.name)
            && match &self.shape {
                None => label(SHAPE_LABEL).is_none(),
                Some(shape) => label(SHAPE_LABEL).is_some_and(|h| *h == shape.hash()),
            }
    }

    /// The sized pods of this group's name, whatever their shape (for a manager starting
    /// after another, which must not leave them behind), with the shape each says it has.
    pub async fn sized_pods(&self) -> Result<Vec<SizedPod>, FleetError> {
        let target = self.target()?;
        let selector = format!(
            "{GROUP_LABEL}={},{MANAGED_LABEL}=true,{SHAPE_LABEL}",
            self.settings.name
        );
        let pods = target
            .pods
            .list(&ListParams::default().labels(&selector))
            .await
            .map_err(|e| FleetError::provider("sized_pods", e))?;
        Ok(pods
            .items
            .into_iter()
            .filter(|p| {
                let labels = p.metadata.labels.as_ref();
                labels
                    .and_then(|l| l.get(GROUP_LABEL))
                    .is_some_and(|g| *g == self.settings.name)
                    && labels.is_some_and(|l| l.contains_key(SHAPE_LABEL))
            })
            .filter_map(|p| {
                let name = p.metadata.name.clone()?;
                let text = p
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(SHAPE_ANNOTATION))
                    .cloned()
                    .unwrap_or_default();
                Some(SizedPod {
                    name,
                    shape: Shape::from_annotation(&text).map_err(|e| e.to_string()),
                })
            })
            .collect())
    }

    /// Why the pod `id` timed out, if it did: its conditions, container states and events.
    pub fn timeout_reason(&self, id: &str) -> Option<String> {
        self.lock().timeouts.get(id).cloned()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, GroupState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn target(&self) -> Result<target::Target, FleetError> {
        self.lock().target.clone().ok_or(FleetError::NotInitialized)
    }

    /// A new pod from the template, with the group's shape (or the configured defaults).
    fn new_pod(&self) -> Pod {
        let mut pod = self.template.clone();
        let labels = pod.metadata.labels.get_or_insert_with(BTreeMap::new);
        labels.extend(self.settings.labels.clone());
        labels.insert(GROUP_LABEL.into(), self.settings.name.clone());
        labels.insert(MANAGED_LABEL.into(), "true".into());
        labels.remove(SHAPE_LABEL);
        let shape = match &self.shape {
            Some(shape) => {
                labels.insert(SHAPE_LABEL.into(), shape.hash());
                pod.metadata
                    .annotations
                    .get_or_insert_with(BTreeMap::new)
                    .insert(SHAPE_ANNOTATION.into(), shape.annotation());
                // What the shape leaves unset stays the runner's default.
                self.sizing.defaults().overlaid(shape)
            }
            None => self.sizing.defaults(),
        };
        if !shape.is_empty()
            && let Some(spec) = pod.spec.as_mut()
        {
            // The container jobs run in: the one named by `container`, else the first.
            let at = self
                .settings
                .container
                .as_ref()
                .and_then(|name| spec.containers.iter().position(|c| c.name == *name))
                .unwrap_or(0);
            if let Some(container) = spec.containers.get_mut(at) {
                shape.apply(container);
            }
        }
        pod.metadata.generate_name = Some(format!("flotilla-{}-", dns_label(&self.settings.name)));
        pod.metadata.namespace = None;
        pod
    }

    async fn list(&self, op: &'static str) -> Result<Vec<Pod>, FleetError> {
        let target = self.target()?;
        let pods = target
            .pods
            .list(&ListParams::default().labels(&self.label_selector()))
            .await
            .map_err(|e| FleetError::provider(op, e))?;
        // The server filtered by label already; check again so a selector typo can never make
        // one group take another's pods.
        Ok(pods.items.into_iter().filter(|p| self.owns(p)).collect())
    }

    /// The pod's conditions and container states, and its events, for the log.
    async fn describe_timeout(&self, pod: &Pod) -> String {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let mut why = state::not_ready_reasons(pod);
        let Ok(target) = self.target() else {
            return why;
        };
        let events: Api<Event> = Api::namespaced(target.client.clone(), &target.namespace);
        let params = ListParams::default().fields(&format!("involvedObject.name={name}"));
        match events.list(&params).await {
            Ok(list) => {
                for e in list.items {
                    why.push_str(&format!(
                        "; event {} {}: {}",
                        e.type_.unwrap_or_default(),
                        e.reason.unwrap_or_default(),
                        e.message.unwrap_or_default()
                    ));
                }
            }
            Err(e) => why.push_str(&format!("; events could not be read: {e}")),
        }
        why
    }
}

#[async_trait]
impl InstanceGroup for KubernetesGroup {
    async fn init(&self, settings: &Settings) -> Result<ProviderInfo, FleetError> {
        let (client, namespace) = target::client(&self.settings).await?;
        let version = client.apiserver_version().await.map_err(|e| {
            FleetError::provider(
                "init",
                format!("the API server did not answer /version: {e}"),
            )
        })?;
        let provider_id = match &self.shape {
            None => format!("kubernetes/{namespace}/{}", self.settings.name),
            Some(shape) => format!(
                "kubernetes/{namespace}/{}/shape-{}",
                self.settings.name,
                shape.hash()
            ),
        };
        let container = self.settings.container.clone().or_else(|| {
            self.template
                .spec
                .as_ref()
                .and_then(|s| s.containers.first())
                .map(|c| c.name.clone())
        });
        let target = target::Target {
            pods: Api::namespaced(client.clone(), &namespace),
            client,
            namespace,
            container,
            keepalive: settings.connector.keepalive,
        };
        target::register(&provider_id, target.clone());
        {
            let mut st = self.lock();
            st.target = Some(target);
            st.provider_id = provider_id.clone();
            st.connector = Some(settings.connector.clone());
        }
        Ok(ProviderInfo {
            id: provider_id,
            max_size: self.settings.max_size.unwrap_or(usize::MAX),
            version: env!("CARGO_PKG_VERSION").into(),
            build_info: format!("API server {}", version.git_version),
            capabilities: Capabilities {
                connector: ConnectorKind::KubeExec,
                ..Capabilities::remote()
            },
        })
    }

    async fn update(&self) -> Result<Vec<InstanceStatus>, FleetError> {
        let pods = self.list("update").await?;
        let now = (self.clock)();
        let mut statuses = Vec::with_capacity(pods.len());
        let mut seen = HashSet::new();
        for pod in &pods {
            let Some(name) = pod.metadata.name.clone() else {
                continue;
            };
            let state = state::instance_state(pod, now, self.settings.pending_timeout);
            if state == State::Timeout && !self.lock().timeouts.contains_key(&name) {
                let why = self.describe_timeout(pod).await;
                tracing::warn!(pod = %name, reasons = %why, "pod did not become ready in time");
                self.lock().timeouts.insert(name.clone(), why);
            }
            seen.insert(name.clone());
            statuses.push(InstanceStatus::new(name, state));
        }
        let mut st = self.lock();
        for gone in st.listed.difference(&seen) {
            statuses.push(InstanceStatus::new(gone.clone(), State::Deleted));
        }
        st.timeouts.retain(|k, _| seen.contains(k));
        st.listed = seen;
        Ok(statuses)
    }

    async fn increase(&self, n: usize) -> Result<usize, FleetError> {
        let target = self.target()?;
        let room = match self.settings.max_size {
            Some(max) => max.saturating_sub(self.list("increase").await?.len()),
            None => n,
        };
        let mut made = 0;
        for _ in 0..n.min(room) {
            match target
                .pods
                .create(&PostParams::default(), &self.new_pod())
                .await
            {
                Ok(pod) => {
                    made += 1;
                    tracing::info!(pod = ?pod.metadata.name, namespace = %target.namespace, "pod created");
                }
                Err(e) if made == 0 => return Err(FleetError::provider("increase", e)),
                Err(e) => {
                    tracing::warn!(error = %e, made, "creating a pod failed");
                    break;
                }
            }
        }
        Ok(made)
    }

    async fn decrease(&self, ids: &[InstanceId]) -> Result<Vec<InstanceId>, FleetError> {
        let target = self.target()?;
        let mut deleted = Vec::new();
        for id in ids {
            match target.pods.delete(id, &DeleteParams::default()).await {
                Ok(_) => deleted.push(id.clone()),
                Err(kube::Error::Api(s)) if s.code == 404 => deleted.push(id.clone()),
                Err(e) => tracing::warn!(pod = %id, error = %e, "deleting a pod failed"),
            }
        }
        Ok(deleted)
    }

    async fn connect_info(&self, id: &str) -> Result<ConnectInfo, FleetError> {
        let target = self.target()?;
        let pod = match target.pods.get_opt(id).await {
            Ok(Some(p)) => p,
            Ok(None) => return Err(FleetError::InstanceNotFound(id.to_string())),
            Err(e) => return Err(FleetError::provider("connect_info", e)),
        };
        let (config, provider_id) = {
            let st = self.lock();
            (
                st.connector.clone().unwrap_or_default(),
                st.provider_id.clone(),
            )
        };
        Ok(ConnectInfo {
            config,
            id: id.to_string(),
            external_addr: target::external_addr(&provider_id, id),
            internal_addr: pod.status.and_then(|s| s.pod_ip).unwrap_or_default(),
            expires: None,
        })
    }

    async fn heartbeat(&self, id: &str) -> Result<(), FleetError> {
        let target = self.target()?;
        match target.pods.get_opt(id).await {
            Ok(Some(pod)) if state::is_ready(&pod) && pod.metadata.deletion_timestamp.is_none() => {
                Ok(())
            }
            Ok(Some(pod)) => Err(FleetError::InstanceUnhealthy {
                id: id.to_string(),
                reason: state::not_ready_reasons(&pod),
            }),
            Ok(None) => Err(FleetError::InstanceNotFound(id.to_string())),
            Err(e) => Err(FleetError::provider("heartbeat", e)),
        }
    }

    async fn shutdown(&self) -> Result<(), FleetError> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(extra: serde_json::Value) -> KubernetesGroup {
        let mut config = serde_json::json!({
            "name": "g",
            "container": "job",
            "pod_template": "spec:\n  containers:\n  - name: side\n    image: a\n  - name: job\n    image: b\n    resources:\n      requests:\n        memory: 64Mi\n",
        });
        config
            .as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        KubernetesGroup::new(KubernetesSettings::from_plugin_config(&config).unwrap()).unwrap()
    }

    fn resources(pod: &Pod, container: usize) -> serde_json::Value {
        serde_json::to_value(&pod.spec.as_ref().unwrap().containers[container].resources).unwrap()
    }

    #[test]
    fn sized_pods_carry_their_shape_in_the_job_container_a_label_and_an_annotation() {
        let default = group(serde_json::json!({"cpu_limit": "2"}));
        let shape = Shape::from_annotation("cpu_request=500m,memory_limit=1Gi").unwrap();
        let sized = default.sized(shape.clone());

        let pod = default.new_pod();
        assert_eq!(
            resources(&pod, 1),
            serde_json::json!({"requests": {"memory": "64Mi"}, "limits": {"cpu": "2"}}),
            "the default pod gets the configured defaults over the template"
        );
        assert_eq!(resources(&pod, 0), serde_json::Value::Null);
        assert!(
            !pod.metadata
                .labels
                .as_ref()
                .unwrap()
                .contains_key(SHAPE_LABEL)
        );
        assert!(default.owns(&pod));
        assert!(!sized.owns(&pod));

        let pod = sized.new_pod();
        assert_eq!(
            resources(&pod, 1),
            serde_json::json!({"requests": {"cpu": "500m", "memory": "64Mi"}, "limits": {"cpu": "2", "memory": "1Gi"}})
        );
        assert_eq!(resources(&pod, 0), serde_json::Value::Null);
        assert_eq!(
            pod.metadata.labels.as_ref().unwrap()[SHAPE_LABEL],
            shape.hash()
        );
        assert_eq!(
            pod.metadata.annotations.as_ref().unwrap()[SHAPE_ANNOTATION],
            "cpu_request=500m,memory_limit=1Gi"
        );
        assert!(sized.owns(&pod));
        assert!(!default.owns(&pod));
        let other = default.sized(Shape::from_annotation("cpu_request=1").unwrap());
        assert!(!other.owns(&pod));

        assert_eq!(
            default.label_selector(),
            "flotilla.group=g,flotilla.managed=true,!flotilla.shape"
        );
        assert_eq!(
            sized.label_selector(),
            format!(
                "flotilla.group=g,flotilla.managed=true,flotilla.shape={}",
                shape.hash()
            )
        );
    }

    #[test]
    fn group_names_become_pod_name_prefixes() {
        assert_eq!(dns_label("My Runner_1"), "my-runner-1");
        assert_eq!(dns_label("--x--"), "x");
    }
}
