//! Firecracker, driven over its REST API on a unix socket (`--api-sock`), written from its
//! OpenAPI file `src/firecracker/swagger/firecracker.yaml` ([`api`]).
//!
//! **Tested only against a fake built from that file** (this crate's `tests/rest_vmms`),
//! never against a real Firecracker: it needs KVM, which the machines this was written on
//! lack for guests.
//!
//! - **Boot**: start `firecracker --api-sock <dir>/api.sock`, then `PUT /machine-config`,
//!   `/boot-source`, `/serial`, `/drives/disk<i>`, `/vsock` (hybrid vsock for the agent:
//!   `CONNECT 1024\n` on `<dir>/agent.sock`), `/network-interfaces/eth0` when a tap is
//!   configured, and `PUT /actions {"action_type": "InstanceStart"}`.
//! - **Pause/resume**: `PATCH /vm {"state": "Paused"|"Resumed"}`.
//! - **Snapshot**: pause, copy each writable drive (Firecracker cannot layer disks), `PUT
//!   /snapshot/create` (`Full`: `vmstate.bin` and the memory in `state.bin`), and a manifest
//!   (`firecracker.json`) of the drive paths and vsock socket the state records.
//! - **Restore**: a fresh process, `PUT /snapshot/load` with the new vsock socket
//!   (`vsock_override`), each drive moved to the restored VM's own copy (`PATCH
//!   /drives/{id}`; the load reopens the recorded paths, so any that are gone are bridged by
//!   a symbolic link for the duration of the load), then `PATCH /vm Resumed`.
//!
//! What a [`VmSpec`] can ask that Firecracker cannot do is refused before anything starts
//! ([`check`]): TCG (Firecracker is KVM only), the `q35` machine (Firecracker has one
//! machine, a microVM without PCI or firmware), qcow2 disks (raw images only: convert with
//! `qemu-img convert -O raw`), and user-mode networking (Firecracker only attaches tap
//! devices: set [`Firecracker::tap`]). Its kernel must be an uncompressed ELF `vmlinux`
//! (Firecracker's `docs/getting-started.md`), not Debian's `vmlinuz`.

pub mod api;

use crate::process;
use crate::rest::RestClient;
use crate::vmm::{AfterSnapshot, AgentEndpoint, SnapshotFiles, SnapshotReport, Vm, Vmm};
use crate::{Accel, Machine, VmSpec, VmmError, disk, host};
use api::*;
use async_trait::async_trait;
use flotilla_connect::Connector;
use flotilla_shell::quote;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::{Duration, Instant};

const NAME: &str = "firecracker";

/// The guest's vsock context id (any >= 3; each VM has its own vsock device).
pub const GUEST_CID: u32 = 3;

/// The Firecracker backend.
#[derive(Debug, Clone)]
pub struct Firecracker {
    /// The `firecracker` binary on the instance.
    pub binary: String,
    /// How long Firecracker may take to start and to answer a call.
    pub timeout: Duration,
    /// The tap device a VM that asks for networking ([`VmSpec::user_net`]) is given;
    /// `{name}` is replaced by the VM's name. `None`: such VMs are refused.
    pub tap: Option<String>,
}

impl Default for Firecracker {
    fn default() -> Self {
        Firecracker {
            binary: "firecracker".into(),
            timeout: Duration::from_secs(30),
            tap: None,
        }
    }
}

