//! Firecracker's API types, from its OpenAPI (Swagger 2.0) file
//! `src/firecracker/swagger/firecracker.yaml` (firecracker-microvm/firecracker, API version
//! 1.17.0-dev, commit 81b38b9d), `definitions:` section. Only the fields flotilla sets are
//! here; optional ones are skipped when unset, as Firecracker rejects unknown fields.

use serde::{Deserialize, Serialize};

/// `#/definitions/MachineConfiguration` (`PUT /machine-config`); required `mem_size_mib`,
/// `vcpu_count` (1..=32).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MachineConfiguration {
    /// Guest memory in MiB.
    pub mem_size_mib: u32,
    /// Virtual CPUs.
    pub vcpu_count: u32,
}

/// `#/definitions/BootSource` (`PUT /boot-source`); required `kernel_image_path`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BootSource {
    /// The kernel on the instance (an uncompressed ELF `vmlinux` on x86_64).
    pub kernel_image_path: String,
    /// The kernel command line.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub boot_args: Option<String>,
    /// The initrd on the instance.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub initrd_path: Option<String>,
}

/// `#/definitions/Drive` (`PUT /drives/{drive_id}`); required `drive_id`, `is_root_device`;
/// `is_read_only` and `path_on_host` are required for a virtio-block drive.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Drive {
    /// Its id (also the path parameter).
    pub drive_id: String,
    /// Whether the kernel mounts it as `/` (flotilla boots from its initramfs: never).
    pub is_root_device: bool,
    /// Attached read-only.
    pub is_read_only: bool,
    /// The raw image on the instance.
    pub path_on_host: String,
}

/// `#/definitions/PartialDrive` (`PATCH /drives/{drive_id}`, post-boot): a drive moved to
/// another file; required `drive_id`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartialDrive {
    /// Its id.
    pub drive_id: String,
    /// The new file.
    pub path_on_host: String,
}

/// `#/definitions/Vsock` (`PUT /vsock`); required `guest_cid` (>= 3), `uds_path`. The host
/// reaches guest port P by connecting to `uds_path` and sending `CONNECT P\n`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Vsock {
    /// The guest's context id.
    pub guest_cid: u32,
    /// The unix socket Firecracker listens on for host-initiated connections.
    pub uds_path: String,
}

/// `#/definitions/SerialDevice` (`PUT /serial`): where the guest's serial console goes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SerialDevice {
    /// A file on the instance.
    pub serial_out_path: String,
}

/// `#/definitions/NetworkInterface` (`PUT /network-interfaces/{iface_id}`); required
/// `host_dev_name` (a tap device), `iface_id`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkInterface {
    /// Its id (also the path parameter).
    pub iface_id: String,
    /// The tap device on the instance.
    pub host_dev_name: String,
}

/// `#/definitions/InstanceActionInfo` (`PUT /actions`); required `action_type`, one of
/// `FlushMetrics`, `InstanceStart`, `SendCtrlAltDel`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceActionInfo {
    /// The action.
    pub action_type: ActionType,
}

/// `InstanceActionInfo.action_type`'s enum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ActionType {
    /// Flush the metrics.
    FlushMetrics,
    /// Boot the configured microVM.
    InstanceStart,
    /// Press Ctrl+Alt+Del (x86_64).
    SendCtrlAltDel,
}

/// `#/definitions/Vm` (`PATCH /vm`); required `state`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VmState {
    /// The wanted state.
    pub state: RunState,
}

/// `Vm.state`'s enum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RunState {
    /// vCPUs stopped.
    Paused,
    /// vCPUs running.
    Resumed,
}

/// `#/definitions/SnapshotCreateParams` (`PUT /snapshot/create`, post-boot, the microVM
/// `Paused`); required `mem_file_path`, `snapshot_path`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotCreateParams {
    /// Where the guest memory goes.
    pub mem_file_path: String,
    /// Where the microVM (device and vCPU) state goes.
    pub snapshot_path: String,
    /// `Full` or `Diff` (flotilla takes full snapshots).
    pub snapshot_type: SnapshotType,
}

/// `SnapshotCreateParams.snapshot_type`'s enum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SnapshotType {
    /// All of guest memory.
    Full,
    /// Only pages dirtied since the last snapshot.
    Diff,
}

/// `#/definitions/SnapshotLoadParams` (`PUT /snapshot/load`, only on a fresh process);
/// required `snapshot_path`, and exactly one of `mem_file_path` (deprecated) and
/// `mem_backend`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotLoadParams {
    /// The microVM state file.
    pub snapshot_path: String,
    /// Where the guest memory comes from.
    pub mem_backend: MemoryBackend,
    /// Whether to resume at once (flotilla resumes after moving the drives).
    pub resume_vm: bool,
    /// The vsock's socket for the restored VM (the snapshot records the old one's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vsock_override: Option<VsockOverride>,
}

/// `#/definitions/MemoryBackend`; required `backend_type` (`File` or `Uffd`),
/// `backend_path`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryBackend {
    /// `File` or `Uffd`.
    pub backend_type: String,
    /// The memory file (or the UFFD handler's socket).
    pub backend_path: String,
}

/// `#/definitions/VsockOverride`; required `uds_path`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VsockOverride {
    /// The new socket.
    pub uds_path: String,
}

/// `#/definitions/InstanceInfo` (`GET /`); required `app_name`, `id`, `state`,
/// `vmm_version`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceInfo {
    /// `Not started`, `Running` or `Paused`.
    pub state: String,
}

/// `#/definitions/Error`: the body of every error answer.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiError {
    /// What went wrong.
    #[serde(default)]
    pub fault_message: Option<String>,
}
