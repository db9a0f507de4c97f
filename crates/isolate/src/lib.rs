//! Isolation levels: how a job's stages are kept apart from other jobs on the same instance.
//!
//! An [`Isolation`] prepares an [`IsolatedEnvironment`] for one job on one slot of one
//! instance, knowing only the instance's [`flotilla_connect::Connector`]. The environment is a
//! [`flotilla_job::Environment`] (the job runner runs the stages in it) that can also
//! [`IsolatedEnvironment::cleanup`] after itself.
//!
//! Levels:
//! - [`shell::ShellIsolation`] (`shell`): a build directory per slot on the instance, every
//!   stage run by the instance's shell over the connector.
//! - [`docker::DockerIsolation`] (`docker`): the job's image as the build container and each
//!   service as a container of its own (its own network namespace, reachable by alias on a
//!   per-job network), on the instance's Docker daemon reached over the connector's
//!   `dial_stdio`.
//! - [`microvm::MicrovmIsolation`] (`microvm`): the job's build stages in a QEMU `microvm`
//!   machine of their own, booted from the job's image and reached through flotilla's guest
//!   agent; helper stages on the instance.
//!
//! The pure parts (where a job's directories are, what a container looks like, which pull
//! policy applies) are separate from the I/O: see [`layout`], [`docker::spec`],
//! [`docker::pull`], [`docker::labels`].

pub mod cgroup;
pub mod command;
mod confinement;
pub mod docker;
mod error;
pub mod exec;
pub mod instance;
mod isolation;
pub mod layout;
pub mod microvm;
pub mod quantity;
pub mod service;
pub mod settings;
pub mod shell;
pub mod stage_record;
pub mod vm;

pub use cgroup::{CgroupConfig, CgroupIsolation};
pub use docker::{DockerIsolation, DockerIsolationConfig};
pub use error::IsolateError;
pub use instance::InstanceIsolation;
pub use isolation::{IsolatedEnvironment, Isolation, PrepareRequest};
pub use microvm::{MicrovmConfig, MicrovmIsolation};
pub use shell::ShellIsolation;
