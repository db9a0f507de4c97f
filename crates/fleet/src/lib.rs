//! The fleet contract and flotilla's instance-group providers.
//!
//! An *instance group* is a set of machines (cloud VMs, containers, static hosts, local VMs)
//! that flotilla can grow and shrink. This crate defines the contract every provider
//! implements, [`InstanceGroup`], with the semantics of GitLab's fleeting plugins:
//!
//! - [`InstanceGroup::update`] lists *every* instance with its [`State`]. The listing is the
//!   truth: callers derive their counters from it on every tick (level-triggered), they never
//!   trust their own bookkeeping over it.
//! - [`InstanceGroup::increase`] asks for more instances and says how many were *requested*;
//!   their ids only appear in later listings.
//! - [`InstanceGroup::decrease`] deletes specific instances and returns the ids it succeeded for.
//! - [`InstanceGroup::connect_info`] says how to reach one instance ([`ConnectInfo`]).
//! - [`InstanceGroup::shutdown`] releases the provider's own resources and never deletes
//!   instances: they outlive the provider, and deleting them is the scaler's decision.
//!
//! Providers:
//! - [`local::LocalGroup`]: this host as exactly one always-running instance (the embedded
//!   default of `flotilla exec`).
//! - `docker::DockerGroup` (feature `docker`): containers that behave like VMs, reached over
//!   SSH.
//!
//! A provider knows nothing of jobs, slots or SSH sessions; it only manages machines and says
//! how to reach them.

mod connector;
#[cfg(feature = "docker")]
pub mod docker;
mod error;
mod group;
mod info;
pub mod local;
mod secret;
mod state;

pub use connector::{ConnectorConfig, Protocol};
pub use error::FleetError;
pub use group::{InstanceGroup, InstanceStatus};
pub use info::{ConnectInfo, InstanceId, ProviderInfo, Settings};
pub use secret::Secret;
pub use state::State;
