//! Hooks the scaler calls around instances: ready-up and heartbeat.

use crate::ledger::Cause;
use async_trait::async_trait;
use flotilla_fleet::{FleetError, InstanceGroup};

/// Work the scaler delegates to its owner.
#[async_trait]
pub trait Hooks: Send + Sync {
    /// Runs once per new (or restored, or pre-existing) instance before its slots are
    /// offered; this is where `instance_ready_command` runs. An error deletes the instance
    /// with the reason recorded, and backs creation off.
    async fn ready_up(
        &self,
        group: &dyn InstanceGroup,
        instance: &str,
        cause: Cause,
    ) -> Result<(), String> {
        let _ = (group, instance, cause);
        Ok(())
    }

    /// Checks an instance before a job gets it (when `acquire_heartbeat` is on). The
    /// default asks the provider.
    async fn heartbeat(&self, group: &dyn InstanceGroup, instance: &str) -> Result<(), FleetError> {
        group.heartbeat(instance).await
    }
}

/// Hooks that accept every instance.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoHooks;

impl Hooks for NoHooks {}
