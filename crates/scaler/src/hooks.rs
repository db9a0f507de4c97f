//! Hooks the scaler calls around instances: ready-up and heartbeat.

use crate::cause::Cause;
use async_trait::async_trait;
use flotilla_fleet::{FleetError, InstanceGroup};

/// What the ready-up hook is told about an instance (taskscaler's `UpFuncInstance`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadyUpInstance {
    /// The provider's id.
    pub id: String,
    /// How the scaler came to know it.
    pub cause: Cause,
    /// Keys of the jobs the durable store says it ran when the previous process stopped
    /// (only with `keep_instance_with_acquisitions`; otherwise such an instance is removed
    /// without a ready-up). Those jobs are gone; the hook may clean up after them.
    pub acquisitions: Vec<String>,
}

/// Work the scaler delegates to its owner.
#[async_trait]
pub trait Hooks: Send + Sync {
    /// Runs once per new (or restored, or pre-existing) instance before its slots are
    /// offered, with everything the scaler knows about it. The default calls
    /// [`Hooks::ready_up`]; override this one to see restored acquisitions.
    async fn ready_up_instance(
        &self,
        group: &dyn InstanceGroup,
        instance: &ReadyUpInstance,
    ) -> Result<(), String> {
        self.ready_up(group, &instance.id, instance.cause).await
    }

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
