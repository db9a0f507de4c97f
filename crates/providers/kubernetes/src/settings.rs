//! The provider's settings, read from `plugin_config`.

use flotilla_fleet::FleetError;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// `[runners.autoscaler.plugin_config]` of `plugin = "kubernetes"`.
///
/// ```toml
/// [runners.autoscaler.plugin_config]
/// namespace = "ci"
/// pod_template_file = "/etc/flotilla/pod.yaml"   # or pod_template = """...yaml..."""
/// kubeconfig = "/etc/flotilla/kubeconfig"         # default: $KUBECONFIG, ~/.kube/config, in-cluster
/// pending_timeout = "5m"
/// # Per-job sizing, with GitLab's `[runners.kubernetes]` names (see `crate::sizing`):
/// cpu_request = "500m"
/// cpu_request_overwrite_max_allowed = "4"
/// memory_limit_overwrite_max_allowed = "8Gi"
/// ```
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct KubernetesSettings {
    /// The group's name: the value of the `flotilla.group` label on its pods.
    pub name: String,
    /// The namespace the pods are made in (default: the kubeconfig context's, else `default`).
    #[serde(default)]
    pub namespace: Option<String>,
    /// The PodTemplate as inline YAML: a `PodTemplate` object, a pod template (`metadata` and
    /// `spec`) or a `Pod`.
    #[serde(default)]
    pub pod_template: Option<String>,
    /// The PodTemplate in a YAML file (instead of `pod_template`).
    #[serde(default)]
    pub pod_template_file: Option<PathBuf>,
    /// A kubeconfig file; without one, `$KUBECONFIG` or `~/.kube/config`, else the in-cluster
    /// service account.
    #[serde(default)]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context (default: its current context).
    #[serde(default)]
    pub context: Option<String>,
    /// Use the in-cluster service account even when a kubeconfig exists.
    #[serde(default)]
    pub in_cluster: bool,
    /// The container commands run in (default: the template's first).
    #[serde(default)]
    pub container: Option<String>,
    /// How long a pod may stay `Pending` (or running but not ready) before it is `timeout`:
    /// seconds, or a duration such as `90s`, `5m`, `1h`.
    #[serde(default = "default_pending_timeout", deserialize_with = "duration")]
    pub pending_timeout: Duration,
    /// The most pods of the group (default: unbounded; `max_instances` bounds it anyway).
    #[serde(default)]
    pub max_size: Option<usize>,
    /// Extra labels on every pod.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// The job container's CPU request (GitLab's `[runners.kubernetes] cpu_request`); the
    /// template's when unset.
    #[serde(default)]
    pub cpu_request: Option<String>,
    /// The most a job may ask with `KUBERNETES_CPU_REQUEST`; unset, the variable is ignored.
    #[serde(default)]
    pub cpu_request_overwrite_max_allowed: Option<String>,
    /// The job container's CPU limit.
    #[serde(default)]
    pub cpu_limit: Option<String>,
    /// The most a job may ask with `KUBERNETES_CPU_LIMIT`.
    #[serde(default)]
    pub cpu_limit_overwrite_max_allowed: Option<String>,
    /// The job container's memory request.
    #[serde(default)]
    pub memory_request: Option<String>,
    /// The most a job may ask with `KUBERNETES_MEMORY_REQUEST`.
    #[serde(default)]
    pub memory_request_overwrite_max_allowed: Option<String>,
    /// The job container's memory limit.
    #[serde(default)]
    pub memory_limit: Option<String>,
    /// The most a job may ask with `KUBERNETES_MEMORY_LIMIT`.
    #[serde(default)]
    pub memory_limit_overwrite_max_allowed: Option<String>,
}

fn default_pending_timeout() -> Duration {
    Duration::from_secs(300)
}

fn duration<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Seconds(u64),
        Text(String),
    }
    match Raw::deserialize(d)? {
        Raw::Seconds(s) => Ok(Duration::from_secs(s)),
        Raw::Text(t) => parse_duration(&t).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "{t:?} is not a duration (seconds, or a number with s, m or h)"
            ))
        }),
    }
}

/// `90`, `90s`, `5m`, `1h`, `1h30m`.
fn parse_duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    if let Ok(seconds) = text.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let mut total = 0u64;
    let mut number = String::new();
    for c in text.chars() {
        if c.is_ascii_digit() {
            number.push(c);
            continue;
        }
        let n: u64 = number.parse().ok()?;
        number.clear();
        total += n * match c {
            's' => 1,
            'm' => 60,
            'h' => 3600,
            _ => return None,
        };
    }
    number.is_empty().then_some(Duration::from_secs(total))
}

impl KubernetesSettings {
    /// Settings from a `plugin_config` JSON value (`name` filled in by the caller).
    pub fn from_plugin_config(config: &serde_json::Value) -> Result<Self, FleetError> {
        let settings: KubernetesSettings = serde_json::from_value(config.clone())
            .map_err(|e| FleetError::Config(format!("kubernetes plugin_config: {e}")))?;
        settings.validate()?;
        Ok(settings)
    }

    /// Checks what can be checked without the cluster.
    pub fn validate(&self) -> Result<(), FleetError> {
        if self.name.is_empty() {
            return Err(FleetError::Config(
                "kubernetes plugin_config: name is empty".into(),
            ));
        }
        match (&self.pod_template, &self.pod_template_file) {
            (Some(_), Some(_)) => Err(FleetError::Config(
                "kubernetes plugin_config: set pod_template or pod_template_file, not both".into(),
            )),
            (None, None) => Err(FleetError::Config(
                "kubernetes plugin_config: pod_template or pod_template_file is required".into(),
            )),
            _ => Ok(()),
        }
    }

    /// The template's YAML text (reading the file if one is named).
    pub fn template_text(&self) -> Result<String, FleetError> {
        match (&self.pod_template, &self.pod_template_file) {
            (Some(text), _) => Ok(text.clone()),
            (None, Some(path)) => std::fs::read_to_string(path).map_err(|e| {
                FleetError::Config(format!(
                    "kubernetes plugin_config: reading pod_template_file {}: {e}",
                    path.display()
                ))
            }),
            (None, None) => Err(FleetError::Config(
                "kubernetes plugin_config: pod_template or pod_template_file is required".into(),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn durations_read_as_seconds_or_with_units() {
        assert_eq!(parse_duration("90"), Some(Duration::from_secs(90)));
        assert_eq!(parse_duration("5m"), Some(Duration::from_secs(300)));
        assert_eq!(parse_duration("1h30m"), Some(Duration::from_secs(5400)));
        assert_eq!(parse_duration("5x"), None);
        assert_eq!(parse_duration("5m3"), None);
    }

    #[test]
    fn a_template_is_required_once_and_unknown_keys_are_refused() {
        let ok = json!({"name": "g", "pod_template": "spec: {}", "pending_timeout": "2m"});
        let s = KubernetesSettings::from_plugin_config(&ok).unwrap();
        assert_eq!(s.pending_timeout, Duration::from_secs(120));
        let none = json!({"name": "g"});
        assert!(KubernetesSettings::from_plugin_config(&none).is_err());
        let both = json!({"name": "g", "pod_template": "a", "pod_template_file": "/b"});
        assert!(KubernetesSettings::from_plugin_config(&both).is_err());
        let typo = json!({"name": "g", "pod_template": "a", "namepsace": "x"});
        let err = KubernetesSettings::from_plugin_config(&typo)
            .unwrap_err()
            .to_string();
        assert!(err.contains("namepsace"), "{err}");
    }
}
