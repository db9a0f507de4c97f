//! The fleet contract: what every instance-group provider implements and says about itself.
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
//! The providers themselves live in their own crates under `crates/providers/` (`local`,
//! `docker`, ...), so a provider's dependencies (a cloud SDK, a container engine client) never
//! reach the crates that only need the contract. What a provider can do is in its
//! [`ProviderInfo`]'s [`Capabilities`]; the binary decides from those, never from the
//! provider's name.
//!
//! A provider knows nothing of jobs, slots or SSH sessions; it only manages machines and says
//! how to reach them.

mod build;
mod capabilities;
mod connector;
mod error;
mod exit;
mod group;
mod info;
mod redact;
mod secret;
mod state;

pub use build::{ProviderConfig, safe_file_name};
pub use capabilities::{Capabilities, ConnectorKind};
pub use connector::{ConnectorConfig, Protocol};
pub use error::FleetError;
pub use exit::{ExitStatus, signal_name, signal_number};
pub use group::{InstanceGroup, InstanceStatus};
pub use info::{ConnectInfo, InstanceId, ProviderInfo, Settings};
pub use redact::{
    REDACTED, debug_redacted, env_value_is_public, redact_url, serialize_environment,
};
pub use secret::Secret;
pub use state::State;
