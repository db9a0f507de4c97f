//! Cloud Hypervisor, driven over its REST API on a unix socket (`--api-socket`), written
//! from its OpenAPI file `vmm/src/api/openapi/cloud-hypervisor.yaml` ([`api`]).
//!
//! **Tested only against a fake built from that file** (this crate's `tests/rest_vmms`),
//! never against a real Cloud Hypervisor: it needs KVM (or MSHV), which the machines this
//! was written on lack for guests.
//!
//! - **Boot**: start `cloud-hypervisor --api-socket path=<dir>/api.sock`, `PUT
//!   /api/v1/vm.create` with a `VmConfig` (kernel, initramfs, command line, vCPUs, memory,
//!   disks, the serial console to `console.log`, hybrid vsock for the agent), then
//!   `vm.boot`.
//! - **Pause/resume**: `vm.pause`, `vm.resume`.
//! - **Snapshot**: pause (unless `vm.info` says it is), copy each writable disk (Cloud
//!   Hypervisor cannot move a running disk to a new layer), `vm.snapshot` to
//!   `file://<snapshot>/cloud-hypervisor`.
//! - **Restore**: the snapshot's `config.json` records the disk paths and sockets of the VM
//!   it was taken of; the restored VM gets its own copy of the snapshot directory (state and
//!   memory hard-linked, `config.json` rewritten to its own disks, vsock socket and console),
//!   a fresh process, `vm.restore` from it, then `vm.resume`.
//! - **Kill**: `vmm.shutdown`, then the process is killed if it still runs.
//!
//! From a [`VmSpec`], Cloud Hypervisor refuses TCG ([`check`]: it is KVM or MSHV only) and
//! user-mode networking (it attaches tap devices: set [`CloudHypervisor::tap`]); both
//! `microvm` and `q35` map onto its one machine (a direct kernel boot here, no firmware).
//! Disks may be raw or qcow2 (with backing files).

pub mod api;

use crate::process;
use crate::rest::RestClient;
use crate::vmm::{AfterSnapshot, AgentEndpoint, SnapshotFiles, SnapshotReport, Vm, Vmm};
use crate::{Accel, VmSpec, VmmError, disk, host};
use api::*;
use async_trait::async_trait;
use flotilla_connect::Connector;
use flotilla_shell::quote;
use serde::Serialize;
use serde_json::Value;
use std::sync::Arc;
use std::time::{Duration, Instant};

const NAME: &str = "cloud-hypervisor";

/// The guest's vsock context id.
pub const GUEST_CID: u64 = 3;

/// The Cloud Hypervisor backend.
#[derive(Debug, Clone)]
pub struct CloudHypervisor {
    /// The `cloud-hypervisor` binary on the instance.
    pub binary: String,
    /// How long it may take to start and to answer a call.
    pub timeout: Duration,
    /// The tap device a VM that asks for networking ([`VmSpec::user_net`]) is given;
    /// `{name}` is replaced by the VM's name. `None`: such VMs are refused.
    pub tap: Option<String>,
}

impl Default for CloudHypervisor {
    fn default() -> Self {
        CloudHypervisor {
            binary: "cloud-hypervisor".into(),
            timeout: Duration::from_secs(30),
            tap: None,
        }
    }
}

/// Whether Cloud Hypervisor can make `spec`'s VM; the error says what it lacks.
pub fn check(spec: &VmSpec, tap: Option<&str>) -> Result<(), VmmError> {
    if spec.accel != Accel::Kvm {
        return Err(VmmError::Unsupported(format!(
            "{}: Cloud Hypervisor runs guests with KVM (or MSHV) only; it has no emulation (TCG): use the qemu backend",
            spec.name
        )));
    }
    if spec.vcpus == 0 {
        return Err(VmmError::Unsupported(format!(
            "{}: a VM needs at least one vCPU",
            spec.name
        )));
    }
    for d in &spec.disks {
        image_type(&d.format).ok_or_else(|| {
            VmmError::Unsupported(format!(
                "{}: Cloud Hypervisor reads raw and qcow2 images here, and {} is {}",
                spec.name, d.path, d.format
            ))
        })?;
    }
    if spec.user_net && tap.is_none() {
        return Err(VmmError::Unsupported(format!(
            "{}: Cloud Hypervisor has no user-mode networking; it attaches a tap device (set the backend's tap)",
            spec.name
        )));
    }
    Ok(())
}

fn image_type(format: &str) -> Option<ImageType> {
    match format.to_ascii_lowercase().as_str() {
        "raw" => Some(ImageType::Raw),
        "qcow2" => Some(ImageType::Qcow2),
        _ => None,
    }
}

