//! The static provider's `plugin_config`, parsed and checked.

use flotilla_fleet::{FleetError, Secret};
use serde::Deserialize;
use std::collections::HashSet;
use std::path::PathBuf;
use std::time::Duration;

/// The static provider's settings: the `plugin_config` table of its instance group.
///
/// ```toml
/// [runners.autoscaler.plugin_config]
/// name = "on-prem"                  # default: the runner's name
/// probe_timeout = 5                 # seconds to wait for a host's SSH banner
/// unreachable_after = 2             # failed probes before a lent host is given up
///
/// [[runners.autoscaler.plugin_config.hosts]]
/// name = "build-1"                  # the instance id; default "<address>:<port>"
/// address = "10.0.0.5"
/// port = 22
/// username = "ci"
/// key_file = "/etc/flotilla/keys/build-1"
/// os = "linux"
/// arch = "amd64"
/// max_slots = 4
///
/// [[runners.autoscaler.plugin_config.hosts]]
/// address = "mac-mini.lan"
/// username = "ci"
/// password = "..."
/// os = "darwin"
/// arch = "arm64"
/// ```
///
/// Unknown keys are refused, so a typo does not silently fall back to a default.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StaticSettings {
    /// The pool's name: its provider id is `static/<name>`.
    pub name: String,
    /// The hosts, in the order they are lent.
    pub hosts: Vec<HostSettings>,
    /// Seconds to wait for a host's SSH banner before it counts as not answering.
    #[serde(default = "default_probe_timeout")]
    pub probe_timeout: u64,
    /// Consecutive failed probes after which a lent host is reported `timeout`, so that the
    /// fleet gives it back (and takes another one) instead of waiting for it.
    #[serde(default = "default_unreachable_after")]
    pub unreachable_after: u32,
    /// Where the names of the lent hosts are kept, so that a restarted flotilla finds the
    /// same hosts lent; `None` keeps them in memory only.
    #[serde(default)]
    pub state_file: Option<PathBuf>,
}

/// One host of the pool.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostSettings {
    /// The instance id of the host; default `<address>:<port>`.
    #[serde(default)]
    pub name: Option<String>,
    /// Its name or IP address.
    pub address: String,
    /// Its SSH port; default the connector's `protocol_port`, else 22.
    #[serde(default)]
    pub port: Option<u16>,
    /// The login user; default the connector's `username`.
    #[serde(default)]
    pub username: Option<String>,
    /// An absolute path to an unencrypted private key (OpenSSH or PEM).
    #[serde(default)]
    pub key_file: Option<PathBuf>,
    /// A password. When a host sets `key_file` or `password`, the connector's credentials
    /// are not used for it.
    #[serde(default)]
    pub password: Option<Secret<String>>,
    /// `linux`, `darwin`, `freebsd`, ...; default the connector's `os`.
    #[serde(default)]
    pub os: Option<String>,
    /// GOARCH-style architecture; default the connector's `arch`.
    #[serde(default)]
    pub arch: Option<String>,
    /// The most job slots this host runs.
    #[serde(default)]
    pub max_slots: Option<usize>,
}

fn default_probe_timeout() -> u64 {
    5
}

fn default_unreachable_after() -> u32 {
    2
}

impl HostSettings {
    /// A host at `address` with every other key unset.
    pub fn new(address: impl Into<String>) -> Self {
        HostSettings {
            name: None,
            address: address.into(),
            port: None,
            username: None,
            key_file: None,
            password: None,
            os: None,
            arch: None,
            max_slots: None,
        }
    }

    /// The host's instance id: its `name`, or `<address>:<port>` (`[v6]:port` for an IPv6
    /// address).
    pub fn id(&self, default_port: u16) -> String {
        match &self.name {
            Some(name) => name.clone(),
            None => dial_addr(&self.address, self.port.unwrap_or(default_port)),
        }
    }
}

/// `host:port`, with an IPv6 address in brackets.
pub fn dial_addr(address: &str, port: u16) -> String {
    if address.contains(':') && !address.starts_with('[') {
        format!("[{address}]:{port}")
    } else {
        format!("{address}:{port}")
    }
}

impl StaticSettings {
    /// Parses `plugin_config` (as JSON) and checks it.
    pub fn from_plugin_config(config: &serde_json::Value) -> Result<Self, FleetError> {
        let settings: StaticSettings = serde_json::from_value(config.clone())
            .map_err(|e| FleetError::Config(format!("static plugin_config: {e}")))?;
        settings.validate()?;
        Ok(settings)
    }

