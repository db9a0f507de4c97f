//! VMM backends behind one trait ([`Vmm`], [`Vm`]): each starts VMs on an instance through
//! the instance's connector, pauses, snapshots and restores them, and kills them (also those
//! an earlier manager left, by their directory).
//!
//! - [`qemu::Qemu`]: QEMU, driven over QMP ([`qmp`]); the one used and tested here, under TCG
//!   (`microvm` machines for the `microvm` level, `q35` for `vm`).
//! - Firecracker and Cloud Hypervisor (REST over a unix socket) are meant to sit behind the
//!   same trait; they are not written yet (both need KVM, which these machines lack).
//!
//! Also here: the guest's boot pieces, found or made on the instance: the kernel
//! ([`kernel`]), the initramfs with the agent and the virtio modules ([`initramfs`]), and
//! copy-on-write disk layers ([`disk`]).

#![warn(missing_docs)]

pub mod disk;
mod error;
pub mod host;
pub mod initramfs;
pub mod kernel;
pub mod qemu;
pub mod qmp;
mod spec;
mod vmm;

pub use error::VmmError;
pub use spec::{Accel, Disk, Machine, VmSpec, kernel_cmdline};
pub use vmm::{AfterSnapshot, AgentEndpoint, SnapshotFiles, SnapshotReport, Vm, Vmm};

/// The virtio-serial port name the guest agent serves on (the agent's
/// `protocol::PORT_NAME`; a test keeps the two equal).
pub const AGENT_PORT_NAME: &str = "org.flotilla.agent";