/// Whether Firecracker can make `spec`'s VM; the error says what it lacks.
pub fn check(spec: &VmSpec, tap: Option<&str>) -> Result<(), VmmError> {
    if spec.accel != Accel::Kvm {
        return Err(VmmError::Unsupported(format!(
            "{}: Firecracker runs guests with KVM only; it has no emulation (TCG): use the qemu backend",
            spec.name
        )));
    }
    if spec.machine != Machine::Microvm {
        return Err(VmmError::Unsupported(format!(
            "{}: Firecracker has one machine, a microVM without PCI or firmware; a q35 VM booting a cloud image needs the qemu backend",
            spec.name
        )));
    }
    if !(1..=32).contains(&spec.vcpus) {
        return Err(VmmError::Unsupported(format!(
            "{}: Firecracker takes 1 to 32 vCPUs, not {}",
            spec.name, spec.vcpus
        )));
    }
    for d in &spec.disks {
        if !d.format.eq_ignore_ascii_case("raw") {
            return Err(VmmError::Unsupported(format!(
                "{}: Firecracker reads raw disk images only, and {} is {}: convert it (qemu-img convert -O raw) or use the qemu backend",
                spec.name, d.path, d.format
            )));
        }
    }
    if spec.user_net && tap.is_none() {
        return Err(VmmError::Unsupported(format!(
            "{}: Firecracker has no user-mode networking; it attaches a tap device made on the instance (set the backend's tap)",
            spec.name
        )));
    }
    Ok(())
}

/// The drive id of disk `i`.
fn drive_id(i: usize) -> String {
    format!("disk{i}")
}

/// The microVM state file of a snapshot.
fn vmstate(to: &SnapshotFiles) -> String {
    format!("{}/vmstate.bin", to.dir)
}

/// The manifest of a snapshot.
fn manifest_path(to: &SnapshotFiles) -> String {
    format!("{}/firecracker.json", to.dir)
}

/// Writable disk `i` of a snapshot, frozen (a copy: Firecracker cannot layer disks).
pub fn frozen_disk(to: &SnapshotFiles, i: usize) -> String {
    format!("{}/disk-{i}.raw", to.dir)
}

/// What a snapshot's state records, which a restore must put right.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Manifest {
    /// Each drive's id and file when the snapshot was taken.
    drives: Vec<Drive>,
    /// The vsock socket then.
    vsock: String,
}

/// Firecracker's error body, `Error.fault_message`; anything else is shown as text.
fn error_message(body: &[u8]) -> String {
    serde_json::from_slice::<ApiError>(body)
        .ok()
        .and_then(|e| e.fault_message)
        .unwrap_or_else(|| String::from_utf8_lossy(body).trim().to_string())
}

/// A client of one Firecracker process's API.
#[derive(Debug, Clone)]
struct Client(RestClient);

impl Client {
    async fn send<T: Serialize>(&self, method: &str, path: &str, body: &T) -> Result<(), VmmError> {
        self.0.call(method, path, Some(body)).await.map(drop)
    }

    async fn state(&self, state: RunState) -> Result<(), VmmError> {
        self.send("PATCH", "/vm", &VmState { state }).await
    }

    /// `GET /`: `InstanceInfo.state` (`Not started`, `Running`, `Paused`).
    async fn instance_state(&self) -> Result<String, VmmError> {
        let body = self.0.call::<()>("GET", "/", None).await?;
        let info: InstanceInfo = serde_json::from_slice(&body)
            .map_err(|e| VmmError::Protocol(format!("GET /: {e}"), NAME))?;
        Ok(info.state)
    }
}

/// A VM run by Firecracker.
pub struct FirecrackerVm {
    host: Arc<dyn Connector>,
    spec: VmSpec,
    pid: u32,
    api: Client,
}

impl std::fmt::Debug for FirecrackerVm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FirecrackerVm")
            .field("name", &self.spec.name)
            .field("pid", &self.pid)
            .finish_non_exhaustive()
    }
}

impl Firecracker {
    fn tap_for(&self, spec: &VmSpec) -> Option<String> {
        self.tap.as_ref().map(|t| t.replace("{name}", &spec.name))
    }