    /// Checks what serde cannot: a non-empty pool, unique usable names, absolute key files,
    /// positive limits.
    pub fn validate(&self) -> Result<(), FleetError> {
        let bad = |m: String| Err(FleetError::Config(format!("static plugin_config: {m}")));
        if !is_id(&self.name) {
            return bad(format!(
                "name {:?} must be non-empty, without whitespace or '/'",
                self.name
            ));
        }
        if self.hosts.is_empty() {
            return bad("hosts is empty: list at least one [[...plugin_config.hosts]]".into());
        }
        if self.probe_timeout == 0 {
            return bad("probe_timeout must be at least 1 (second)".into());
        }
        if self.unreachable_after == 0 {
            return bad("unreachable_after must be at least 1".into());
        }
        let mut seen = HashSet::new();
        for (i, h) in self.hosts.iter().enumerate() {
            let at = format!("hosts[{i}]");
            if h.address.trim().is_empty() || h.address.chars().any(char::is_whitespace) {
                return bad(format!("{at}: address {:?} is not a host name", h.address));
            }
            let id = h.id(22);
            if !is_id(&id) {
                return bad(format!(
                    "{at}: name {id:?} must be non-empty, without whitespace or '/'"
                ));
            }
            if !seen.insert(id.clone()) {
                return bad(format!(
                    "{at}: two hosts are named {id:?}; give each a distinct name"
                ));
            }
            if let Some(path) = &h.key_file
                && !path.is_absolute()
            {
                return bad(format!(
                    "{at} ({id}): key_file {} must be an absolute path",
                    path.display()
                ));
            }
            if h.max_slots == Some(0) {
                return bad(format!("{at} ({id}): max_slots must be at least 1"));
            }
            for (key, value) in [("os", &h.os), ("arch", &h.arch), ("username", &h.username)] {
                if value.as_deref().is_some_and(|v| v.trim().is_empty()) {
                    return bad(format!("{at} ({id}): {key} is empty"));
                }
            }
        }
        Ok(())
    }

    /// How long a probe waits for a banner.
    pub fn probe_timeout(&self) -> Duration {
        Duration::from_secs(self.probe_timeout)
    }
}

/// Whether `s` can be an instance id (it names a host in logs, the store and host-key pins).
fn is_id(s: &str) -> bool {
    !s.is_empty()
        && !s
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || c == '/')
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: serde_json::Value) -> Result<StaticSettings, FleetError> {
        StaticSettings::from_plugin_config(&v)
    }

    #[test]
    fn minimal_config_gets_defaults() {
        let s = parse(json!({"name": "p", "hosts": [{"address": "10.0.0.5"}]})).unwrap();
        assert_eq!(s.hosts, vec![HostSettings::new("10.0.0.5")]);
        assert_eq!(s.probe_timeout(), Duration::from_secs(5));
        assert_eq!(s.unreachable_after, 2);
        assert_eq!(s.state_file, None);
        assert_eq!(s.hosts[0].id(22), "10.0.0.5:22");
        assert_eq!(s.hosts[0].id(2222), "10.0.0.5:2222");
    }

    #[test]
    fn full_config() {
        let s = parse(json!({
            "name": "p", "probe_timeout": 2, "unreachable_after": 3, "state_file": "/s/p.json",
            "hosts": [
                {"name": "b1", "address": "b1.lan", "port": 2222, "username": "ci",
                 "key_file": "/k/b1", "os": "freebsd", "arch": "arm64", "max_slots": 2},
                {"address": "fe80::1", "password": "pw"}
            ]
        }))
        .unwrap();
        assert_eq!(s.hosts[0].id(22), "b1");
        assert_eq!(s.hosts[0].max_slots, Some(2));
        assert_eq!(s.hosts[1].id(22), "[fe80::1]:22");
        assert_eq!(s.hosts[1].password.as_ref().unwrap().expose(), "pw");
        assert!(
            !format!("{s:?}").contains("pw\""),
            "the password is never printed"
        );
    }

    #[test]
    fn mistakes_are_refused_with_what_is_wrong() {
        for (bad, says) in [
            (json!({"name": "p", "hosts": []}), "hosts is empty"),
            (json!({"name": "p"}), "hosts"),
            (json!({"name": "", "hosts": [{"address": "a"}]}), "name"),
            (json!({"name": "p", "hosts": [{"address": " "}]}), "address"),
            (
                json!({"name": "p", "hosts": [{"address": "a"}, {"address": "a"}]}),
                "two hosts are named \"a:22\"",
            ),
            (
                json!({"name": "p", "hosts": [{"address": "a", "key_file": "k"}]}),
                "absolute",
            ),
            (
                json!({"name": "p", "hosts": [{"address": "a", "max_slots": 0}]}),
                "max_slots",
            ),
            (
                json!({"name": "p", "hosts": [{"address": "a", "adress": "b"}]}),
                "adress",
            ),
            (
                json!({"name": "p", "hosts": [{"address": "a"}], "probe_timeout": 0}),
                "probe_timeout",
            ),
            (
                json!({"name": "p", "hosts": [{"address": "a", "name": "x/y"}]}),
                "x/y",
            ),
            (
                json!({"name": "p", "hosts": [{"address": "a", "os": ""}]}),
                "os is empty",
            ),
        ] {
            let e = parse(bad.clone()).unwrap_err();
            assert!(matches!(e, FleetError::Config(_)), "{bad}");
            assert!(e.to_string().contains(says), "{bad}: {e}");
        }
    }
}
