//! Objects other than pods, kept as they are given: what `kubectl apply` of flotilla's own
//! deployment manifests needs (a manager's ServiceAccount, Secret, ConfigMap, Service,
//! StatefulSet, Role and RoleBinding). Nothing acts on them: no controller makes a
//! StatefulSet's pods, no authorizer reads a Role; tests read them back.
//!
//! Written from the API reference (kubernetes.io/docs/reference/kubernetes-api): each kind's
//! group, version and plural resource; `metadata.name` required (422 `Invalid`, "name:
//! Required value"); a second create of a name is 409 `AlreadyExists`; the server sets
//! `uid`, `resourceVersion`, `creationTimestamp` and the request's namespace; a Secret's
//! `stringData` is "merged into the data field on write" (base64) and "never output when
//! reading from the API".

use super::status::StatusError;
use base64::Engine;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// One kind the fake keeps.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Kind {
    pub(crate) group: &'static str,
    pub(crate) version: &'static str,
    pub(crate) resource: &'static str,
    pub(crate) singular: &'static str,
    pub(crate) kind: &'static str,
}

/// The kinds kept, all namespaced.
pub(crate) const KINDS: [Kind; 7] = [
    Kind {
        group: "",
        version: "v1",
        resource: "secrets",
        singular: "secret",
        kind: "Secret",
    },
    Kind {
        group: "",
        version: "v1",
        resource: "configmaps",
        singular: "configmap",
        kind: "ConfigMap",
    },
    Kind {
        group: "",
        version: "v1",
        resource: "serviceaccounts",
        singular: "serviceaccount",
        kind: "ServiceAccount",
    },
    Kind {
        group: "",
        version: "v1",
        resource: "services",
        singular: "service",
        kind: "Service",
    },
    Kind {
        group: "apps",
        version: "v1",
        resource: "statefulsets",
        singular: "statefulset",
        kind: "StatefulSet",
    },
    Kind {
        group: "rbac.authorization.k8s.io",
        version: "v1",
        resource: "roles",
        singular: "role",
        kind: "Role",
    },
    Kind {
        group: "rbac.authorization.k8s.io",
        version: "v1",
        resource: "rolebindings",
        singular: "rolebinding",
        kind: "RoleBinding",
    },
];

/// The kind served at `group`/`version`/`resource`.
pub(crate) fn kind_at(group: &str, version: &str, resource: &str) -> Option<Kind> {
    KINDS
        .iter()
        .copied()
        .find(|k| k.group == group && k.version == version && k.resource == resource)
}

/// `APIResource` entries of the kinds in `group`/`version`.
pub(crate) fn resources(group: &str, version: &str) -> Vec<Value> {
    KINDS
        .iter()
        .filter(|k| k.group == group && k.version == version)
        .map(|k| {
            json!({
                "name": k.resource, "singularName": k.singular, "namespaced": true,
                "kind": k.kind, "verbs": ["create", "delete", "get", "list"],
            })
        })
        .collect()
}

/// The `APIGroupList` of `/apis`.
pub(crate) fn group_list() -> Value {
    let mut groups: Vec<&str> = KINDS
        .iter()
        .map(|k| k.group)
        .filter(|g| !g.is_empty())
        .collect();
    groups.dedup();
    json!({
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": groups.iter().map(|g| json!({
            "name": g,
            "versions": [{"groupVersion": format!("{g}/v1"), "version": "v1"}],
            "preferredVersion": {"groupVersion": format!("{g}/v1"), "version": "v1"},
        })).collect::<Vec<_>>(),
    })
}

/// Where an object is kept: (resource, namespace, name).
type Key = (String, String, String);

fn key(kind: Kind, namespace: &str, name: &str) -> Key {
    (
        kind.resource.to_string(),
        namespace.to_string(),
        name.to_string(),
    )
}

/// The objects, by (resource, namespace, name).
#[derive(Debug)]
pub(crate) struct Objects {
    map: Mutex<BTreeMap<Key, Value>>,
    next: AtomicU64,
}

impl Default for Objects {
    fn default() -> Self {
        Objects {
            map: Mutex::new(BTreeMap::new()),
            next: AtomicU64::new(5000),
        }
    }
}

impl Objects {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<Key, Value>> {
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Creates `object` of `kind` in `namespace`.
    pub(crate) fn create(
        &self,
        kind: Kind,
        namespace: &str,
        mut object: Value,
    ) -> Result<Value, StatusError> {
        if object["kind"].as_str().is_some_and(|k| k != kind.kind) {
            return Err(StatusError::bad_request(format!(
                "the API version in the data ({}) does not match the expected API version ({})",
                object["kind"], kind.kind
            )));
        }
        let Some(name) = object["metadata"]["name"].as_str().map(str::to_string) else {
            return Err(StatusError::invalid(
                kind.kind,
                "",
                &[(
                    "metadata.name".into(),
                    "Required value: name or generateName is required".into(),
                    "FieldValueRequired",
                )],
            ));
        };
        let key = key(kind, namespace, &name);
        let mut map = self.lock();
        if map.contains_key(&key) {
            return Err(StatusError::already_exists(kind.resource, &name));
        }
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let meta = &mut object["metadata"];
        meta["namespace"] = json!(namespace);
        meta["uid"] = json!(format!("00000000-0000-4000-8000-{n:012}"));
        meta["resourceVersion"] = json!(n.to_string());
        meta["creationTimestamp"] =
            json!(chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
        object["apiVersion"] = json!(if kind.group.is_empty() {
            kind.version.to_string()
        } else {
            format!("{}/{}", kind.group, kind.version)
        });
        object["kind"] = json!(kind.kind);
        if kind.kind == "Secret"
            && let Some(Value::Object(strings)) =
                object.as_object_mut().and_then(|o| o.remove("stringData"))
        {
            let mut data = object["data"].as_object().cloned().unwrap_or_default();
            for (k, v) in strings {
                let text = v.as_str().unwrap_or_default();
                data.insert(
                    k,
                    json!(base64::engine::general_purpose::STANDARD.encode(text)),
                );
            }
            object["data"] = Value::Object(data);
        }
        map.insert(key, object.clone());
        Ok(object)
    }

    /// The object `name` of `kind` in `namespace`.
    pub(crate) fn get(
        &self,
        kind: Kind,
        namespace: &str,
        name: &str,
    ) -> Result<Value, StatusError> {
        self.lock()
            .get(&key(kind, namespace, name))
            .cloned()
            .ok_or_else(|| StatusError::not_found(kind.resource, name))
    }

    /// The objects of `kind` in `namespace`, as a list.
    pub(crate) fn list(&self, kind: Kind, namespace: &str) -> Value {
        let items: Vec<Value> = self
            .lock()
            .iter()
            .filter(|((r, ns, _), _)| r == kind.resource && ns == namespace)
            .map(|(_, v)| v.clone())
            .collect();
        json!({
            "kind": format!("{}List", kind.kind),
            "apiVersion": if kind.group.is_empty() { kind.version.to_string() } else { format!("{}/{}", kind.group, kind.version) },
            "metadata": {"resourceVersion": self.next.load(Ordering::Relaxed).to_string()},
            "items": items,
        })
    }

    /// Deletes the object `name` of `kind` in `namespace`, answering it.
    pub(crate) fn delete(
        &self,
        kind: Kind,
        namespace: &str,
        name: &str,
    ) -> Result<Value, StatusError> {
        self.lock()
            .remove(&key(kind, namespace, name))
            .ok_or_else(|| StatusError::not_found(kind.resource, name))
    }
}