    /// Starts a fresh Firecracker process for `spec`.
    async fn start(
        &self,
        host: &Arc<dyn Connector>,
        spec: &VmSpec,
    ) -> Result<(u32, Client), VmmError> {
        let args = vec!["--api-sock".to_string(), spec.api_socket()];
        let pid = process::start(&**host, NAME, &self.binary, &args, spec, self.timeout).await?;
        let api = Client(RestClient::new(
            host.clone(),
            spec.api_socket(),
            NAME,
            self.timeout,
            error_message,
        ));
        Ok((pid, api))
    }

    /// The pre-boot configuration calls, in order.
    async fn configure(&self, api: &Client, spec: &VmSpec) -> Result<(), VmmError> {
        api.send(
            "PUT",
            "/machine-config",
            &MachineConfiguration {
                mem_size_mib: spec.memory_mib,
                vcpu_count: spec.vcpus,
            },
        )
        .await?;
        api.send(
            "PUT",
            "/boot-source",
            &BootSource {
                kernel_image_path: spec.kernel.clone(),
                boot_args: Some(spec.cmdline.clone()),
                initrd_path: (!spec.initrd.is_empty()).then(|| spec.initrd.clone()),
            },
        )
        .await?;
        api.send(
            "PUT",
            "/serial",
            &SerialDevice {
                serial_out_path: spec.console_log(),
            },
        )
        .await?;
        for (i, d) in spec.disks.iter().enumerate() {
            let id = drive_id(i);
            api.send(
                "PUT",
                &format!("/drives/{id}"),
                &Drive {
                    drive_id: id.clone(),
                    is_root_device: false,
                    is_read_only: d.read_only,
                    path_on_host: d.path.clone(),
                },
            )
            .await?;
        }
        api.send(
            "PUT",
            "/vsock",
            &Vsock {
                guest_cid: GUEST_CID,
                uds_path: spec.agent_socket(),
            },
        )
        .await?;
        if spec.user_net
            && let Some(tap) = self.tap_for(spec)
        {
            api.send(
                "PUT",
                "/network-interfaces/eth0",
                &NetworkInterface {
                    iface_id: "eth0".into(),
                    host_dev_name: tap,
                },
            )
            .await?;
        }
        Ok(())
    }
}

/// Copies `from` to `to` on the instance (a reflink where the file system has them, holes
/// kept).
async fn copy(host: &dyn Connector, what: &str, from: &str, to: &str) -> Result<(), VmmError> {
    host::run(
        host,
        what,
        &format!(
            "cp --reflink=auto --sparse=always {} {}",
            quote(from),
            quote(to)
        ),
    )
    .await
    .map(drop)
}

