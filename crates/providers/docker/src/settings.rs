//! The docker provider's `plugin_config`, parsed and checked.

use flotilla_fleet::FleetError;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// The docker provider's settings: the `plugin_config` table of its instance group.
///
/// ```toml
/// [runners.autoscaler.plugin_config]
/// name = "linux-small"
/// image = "local/flotilla-instance:abc123"
/// inner_dockerd = true
/// cpus = 2.0
/// memory = "2g"
/// max_size = 20
/// labels = { team = "ci" }
/// ```
///
/// Unknown keys are refused, so a typo does not silently fall back to a default.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DockerSettings {
    /// The group's name. Its containers carry the label `flotilla.group=<name>` and its
    /// provider id is `docker/<name>`. Letters, digits, `_`, `.` and `-`.
    pub name: String,
    /// The instance image; it must run sshd on port 22 (and dockerd for docker isolation).
    pub image: String,
    /// The Docker engine to use (`unix:///path`, `tcp://host:port` or `http://host:port`);
    /// `None` means the local default (`DOCKER_HOST`, else `/var/run/docker.sock`).
    #[serde(default)]
    pub docker_host: Option<String>,
    /// Start a Docker daemon inside each instance (`FLOTILLA_INNER_DOCKERD=1`), with the
    /// capabilities, security options and mounts it needs.
    #[serde(default)]
    pub inner_dockerd: bool,
    /// CPU limit per instance, in CPUs (`1.5` = one and a half).
    #[serde(default)]
    pub cpus: Option<f64>,
    /// Memory limit per instance: bytes, or a number with a `k`, `m`, `g` or `t` suffix.
    #[serde(default)]
    pub memory: Option<String>,
    /// Extra labels on every container of the group.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// The most containers the group holds.
    #[serde(default = "default_max_size")]
    pub max_size: usize,
    /// The Docker network to attach containers to; `None` means the engine's default bridge.
    #[serde(default)]
    pub network: Option<String>,
    /// Where the group's generated SSH key is kept. When set, the key is loaded from this file
    /// (or written to it, mode 0600, on first use), so instances stay reachable after the
    /// provider restarts. When unset, a fresh key is made at every `init`. Unused with
    /// `use_static_credentials`.
    #[serde(default)]
    pub key_file: Option<PathBuf>,
    /// How long a container may run without sshd answering before it is reported as
    /// `timeout`, in seconds.
    #[serde(default = "default_startup_timeout")]
    pub startup_timeout: u64,
}

fn default_max_size() -> usize {
    100
}

fn default_startup_timeout() -> u64 {
    120
}

impl DockerSettings {
    /// Settings with the defaults for everything but the name and the image.
    pub fn new(name: impl Into<String>, image: impl Into<String>) -> Self {
        DockerSettings {
            name: name.into(),
            image: image.into(),
            docker_host: None,
            inner_dockerd: false,
            cpus: None,
            memory: None,
            labels: BTreeMap::new(),
            max_size: default_max_size(),
            network: None,
            key_file: None,
            startup_timeout: default_startup_timeout(),
        }
    }

    /// Parses `plugin_config` (as JSON) and checks it.
    pub fn from_plugin_config(config: &serde_json::Value) -> Result<Self, FleetError> {
        let settings: DockerSettings = serde_json::from_value(config.clone())
            .map_err(|e| FleetError::Config(format!("docker plugin_config: {e}")))?;
        settings.validate()?;
        Ok(settings)
    }

    /// Checks values serde cannot: the name's characters, limits, the memory syntax.
    pub fn validate(&self) -> Result<(), FleetError> {
        let bad = |m: String| Err(FleetError::Config(format!("docker plugin_config: {m}")));
        if self.name.is_empty()
            || !self
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
        {
            return bad(format!(
                "name {:?} must be non-empty and use only letters, digits, '_', '.' and '-'",
                self.name
            ));
        }
        if self.image.trim().is_empty() {
            return bad("image is required".into());
        }
        if let Some(cpus) = self.cpus
            && !(cpus.is_finite() && cpus > 0.0)
        {
            return bad(format!("cpus must be a positive number, not {cpus}"));
        }
        if let Some(memory) = &self.memory {
            parse_memory(memory)
                .map_err(|m| FleetError::Config(format!("docker plugin_config: {m}")))?;
        }
        if self.max_size == 0 {
            return bad("max_size must be at least 1".into());
        }
        for key in self.labels.keys() {
            if key.starts_with("flotilla.") {
                return bad(format!("label {key:?} is reserved (flotilla.*)"));
            }
        }
        Ok(())
    }

    /// The CPU limit in nano-CPUs, as the Docker API wants it.
    pub fn nano_cpus(&self) -> Option<i64> {
        self.cpus.map(|c| (c * 1e9).round() as i64)
    }

