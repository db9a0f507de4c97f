//! The dispatcher: takes a job, acquires a slot from the scaler, connects to the slot's
//! instance, prepares the job's environment at the configured isolation level, runs the job,
//! cleans up and releases the slot. `flotilla exec` and the GitLab job source both run jobs
//! through it.
//!
//! - [`Dispatcher::dispatch`]: acquire (the scaler's default timeout) and run.
//! - [`Dispatcher::run`]: run on a slot already acquired (a job source that reserved
//!   capacity before asking GitLab for a job); the slot is always released.
//! - [`ConnectorFactory`]: how a [`flotilla_fleet::ConnectInfo`] becomes a connector:
//!   [`LocalConnectors`] for the local provider, [`SshConnectors`] for everything reached over
//!   SSH. One connector per instance is kept and reused while it is healthy.
//!
//! Whatever goes wrong before the job runner starts (no slot, no connection, no environment)
//! is written to the job's trace and ends the job with `runner_system_failure`; an instance
//! that dies under a job aborts it the same way.

mod connectors;
mod dispatcher;
mod error;
mod levels;
mod merged_output;
mod notice;
mod tally;
mod watch;

pub use connectors::{ConnectorFactory, LocalConnectors, SshConnectors};
pub use dispatcher::{Dispatcher, DispatcherConfig, LogAddresses};
pub use error::DispatchError;
pub use levels::{
    ISOLATION_VARIABLE, LevelRefused, Levels, level_index, requested_level, requested_level_of,
};
pub use watch::WatchedConnector;