#[async_trait]
impl Vmm for Firecracker {
    fn name(&self) -> &'static str {
        NAME
    }

    async fn boot(&self, host: Arc<dyn Connector>, spec: VmSpec) -> Result<Box<dyn Vm>, VmmError> {
        check(&spec, self.tap.as_deref())?;
        let (pid, api) = self.start(&host, &spec).await?;
        let booted = async {
            self.configure(&api, &spec).await?;
            api.send(
                "PUT",
                "/actions",
                &InstanceActionInfo {
                    action_type: ActionType::InstanceStart,
                },
            )
            .await
        }
        .await;
        if let Err(e) = booted {
            let _ = process::kill_pid(&*host, pid, &spec.dir).await;
            return Err(e);
        }
        Ok(Box::new(FirecrackerVm {
            host,
            spec,
            pid,
            api,
        }))
    }

    async fn restore(
        &self,
        host: Arc<dyn Connector>,
        spec: VmSpec,
        from: &SnapshotFiles,
    ) -> Result<Box<dyn Vm>, VmmError> {
        check(&spec, self.tap.as_deref())?;
        let raw = host::read(&*host, &manifest_path(from)).await?;
        let manifest: Manifest = serde_json::from_slice(&raw).map_err(|e| {
            VmmError::Protocol(format!("the snapshot's {}: {e}", manifest_path(from)), NAME)
        })?;
        if manifest.drives.len() != spec.disks.len() {
            return Err(VmmError::Unsupported(format!(
                "{}: the snapshot in {} has {} drives, the VM to restore {}",
                spec.name,
                from.dir,
                manifest.drives.len(),
                spec.disks.len()
            )));
        }
        host::run(
            &*host,
            "making the VM's directory",
            &format!("mkdir -p {}", quote(&spec.dir)),
        )
        .await?;
        // Each writable drive starts as the snapshot's frozen copy, unless the caller made
        // its file already.
        for (i, d) in spec.disks.iter().enumerate() {
            if !d.read_only {
                host::run(
                    &*host,
                    "copying a snapshot's drive",
                    &format!(
                        "[ -e {to} ] || cp --reflink=auto --sparse=always {from} {to}",
                        from = quote(&frozen_disk(from, i)),
                        to = quote(&d.path)
                    ),
                )
                .await?;
            }
        }
        // The load reopens the drive files the state records; bridge those that are gone
        // (the snapshotted VM's directory was removed) to this VM's own, until the drives
        // are moved below. Nothing writes through them: the VM stays paused until then.
        let mut bridges = Vec::new();
        for (rec, d) in manifest.drives.iter().zip(&spec.disks) {
            let out = host::run(
                &*host,
                "bridging a recorded drive path",
                &format!(
                    "if [ ! -e {rec} ]; then mkdir -p \"$(dirname {rec})\" && ln -s {to} {rec} && echo made; fi",
                    rec = quote(&rec.path_on_host),
                    to = quote(&d.path)
                ),
            )
            .await?;
            if out.contains("made") {
                bridges.push(rec.path_on_host.clone());
            }
        }
        let (pid, api) = self.start(&host, &spec).await?;
        let restored = async {
            api.send(
                "PUT",
                "/snapshot/load",
                &SnapshotLoadParams {
                    snapshot_path: vmstate(from),
                    mem_backend: MemoryBackend {
                        backend_type: "File".into(),
                        backend_path: from.state(),
                    },
                    resume_vm: false,
                    vsock_override: (manifest.vsock != spec.agent_socket()).then(|| {
                        VsockOverride {
                            uds_path: spec.agent_socket(),
                        }
                    }),
                },
            )
            .await?;
            for (rec, d) in manifest.drives.iter().zip(&spec.disks) {
                if rec.path_on_host != d.path {
                    api.send(
                        "PATCH",
                        &format!("/drives/{}", rec.drive_id),
                        &PartialDrive {
                            drive_id: rec.drive_id.clone(),
                            path_on_host: d.path.clone(),
                        },
                    )
                    .await?;
                }
            }
            api.state(RunState::Resumed).await
        }
        .await;
        for b in &bridges {
            let _ = host::run(&*host, "removing a bridge", &format!("rm -f {}", quote(b))).await;
        }
        if let Err(e) = restored {
            let _ = process::kill_pid(&*host, pid, &spec.dir).await;
            return Err(e);
        }
        Ok(Box::new(FirecrackerVm {
            host,
            spec,
            pid,
            api,
        }))
    }

    async fn kill_dir(&self, host: &dyn Connector, dir: &str) -> Result<bool, VmmError> {
        process::kill_dir(host, dir).await
    }
}

#[async_trait]
impl Vm for FirecrackerVm {
    fn spec(&self) -> &VmSpec {
        &self.spec
    }

    fn pid(&self) -> u32 {
        self.pid
    }

    fn agent(&self) -> AgentEndpoint {
        AgentEndpoint {
            socket: self.spec.agent_socket(),
            connect_line: Some(format!("CONNECT {}\n", crate::AGENT_VSOCK_PORT)),
        }
    }

    async fn pause(&self) -> Result<(), VmmError> {
        self.api.state(RunState::Paused).await
    }

    async fn resume(&self) -> Result<(), VmmError> {
        self.api.state(RunState::Resumed).await
    }

