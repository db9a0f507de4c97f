//! Pods and events, kept in memory; each pod backed by a container of the Docker engine.
//!
//! A pod's object is kept as the client sent it, with what the API server adds
//! (`metadata.uid`, `resourceVersion`, `creationTimestamp`, `namespace`, the `status`). Its
//! status follows the pod lifecycle of the API reference ("Pod Lifecycle" and
//! `staging/src/k8s.io/api/core/v1/types.go`: `PodPhase`, `PodConditionType`): `Pending` with
//! `PodScheduled` while the container is being made, then `Running` with `PodScheduled`,
//! `Initialized`, `ContainersReady` and `Ready` true, `status.podIP` the container's address
//! and a `containerStatuses` entry in state `running`; `Succeeded`/`Failed` once the container
//! exits. A pod held by [`super::FakeKube::hold_pending`] stays `Pending` with `PodScheduled`
//! false, reason `Unschedulable`, and a `FailedScheduling` event, as the scheduler reports it
//! (`pkg/scheduler/schedule_one.go`, `handleSchedulingFailure`).
//!
//! The container is made from the pod's first container (`image`, `command` as the
//! entrypoint, `args`, `env` values, `resources.limits` cpu and memory), with what an inner
//! dockerd needs on this kind of host (the capabilities and unconfined profiles the docker
//! provider uses: privileged mode fails here). `securityContext` and everything else in the
//! spec is not enforced.

use super::selector::{FieldSelector, LabelSelector};
use super::status::StatusError;
use bollard::Docker;
use bollard::models::{ContainerCreateBody, HostConfig};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, InspectContainerOptions, ListContainersOptions,
    RemoveContainerOptionsBuilder, StartContainerOptions,
};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::broadcast;

/// The label every container of one fake server carries (value: the server's id).
pub const SERVER_LABEL: &str = "flotilla.fake-kube";

/// The fields a pod can be selected by (`PodToSelectableFields`).
pub(crate) const POD_FIELDS: &[&str] = &[
    "metadata.name",
    "metadata.namespace",
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "status.phase",
    "status.podIP",
    "status.nominatedNodeName",
];

/// The fields an event can be selected by (`event.ToSelectableFields`).
pub(crate) const EVENT_FIELDS: &[&str] = &[
    "metadata.name",
    "metadata.namespace",
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
    "type",
];

/// One change to a pod, as a watch reports it.
#[derive(Debug, Clone)]
pub(crate) struct WatchEvent {
    pub(crate) kind: &'static str,
    pub(crate) object: Value,
}

/// Why pods are held `Pending` (set by tests).
#[derive(Debug, Clone)]
pub(crate) struct Hold {
    pub(crate) reason: String,
    pub(crate) message: String,
}

/// Pods and events of one fake server.
#[derive(Debug)]
pub(crate) struct Store {
    pub(crate) id: String,
    pub(crate) docker: Docker,
    pods: Mutex<BTreeMap<(String, String), Value>>,
    /// Docker container id per pod.
    containers: Mutex<HashMap<(String, String), String>>,
    events: Mutex<Vec<Value>>,
    resource_version: AtomicU64,
    pub(crate) watchers: broadcast::Sender<WatchEvent>,
    pub(crate) hold: Mutex<Option<Hold>>,
    /// Requests served, by `METHOD path` (for tests that check what a client asked).
    pub(crate) requests: Mutex<Vec<String>>,
    /// Wakes every open exec session to drop its connection without a status (a test's
    /// stand-in for a connection lost between client, API server and node).
    pub(crate) sever: tokio::sync::Notify,
    /// Objects of the other kinds (`kubectl apply` of a deployment's manifests).
    pub(crate) objects: super::objects::Objects,
}

/// The one node pods are bound to.
const NODE_NAME: &str = "fake-node";

fn now() -> String {
    in_seconds(0)
}

