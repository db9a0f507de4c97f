//! A host of the pool with the credentials it is reached with, resolved once at `init`.

use crate::settings::{HostSettings, StaticSettings, dial_addr};
use flotilla_fleet::{ConnectorConfig, FleetError, Protocol, Secret};
use flotilla_ssh_machine::GroupKey;
use std::collections::HashSet;

/// A host, ready to be listed, probed and connected to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    /// Its instance id.
    pub id: String,
    /// Its name or IP address.
    pub address: String,
    /// Its SSH port.
    pub port: u16,
    /// How to connect: the fleet's connector settings with the host's own credentials, user,
    /// OS and architecture in place.
    pub connector: ConnectorConfig,
    /// The most job slots it runs.
    pub max_slots: Option<usize>,
}

impl Host {
    /// `address:port`, as the connector dials it.
    pub fn dial_addr(&self) -> String {
        dial_addr(&self.address, self.port)
    }
}

/// Every host of `settings`, with `fleet` (the runner's `connector_config`) filling in what a
/// host leaves unset. Private key files are read and parsed here, so a wrong path or a bad
/// key is refused when flotilla starts, not at a job's first connection.
pub(crate) fn resolve(
    settings: &StaticSettings,
    fleet: &ConnectorConfig,
) -> Result<Vec<Host>, FleetError> {
    if fleet.protocol != Protocol::Ssh {
        return Err(FleetError::Config(format!(
            "static hosts are reached over SSH, but connector_config sets protocol = \"{}\"",
            fleet.protocol
        )));
    }
    let default_port = fleet.port();
    let mut seen = HashSet::new();
    let mut hosts = Vec::with_capacity(settings.hosts.len());
    for h in &settings.hosts {
        let host = resolve_one(h, fleet, default_port)?;
        if !seen.insert(host.id.clone()) {
            return Err(FleetError::Config(format!(
                "static plugin_config: two hosts are named {:?}; give each a distinct name",
                host.id
            )));
        }
        hosts.push(host);
    }
    Ok(hosts)
}