    async fn snapshot(
        &self,
        to: &SnapshotFiles,
        after: AfterSnapshot,
    ) -> Result<SnapshotReport, VmmError> {
        let started = Instant::now();
        let host = &*self.host;
        host::run(
            host,
            "making the snapshot directory",
            &format!("mkdir -p {}", quote(&to.dir)),
        )
        .await?;
        // A VM its owner paused stays paused after the snapshot.
        let was_paused = self.api.instance_state().await? == "Paused";
        if !was_paused {
            self.api.state(RunState::Paused).await?;
        }
        let mut frozen = Vec::new();
        for (i, d) in self.spec.disks.iter().enumerate() {
            if !d.read_only {
                let dest = frozen_disk(to, i);
                copy(host, "freezing a drive", &d.path, &dest).await?;
                frozen.push(dest);
            }
        }
        self.api
            .send(
                "PUT",
                "/snapshot/create",
                &SnapshotCreateParams {
                    mem_file_path: to.state(),
                    snapshot_path: vmstate(to),
                    snapshot_type: SnapshotType::Full,
                },
            )
            .await?;
        let manifest = Manifest {
            drives: self
                .spec
                .disks
                .iter()
                .enumerate()
                .map(|(i, d)| Drive {
                    drive_id: drive_id(i),
                    is_root_device: false,
                    is_read_only: d.read_only,
                    path_on_host: d.path.clone(),
                })
                .collect(),
            vsock: self.spec.agent_socket(),
        };
        let json = serde_json::to_vec_pretty(&manifest)
            .map_err(|e| VmmError::Protocol(format!("encoding the manifest: {e}"), NAME))?;
        host::write(host, &manifest_path(to), json).await?;
        let took = started.elapsed();
        if after == AfterSnapshot::Resume && !was_paused {
            self.api.state(RunState::Resumed).await?;
        }
        Ok(SnapshotReport {
            state_bytes: disk::allocated(host, &[to.state(), vmstate(to)]).await?,
            disk_bytes: disk::allocated(host, &frozen).await?,
            took,
        })
    }

    async fn kill(&self) -> Result<(), VmmError> {
        process::kill_pid(&*self.host, self.pid, &self.spec.dir)
            .await
            .map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Disk;

    fn spec() -> VmSpec {
        VmSpec {
            name: "t".into(),
            machine: Machine::Microvm,
            accel: Accel::Kvm,
            vcpus: 2,
            memory_mib: 256,
            kernel: "/k".into(),
            initrd: "/i".into(),
            cmdline: "console=ttyS0".into(),
            disks: vec![Disk {
                path: "/d.raw".into(),
                format: "raw".into(),
                read_only: false,
            }],
            user_net: false,
            dir: "/vm".into(),
        }
    }

    #[test]
    fn what_firecracker_cannot_do_is_refused_with_the_reason() {
        assert!(check(&spec(), None).is_ok());
        let e = check(
            &VmSpec {
                accel: Accel::Tcg,
                ..spec()
            },
            None,
        )
        .unwrap_err();
        assert!(e.to_string().contains("KVM only"), "{e}");
        let e = check(
            &VmSpec {
                machine: Machine::Q35,
                ..spec()
            },
            None,
        )
        .unwrap_err();
        assert!(e.to_string().contains("one machine"), "{e}");
        let mut q = spec();
        q.disks[0].format = "qcow2".into();
        let e = check(&q, None).unwrap_err();
        assert!(e.to_string().contains("raw disk images only"), "{e}");
        let e = check(
            &VmSpec {
                vcpus: 33,
                ..spec()
            },
            None,
        )
        .unwrap_err();
        assert!(e.to_string().contains("1 to 32"), "{e}");
        let net = VmSpec {
            user_net: true,
            ..spec()
        };
        let e = check(&net, None).unwrap_err();
        assert!(e.to_string().contains("tap"), "{e}");
        assert!(check(&net, Some("tap0")).is_ok());
    }
}