/// The `VmConfig` of `spec`.
pub fn vm_config(spec: &VmSpec, tap: Option<String>) -> VmConfig {
    VmConfig {
        cpus: CpusConfig {
            boot_vcpus: spec.vcpus,
            max_vcpus: spec.vcpus,
        },
        memory: MemoryConfig {
            size: u64::from(spec.memory_mib) << 20,
        },
        payload: PayloadConfig {
            kernel: spec.kernel.clone(),
            cmdline: spec.cmdline.clone(),
            initramfs: (!spec.initrd.is_empty()).then(|| spec.initrd.clone()),
        },
        disks: spec
            .disks
            .iter()
            .enumerate()
            .map(|(i, d)| {
                let image_type = image_type(&d.format).unwrap_or(ImageType::Unknown);
                DiskConfig {
                    path: d.path.clone(),
                    readonly: d.read_only,
                    image_type,
                    backing_files: image_type == ImageType::Qcow2,
                    id: format!("disk{i}"),
                }
            })
            .collect(),
        net: match (spec.user_net, tap) {
            (true, Some(tap)) => vec![NetConfig { tap }],
            _ => Vec::new(),
        },
        serial: ConsoleConfig {
            mode: ConsoleMode::File,
            file: Some(spec.console_log()),
        },
        console: ConsoleConfig {
            mode: ConsoleMode::Off,
            file: None,
        },
        vsock: VsockConfig {
            cid: GUEST_CID,
            socket: spec.agent_socket(),
        },
    }
}

/// Where Cloud Hypervisor's own snapshot files go in a snapshot.
fn snapshot_dir(to: &SnapshotFiles) -> String {
    format!("{}/cloud-hypervisor", to.dir)
}

/// Writable disk `i` of a snapshot, frozen (a copy, in the disk's own format).
pub fn frozen_disk(to: &SnapshotFiles, i: usize, format: &str) -> String {
    format!("{}/disk-{i}.{}", to.dir, format.to_ascii_lowercase())
}

/// Rewrites a snapshot's `config.json` (`VmConfig`) for a VM restored as `spec`: its own
/// disks, vsock socket and console; everything else kept as Cloud Hypervisor wrote it.
pub fn relocate_config(config: &mut Value, spec: &VmSpec) -> Result<(), VmmError> {
    let disks = config
        .get_mut("disks")
        .and_then(Value::as_array_mut)
        .map(|d| d.len())
        .unwrap_or(0);
    if disks != spec.disks.len() {
        return Err(VmmError::Unsupported(format!(
            "{}: the snapshot has {disks} disks, the VM to restore {}",
            spec.name,
            spec.disks.len()
        )));
    }
    if let Some(list) = config.get_mut("disks").and_then(Value::as_array_mut) {
        for (d, s) in list.iter_mut().zip(&spec.disks) {
            d["path"] = Value::String(s.path.clone());
        }
    }
    if let Some(v) = config.get_mut("vsock").filter(|v| v.is_object()) {
        v["socket"] = Value::String(spec.agent_socket());
    }
    if let Some(s) = config.get_mut("serial").filter(|v| v.is_object())
        && s.get("mode").and_then(Value::as_str) == Some("File")
    {
        s["file"] = Value::String(spec.console_log());
    }
    Ok(())
}

/// Cloud Hypervisor's error body: a JSON array of messages, outermost first
/// (`vmm/src/api/http/mod.rs`, `error_response`); anything else is shown as text.
fn error_message(body: &[u8]) -> String {
    match serde_json::from_slice::<Vec<String>>(body) {
        Ok(chain) if !chain.is_empty() => chain.join(": "),
        _ => String::from_utf8_lossy(body).trim().to_string(),
    }
}

/// A client of one Cloud Hypervisor process's API.
#[derive(Debug, Clone)]
struct Client(RestClient);

impl Client {
    async fn call<T: Serialize>(&self, op: &str, body: Option<&T>) -> Result<Vec<u8>, VmmError> {
        let path = format!("/api/v1/{op}");
        let method = if op == "vm.info" { "GET" } else { "PUT" };
        self.0.call(method, &path, body).await
    }

    async fn put<T: Serialize>(&self, op: &str, body: &T) -> Result<(), VmmError> {
        self.call(op, Some(body)).await.map(drop)
    }

    async fn state(&self) -> Result<String, VmmError> {
        let body = self.call::<()>("vm.info", None).await?;
        let info: VmInfo = serde_json::from_slice(&body)
            .map_err(|e| VmmError::Protocol(format!("vm.info: {e}"), NAME))?;
        Ok(info.state)
    }
}

/// A VM run by Cloud Hypervisor.
pub struct CloudHypervisorVm {
    host: Arc<dyn Connector>,
    spec: VmSpec,
    pid: u32,
    api: Client,
}

impl std::fmt::Debug for CloudHypervisorVm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CloudHypervisorVm")
            .field("name", &self.spec.name)
            .field("pid", &self.pid)
            .finish_non_exhaustive()
    }
}

