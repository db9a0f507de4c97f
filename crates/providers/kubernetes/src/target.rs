//! The cluster a group talks to: its client from kubeconfig or the in-cluster service
//! account, its namespace, and the table connectors find it in.
//!
//! The binary builds connectors from a [`flotilla_fleet::ConnectInfo`] alone, so the group
//! registers its client here at `init` under its provider id, and its connect infos name that
//! id in `external_addr` (`kube-exec://<provider id>/<pod>`); [`connector`] looks it up.

use crate::connector::KubeExecConnector;
use crate::settings::KubernetesSettings;
use flotilla_connect::ConnectError;
use flotilla_fleet::{ConnectInfo, FleetError};
use k8s_openapi::api::core::v1::Pod;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

/// The scheme of a pod's `external_addr`.
pub const SCHEME: &str = "kube-exec://";

/// A group's client, namespace and the container commands run in.
#[derive(Clone)]
pub(crate) struct Target {
    pub(crate) pods: Api<Pod>,
    pub(crate) client: Client,
    pub(crate) namespace: String,
    pub(crate) container: Option<String>,
    pub(crate) keepalive: Duration,
}

/// Builds the client the settings ask for: `kubeconfig` (with `context`), or with
/// `in_cluster` the service account, or else kube-rs's inference (`$KUBECONFIG`,
/// `~/.kube/config`, then in-cluster). Returns it with the namespace to use.
pub(crate) async fn client(settings: &KubernetesSettings) -> Result<(Client, String), FleetError> {
    let options = KubeConfigOptions {
        context: settings.context.clone(),
        ..Default::default()
    };
    let config = if settings.in_cluster {
        Config::incluster()
            .map_err(|e| FleetError::provider("init", format!("in-cluster credentials: {e}")))?
    } else if let Some(path) = &settings.kubeconfig {
        let file = Kubeconfig::read_from(path)
            .map_err(|e| FleetError::Config(format!("kubeconfig {}: {e}", path.display())))?;
        Config::from_custom_kubeconfig(file, &options)
            .await
            .map_err(|e| FleetError::Config(format!("kubeconfig {}: {e}", path.display())))?
    } else if settings.context.is_some() {
        Config::from_kubeconfig(&options)
            .await
            .map_err(|e| FleetError::Config(format!("kubeconfig: {e}")))?
    } else {
        Config::infer().await.map_err(|e| {
            FleetError::Config(format!(
                "no kubeconfig and no in-cluster service account: {e}"
            ))
        })?
    };
    let namespace = settings
        .namespace
        .clone()
        .unwrap_or_else(|| config.default_namespace.clone());
    let client = Client::try_from(config)
        .map_err(|e| FleetError::provider("init", format!("kubernetes client: {e}")))?;
    Ok((client, namespace))
}

fn table() -> &'static Mutex<HashMap<String, Target>> {
    static TABLE: OnceLock<Mutex<HashMap<String, Target>>> = OnceLock::new();
    TABLE.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Makes `target` the one connectors of `provider_id` use.
pub(crate) fn register(provider_id: &str, target: Target) {
    table()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(provider_id.to_string(), target);
}

/// `kube-exec://<provider id>/<pod>`.
pub(crate) fn external_addr(provider_id: &str, pod: &str) -> String {
    format!("{SCHEME}{provider_id}/{pod}")
}

/// The connector for the pod `info` describes (its `external_addr` names the group).
pub fn connector(info: &ConnectInfo) -> Result<KubeExecConnector, ConnectError> {
    let rest = info.external_addr.strip_prefix(SCHEME).ok_or_else(|| {
        ConnectError::InvalidRequest(format!(
            "{:?} is not a kube-exec address ({SCHEME}<group>/<pod>)",
            info.external_addr
        ))
    })?;
    let (provider_id, pod) = rest.rsplit_once('/').ok_or_else(|| {
        ConnectError::InvalidRequest(format!("{:?} names no pod", info.external_addr))
    })?;
    let target = table()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(provider_id)
        .cloned()
        .ok_or_else(|| {
            ConnectError::Credentials(format!(
                "no kubernetes group {provider_id:?} has been initialised in this process"
            ))
        })?;
    Ok(KubeExecConnector::new(target, pod))
}
