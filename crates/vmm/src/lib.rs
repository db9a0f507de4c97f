//! VMM backends behind one trait ([`Vmm`], [`Vm`]): each starts VMs on an instance through
//! the instance's connector, pauses, snapshots and restores them, and kills them (also those
//! an earlier manager left, by their directory).
//!
//! - [`qemu::Qemu`]: QEMU, driven over QMP ([`qmp`]); the one used and tested here, under TCG
//!   (`microvm` machines for the `microvm` level, `q35` for `vm`).
//! - [`firecracker::Firecracker`] and [`cloud_hypervisor::CloudHypervisor`]: REST over a unix
//!   socket (HTTP/1.1 through the instance's connector), written from their OpenAPI files;
//!   the agent is reached over hybrid vsock ([`vsock`]). **Both were tested only against fakes built from those files
//!   (`tests/rest_vmms`), not against the real VMMs**: they need KVM, which the machines
//!   this was written on lack for guests.
//!
//! [`backend`] picks one by name.
//!
//! Also here: the guest's boot pieces, found or made on the instance: the kernel
//! ([`kernel`]), the initramfs with the agent and the virtio modules ([`initramfs`]), and
//! copy-on-write disk layers ([`disk`]).

#![warn(missing_docs)]

mod backend;
pub mod cloud_hypervisor;
pub mod disk;
mod error;
pub mod firecracker;
pub mod host;
pub mod initramfs;
pub mod kernel;
mod process;
pub mod qemu;
pub mod qmp;
mod rest;
mod spec;
mod vmm;
pub mod vsock;

pub use backend::{Backend, backend};
pub use error::VmmError;
pub use spec::{Accel, Disk, Machine, VmSpec, kernel_cmdline};
pub use vmm::{AfterSnapshot, AgentEndpoint, SnapshotFiles, SnapshotReport, Vm, Vmm};

/// The virtio-serial port name the guest agent serves on (the agent's
/// `protocol::PORT_NAME`; a test keeps the two equal).
pub const AGENT_PORT_NAME: &str = "org.flotilla.agent";

/// The vsock port the guest agent listens on where the VMM offers (hybrid) vsock instead of
/// virtio-serial: Firecracker, Cloud Hypervisor (the agent's `protocol::VSOCK_PORT`; a test
/// keeps the two equal).
pub const AGENT_VSOCK_PORT: u32 = 1024;
