//! `image` and `services[]`.

use super::nullable::nullable;
use super::variable::Variable;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A container image for the job or a service.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Image {
    /// The image reference, e.g. `ruby:3.3`. Empty when the job names none.
    #[serde(deserialize_with = "nullable")]
    pub name: String,
    /// The service's alias (host name), possibly several separated by commas or spaces.
    #[serde(deserialize_with = "nullable")]
    pub alias: String,
    /// Overrides the image's command.
    #[serde(deserialize_with = "nullable")]
    pub command: Vec<String>,
    /// Overrides the image's entrypoint.
    #[serde(deserialize_with = "nullable")]
    pub entrypoint: Vec<String>,
    /// Exposed ports.
    #[serde(deserialize_with = "nullable")]
    pub ports: Vec<Port>,
    /// Variables for this service's container.
    #[serde(deserialize_with = "nullable")]
    pub variables: Vec<Variable>,
    /// `always`, `if-not-present`, `never`.
    #[serde(deserialize_with = "nullable")]
    pub pull_policy: Vec<String>,
    /// Executor-specific options.
    #[serde(deserialize_with = "nullable")]
    pub executor_opts: ExecutorOptions,
}

impl Image {
    /// The host names a service is reachable by: each alias, else derived from the image name
    /// like GitLab (`registry/group/redis:7` gives `registry__group__redis` and
    /// `registry-group-redis`).
    pub fn aliases(&self) -> Vec<String> {
        let explicit: Vec<String> = self
            .alias
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter(|a| !a.is_empty())
            .map(str::to_owned)
            .collect();
        if !explicit.is_empty() {
            return explicit;
        }
        let without_tag = strip_tag(&self.name);
        if without_tag.is_empty() {
            return Vec::new();
        }
        let mut out = vec![without_tag.replace('/', "__")];
        let dashed = without_tag.replace('/', "-");
        if !out.contains(&dashed) {
            out.push(dashed);
        }
        out
    }
}

/// `name` without `:tag` or `@digest` (a `:` inside the registry host's port is kept).
fn strip_tag(name: &str) -> &str {
    let name = name.split('@').next().unwrap_or(name);
    let last_slash = name.rfind('/').map(|i| i + 1).unwrap_or(0);
    match name[last_slash..].rfind(':') {
        Some(i) => &name[..last_slash + i],
        None => name,
    }
}

/// A port a service exposes.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Port {
    /// The port number.
    #[serde(deserialize_with = "nullable")]
    pub number: u16,
    /// `http`, `https`, `tcp`.
    #[serde(deserialize_with = "nullable")]
    pub protocol: String,
    /// A name for the port.
    #[serde(deserialize_with = "nullable")]
    pub name: String,
}

/// `executor_opts`: `{docker: {platform, user}, kubernetes: {user}}`. Unknown keys are kept so
/// an isolation level can refuse them (GitLab fails such jobs with `runner_system_failure`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct ExecutorOptions {
    /// Docker options.
    #[serde(deserialize_with = "nullable", skip_serializing_if = "Option::is_none")]
    pub docker: Option<DockerOptions>,
    /// Kubernetes options.
    #[serde(deserialize_with = "nullable", skip_serializing_if = "Option::is_none")]
    pub kubernetes: Option<KubernetesOptions>,
    /// Keys this runner does not know.
    #[serde(flatten)]
    pub unknown: BTreeMap<String, serde_json::Value>,
}

impl ExecutorOptions {
    /// The dotted names of options this runner does not support, e.g. `docker.privileged`.
    pub fn unsupported(&self) -> Vec<String> {
        let mut out: Vec<String> = self.unknown.keys().cloned().collect();
        if let Some(d) = &self.docker {
            out.extend(d.unknown.keys().map(|k| format!("docker.{k}")));
        }
        if let Some(k) = &self.kubernetes {
            out.extend(k.unknown.keys().map(|key| format!("kubernetes.{key}")));
        }
        out
    }
}

/// `executor_opts.docker`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct DockerOptions {
    /// The platform to pull, e.g. `linux/arm64`.
    #[serde(deserialize_with = "nullable")]
    pub platform: String,
    /// The user to run as (`uid[:gid]` or a name; GitLab accepts a number too).
    #[serde(deserialize_with = "string_or_int")]
    pub user: String,
    /// Keys this runner does not know.
    #[serde(flatten)]
    pub unknown: BTreeMap<String, serde_json::Value>,
}

/// `executor_opts.kubernetes`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct KubernetesOptions {
    /// The user to run as.
    #[serde(deserialize_with = "string_or_int")]
    pub user: String,
    /// Keys this runner does not know.
    #[serde(flatten)]
    pub unknown: BTreeMap<String, serde_json::Value>,
}

fn string_or_int<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum StrOrInt {
        S(String),
        I(i64),
    }
    Ok(match Option::<StrOrInt>::deserialize(d)? {
        None => String::new(),
        Some(StrOrInt::S(s)) => s,
        Some(StrOrInt::I(i)) => i.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aliases_follow_gitlab_rules() {
        let img = |name: &str, alias: &str| Image {
            name: name.into(),
            alias: alias.into(),
            ..Default::default()
        };
        assert_eq!(img("redis:7", "").aliases(), vec!["redis"]);
        assert_eq!(
            img("registry.example.com:5000/group/valkey:8@sha256:ab", "").aliases(),
            vec![
                "registry.example.com:5000__group__valkey",
                "registry.example.com:5000-group-valkey"
            ]
        );
        assert_eq!(img("redis", "cache, db").aliases(), vec!["cache", "db"]);
    }

    #[test]
    fn unknown_executor_options_are_reported() {
        let o: ExecutorOptions = serde_json::from_str(
            r#"{"docker":{"platform":"linux/amd64","user":1000,"privileged":true},"podman":{}}"#,
        )
        .unwrap();
        assert_eq!(o.docker.as_ref().unwrap().user, "1000");
        assert_eq!(o.unsupported(), vec!["podman", "docker.privileged"]);
    }
}
