//! The fleet's types as messages of the InstanceGroup service, and back.
//!
//! Host and SDK both convert with these functions, so a field cannot be forgotten on one side
//! only. Conversions from messages check what protobuf cannot (an unset enum, a port out of
//! range, a negative duration) and say which field was wrong.

use crate::pb::instance_group as pb;
use flotilla_fleet::{
    Capabilities, ConnectInfo, ConnectorConfig, ConnectorKind, InstanceStatus, Protocol,
    ProviderInfo, Secret, State,
};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A message that does not make a valid fleet value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {field} in the plugin's answer: {reason}")]
pub struct ConvertError {
    /// The message field.
    pub field: &'static str,
    /// What was wrong with it.
    pub reason: String,
}

fn invalid(field: &'static str, reason: impl Into<String>) -> ConvertError {
    ConvertError {
        field,
        reason: reason.into(),
    }
}

/// A connector configuration as a message.
pub fn connector_to_pb(c: &ConnectorConfig) -> pb::ConnectorConfig {
    pb::ConnectorConfig {
        os: c.os.clone(),
        arch: c.arch.clone(),
        protocol: match c.protocol {
            Protocol::Ssh => pb::Protocol::Ssh,
            Protocol::WinRm => pb::Protocol::Winrm,
            Protocol::WinRmHttps => pb::Protocol::WinrmHttps,
        } as i32,
        protocol_port: c.protocol_port.map(u32::from),
        username: c.username.clone(),
        password: c.password.as_ref().map(|p| p.expose().clone()),
        key: c.key.as_ref().map(|k| k.expose().clone()),
        use_static_credentials: c.use_static_credentials,
        keepalive_seconds: c.keepalive.as_secs_f64(),
        timeout_seconds: c.timeout.as_secs_f64(),
        use_external_addr: c.use_external_addr,
    }
}

/// A connector configuration from a message.
pub fn connector_from_pb(c: pb::ConnectorConfig) -> Result<ConnectorConfig, ConvertError> {
    let protocol = match pb::Protocol::try_from(c.protocol) {
        Ok(pb::Protocol::Ssh) => Protocol::Ssh,
        Ok(pb::Protocol::Winrm) => Protocol::WinRm,
        Ok(pb::Protocol::WinrmHttps) => Protocol::WinRmHttps,
        Err(_) => return Err(invalid("connector.protocol", format!("{}", c.protocol))),
    };
    let protocol_port = c
        .protocol_port
        .map(|p| u16::try_from(p).map_err(|_| invalid("connector.protocol_port", p.to_string())))
        .transpose()?;
    let seconds = |field: &'static str, s: f64| {
        Duration::try_from_secs_f64(s).map_err(|e| invalid(field, e.to_string()))
    };
    Ok(ConnectorConfig {
        os: c.os,
        arch: c.arch,
        protocol,
        protocol_port,
        username: c.username,
        password: c.password.map(Secret::new),
        key: c.key.map(Secret::new),
        use_static_credentials: c.use_static_credentials,
        keepalive: seconds("connector.keepalive_seconds", c.keepalive_seconds)?,
        timeout: seconds("connector.timeout_seconds", c.timeout_seconds)?,
        use_external_addr: c.use_external_addr,
    })
}

/// A provider's description as a message (`usize::MAX`, unbounded, is sent as 0).
pub fn info_to_pb(i: &ProviderInfo) -> pb::ProviderInfo {
    let c = &i.capabilities;
    pb::ProviderInfo {
        id: i.id.clone(),
        max_size: if i.max_size == usize::MAX {
            0
        } else {
            i.max_size as u64
        },
        version: i.version.clone(),
        build_info: i.build_info.clone(),
        capabilities: Some(pb::Capabilities {
            single_host: c.single_host,
            adopts_preexisting: c.adopts_preexisting,
            connector: match c.connector {
                ConnectorKind::Protocol => pb::ConnectorKind::Protocol,
                ConnectorKind::Local => pb::ConnectorKind::Local,
                ConnectorKind::KubeExec => pb::ConnectorKind::KubeExec,
            } as i32,
            fixed_pool: c.fixed_pool,
            max_slots_per_instance: c.max_slots_per_instance.map(|n| n as u64),
        }),
    }
}

