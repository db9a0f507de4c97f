//! The contract every VMM backend implements.

use crate::{VmSpec, VmmError};
use async_trait::async_trait;
use flotilla_connect::Connector;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// Where a snapshot's files are, on the instance: `state.bin` (the VM's memory and device
/// state) and `disk-<i>.qcow2` (each writable disk frozen at the snapshot, copy-on-write
/// over its base).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotFiles {
    /// The directory.
    pub dir: String,
}

impl SnapshotFiles {
    /// The memory and device state.
    pub fn state(&self) -> String {
        format!("{}/state.bin", self.dir)
    }

    /// Writable disk `i` as it was.
    pub fn disk(&self, i: usize) -> String {
        format!("{}/disk-{i}.qcow2", self.dir)
    }
}

/// What a snapshot cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotReport {
    /// Bytes of memory and device state.
    pub state_bytes: u64,
    /// Bytes the frozen disk layers take on the instance (what the job wrote, not the image).
    pub disk_bytes: u64,
    /// How long the VM was stopped for it.
    pub took: Duration,
}

/// What the VM does after a snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterSnapshot {
    /// It runs on (its disks continue in new copy-on-write layers).
    Resume,
    /// It stays stopped (it is about to be killed).
    Stop,
}

/// How the host reaches the agent in the VM: a unix socket on the instance, and for hybrid
/// vsock (Firecracker, Cloud Hypervisor) a line to send first (`CONNECT <port>\n`, answered
/// with `OK <host-side port>\n`: the port the VMM assigned to the host end, not the agent's;
/// [`crate::vsock::connect`] does the exchange).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentEndpoint {
    /// The socket.
    pub socket: String,
    /// The handshake line, if any.
    pub connect_line: Option<String>,
}

/// A VMM that starts VMs on an instance (whose connector runs its commands).
#[async_trait]
pub trait Vmm: Send + Sync + fmt::Debug {
    /// `qemu`, `firecracker`, `cloud-hypervisor`.
    fn name(&self) -> &'static str;

    /// Boots a VM.
    async fn boot(&self, host: Arc<dyn Connector>, spec: VmSpec) -> Result<Box<dyn Vm>, VmmError>;

    /// Starts a VM from the snapshot in `from` instead of booting; `spec` is the machine the
    /// snapshot was taken of, moved to its own directory with disks over the snapshot's.
    async fn restore(
        &self,
        host: Arc<dyn Connector>,
        spec: VmSpec,
        from: &SnapshotFiles,
    ) -> Result<Box<dyn Vm>, VmmError>;

    /// Kills the VM whose directory is `dir` if its VMM process still runs (a VM of an
    /// earlier manager); returns whether one was killed.
    async fn kill_dir(&self, host: &dyn Connector, dir: &str) -> Result<bool, VmmError>;
}

/// A running VM.
#[async_trait]
pub trait Vm: Send + Sync + fmt::Debug {
    /// What it was made from.
    fn spec(&self) -> &VmSpec;

    /// The VMM process on the instance.
    fn pid(&self) -> u32;

    /// Where its agent is reached.
    fn agent(&self) -> AgentEndpoint;

    /// Stops its vCPUs.
    async fn pause(&self) -> Result<(), VmmError>;

    /// Lets its vCPUs run again.
    async fn resume(&self) -> Result<(), VmmError>;

    /// Saves it into `to` (made if missing).
    async fn snapshot(
        &self,
        to: &SnapshotFiles,
        after: AfterSnapshot,
    ) -> Result<SnapshotReport, VmmError>;

    /// Kills the VMM process and waits for it to be gone.
    async fn kill(&self) -> Result<(), VmmError>;
}
