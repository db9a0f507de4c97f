//! How an instance is set up to be connected to (fleeting's `ConnectorConfig`).

use crate::Secret;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::time::Duration;

/// The remote-execution protocol an instance speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum Protocol {
    /// SSH (default port 22).
    #[default]
    #[serde(rename = "ssh")]
    Ssh,
    /// WinRM over HTTP (default port 5985).
    #[serde(rename = "winrm")]
    WinRm,
    /// WinRM over HTTPS (default port 5986).
    #[serde(rename = "winrm+https")]
    WinRmHttps,
}

impl Protocol {
    /// The port used when `protocol_port` is not set.
    pub fn default_port(self) -> u16 {
        match self {
            Protocol::Ssh => 22,
            Protocol::WinRm => 5985,
            Protocol::WinRmHttps => 5986,
        }
    }

    /// The name used in GitLab's config (`ssh`, `winrm`, `winrm+https`).
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Ssh => "ssh",
            Protocol::WinRm => "winrm",
            Protocol::WinRmHttps => "winrm+https",
        }
    }

    /// Parses a protocol name as GitLab's config spells it.
    pub fn parse(s: &str) -> Option<Protocol> {
        Some(match s {
            "ssh" => Protocol::Ssh,
            "winrm" | "winrm+http" => Protocol::WinRm,
            "winrm+https" => Protocol::WinRmHttps,
            _ => return None,
        })
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Hints from the user on how instances are set up for connecting, and on the way out (inside
/// [`crate::ConnectInfo`]) exactly what is needed to connect.
///
/// On input (`[runners.autoscaler.connector_config]`), a provider treats these as hints: with
/// `use_static_credentials` it passes the username and password or key through unchanged;
/// without it, it may mint credentials of its own (a per-group key, short-lived keys).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ConnectorConfig {
    /// `linux`, `windows` or `darwin`.
    pub os: String,
    /// GOARCH-style architecture: `amd64`, `arm64`, `386`.
    pub arch: String,
    /// The protocol to connect with.
    pub protocol: Protocol,
    /// The port; `None` means the protocol's default.
    pub protocol_port: Option<u16>,
    /// The login user.
    pub username: String,
    /// A password, for password authentication.
    pub password: Option<Secret<String>>,
    /// A PEM or OpenSSH private key.
    pub key: Option<Secret<Vec<u8>>>,
    /// Use the credentials above as they are; do not let the provider mint its own.
    pub use_static_credentials: bool,
    /// Interval between keepalive probes on an idle connection; zero disables them.
    #[serde(with = "duration_secs")]
    pub keepalive: Duration,
    /// How long to wait for a connection to be established.
    #[serde(with = "duration_secs")]
    pub timeout: Duration,
    /// Connect to the external address rather than the internal one.
    pub use_external_addr: bool,
}

impl Default for ConnectorConfig {
    fn default() -> Self {
        ConnectorConfig {
            os: "linux".into(),
            arch: "amd64".into(),
            protocol: Protocol::Ssh,
            protocol_port: None,
            username: String::new(),
            password: None,
            key: None,
            use_static_credentials: false,
            keepalive: Duration::from_secs(30),
            timeout: Duration::from_secs(600),
            use_external_addr: false,
        }
    }
}

impl ConnectorConfig {
    /// The port to connect to: `protocol_port`, or the protocol's default.
    pub fn port(&self) -> u16 {
        self.protocol_port
            .unwrap_or_else(|| self.protocol.default_port())
    }
}

/// Durations as fractional seconds in JSON (the store and plugin transport).
mod duration_secs {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub(super) fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64())
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let secs = f64::deserialize(d)?;
        Duration::try_from_secs_f64(secs).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_ports() {
        assert_eq!(Protocol::Ssh.default_port(), 22);
        assert_eq!(Protocol::WinRm.default_port(), 5985);
        assert_eq!(Protocol::WinRmHttps.default_port(), 5986);
        let mut c = ConnectorConfig::default();
        assert_eq!(c.port(), 22);
        c.protocol = Protocol::WinRmHttps;
        assert_eq!(c.port(), 5986);
        c.protocol_port = Some(2222);
        assert_eq!(c.port(), 2222);
    }

    #[test]
    fn protocol_names() {
        for p in [Protocol::Ssh, Protocol::WinRm, Protocol::WinRmHttps] {
            assert_eq!(Protocol::parse(p.as_str()), Some(p));
            assert_eq!(serde_json::to_string(&p).unwrap(), format!("\"{p}\""));
        }
        assert_eq!(Protocol::parse("winrm+http"), Some(Protocol::WinRm));
        assert_eq!(Protocol::parse("telnet"), None);
    }

    #[test]
    fn secrets_do_not_leak_through_debug() {
        let c = ConnectorConfig {
            password: Some(Secret::new("pw-123".into())),
            key: Some(Secret::new(b"-----BEGIN KEY-----".to_vec())),
            ..Default::default()
        };
        let dbg = format!("{c:?}");
        assert!(!dbg.contains("pw-123"), "{dbg}");
        assert!(!dbg.contains("BEGIN"), "{dbg}");
    }

    #[test]
    fn json_round_trip() {
        let c = ConnectorConfig {
            username: "root".into(),
            keepalive: Duration::from_millis(1500),
            ..Default::default()
        };
        let j = serde_json::to_string(&c).unwrap();
        let back: ConnectorConfig = serde_json::from_str(&j).unwrap();
        assert_eq!(back, c);
    }
}