fn resolve_one(
    h: &HostSettings,
    fleet: &ConnectorConfig,
    default_port: u16,
) -> Result<Host, FleetError> {
    let id = h.id(default_port);
    let bad = |m: String| FleetError::Config(format!("static host {id}: {m}"));
    let mut connector = fleet.clone();
    if let Some(user) = &h.username {
        connector.username = user.clone();
    }
    if connector.username.is_empty() {
        return Err(bad(
            "no username: set `username` on the host or in connector_config".into(),
        ));
    }
    if h.key_file.is_some() || h.password.is_some() {
        // The host's own credentials replace the fleet's.
        connector.key = match &h.key_file {
            Some(path) => {
                let bytes = std::fs::read(path)
                    .map_err(|e| bad(format!("cannot read key_file {}: {e}", path.display())))?;
                GroupKey::parse(&bytes)
                    .map_err(|e| bad(format!("key_file {}: {e}", path.display())))?;
                Some(Secret::new(bytes))
            }
            None => None,
        };
        connector.password = h.password.clone();
    } else if let Some(key) = &connector.key {
        GroupKey::parse(key.expose()).map_err(|e| bad(format!("connector_config key: {e}")))?;
    }
    if connector.key.is_none() && connector.password.is_none() {
        return Err(bad(
            "no credentials: set `key_file` or `password` on the host, or `key_path` or \
             `password` in connector_config"
                .into(),
        ));
    }
    if let Some(os) = &h.os {
        connector.os = os.clone();
    }
    if let Some(arch) = &h.arch {
        connector.arch = arch.clone();
    }
    let port = h.port.unwrap_or(default_port);
    connector.protocol = Protocol::Ssh;
    connector.protocol_port = Some(port);
    // The provider mints nothing: what is configured is what is used.
    connector.use_static_credentials = true;
    Ok(Host {
        id,
        address: h.address.clone(),
        port,
        connector,
        max_slots: h.max_slots,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn settings(hosts: serde_json::Value) -> StaticSettings {
        StaticSettings::from_plugin_config(&json!({"name": "p", "hosts": hosts})).unwrap()
    }

    fn fleet() -> ConnectorConfig {
        ConnectorConfig {
            username: "ci".into(),
            password: Some(Secret::new("fleet-pw".into())),
            ..ConnectorConfig::default()
        }
    }

    #[test]
    fn hosts_take_the_fleet_defaults_and_override_them() {
        let dir = tempfile::tempdir().unwrap();
        let key_file = dir.path().join("k");
        let key = GroupKey::generate("t").unwrap();
        std::fs::write(&key_file, key.private_openssh.expose()).unwrap();
        let hosts = resolve(
            &settings(json!([
                {"address": "a.lan"},
                {"name": "mac", "address": "10.0.0.9", "port": 2222, "username": "admin",
                 "key_file": key_file, "os": "darwin", "arch": "arm64", "max_slots": 2},
                {"address": "::1", "password": "own-pw"}
            ])),
            &fleet(),
        )
        .unwrap();
        let a = &hosts[0];
        assert_eq!((a.id.as_str(), a.port), ("a.lan:22", 22));
        assert_eq!(a.connector.username, "ci");
        assert_eq!(a.connector.password.as_ref().unwrap().expose(), "fleet-pw");
        assert_eq!(
            (a.connector.os.as_str(), a.connector.arch.as_str()),
            ("linux", "amd64")
        );
        assert!(a.connector.use_static_credentials);
        let mac = &hosts[1];
        assert_eq!(mac.dial_addr(), "10.0.0.9:2222");
        assert_eq!(mac.connector.port(), 2222);
        assert_eq!(mac.connector.username, "admin");
        assert!(mac.connector.key.is_some());
        assert_eq!(
            mac.connector.password, None,
            "the host's credentials replace the fleet's"
        );
        assert_eq!(mac.connector.os, "darwin");
        assert_eq!(mac.max_slots, Some(2));
        let v6 = &hosts[2];
        assert_eq!(v6.id, "[::1]:22");
        assert_eq!(v6.dial_addr(), "[::1]:22");
        assert_eq!(v6.connector.password.as_ref().unwrap().expose(), "own-pw");
    }

    #[test]
    fn missing_or_bad_credentials_are_refused_at_init() {
        let mut no_creds = fleet();
        no_creds.password = None;
        let e = resolve(&settings(json!([{"address": "a"}])), &no_creds).unwrap_err();
        assert!(e.to_string().contains("no credentials"), "{e}");
        let mut no_user = fleet();
        no_user.username.clear();
        let e = resolve(&settings(json!([{"address": "a"}])), &no_user).unwrap_err();
        assert!(e.to_string().contains("no username"), "{e}");
        let e = resolve(
            &settings(json!([{"address": "a", "key_file": "/nonexistent/key"}])),
            &fleet(),
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("cannot read key_file /nonexistent/key"),
            "{e}"
        );
        let dir = tempfile::tempdir().unwrap();
        let garbage = dir.path().join("garbage");
        std::fs::write(&garbage, "not a key").unwrap();
        let e = resolve(
            &settings(json!([{"address": "a", "key_file": garbage}])),
            &fleet(),
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("cannot read the SSH private key"),
            "{e}"
        );
        let mut winrm = fleet();
        winrm.protocol = Protocol::WinRm;
        let e = resolve(&settings(json!([{"address": "a"}])), &winrm).unwrap_err();
        assert!(e.to_string().contains("over SSH"), "{e}");
    }

    #[test]
    fn the_fleet_port_is_every_host_default() {
        let mut f = fleet();
        f.protocol_port = Some(2200);
        let hosts = resolve(&settings(json!([{"address": "a"}])), &f).unwrap();
        assert_eq!((hosts[0].id.as_str(), hosts[0].port), ("a:2200", 2200));
    }
}