/// The time `secs` seconds from now, as the API server writes times.
fn in_seconds(secs: i64) -> String {
    (chrono::Utc::now() + chrono::Duration::seconds(secs))
        .format("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// The grace period of deleting `pod`, as the registry decides it
/// (`pkg/registry/core/pod/strategy.go`, `podStrategy.CheckGracefulDelete`): the request's
/// `gracePeriodSeconds`, else the pod's `terminationGracePeriodSeconds`; zero for a pod not
/// bound to a node or already `Succeeded`/`Failed`; a negative value becomes 1.
fn grace_period(pod: &Value, requested: Option<i64>) -> i64 {
    let mut period = requested
        .or_else(|| pod["spec"]["terminationGracePeriodSeconds"].as_i64())
        .unwrap_or(0);
    if pod["spec"]["nodeName"].as_str().is_none_or(str::is_empty) {
        period = 0;
    }
    if matches!(
        pod["status"]["phase"].as_str(),
        Some("Succeeded" | "Failed")
    ) {
        period = 0;
    }
    if period < 0 {
        period = 1;
    }
    period
}

fn labels_of(object: &Value) -> BTreeMap<String, String> {
    object["metadata"]["labels"]
        .as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

fn random_hex(n: usize) -> String {
    use rand::Rng;
    let mut rng = rand::rng();
    (0..n)
        .map(|_| format!("{:x}", rng.random_range(0..16u8)))
        .collect()
}

/// `metadata.generateName` completed the way `names.SimpleNameGenerator` does: five random
/// characters from `bcdfghjklmnpqrstvwxz2456789`.
fn generated_name(prefix: &str) -> String {
    use rand::Rng;
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut rng = rand::rng();
    let suffix: String = (0..5)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect();
    format!("{prefix}{suffix}")
}

/// A DNS-1123 subdomain (`IsDNS1123Subdomain` in `apimachinery/pkg/util/validation`).
fn is_dns_subdomain(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && name.as_bytes()[name.len() - 1].is_ascii_alphanumeric()
}

impl Store {
    pub(crate) fn new(id: String, docker: Docker) -> Store {
        Store {
            id,
            docker,
            pods: Mutex::new(BTreeMap::new()),
            containers: Mutex::new(HashMap::new()),
            events: Mutex::new(Vec::new()),
            resource_version: AtomicU64::new(1000),
            watchers: broadcast::channel(1024).0,
            hold: Mutex::new(None),
            requests: Mutex::new(Vec::new()),
            sever: tokio::sync::Notify::new(),
            objects: super::objects::Objects::default(),
        }
    }

    fn next_version(&self) -> String {
        (self.resource_version.fetch_add(1, Ordering::SeqCst) + 1).to_string()
    }

    /// The current resource version (for a list's `metadata.resourceVersion`).
    pub(crate) fn version(&self) -> String {
        self.resource_version.load(Ordering::SeqCst).to_string()
    }

    fn publish(&self, kind: &'static str, object: &Value) {
        let _ = self.watchers.send(WatchEvent {
            kind,
            object: object.clone(),
        });
    }

    /// Creates a pod from `body` (the object the client posted) in `namespace`.
    pub(crate) fn create(
        self: &Arc<Self>,
        namespace: &str,
        mut body: Value,
    ) -> Result<Value, StatusError> {
        if !body.is_object() {
            return Err(StatusError::bad_request(
                "the body of the request was not a Pod object",
            ));
        }
        let kind = body["kind"].as_str().unwrap_or("Pod");
        if kind != "Pod" {
            return Err(StatusError::bad_request(format!(
                "the API version in the data (v1) does not match the expected API version (v1) or kind {kind} is not Pod"
            )));
        }
        let mut name = body["metadata"]["name"].as_str().unwrap_or("").to_string();
        if name.is_empty()
            && let Some(prefix) = body["metadata"]["generateName"].as_str()
        {
            name = generated_name(prefix);
        }
        let mut errors = Vec::new();
        if name.is_empty() {
            errors.push((
                "metadata.name".to_string(),
                "Required value: name or generateName is required".to_string(),
                "FieldValueRequired",
            ));
        } else if !is_dns_subdomain(&name) {
            errors.push((
                "metadata.name".to_string(),
                format!("Invalid value: \"{name}\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"),
                "FieldValueInvalid",
            ));
        }
        let containers = body["spec"]["containers"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if containers.is_empty() {
            errors.push((
                "spec.containers".to_string(),
                "Required value".to_string(),
                "FieldValueRequired",
            ));
        }
        for (i, c) in containers.iter().enumerate() {
            if c["name"].as_str().is_none_or(str::is_empty) {
                errors.push((
                    format!("spec.containers[{i}].name"),
                    "Required value".to_string(),
                    "FieldValueRequired",
                ));
            }
            if c["image"].as_str().is_none_or(str::is_empty) {
                errors.push((
                    format!("spec.containers[{i}].image"),
                    "Required value".to_string(),
                    "FieldValueRequired",
                ));
            }
        }
        if !errors.is_empty() {
            return Err(StatusError::invalid("Pod", &name, &errors));
        }
        let key = (namespace.to_string(), name.clone());
        let object = {
            let mut pods = self.pods.lock().unwrap_or_else(|e| e.into_inner());
            if pods.contains_key(&key) {
                return Err(StatusError::already_exists("pods", &name));
            }
            let meta = &mut body["metadata"];
            meta["name"] = json!(name);
            meta["namespace"] = json!(namespace);
            meta["uid"] = json!(format!(
                "{}-{}-{}-{}-{}",
                random_hex(8),
                random_hex(4),
                random_hex(4),
                random_hex(4),
                random_hex(12)
            ));
            meta["creationTimestamp"] = json!(now());
            meta["resourceVersion"] = json!(self.next_version());
            if let Some(m) = meta.as_object_mut() {
                m.remove("generateName");
            }
            if body["spec"]["restartPolicy"].is_null() {
                body["spec"]["restartPolicy"] = json!("Always");
            }
            // SetDefaults_PodSpec (pkg/apis/core/v1/defaults.go):
            // DefaultTerminationGracePeriodSeconds, 30.
            if body["spec"]["terminationGracePeriodSeconds"].is_null() {
                body["spec"]["terminationGracePeriodSeconds"] = json!(30);
            }
            body["apiVersion"] = json!("v1");
            body["kind"] = json!("Pod");
            body["status"] = json!({"phase": "Pending", "qosClass": "BestEffort"});
            pods.insert(key.clone(), body.clone());
            body
        };
        self.publish("ADDED", &object);
        let store = self.clone();
        tokio::spawn(async move { store.start_container(key).await });
        Ok(object)
    }

    /// Replaces a pod's status (and bumps its resource version), if the pod still exists.
    fn set_status(&self, key: &(String, String), status: Value) {
        let object = {
            let mut pods = self.pods.lock().unwrap_or_else(|e| e.into_inner());
            let Some(pod) = pods.get_mut(key) else { return };
            pod["status"] = status;
            pod["metadata"]["resourceVersion"] = json!(self.next_version());
            pod.clone()
        };
        self.publish("MODIFIED", &object);
    }

    fn record_event(&self, pod: &Value, kind: &str, reason: &str, message: &str, component: &str) {
        let ns = pod["metadata"]["namespace"].as_str().unwrap_or("default");
        let name = pod["metadata"]["name"].as_str().unwrap_or("");
        let event = json!({
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": format!("{name}.{}", random_hex(16)),
                "namespace": ns,
                "resourceVersion": self.next_version(),
                "creationTimestamp": now(),
            },
            "involvedObject": {
                "kind": "Pod",
                "namespace": ns,
                "name": name,
                "uid": pod["metadata"]["uid"],
                "apiVersion": "v1",
            },
            "reason": reason,
            "message": message,
            "type": kind,
            "source": {"component": component},
            "reportingComponent": component,
            "firstTimestamp": now(),
            "lastTimestamp": now(),
            "count": 1,
        });
        self.events
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(event);
    }

    /// Makes and starts the pod's container, then reports the pod `Running` (or why not).
    async fn start_container(self: Arc<Self>, key: (String, String)) {
        let Some(pod) = self.get(&key.0, &key.1).ok() else {
            return;
        };
        let hold = self.hold.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if let Some(hold) = hold {
            self.record_event(
                &pod,
                "Warning",
                "FailedScheduling",
                &hold.message,
                "default-scheduler",
            );
            self.set_status(
                &key,
                json!({
                    "phase": "Pending",
                    "qosClass": "BestEffort",
                    "conditions": [{
                        "type": "PodScheduled",
                        "status": "False",
                        "lastProbeTime": null,
                        "lastTransitionTime": now(),
                        "reason": hold.reason,
                        "message": hold.message,
                    }],
                }),
            );
            return;
        }
        self.set_status(
            &key,
            json!({
                "phase": "Pending",
                "qosClass": "BestEffort",
                "conditions": [{"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": now()}],
            }),
        );
        // The scheduler's binding (pods/binding): the pod is on a node from now on.
        if let Some(p) = self
            .pods
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_mut(&key)
        {
            p["spec"]["nodeName"] = json!(NODE_NAME);
        }
        self.record_event(
            &pod,
            "Normal",
            "Scheduled",
            &format!("Successfully assigned {}/{} to fake-node", key.0, key.1),
            "default-scheduler",
        );
        match self.run_container(&key, &pod).await {
            Ok((id, ip)) => {
                self.containers
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(key.clone(), id.clone());
                let started = now();
                let container_name = pod["spec"]["containers"][0]["name"].clone();
                let image = pod["spec"]["containers"][0]["image"].clone();
                let condition = |t: &str| json!({"type": t, "status": "True", "lastProbeTime": null, "lastTransitionTime": started});
                self.record_event(&pod, "Normal", "Started", "Started container", "kubelet");
                self.set_status(
                    &key,
                    json!({
                        "phase": "Running",
                        "qosClass": "BestEffort",
                        "hostIP": "127.0.0.1",
                        "podIP": ip,
                        "podIPs": [{"ip": ip}],
                        "startTime": started,
                        "conditions": [condition("PodReadyToStartContainers"), condition("Initialized"), condition("Ready"), condition("ContainersReady"), condition("PodScheduled")],
                        "containerStatuses": [{
                            "name": container_name,
                            "image": image,
                            "imageID": "",
                            "containerID": format!("docker://{id}"),
                            "ready": true,
                            "started": true,
                            "restartCount": 0,
                            "state": {"running": {"startedAt": started}},
                        }],
                    }),
                );
            }
            Err(message) => {
                self.record_event(&pod, "Warning", "Failed", &message, "kubelet");
                self.set_status(
                    &key,
                    json!({
                        "phase": "Pending",
                        "qosClass": "BestEffort",
                        "conditions": [
                            {"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": now()},
                            {"type": "ContainersReady", "status": "False", "lastProbeTime": null, "lastTransitionTime": now(), "reason": "ContainersNotReady", "message": "containers with unready status: [main]"},
                        ],
                        "containerStatuses": [{
                            "name": pod["spec"]["containers"][0]["name"],
                            "image": pod["spec"]["containers"][0]["image"],
                            "imageID": "",
                            "ready": false,
                            "started": false,
                            "restartCount": 0,
                            "state": {"waiting": {"reason": "CreateContainerError", "message": message}},
                        }],
                    }),
                );
            }
        }
    }

    async fn run_container(
        &self,
        key: &(String, String),
        pod: &Value,
    ) -> Result<(String, String), String> {
        let spec = &pod["spec"]["containers"][0];
        let strings = |v: &Value| -> Option<Vec<String>> {
            v.as_array().map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(String::from))
                    .collect()
            })
        };
        let env: Vec<String> = spec["env"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|e| {
                        Some(format!(
                            "{}={}",
                            e["name"].as_str()?,
                            e["value"].as_str().unwrap_or("")
                        ))
                    })
                    .collect()
            })
            .unwrap_or_default();
        let limits = &spec["resources"]["limits"];
        let nano_cpus = limits["cpu"]
            .as_str()
            .and_then(parse_cpu)
            .map(|c| (c * 1e9) as i64);
        let memory = limits["memory"].as_str().and_then(parse_memory);
        let labels = HashMap::from([
            (SERVER_LABEL.to_string(), self.id.clone()),
            (
                format!("{SERVER_LABEL}.pod"),
                format!("{}/{}", key.0, key.1),
            ),
        ]);
        let body = ContainerCreateBody {
            image: spec["image"].as_str().map(String::from),
            entrypoint: strings(&spec["command"]),
            cmd: strings(&spec["args"]),
            env: Some(env),
            labels: Some(labels),
            hostname: Some(key.1.chars().take(63).collect()),
            volumes: Some(vec!["/var/lib/docker".into()]),
            host_config: Some(HostConfig {
                cap_add: Some(vec!["SYS_ADMIN".into(), "NET_ADMIN".into()]),
                security_opt: Some(vec![
                    "seccomp=unconfined".into(),
                    "apparmor=unconfined".into(),
                ]),
                binds: Some(vec!["/sys/fs/cgroup:/sys/fs/cgroup:rw".into()]),
                nano_cpus,
                memory,
                ..Default::default()
            }),
            ..Default::default()
        };
        let name = format!("fake-kube-{}-{}-{}", self.id, key.0, key.1);
        let options = CreateContainerOptionsBuilder::new().name(&name).build();
        let created = self
            .docker
            .create_container(Some(options), body)
            .await
            .map_err(|e| format!("creating the container: {e}"))?;
        self.docker
            .start_container(&created.id, None::<StartContainerOptions>)
            .await
            .map_err(|e| format!("starting the container: {e}"))?;
        let inspect = self
            .docker
            .inspect_container(&created.id, None::<InspectContainerOptions>)
            .await
            .map_err(|e| format!("inspecting the container: {e}"))?;
        // The container's address on its network (the default bridge): what a pod IP is.
        let ip = inspect
            .network_settings
            .and_then(|n| n.networks)
            .and_then(|nets| {
                nets.into_values()
                    .find_map(|e| e.ip_address.filter(|ip| !ip.is_empty()))
            })
            .ok_or("the container has no IP address on the default bridge")?;
        Ok((created.id, ip))
    }

    /// The pod `namespace/name`.
    pub(crate) fn get(&self, namespace: &str, name: &str) -> Result<Value, StatusError> {
        self.pods
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
            .ok_or_else(|| StatusError::not_found("pods", name))
    }

    /// The container backing a running pod.
    pub(crate) fn container(&self, namespace: &str, name: &str) -> Option<String> {
        self.containers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
    }

    /// Pods of `namespace` (every namespace when `None`) matching both selectors.
    pub(crate) fn list(
        &self,
        namespace: Option<&str>,
        labels: &LabelSelector,
        fields: &FieldSelector,
    ) -> Vec<Value> {
        self.pods
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|((ns, _), _)| namespace.is_none_or(|n| n == ns))
            .filter(|(_, pod)| labels.matches(&labels_of(pod)) && fields.matches(pod))
            .map(|(_, pod)| pod.clone())
            .collect()
    }

    /// Whether `object` is in `namespace` and matches both selectors (for watches).
    pub(crate) fn selects(
        namespace: Option<&str>,
        labels: &LabelSelector,
        fields: &FieldSelector,
        object: &Value,
    ) -> bool {
        namespace.is_none_or(|n| object["metadata"]["namespace"].as_str() == Some(n))
            && labels.matches(&labels_of(object))
            && fields.matches(object)
    }

    /// Events of `namespace` matching the field selector.
    pub(crate) fn events(&self, namespace: Option<&str>, fields: &FieldSelector) -> Vec<Value> {
        self.events
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|e| namespace.is_none_or(|n| e["metadata"]["namespace"].as_str() == Some(n)))
            .filter(|e| fields.matches(e))
            .cloned()
            .collect()
    }

    /// Deletes the pod, gracefully as the registry and the kubelet do: with a grace period
    /// ([`grace_period`]) the pod stays, marked with `deletionTimestamp` (now plus the period)
    /// and `deletionGracePeriodSeconds` (a `MODIFIED` event), while its container is stopped
    /// (SIGTERM, SIGKILL when the period ends, as the kubelet's `killContainer`); then it is
    /// removed (`DELETED`). A pod being deleted already is returned as it is. With no grace
    /// period it goes at once. Returns the pod as the registry does (`ReturnDeletedObject`).
    pub(crate) fn delete(
        self: &Arc<Self>,
        namespace: &str,
        name: &str,
        requested_grace: Option<i64>,
    ) -> Result<Value, StatusError> {
        let key = (namespace.to_string(), name.to_string());
        let marked = {
            let mut pods = self.pods.lock().unwrap_or_else(|e| e.into_inner());
            let pod = pods
                .get_mut(&key)
                .ok_or_else(|| StatusError::not_found("pods", name))?;
            if !pod["metadata"]["deletionTimestamp"].is_null() {
                return Ok(pod.clone());
            }
            let period = grace_period(pod, requested_grace);
            if period > 0 {
                pod["metadata"]["deletionTimestamp"] = json!(in_seconds(period));
                pod["metadata"]["deletionGracePeriodSeconds"] = json!(period);
                pod["metadata"]["resourceVersion"] = json!(self.next_version());
                Some((pod.clone(), period))
            } else {
                None
            }
        };
        let Some((pod, period)) = marked else {
            return self.remove_now(key);
        };
        self.publish("MODIFIED", &pod);
        let container = self
            .containers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
            .cloned();
        let store = self.clone();
        tokio::spawn(async move {
            if let Some(id) = container {
                let options = bollard::query_parameters::StopContainerOptionsBuilder::new()
                    .t(i32::try_from(period).unwrap_or(i32::MAX))
                    .build();
                let _ = store.docker.stop_container(&id, Some(options)).await;
            }
            // The kubelet's final delete, with no grace period left.
            let _ = store.remove_now(key);
        });
        Ok(pod)
    }

    /// Removes the pod now (grace period zero) and returns its last state; its container goes
    /// in the background.
    fn remove_now(&self, key: (String, String)) -> Result<Value, StatusError> {
        let name = key.1.clone();
        let mut pod = self
            .pods
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&key)
            .ok_or_else(|| StatusError::not_found("pods", &name))?;
        if pod["metadata"]["deletionTimestamp"].is_null() {
            pod["metadata"]["deletionTimestamp"] = json!(now());
        }
        pod["metadata"]["deletionGracePeriodSeconds"] = json!(0);
        pod["metadata"]["resourceVersion"] = json!(self.next_version());
        self.publish("DELETED", &pod);
        let container = self
            .containers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&key);
        let docker = self.docker.clone();
        let id = self.id.clone();
        tokio::spawn(async move {
            let target = container.unwrap_or_else(|| format!("fake-kube-{id}-{}-{}", key.0, key.1));
            let options = RemoveContainerOptionsBuilder::new()
                .force(true)
                .v(true)
                .build();
            let _ = docker.remove_container(&target, Some(options)).await;
        });
        Ok(pod)
    }

    /// Checks the containers of running pods; a container that stopped makes its pod
    /// `Succeeded` (exit 0) or `Failed`, as the kubelet reports a container that ended under
    /// `restartPolicy: Never`.
    pub(crate) async fn reconcile(&self) {
        let running: Vec<((String, String), String)> = self
            .containers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if running.is_empty() {
            return;
        }
        let filters = HashMap::from([
            (
                "label".to_string(),
                vec![format!("{SERVER_LABEL}={}", self.id)],
            ),
            (
                "status".to_string(),
                vec!["exited".to_string(), "dead".to_string()],
            ),
        ]);
        let options = ListContainersOptions {
            all: true,
            filters: Some(filters),
            ..Default::default()
        };
        let Ok(stopped) = self.docker.list_containers(Some(options)).await else {
            return;
        };
        for (key, id) in running {
            if !stopped.iter().any(|c| c.id.as_deref() == Some(id.as_str())) {
                continue;
            }
            let code = self
                .docker
                .inspect_container(&id, None::<InspectContainerOptions>)
                .await
                .ok()
                .and_then(|i| i.state?.exit_code)
                .unwrap_or(-1);
            self.containers
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&key);
            let Ok(pod) = self.get(&key.0, &key.1) else {
                continue;
            };
            let mut status = pod["status"].clone();
            status["phase"] = json!(if code == 0 { "Succeeded" } else { "Failed" });
            if let Some(conditions) = status["conditions"].as_array_mut() {
                for c in conditions {
                    if c["type"] == "Ready" || c["type"] == "ContainersReady" {
                        c["status"] = json!("False");
                        c["reason"] = json!("PodCompleted");
                    }
                }
            }
            status["containerStatuses"][0]["ready"] = json!(false);
            status["containerStatuses"][0]["state"] = json!({"terminated": {"exitCode": code, "reason": if code == 0 { "Completed" } else { "Error" }, "finishedAt": now()}});
            self.set_status(&key, status);
        }
    }
}

/// A CPU quantity (`500m`, `2`, `0.5`) in cores.
pub(crate) fn parse_cpu(text: &str) -> Option<f64> {
    match text.strip_suffix('m') {
        Some(milli) => milli.parse::<f64>().ok().map(|m| m / 1000.0),
        None => text.parse().ok(),
    }
}

/// A memory quantity (`512Mi`, `1G`, `1000000`) in bytes.
pub(crate) fn parse_memory(text: &str) -> Option<i64> {
    const UNITS: &[(&str, f64)] = &[
        ("Ki", 1024.0),
        ("Mi", 1048576.0),
        ("Gi", 1073741824.0),
        ("Ti", 1099511627776.0),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
    ];
    for (suffix, factor) in UNITS {
        if let Some(n) = text.strip_suffix(suffix) {
            return n.parse::<f64>().ok().map(|n| (n * factor) as i64);
        }
    }
    text.parse::<f64>().ok().map(|n| n as i64)
}
