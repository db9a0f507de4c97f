//! What can go wrong when talking to an instance group.

use crate::InstanceId;

/// An error from an [`crate::InstanceGroup`] operation.
#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    /// The instance exists but is not usable (fleeting's `ErrInstanceUnhealthy`). The scaler
    /// counts these towards `failure_threshold`.
    #[error("instance {id} is unhealthy: {reason}")]
    InstanceUnhealthy {
        /// The instance.
        id: InstanceId,
        /// What the provider saw.
        reason: String,
    },
    /// The provider does not know this instance (any more).
    #[error("instance {0} not found")]
    InstanceNotFound(InstanceId),
    /// The provider's settings are invalid; `init` refuses to start.
    #[error("invalid provider configuration: {0}")]
    Config(String),
    /// The provider was used before `init` succeeded.
    #[error("provider not initialised")]
    NotInitialized,
    /// The backing system (Docker engine, cloud API, plugin process) failed the operation.
    #[error("{op} failed: {message}")]
    Provider {
        /// The operation: `update`, `increase`, `decrease`, `connect_info`, `heartbeat`, ...
        op: &'static str,
        /// What the backing system said.
        message: String,
    },
    /// The operation does not exist for this provider.
    #[error("{0} is not supported by this provider")]
    Unsupported(&'static str),
}

impl FleetError {
    /// A [`FleetError::Provider`] for `op`.
    pub fn provider(op: &'static str, message: impl std::fmt::Display) -> Self {
        FleetError::Provider {
            op,
            message: message.to_string(),
        }
    }

    /// Whether this error says the instance is unhealthy or gone.
    pub fn is_unhealthy(&self) -> bool {
        matches!(
            self,
            FleetError::InstanceUnhealthy { .. } | FleetError::InstanceNotFound(_)
        )
    }
}
