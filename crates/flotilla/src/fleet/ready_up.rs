//! The ready-up hook: an instance's slots are offered only once it answers.

use async_trait::async_trait;
use flotilla_connect::ConnectorExt;
use flotilla_dispatch::ConnectorFactory;
use flotilla_fleet::InstanceGroup;
use flotilla_scaler::{Cause, Hooks};
use std::sync::Arc;

/// Runs `instance_ready_command` (or, for instances across the network, a reachability
/// check) on every new or adopted instance before its slots are offered.
pub(super) struct ReadyUp {
    /// `[runners.autoscaler] instance_ready_command`.
    pub(super) command: Option<String>,
    /// How instances are reached.
    pub(super) connectors: Arc<dyn ConnectorFactory>,
    /// Whether to check that an instance answers even without a command.
    pub(super) check: bool,
}

#[async_trait]
impl Hooks for ReadyUp {
    async fn ready_up(
        &self,
        group: &dyn InstanceGroup,
        instance: &str,
        cause: Cause,
    ) -> Result<(), String> {
        if !self.check && self.command.is_none() {
            return Ok(());
        }
        let info = group
            .connect_info(instance)
            .await
            .map_err(|e| format!("connect info: {e}"))?;
        let connector = self
            .connectors
            .connector(&info)
            .map_err(|e| format!("connector: {e}"))?;
        let command = self.command.clone().unwrap_or_else(|| "true".to_string());
        let output = connector
            .output(&command)
            .await
            .map_err(|e| format!("{cause:?} instance not reachable: {e}"))?;
        if !output.status.success() {
            return Err(format!(
                "instance_ready_command failed with {}: {}",
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            ));
        }
        Ok(())
    }
}
