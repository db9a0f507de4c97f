//! Cloud Hypervisor's API types, from its OpenAPI 3 file
//! `vmm/src/api/openapi/cloud-hypervisor.yaml` (cloud-hypervisor/cloud-hypervisor, API
//! version 0.3.0, commit ae44c297), `components: schemas:`. Only the fields flotilla sets
//! are here; unset optional ones are left out.

use serde::{Deserialize, Serialize};

/// `VmConfig` (`PUT /api/v1/vm.create`); required `payload`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VmConfig {
    /// vCPUs.
    pub cpus: CpusConfig,
    /// Guest memory.
    pub memory: MemoryConfig,
    /// What boots.
    pub payload: PayloadConfig,
    /// Disks, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub disks: Vec<DiskConfig>,
    /// Network devices.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub net: Vec<NetConfig>,
    /// The serial port (the guest's `ttyS0`).
    pub serial: ConsoleConfig,
    /// The virtio console (off: flotilla's guests log to the serial port).
    pub console: ConsoleConfig,
    /// The agent's vsock.
    pub vsock: VsockConfig,
}

/// `CpusConfig`; required `boot_vcpus`, `max_vcpus` (each >= 1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpusConfig {
    /// vCPUs at boot.
    pub boot_vcpus: u32,
    /// vCPUs at most (no hotplug here: the same).
    pub max_vcpus: u32,
}

/// `MemoryConfig`; required `size` (bytes, int64).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryConfig {
    /// Guest memory in bytes.
    pub size: u64,
}

/// `PayloadConfig`: a kernel booted directly (no firmware).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PayloadConfig {
    /// The kernel on the instance.
    pub kernel: String,
    /// The kernel command line.
    pub cmdline: String,
    /// The initramfs on the instance.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub initramfs: Option<String>,
}

/// `DiskConfig` (no required fields; `path` for a file-backed disk).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiskConfig {
    /// The image on the instance.
    pub path: String,
    /// Attached read-only.
    pub readonly: bool,
    /// `ImageType`: `Raw` or `Qcow2` here.
    pub image_type: ImageType,
    /// Whether a qcow2 image may have a backing file (flotilla's layers do).
    pub backing_files: bool,
    /// Its device id.
    pub id: String,
}

/// `ImageType`'s enum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ImageType {
    /// A VHD of fixed size.
    FixedVhd,
    /// qcow2.
    Qcow2,
    /// A raw image.
    Raw,
    /// VHDX.
    Vhdx,
    /// Let Cloud Hypervisor probe it.
    Unknown,
}

/// `NetConfig` (no required fields): a tap device on the instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetConfig {
    /// The tap device.
    pub tap: String,
}

/// `ConsoleConfig` / `SerialConfig`; required `mode` (`ConsoleMode`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConsoleConfig {
    /// Where it goes.
    pub mode: ConsoleMode,
    /// The file, for `File`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
}

/// `ConsoleMode`'s enum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ConsoleMode {
    /// No device.
    Off,
    /// A pseudo-terminal.
    Pty,
    /// Cloud Hypervisor's own terminal.
    Tty,
    /// A file.
    File,
    /// A unix socket.
    Socket,
    /// The device, its output dropped.
    Null,
}

/// `VsockConfig`; required `cid` (>= 3), `socket`. The host reaches guest port P by
/// connecting to `socket` and sending `CONNECT P\n` (hybrid vsock, as Firecracker's).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VsockConfig {
    /// The guest's context id.
    pub cid: u64,
    /// The unix socket on the instance.
    pub socket: String,
}

/// `VmSnapshotConfig` (`PUT /api/v1/vm.snapshot`, the VM paused).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VmSnapshotConfig {
    /// `file://<directory>`: Cloud Hypervisor writes `config.json`, `state.json` and
    /// `memory-ranges` there.
    pub destination_url: String,
}

/// `RestoreConfig` (`PUT /api/v1/vm.restore`, before any `vm.create`); required
/// `source_url`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestoreConfig {
    /// `file://<directory>` of a snapshot.
    pub source_url: String,
    /// Whether to resume at once (flotilla resumes with `vm.resume`).
    pub resume: bool,
}

/// `VmInfo` (`GET /api/v1/vm.info`); required `config`, `state`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VmInfo {
    /// `VmState`: `Created`, `Running`, `Shutdown`, `Paused`, `BreakPoint`.
    pub state: String,
}