impl CloudHypervisor {
    fn tap_for(&self, spec: &VmSpec) -> Option<String> {
        self.tap.as_ref().map(|t| t.replace("{name}", &spec.name))
    }

    async fn start(
        &self,
        host: &Arc<dyn Connector>,
        spec: &VmSpec,
    ) -> Result<(u32, Client), VmmError> {
        let args = vec![
            "--api-socket".to_string(),
            format!("path={}", spec.api_socket()),
        ];
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

    fn vm(&self, host: Arc<dyn Connector>, spec: VmSpec, pid: u32, api: Client) -> Box<dyn Vm> {
        Box::new(CloudHypervisorVm {
            host,
            spec,
            pid,
            api,
        })
    }
}

#[async_trait]
impl Vmm for CloudHypervisor {
    fn name(&self) -> &'static str {
        NAME
    }

    async fn boot(&self, host: Arc<dyn Connector>, spec: VmSpec) -> Result<Box<dyn Vm>, VmmError> {
        check(&spec, self.tap.as_deref())?;
        let (pid, api) = self.start(&host, &spec).await?;
        let booted = async {
            api.put("vm.create", &vm_config(&spec, self.tap_for(&spec)))
                .await?;
            api.call::<()>("vm.boot", None).await.map(drop)
        }
        .await;
        if let Err(e) = booted {
            let _ = process::kill_pid(&*host, pid, &spec.dir).await;
            return Err(e);
        }
        Ok(self.vm(host, spec, pid, api))
    }

    async fn restore(
        &self,
        host: Arc<dyn Connector>,
        spec: VmSpec,
        from: &SnapshotFiles,
    ) -> Result<Box<dyn Vm>, VmmError> {
        check(&spec, self.tap.as_deref())?;
        let src = snapshot_dir(from);
        let own = format!("{}/restore", spec.dir);
        let raw = host::read(&*host, &format!("{src}/config.json")).await?;
        let mut config: Value = serde_json::from_slice(&raw).map_err(|e| {
            VmmError::Protocol(format!("the snapshot's {src}/config.json: {e}"), NAME)
        })?;
        relocate_config(&mut config, &spec)?;
        // Hard links where the snapshot shares the file system, copies elsewhere: Cloud
        // Hypervisor only reads them.
        host::run(
            &*host,
            "linking the snapshot's state",
            &format!(
                "mkdir -p {own} && for f in {src}/*; do [ \"$(basename \"$f\")\" = config.json ] || ln -f \"$f\" {own}/ 2>/dev/null || cp \"$f\" {own}/; done",
                own = quote(&own),
                src = quote(&src)
            ),
        )
        .await?;
        let json = serde_json::to_vec(&config)
            .map_err(|e| VmmError::Protocol(format!("encoding config.json: {e}"), NAME))?;
        host::write(&*host, &format!("{own}/config.json"), json).await?;
        for (i, d) in spec.disks.iter().enumerate() {
            if !d.read_only {
                host::run(
                    &*host,
                    "copying a snapshot's disk",
                    &format!(
                        "[ -e {to} ] || cp --reflink=auto --sparse=always {from} {to}",
                        from = quote(&frozen_disk(from, i, &d.format)),
                        to = quote(&d.path)
                    ),
                )
                .await?;
            }
        }
        let (pid, api) = self.start(&host, &spec).await?;
        let restored = async {
            api.put(
                "vm.restore",
                &RestoreConfig {
                    source_url: format!("file://{own}"),
                    resume: false,
                },
            )
            .await?;
            api.call::<()>("vm.resume", None).await.map(drop)
        }
        .await;
        if let Err(e) = restored {
            let _ = process::kill_pid(&*host, pid, &spec.dir).await;
            return Err(e);
        }
        Ok(self.vm(host, spec, pid, api))
    }

    async fn kill_dir(&self, host: &dyn Connector, dir: &str) -> Result<bool, VmmError> {
        process::kill_dir(host, dir).await
    }
}