/// A provider's description from a message. Absent capabilities mean a remote group, as an
/// empty `Capabilities` does in the fleet crate.
pub fn info_from_pb(i: pb::ProviderInfo) -> Result<ProviderInfo, ConvertError> {
    if i.id.is_empty() {
        return Err(invalid(
            "info.id",
            "empty: flotilla keys the fleet's state by it",
        ));
    }
    let c = i.capabilities.unwrap_or_default();
    let connector = match pb::ConnectorKind::try_from(c.connector) {
        Ok(pb::ConnectorKind::Protocol) => ConnectorKind::Protocol,
        Ok(pb::ConnectorKind::Local) => ConnectorKind::Local,
        // The kube-exec connector finds its client in the kubernetes provider of this
        // process; a plugin's pods cannot be reached that way.
        Ok(pb::ConnectorKind::KubeExec) => {
            return Err(invalid(
                "capabilities.connector",
                "kube-exec: only flotilla's own kubernetes provider can use it",
            ));
        }
        Err(_) => return Err(invalid("capabilities.connector", c.connector.to_string())),
    };
    Ok(ProviderInfo {
        id: i.id,
        max_size: if i.max_size == 0 {
            usize::MAX
        } else {
            usize::try_from(i.max_size).unwrap_or(usize::MAX)
        },
        version: i.version,
        build_info: i.build_info,
        capabilities: Capabilities {
            single_host: c.single_host,
            adopts_preexisting: c.adopts_preexisting,
            connector,
            fixed_pool: c.fixed_pool,
            max_slots_per_instance: c
                .max_slots_per_instance
                .map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
        },
    })
}

/// A state as the message enum.
pub fn state_to_pb(s: State) -> pb::State {
    match s {
        State::Creating => pb::State::Creating,
        State::Running => pb::State::Running,
        State::Deleting => pb::State::Deleting,
        State::Deleted => pb::State::Deleted,
        State::Timeout => pb::State::Timeout,
    }
}

/// A state from the message enum (unset or unknown values are refused).
pub fn state_from_pb(s: i32) -> Result<State, ConvertError> {
    match pb::State::try_from(s) {
        Ok(pb::State::Creating) => Ok(State::Creating),
        Ok(pb::State::Running) => Ok(State::Running),
        Ok(pb::State::Deleting) => Ok(State::Deleting),
        Ok(pb::State::Deleted) => Ok(State::Deleted),
        Ok(pb::State::Timeout) => Ok(State::Timeout),
        Ok(pb::State::Unspecified) | Err(_) => Err(invalid("instance.state", s.to_string())),
    }
}

/// A listing as a message.
pub fn listing_to_pb(list: &[InstanceStatus]) -> pb::UpdateResponse {
    pb::UpdateResponse {
        instances: list
            .iter()
            .map(|i| pb::Instance {
                id: i.id.clone(),
                state: state_to_pb(i.state) as i32,
            })
            .collect(),
    }
}

/// A listing from a message. An instance without an id is refused: it could not be told
/// apart from another.
pub fn listing_from_pb(r: pb::UpdateResponse) -> Result<Vec<InstanceStatus>, ConvertError> {
    r.instances
        .into_iter()
        .map(|i| {
            if i.id.is_empty() {
                return Err(invalid("instance.id", "empty"));
            }
            Ok(InstanceStatus {
                id: i.id,
                state: state_from_pb(i.state)?,
            })
        })
        .collect()
}

/// Connection details as a message.
pub fn connect_info_to_pb(c: &ConnectInfo) -> pb::ConnectInfoResponse {
    pb::ConnectInfoResponse {
        config: Some(connector_to_pb(&c.config)),
        id: c.id.clone(),
        external_addr: c.external_addr.clone(),
        internal_addr: c.internal_addr.clone(),
        expires_unix_ms: c.expires.map(|t| match t.duration_since(UNIX_EPOCH) {
            Ok(d) => i64::try_from(d.as_millis()).unwrap_or(i64::MAX),
            Err(before) => -i64::try_from(before.duration().as_millis()).unwrap_or(i64::MAX),
        }),
    }
}

