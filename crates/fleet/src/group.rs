//! The instance-group contract.

use crate::{ConnectInfo, FleetError, InstanceId, ProviderInfo, Settings, State};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};

/// One line of a provider's listing: an instance and its state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceStatus {
    /// The provider's id of the instance.
    pub id: InstanceId,
    /// Its state.
    pub state: State,
}

impl InstanceStatus {
    /// A listing line.
    pub fn new(id: impl Into<InstanceId>, state: State) -> Self {
        InstanceStatus {
            id: id.into(),
            state,
        }
    }
}

/// A group of instances that can be listed, grown, shrunk and connected to: fleeting's
/// `provider.InstanceGroup`.
///
/// Contract, for implementers and callers alike:
/// - `init` is called once, before anything else.
/// - Every method may be called concurrently from several tasks.
/// - `update` returns *every* instance the group holds. It is the truth; callers derive their
///   counts from it each time and must tolerate instances appearing and disappearing between
///   calls (removed from outside, created by an earlier `increase`).
/// - `increase(n)` returns how many instances were requested (`0..=n`), not their ids.
/// - `decrease(ids)` returns the ids whose deletion was requested successfully; the others
///   may be retried.
/// - `shutdown` frees the provider's own resources. It never deletes instances.
#[async_trait]
pub trait InstanceGroup: Send + Sync {
    /// Initialises the provider with the user's connector hints and says what it is.
    async fn init(&self, settings: &Settings) -> Result<ProviderInfo, FleetError>;

    /// Lists every instance in the group with its state.
    async fn update(&self) -> Result<Vec<InstanceStatus>, FleetError>;

    /// Requests `n` more instances; returns how many were requested.
    async fn increase(&self, n: usize) -> Result<usize, FleetError>;

    /// Requests deletion of `ids`; returns those for which the request succeeded.
    async fn decrease(&self, ids: &[InstanceId]) -> Result<Vec<InstanceId>, FleetError>;

    /// How to connect to instance `id`, with credentials (possibly short-lived).
    async fn connect_info(&self, id: &str) -> Result<ConnectInfo, FleetError>;

    /// A cheap health probe of one instance; `Err(InstanceUnhealthy)` when it is not usable.
    async fn heartbeat(&self, id: &str) -> Result<(), FleetError>;

    /// Releases the provider's resources. Instances are left alone.
    async fn shutdown(&self) -> Result<(), FleetError>;
}
