//! Connectors: how flotilla reaches an instance (ssh, docker exec, local process).
//!
//! A [`Connector`] runs commands on one instance ([`Connector::exec`]: stdin in, stdout and
//! stderr streamed out separately with backpressure, exit code or signal, cancellation),
//! opens a stream to a command's stdio ([`Connector::dial_stdio`], how the Docker API is
//! reached: see [`docker_api`]) and forwards to sockets on the instance
//! ([`Connector::forward`]). Isolation levels are written against the trait only.
//!
//! Implementations:
//! - [`ssh::SshConnector`]: russh, one connection per instance shared by all channels,
//!   keepalive, host keys pinned on first contact, expiring credentials refreshed.
//! - [`local::LocalConnector`]: processes of this host (`bash -c`, a process group each).
//! - [`docker_exec::DockerExecConnector`]: commands in a container via the Docker exec API.
//!
//! Errors are classified ([`ConnectError`]): authentication, network, timeout, host-key
//! mismatch, remote refusal, protocol; [`ConnectError::is_retryable`] tells callers whether a
//! new attempt may help.

mod connector;
pub mod docker_api;
pub mod docker_exec;
mod error;
mod exec;
pub mod local;
pub mod pump;
pub mod recorded;
pub mod shell;
pub mod ssh;

pub use connector::{BoxedStream, Connector, ConnectorExt, ForwardTarget, IoStream};
pub use error::ConnectError;
pub use exec::{ExecRequest, Output, OutputSink, Stdin};
pub use flotilla_fleet::{ExitStatus, signal_name};