/// Connection details from a message.
pub fn connect_info_from_pb(c: pb::ConnectInfoResponse) -> Result<ConnectInfo, ConvertError> {
    let config = connector_from_pb(c.config.ok_or_else(|| invalid("config", "absent"))?)?;
    let expires = c.expires_unix_ms.map(|ms| {
        if ms >= 0 {
            UNIX_EPOCH + Duration::from_millis(ms as u64)
        } else {
            UNIX_EPOCH - Duration::from_millis(ms.unsigned_abs())
        }
    });
    Ok(ConnectInfo {
        config,
        id: c.id,
        external_addr: c.external_addr,
        internal_addr: c.internal_addr,
        expires: expires.map(|t: SystemTime| t),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connector_config_round_trips_with_its_secrets() {
        let c = ConnectorConfig {
            os: "darwin".into(),
            arch: "arm64".into(),
            protocol: Protocol::WinRmHttps,
            protocol_port: Some(2222),
            username: "ci".into(),
            password: Some(Secret::new("pw".into())),
            key: Some(Secret::new(b"KEY".to_vec())),
            use_static_credentials: true,
            keepalive: Duration::from_millis(1500),
            timeout: Duration::from_secs(7),
            use_external_addr: true,
        };
        assert_eq!(connector_from_pb(connector_to_pb(&c)).unwrap(), c);
        let d = ConnectorConfig::default();
        assert_eq!(connector_from_pb(connector_to_pb(&d)).unwrap(), d);
    }

    #[test]
    fn bad_connector_fields_are_named() {
        let mut m = connector_to_pb(&ConnectorConfig::default());
        m.protocol_port = Some(70_000);
        assert_eq!(
            connector_from_pb(m.clone()).unwrap_err().field,
            "connector.protocol_port"
        );
        m.protocol_port = None;
        m.timeout_seconds = -1.0;
        assert_eq!(
            connector_from_pb(m.clone()).unwrap_err().field,
            "connector.timeout_seconds"
        );
        m.timeout_seconds = 1.0;
        m.protocol = 9;
        assert_eq!(
            connector_from_pb(m).unwrap_err().field,
            "connector.protocol"
        );
    }

    #[test]
    fn provider_info_round_trips_and_unbounded_is_zero() {
        let i = ProviderInfo {
            id: "x/y".into(),
            max_size: usize::MAX,
            version: "1".into(),
            build_info: "b".into(),
            capabilities: Capabilities {
                fixed_pool: true,
                max_slots_per_instance: Some(3),
                ..Capabilities::this_host()
            },
        };
        let m = info_to_pb(&i);
        assert_eq!(m.max_size, 0);
        assert_eq!(info_from_pb(m).unwrap(), i);
        let bounded = ProviderInfo { max_size: 10, ..i };
        assert_eq!(info_from_pb(info_to_pb(&bounded)).unwrap(), bounded);
    }

    #[test]
    fn absent_capabilities_are_a_remote_group_and_an_empty_id_is_refused() {
        let m = pb::ProviderInfo {
            id: "g".into(),
            ..Default::default()
        };
        assert_eq!(
            info_from_pb(m).unwrap().capabilities,
            Capabilities::remote()
        );
        assert_eq!(
            info_from_pb(pb::ProviderInfo::default()).unwrap_err().field,
            "info.id"
        );
    }

    #[test]
    fn listings_round_trip_and_unset_states_are_refused() {
        let list = vec![
            InstanceStatus::new("a", State::Creating),
            InstanceStatus::new("b", State::Running),
            InstanceStatus::new("c", State::Deleting),
            InstanceStatus::new("d", State::Deleted),
            InstanceStatus::new("e", State::Timeout),
        ];
        assert_eq!(listing_from_pb(listing_to_pb(&list)).unwrap(), list);
        let unset = pb::UpdateResponse {
            instances: vec![pb::Instance {
                id: "a".into(),
                state: 0,
            }],
        };
        assert_eq!(listing_from_pb(unset).unwrap_err().field, "instance.state");
        let anonymous = pb::UpdateResponse {
            instances: vec![pb::Instance {
                id: String::new(),
                state: 2,
            }],
        };
        assert_eq!(listing_from_pb(anonymous).unwrap_err().field, "instance.id");
    }

    #[test]
    fn connect_info_round_trips_with_its_expiry() {
        let c = ConnectInfo {
            config: ConnectorConfig::default(),
            id: "i-1".into(),
            external_addr: "203.0.113.7:22".into(),
            internal_addr: "10.0.0.7:22".into(),
            expires: Some(UNIX_EPOCH + Duration::from_millis(1_700_000_000_123)),
        };
        assert_eq!(connect_info_from_pb(connect_info_to_pb(&c)).unwrap(), c);
        let never = ConnectInfo { expires: None, ..c };
        assert_eq!(
            connect_info_from_pb(connect_info_to_pb(&never)).unwrap(),
            never
        );
    }
}
