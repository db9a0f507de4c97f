//! `[runners.autoscaler.connector_config]` (and `[runners.autoscaler.vm_isolation.connector_config]`):
//! how instances are connected to, as written in the file.

use super::duration;
use super::error::ConfigError;
use super::redact;
use flotilla_fleet::{ConnectorConfig, Protocol, Secret};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::path::PathBuf;
use std::time::Duration;

/// `connector_config` as written. Every field is optional; unset ones take the fleet's
/// defaults ([`ConnectorConfig::default`]) when turned into a [`ConnectorConfig`] by
/// [`ConnectorSettings::to_connector_config`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ConnectorSettings {
    /// `linux`, `windows` or `darwin`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub os: Option<String>,
    /// GOARCH-style architecture (`amd64`, `arm64`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arch: Option<String>,
    /// `ssh`, `winrm` or `winrm+https`; unset means `winrm` for `os = "windows"`, else `ssh`.
    #[serde(
        deserialize_with = "protocol",
        serialize_with = "protocol_out",
        skip_serializing_if = "Option::is_none"
    )]
    pub protocol: Option<Protocol>,
    /// The port; unset means the protocol's default (22, 5985, 5986).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub protocol_port: Option<u16>,
    /// The login user.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    /// A password. Printed as `[REDACTED]`.
    #[serde(
        serialize_with = "redact::secret_opt",
        skip_serializing_if = "Option::is_none"
    )]
    pub password: Option<Secret<String>>,
    /// A private key file, read by [`ConnectorSettings::to_connector_config`]. A relative path
    /// is made absolute against the configuration file's directory when loading.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_path: Option<PathBuf>,
    /// Use the credentials above as they are; do not let the provider mint its own.
    pub use_static_credentials: bool,
    /// Keepalive interval on idle connections.
    #[serde(with = "duration::go_opt", skip_serializing_if = "Option::is_none")]
    pub keepalive: Option<Duration>,
    /// Connection timeout.
    #[serde(with = "duration::go_opt", skip_serializing_if = "Option::is_none")]
    pub timeout: Option<Duration>,
    /// Connect to the instance's external address instead of its internal one.
    pub use_external_addr: bool,
}

fn protocol<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Protocol>, D::Error> {
    let s = String::deserialize(d)?;
    Protocol::parse(&s).map(Some).ok_or_else(|| {
        serde::de::Error::custom(format!(
            "unknown protocol `{s}`; expected `ssh`, `winrm` or `winrm+https`"
        ))
    })
}

fn protocol_out<S: Serializer>(p: &Option<Protocol>, s: S) -> Result<S::Ok, S::Error> {
    match p {
        Some(p) => s.serialize_str(p.as_str()),
        None => s.serialize_none(),
    }
}

impl ConnectorSettings {
    /// Whether nothing is configured (the table is left out of printed configurations).
    pub fn is_unset(&self) -> bool {
        *self == ConnectorSettings::default()
    }

    /// The protocol in effect: the configured one, or `winrm` for Windows and `ssh` otherwise
    /// (GitLab's rule).
    pub fn effective_protocol(&self) -> Protocol {
        match (self.protocol, self.os.as_deref()) {
            (Some(p), _) => p,
            (None, Some("windows")) => Protocol::WinRm,
            (None, _) => Protocol::Ssh,
        }
    }

    /// The fleet's [`ConnectorConfig`] for these settings, with the private key read from
    /// `key_path`. Fails only when the key file cannot be read.
    pub fn to_connector_config(&self) -> Result<ConnectorConfig, ConfigError> {
        let defaults = ConnectorConfig::default();
        let key = match &self.key_path {
            Some(path) => Some(Secret::new(std::fs::read(path).map_err(|error| {
                ConfigError::KeyFile {
                    path: path.clone(),
                    error,
                }
            })?)),
            None => None,
        };
        Ok(ConnectorConfig {
            os: self.os.clone().unwrap_or(defaults.os),
            arch: self.arch.clone().unwrap_or(defaults.arch),
            protocol: self.effective_protocol(),
            protocol_port: self.protocol_port,
            username: self.username.clone().unwrap_or(defaults.username),
            password: self.password.clone(),
            key,
            use_static_credentials: self.use_static_credentials,
            keepalive: self.keepalive.unwrap_or(defaults.keepalive),
            timeout: self.timeout.unwrap_or(defaults.timeout),
            use_external_addr: self.use_external_addr,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unset_fields_take_fleet_defaults() {
        let c = ConnectorSettings::default().to_connector_config().unwrap();
        assert_eq!(c, ConnectorConfig::default());
    }

    #[test]
    fn windows_defaults_to_winrm() {
        let s = ConnectorSettings {
            os: Some("windows".into()),
            ..Default::default()
        };
        let c = s.to_connector_config().unwrap();
        assert_eq!(c.protocol, Protocol::WinRm);
        assert_eq!(c.port(), 5985);
    }

    #[test]
    fn key_path_is_read_and_kept_secret() {
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("id_ed25519");
        std::fs::write(&key, b"-----BEGIN OPENSSH PRIVATE KEY-----\nabc\n").unwrap();
        let s = ConnectorSettings {
            username: Some("ec2-user".into()),
            key_path: Some(key),
            protocol: Some(Protocol::Ssh),
            protocol_port: Some(2222),
            keepalive: Some(Duration::from_secs(5)),
            ..Default::default()
        };
        let c = s.to_connector_config().unwrap();
        assert_eq!(
            c.key.as_ref().unwrap().expose().as_slice(),
            b"-----BEGIN OPENSSH PRIVATE KEY-----\nabc\n"
        );
        assert_eq!(c.username, "ec2-user");
        assert_eq!(c.port(), 2222);
        assert_eq!(c.keepalive, Duration::from_secs(5));
        assert!(!format!("{c:?}").contains("PRIVATE KEY"));
    }

    #[test]
    fn missing_key_file_names_the_path() {
        let s = ConnectorSettings {
            key_path: Some("/nonexistent/flotilla/key".into()),
            ..Default::default()
        };
        let e = s.to_connector_config().unwrap_err();
        assert!(
            e.to_string()
                .starts_with("/nonexistent/flotilla/key: cannot read connector key_path:"),
            "{e}"
        );
    }
}