    /// The memory limit in bytes.
    pub fn memory_bytes(&self) -> Option<i64> {
        self.memory.as_deref().and_then(|m| parse_memory(m).ok())
    }

    /// The startup timeout as a duration.
    pub fn startup_timeout(&self) -> Duration {
        Duration::from_secs(self.startup_timeout)
    }
}

/// Parses a memory size as Docker's CLI does: `1073741824`, `512m`, `1g`, `1.5g`, `64k`, with
/// an optional trailing `b` (`512mb`). Case-insensitive.
pub fn parse_memory(s: &str) -> Result<i64, String> {
    let t = s.trim().to_ascii_lowercase();
    let t = t.strip_suffix('b').unwrap_or(&t);
    let (num, mult): (&str, f64) = match t.chars().last() {
        Some('k') => (&t[..t.len() - 1], 1024.0),
        Some('m') => (&t[..t.len() - 1], 1024.0 * 1024.0),
        Some('g') => (&t[..t.len() - 1], 1024.0 * 1024.0 * 1024.0),
        Some('t') => (&t[..t.len() - 1], 1024.0 * 1024.0 * 1024.0 * 1024.0),
        _ => (t, 1.0),
    };
    let value: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("memory {s:?} is not a size such as 512m or 1g"))?;
    let bytes = value * mult;
    if !(bytes.is_finite() && bytes >= 4.0 * 1024.0 * 1024.0 && bytes < i64::MAX as f64) {
        return Err(format!("memory {s:?} must be at least 4m"));
    }
    Ok(bytes as i64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn minimal_config_gets_defaults() {
        let s =
            DockerSettings::from_plugin_config(&json!({"name": "g1", "image": "img:1"})).unwrap();
        assert_eq!(s, DockerSettings::new("g1", "img:1"));
        assert_eq!(s.max_size, 100);
        assert!(!s.inner_dockerd);
        assert_eq!(s.nano_cpus(), None);
    }

    #[test]
    fn full_config() {
        let s = DockerSettings::from_plugin_config(&json!({
            "name": "big", "image": "img", "docker_host": "unix:///run/d.sock",
            "inner_dockerd": true, "cpus": 1.5, "memory": "1g",
            "labels": {"team": "ci"}, "max_size": 7, "network": "n1",
            "key_file": "/tmp/k", "startup_timeout": 30
        }))
        .unwrap();
        assert_eq!(s.nano_cpus(), Some(1_500_000_000));
        assert_eq!(s.memory_bytes(), Some(1 << 30));
        assert_eq!(s.labels["team"], "ci");
        assert_eq!(s.max_size, 7);
        assert_eq!(s.startup_timeout(), Duration::from_secs(30));
    }

    #[test]
    fn unknown_keys_are_refused_with_their_name() {
        let e =
            DockerSettings::from_plugin_config(&json!({"name": "g", "image": "i", "imgae": "x"}))
                .unwrap_err();
        let m = e.to_string();
        assert!(matches!(e, FleetError::Config(_)));
        assert!(m.contains("imgae"), "{m}");
    }

    #[test]
    fn missing_image_is_refused() {
        let e = DockerSettings::from_plugin_config(&json!({"name": "g"})).unwrap_err();
        assert!(e.to_string().contains("image"), "{e}");
        let e =
            DockerSettings::from_plugin_config(&json!({"name": "g", "image": " "})).unwrap_err();
        assert!(e.to_string().contains("image"), "{e}");
    }

    #[test]
    fn bad_values_are_refused() {
        for bad in [
            json!({"name": "", "image": "i"}),
            json!({"name": "a b", "image": "i"}),
            json!({"name": "g", "image": "i", "cpus": 0.0}),
            json!({"name": "g", "image": "i", "cpus": -1.0}),
            json!({"name": "g", "image": "i", "memory": "lots"}),
            json!({"name": "g", "image": "i", "memory": "1k"}),
            json!({"name": "g", "image": "i", "max_size": 0}),
            json!({"name": "g", "image": "i", "labels": {"flotilla.group": "x"}}),
        ] {
            assert!(
                matches!(
                    DockerSettings::from_plugin_config(&bad),
                    Err(FleetError::Config(_))
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn memory_sizes() {
        assert_eq!(parse_memory("512m"), Ok(512 << 20));
        assert_eq!(parse_memory("512MB"), Ok(512 << 20));
        assert_eq!(parse_memory("1.5g"), Ok(3 << 29));
        assert_eq!(parse_memory("8388608"), Ok(8 << 20));
        assert_eq!(parse_memory("65536k"), Ok(64 << 20));
        assert!(parse_memory("1m").is_err(), "below Docker's minimum");
        assert!(parse_memory("g").is_err());
        assert!(parse_memory("").is_err());
    }
}