#[async_trait]
impl Vm for CloudHypervisorVm {
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
        self.api.call::<()>("vm.pause", None).await.map(drop)
    }

    async fn resume(&self) -> Result<(), VmmError> {
        self.api.call::<()>("vm.resume", None).await.map(drop)
    }

    async fn snapshot(
        &self,
        to: &SnapshotFiles,
        after: AfterSnapshot,
    ) -> Result<SnapshotReport, VmmError> {
        let started = Instant::now();
        let host = &*self.host;
        let dest = snapshot_dir(to);
        host::run(
            host,
            "making the snapshot directory",
            &format!("mkdir -p {}", quote(&dest)),
        )
        .await?;
        let was_paused = self.api.state().await? == "Paused";
        if !was_paused {
            self.api.call::<()>("vm.pause", None).await?;
        }
        let mut frozen = Vec::new();
        for (i, d) in self.spec.disks.iter().enumerate() {
            if !d.read_only {
                let path = frozen_disk(to, i, &d.format);
                host::run(
                    host,
                    "freezing a disk",
                    &format!(
                        "cp --reflink=auto --sparse=always {} {}",
                        quote(&d.path),
                        quote(&path)
                    ),
                )
                .await?;
                frozen.push(path);
            }
        }
        self.api
            .put(
                "vm.snapshot",
                &VmSnapshotConfig {
                    destination_url: format!("file://{dest}"),
                },
            )
            .await?;
        let took = started.elapsed();
        if after == AfterSnapshot::Resume && !was_paused {
            self.api.call::<()>("vm.resume", None).await?;
        }
        let state = host::run(
            host,
            "listing the snapshot",
            &format!("ls -1 {}", quote(&dest)),
        )
        .await?;
        let files: Vec<String> = state
            .lines()
            .filter(|l| !l.is_empty())
            .map(|l| format!("{dest}/{l}"))
            .collect();
        Ok(SnapshotReport {
            state_bytes: disk::allocated(host, &files).await?,
            disk_bytes: disk::allocated(host, &frozen).await?,
            took,
        })
    }

    async fn kill(&self) -> Result<(), VmmError> {
        // A clean stop first; the process is killed whatever it answers.
        let _ = tokio::time::timeout(
            Duration::from_secs(2),
            self.api.call::<()>("vmm.shutdown", None),
        )
        .await;
        process::kill_pid(&*self.host, self.pid, &self.spec.dir)
            .await
            .map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Disk, Machine};
    use serde_json::json;

    fn spec() -> VmSpec {
        VmSpec {
            name: "t".into(),
            machine: Machine::Q35,
            accel: Accel::Kvm,
            vcpus: 2,
            memory_mib: 256,
            kernel: "/k".into(),
            initrd: String::new(),
            cmdline: "console=ttyS0".into(),
            disks: vec![Disk {
                path: "/vm2/d.qcow2".into(),
                format: "qcow2".into(),
                read_only: false,
            }],
            user_net: false,
            dir: "/vm2".into(),
        }
    }

    #[test]
    fn the_config_follows_the_schema() {
        let v = serde_json::to_value(vm_config(&spec(), None)).unwrap();
        assert_eq!(v["memory"]["size"], json!(256u64 << 20));
        assert_eq!(v["cpus"], json!({"boot_vcpus": 2, "max_vcpus": 2}));
        assert_eq!(v["disks"][0]["image_type"], json!("Qcow2"));
        assert_eq!(v["disks"][0]["backing_files"], json!(true));
        assert!(v["payload"].get("initramfs").is_none(), "{v}");
        assert_eq!(v["vsock"]["socket"], json!("/vm2/agent.sock"));
        assert!(v.get("net").is_none());
    }

    #[test]
    fn tcg_vhd_and_user_networking_are_refused() {
        assert!(check(&spec(), None).is_ok());
        let e = check(
            &VmSpec {
                accel: Accel::Tcg,
                ..spec()
            },
            None,
        )
        .unwrap_err();
        assert!(e.to_string().contains("KVM"), "{e}");
        let mut v = spec();
        v.disks[0].format = "vhdx".into();
        assert!(check(&v, None).is_err());
        let net = VmSpec {
            user_net: true,
            ..spec()
        };
        assert!(check(&net, None).unwrap_err().to_string().contains("tap"));
    }

    #[test]
    fn a_restored_config_points_at_the_new_vms_files() {
        let mut c = json!({
            "payload": {"kernel": "/k"},
            "disks": [{"path": "/vm1/d.qcow2", "readonly": false, "num_queues": 1}],
            "vsock": {"cid": 3, "socket": "/vm1/agent.sock", "iommu": false},
            "serial": {"mode": "File", "file": "/vm1/console.log"},
        });
        relocate_config(&mut c, &spec()).unwrap();
        assert_eq!(c["disks"][0]["path"], json!("/vm2/d.qcow2"));
        assert_eq!(
            c["disks"][0]["num_queues"],
            json!(1),
            "other fields are kept"
        );
        assert_eq!(c["vsock"]["socket"], json!("/vm2/agent.sock"));
        assert_eq!(c["serial"]["file"], json!("/vm2/console.log"));
        let mut two = c.clone();
        two["disks"] = json!([{}, {}]);
        assert!(relocate_config(&mut two, &spec()).is_err());
    }

    #[test]
    fn error_chains_are_joined() {
        assert_eq!(
            error_message(br#"["Error from API","The VM could not be snapshotted"]"#),
            "Error from API: The VM could not be snapshotted"
        );
        assert_eq!(error_message(b"plain"), "plain");
    }
}
