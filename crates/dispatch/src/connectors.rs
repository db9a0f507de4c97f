//! Turning connection details into connectors.

use crate::DispatchError;
use flotilla_connect::Connector;
use flotilla_connect::local::{KEPT_ENV, LocalConnector};
use flotilla_connect::ssh::{
    GroupCredentials, HostKeyStore, MemoryHostKeys, SshConnector, SshOptions,
};
use flotilla_fleet::{ConnectInfo, InstanceGroup, Protocol};
use std::fmt;
use std::sync::Arc;

/// Makes the connector for an instance from its [`ConnectInfo`]. The dispatcher calls it
/// once per instance and again only after that connector reported the instance failing.
pub trait ConnectorFactory: Send + Sync {
    /// A connector for the instance `info` describes.
    fn connector(&self, info: &ConnectInfo) -> Result<Arc<dyn Connector>, DispatchError>;
}

/// Connectors for the local provider: every instance is this host.
#[derive(Debug, Clone, Copy, Default)]
pub struct LocalConnectors;

impl ConnectorFactory for LocalConnectors {
    fn connector(&self, _info: &ConnectInfo) -> Result<Arc<dyn Connector>, DispatchError> {
        // Jobs get a clean environment anyway; started in one, they skip an `env` process
        // per stage.
        Ok(Arc::new(LocalConnector::new().with_clean_env(&KEPT_ENV)))
    }
}

/// SSH connectors: host keys pinned in one store shared by the fleet, expired credentials
/// refreshed through the instance group.
#[derive(Clone)]
pub struct SshConnectors {
    group: Arc<dyn InstanceGroup>,
    host_keys: Arc<dyn HostKeyStore>,
    options: SshOptions,
}

impl fmt::Debug for SshConnectors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SshConnectors")
            .field("host_keys", &self.host_keys)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl SshConnectors {
    /// Connectors for the instances of `group`, pinning host keys in memory.
    pub fn new(group: Arc<dyn InstanceGroup>) -> SshConnectors {
        SshConnectors {
            group,
            host_keys: Arc::new(MemoryHostKeys::new()),
            options: SshOptions::default(),
        }
    }

    /// Pins host keys in `store` (a file store survives restarts).
    pub fn with_host_keys(mut self, store: Arc<dyn HostKeyStore>) -> SshConnectors {
        self.host_keys = store;
        self
    }

    /// Tunes the connectors.
    pub fn with_options(mut self, options: SshOptions) -> SshConnectors {
        self.options = options;
        self
    }
}

impl ConnectorFactory for SshConnectors {
    fn connector(&self, info: &ConnectInfo) -> Result<Arc<dyn Connector>, DispatchError> {
        if info.config.protocol != Protocol::Ssh {
            return Err(DispatchError::UnsupportedProtocol {
                instance: info.id.clone(),
                protocol: info.config.protocol.to_string(),
            });
        }
        Ok(Arc::new(
            SshConnector::new(info.clone())
                .with_host_keys(self.host_keys.clone())
                .with_credentials(Arc::new(GroupCredentials(self.group.clone())))
                .with_options(self.options.clone()),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_fleet::ConnectorConfig;
    use flotilla_provider_local::LocalGroup;

    fn info(protocol: Protocol) -> ConnectInfo {
        ConnectInfo {
            config: ConnectorConfig {
                protocol,
                ..Default::default()
            },
            id: "i-1".into(),
            external_addr: "127.0.0.1:22".into(),
            internal_addr: "127.0.0.1:22".into(),
            expires: None,
        }
    }

    #[test]
    fn ssh_connectors_refuse_other_protocols() {
        let f = SshConnectors::new(Arc::new(LocalGroup::new()));
        assert!(f.connector(&info(Protocol::Ssh)).is_ok());
        let e = f.connector(&info(Protocol::WinRm)).unwrap_err();
        assert!(e.to_string().contains("instance i-1 speaks winrm"), "{e}");
        assert!(LocalConnectors.connector(&info(Protocol::WinRm)).is_ok());
    }
}
