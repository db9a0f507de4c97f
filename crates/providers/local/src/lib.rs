//! The `local` provider: this host as the fleet's one and only instance.
//!
//! It is the embedded default of `flotilla exec`: nothing to create, nothing to delete, and
//! the instance is always running. `increase` requests nothing (the group is full at one),
//! `decrease` refuses to delete this host.

use async_trait::async_trait;
use flotilla_fleet::{
    Capabilities, ConnectInfo, FleetError, InstanceGroup, InstanceId, InstanceStatus,
    ProviderConfig, ProviderInfo, Settings, State,
};
use std::sync::{Arc, Mutex};

/// The provider's name in configuration (`plugin = "local"`, or no plugin at all).
pub const PLUGIN: &str = "local";

/// The id of the single local instance.
pub const LOCAL_INSTANCE_ID: &str = "local";

/// This host as an instance group of exactly one always-running instance.
#[derive(Debug, Default)]
pub struct LocalGroup {
    settings: Mutex<Option<Settings>>,
}

impl LocalGroup {
    /// A local group; call [`InstanceGroup::init`] before use.
    pub fn new() -> Self {
        Self::default()
    }
}

/// The local group for a runner. It has nothing to configure: `plugin_config` is ignored.
pub fn build(_config: &ProviderConfig<'_>) -> Result<Arc<dyn InstanceGroup>, FleetError> {
    Ok(Arc::new(LocalGroup::new()))
}

#[async_trait]
impl InstanceGroup for LocalGroup {
    async fn init(&self, settings: &Settings) -> Result<ProviderInfo, FleetError> {
        *self.settings.lock().unwrap_or_else(|e| e.into_inner()) = Some(settings.clone());
        Ok(ProviderInfo {
            id: PLUGIN.into(),
            max_size: 1,
            version: env!("CARGO_PKG_VERSION").into(),
            build_info: String::new(),
            capabilities: Capabilities::this_host(),
        })
    }

    async fn update(&self) -> Result<Vec<InstanceStatus>, FleetError> {
        Ok(vec![InstanceStatus::new(LOCAL_INSTANCE_ID, State::Running)])
    }

    async fn increase(&self, _n: usize) -> Result<usize, FleetError> {
        // The group always holds exactly one instance: nothing more can be requested.
        Ok(0)
    }

    async fn decrease(&self, _ids: &[InstanceId]) -> Result<Vec<InstanceId>, FleetError> {
        // This host is never deleted.
        Ok(vec![])
    }

    async fn connect_info(&self, id: &str) -> Result<ConnectInfo, FleetError> {
        if id != LOCAL_INSTANCE_ID {
            return Err(FleetError::InstanceNotFound(id.into()));
        }
        let settings = self
            .settings
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .ok_or(FleetError::NotInitialized)?;
        let mut config = settings.connector;
        config.os = std::env::consts::OS.into();
        config.arch = go_arch(std::env::consts::ARCH).into();
        Ok(ConnectInfo {
            config,
            id: LOCAL_INSTANCE_ID.into(),
            external_addr: String::new(),
            internal_addr: "localhost".into(),
            expires: None,
        })
    }

    async fn heartbeat(&self, id: &str) -> Result<(), FleetError> {
        if id == LOCAL_INSTANCE_ID {
            Ok(())
        } else {
            Err(FleetError::InstanceNotFound(id.into()))
        }
    }

    async fn shutdown(&self) -> Result<(), FleetError> {
        Ok(())
    }
}

/// Rust's architecture names in GOARCH spelling, as fleeting reports them.
fn go_arch(rust_arch: &str) -> &str {
    match rust_arch {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn one_instance_always_running() {
        let g = LocalGroup::new();
        assert!(matches!(
            g.connect_info(LOCAL_INSTANCE_ID).await,
            Err(FleetError::NotInitialized)
        ));
        let info = g.init(&Settings::default()).await.unwrap();
        assert_eq!(info.max_size, 1);
        assert_eq!(info.capabilities, Capabilities::this_host());
        assert_eq!(
            g.update().await.unwrap(),
            vec![InstanceStatus::new("local", State::Running)]
        );
        assert_eq!(g.increase(3).await.unwrap(), 0);
        assert!(g.decrease(&["local".into()]).await.unwrap().is_empty());
        assert_eq!(g.update().await.unwrap().len(), 1, "never deleted");
        g.heartbeat("local").await.unwrap();
        assert!(g.heartbeat("other").await.is_err());
        let ci = g.connect_info("local").await.unwrap();
        assert_eq!(ci.id, "local");
        assert_eq!(ci.config.os, std::env::consts::OS);
        assert!(matches!(
            g.connect_info("nope").await,
            Err(FleetError::InstanceNotFound(_))
        ));
        g.shutdown().await.unwrap();
        assert_eq!(g.update().await.unwrap().len(), 1, "outlives shutdown");
    }
}
