//! A fake Firecracker API, written from `src/firecracker/swagger/firecracker.yaml`
//! (firecracker-microvm/firecracker @ 81b38b9d) and the state rules of
//! `src/vmm/src/rpc_interface.rs` (`PrebootApiController::handle_preboot_request`: the
//! calls refused before boot with `OperationNotSupportedPreBoot`;
//! `RuntimeApiController::handle_request`: those refused after with
//! `OperationNotSupportedPostBoot`), answering errors as `#/definitions/Error`
//! (`{"fault_message": ...}`, status 400) like `src/firecracker/src/api_server`.
//!
//! It checks each body's required fields, enums, types and (Firecracker denies unknown
//! fields) its property names; it opens the files a real Firecracker would open (kernel,
//! initrd, drives, snapshot files) so a wrong path fails; snapshots are created only when
//! Paused, and loaded only on a fresh process. Its snapshot files are its own JSON, read
//! back by another fake's `/snapshot/load`.

use crate::http::{Handler, Req, Resp, schema};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

const POST_BOOT: &str = "The requested operation is not supported after starting the microVM.";
const PRE_BOOT: &str = "The requested operation is not supported before starting the microVM.";

/// The microVM's state (`InstanceInfo.state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    NotStarted,
    Running,
    Paused,
}

/// What the fake holds.
#[derive(Debug)]
pub(crate) struct Fc {
    pub(crate) state: State,
    /// Whether anything boot-specific was configured (a load is then refused).
    pub(crate) configured: bool,
    pub(crate) machine: Option<Value>,
    pub(crate) boot_source: Option<Value>,
    pub(crate) drives: BTreeMap<String, Value>,
    pub(crate) vsock: Option<Value>,
    pub(crate) net: BTreeMap<String, Value>,
    /// Every call, `METHOD path`, in order.
    pub(crate) calls: Vec<String>,
}

/// The fake; clone it to look inside while it serves.
#[derive(Debug, Clone)]
pub(crate) struct FakeFirecracker(pub(crate) Arc<Mutex<Fc>>);

fn fault(msg: impl Into<String>) -> Resp {
    (
        400,
        json!({ "fault_message": msg.into() })
            .to_string()
            .into_bytes(),
    )
}

fn deser(e: String) -> Resp {
    // parsed_request.rs: `An error occurred when deserializing the json body of a request: {0}.`
    fault(format!(
        "An error occurred when deserializing the json body of a request: {e}."
    ))
}

/// Serves hybrid vsock on `uds_path` as `docs/vsock.md` describes: `CONNECT <port>\n` to a
/// port something listens on in the "guest" (here: only `AGENT_VSOCK_PORT`, an echo) is
/// answered `OK <host-side port>\n`; any other port gets the connection closed.
fn serve_vsock(uds_path: &str) {
    let _ = std::fs::remove_file(uds_path);
    let Ok(listener) = tokio::net::UnixListener::bind(uds_path) else {
        return;
    };
    tokio::spawn(async move {
        use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut s = tokio::io::BufReader::new(stream);
                let mut line = String::new();
                if s.read_line(&mut line).await.is_err() {
                    return;
                }
                let port = line
                    .trim()
                    .strip_prefix("CONNECT ")
                    .and_then(|p| p.parse::<u32>().ok());
                if port != Some(flotilla_vmm::AGENT_VSOCK_PORT) {
                    return;
                }
                if s.get_mut().write_all(b"OK 1073741824\n").await.is_err() {
                    return;
                }
                let (mut rd, mut wr) = tokio::io::split(s);
                let _ = tokio::io::copy(&mut rd, &mut wr).await;
            });
        }
    });
}

fn exists(path: &str) -> bool {
    std::path::Path::new(path).exists()
}

impl FakeFirecracker {
    pub(crate) fn new() -> FakeFirecracker {
        FakeFirecracker(Arc::new(Mutex::new(Fc {
            state: State::NotStarted,
            configured: false,
            machine: None,
            boot_source: None,
            drives: BTreeMap::new(),
            vsock: None,
            net: BTreeMap::new(),
            calls: Vec::new(),
        })))
    }

    pub(crate) fn handler(&self) -> Handler {
        let me = self.clone();
        Arc::new(move |req| me.handle(req))
    }

    pub(crate) fn state(&self) -> State {
        self.0.lock().unwrap().state
    }

    fn handle(&self, req: Req) -> Resp {
        let mut fc = self.0.lock().unwrap();
        fc.calls.push(format!("{} {}", req.method, req.path));
        let booted = fc.state != State::NotStarted;
        let body = req.json();
        let needs_body = |b: &Option<Value>| -> Result<Value, Resp> {
            b.clone()
                .ok_or_else(|| deser("EOF while parsing a value at line 1 column 0".into()))
        };
        macro_rules! body {
            () => {
                match needs_body(&body) {
                    Ok(b) => b,
                    Err(r) => return r,
                }
            };
        }
        macro_rules! check {
            ($e:expr) => {
                if let Err(e) = $e {
                    return deser(e);
                }
            };
        }
        let segs: Vec<&str> = req.path.trim_start_matches('/').split('/').collect();
        match (req.method.as_str(), segs.as_slice()) {
            ("GET", [""]) => {
                let state = match fc.state {
                    State::NotStarted => "Not started",
                    State::Running => "Running",
                    State::Paused => "Paused",
                };
                (200, json!({"app_name": "Firecracker", "id": "anonymous-instance", "state": state, "vmm_version": "1.17.0-dev"}).to_string().into_bytes())
            }
            // MachineConfiguration: required mem_size_mib, vcpu_count (1..=32).
            ("PUT", ["machine-config"]) => {
                let b = body!();
                check!(schema::object(
                    &b,
                    &["mem_size_mib", "vcpu_count"],
                    &[
                        "cpu_template",
                        "smt",
                        "mem_size_mib",
                        "track_dirty_pages",
                        "vcpu_count",
                        "huge_pages"
                    ]
                ));
                check!(schema::typed(&b, "mem_size_mib", "integer"));
                check!(schema::typed(&b, "vcpu_count", "integer"));
                check!(schema::one_of(
                    &b,
                    "huge_pages",
                    &["None", "Transparent", "2M"]
                ));
                if booted {
                    return fault(POST_BOOT);
                }
                if let Err(e) = schema::range(&b, "vcpu_count", 1, 32) {
                    return fault(format!("Machine config error: {e}"));
                }
                fc.configured = true;
                fc.machine = Some(b);
                (204, Vec::new())
            }
            // BootSource: required kernel_image_path; the kernel and initrd are opened.
            ("PUT", ["boot-source"]) => {
                let b = body!();
                check!(schema::object(
                    &b,
                    &["kernel_image_path"],
                    &["boot_args", "initrd_path", "kernel_image_path"]
                ));
                if booted {
                    return fault(POST_BOOT);
                }
                for key in ["kernel_image_path", "initrd_path"] {
                    if let Some(p) = b.get(key).and_then(Value::as_str)
                        && !exists(p)
                    {
                        return fault(format!(
                            "Boot source error: Cannot open {key} {p}: No such file or directory (os error 2)"
                        ));
                    }
                }
                fc.configured = true;
                fc.boot_source = Some(b);
                (204, Vec::new())
            }
            ("PUT", ["serial"]) => {
                let b = body!();
                check!(schema::object(
                    &b,
                    &[],
                    &["serial_out_path", "rate_limiter"]
                ));
                if booted {
                    return fault(POST_BOOT);
                }
                fc.configured = true;
                (204, Vec::new())
            }
            // Drive: required drive_id, is_root_device; path_on_host and is_read_only for
            // virtio-block; the id in the path must be the body's.
            ("PUT", ["drives", id]) => {
                let b = body!();
                check!(schema::object(
                    &b,
                    &["drive_id", "is_root_device"],
                    &[
                        "drive_id",
                        "partuuid",
                        "is_root_device",
                        "cache_type",
                        "is_read_only",
                        "path_on_host",
                        "rate_limiter",
                        "io_engine",
                        "socket"
                    ]
                ));
                check!(schema::typed(&b, "is_root_device", "boolean"));
                check!(schema::typed(&b, "is_read_only", "boolean"));
                check!(schema::one_of(&b, "cache_type", &["Unsafe", "Writeback"]));
                check!(schema::one_of(&b, "io_engine", &["Sync", "Async"]));
                if b["drive_id"].as_str() != Some(id) {
                    return fault("The id from the path does not match the id from the body!");
                }
                if booted {
                    // Post-boot a PUT is a hotplug, which needs PCI; flotilla never asks.
                    return fault(POST_BOOT);
                }
                if b.get("socket").is_none() {
                    check!(schema::object(&b, &["path_on_host", "is_read_only"], &[]));
                    let p = b["path_on_host"].as_str().unwrap_or_default();
                    if !exists(p) {
                        return fault(format!(
                            "Drive config error: Unable to create the virtio block device: Virtio backend error: Error manipulating the backing file: No such file or directory (os error 2) {p}"
                        ));
                    }
                }
                fc.configured = true;
                fc.drives.insert(id.to_string(), b);
                (204, Vec::new())
            }
            // PartialDrive (post-boot): required drive_id; moves the drive to another file.
            ("PATCH", ["drives", id]) => {
                let b = body!();
                check!(schema::object(
                    &b,
                    &["drive_id"],
                    &["drive_id", "path_on_host", "rate_limiter"]
                ));
                if !booted {
                    return fault(PRE_BOOT);
                }
                if b["drive_id"].as_str() != Some(id) {
                    return fault("The id from the path does not match the id from the body!");
                }
                let Some(d) = fc.drives.get_mut(*id) else {
                    return fault(format!("Drive config error: Unable to find the drive {id}"));
                };
                if let Some(p) = b.get("path_on_host").and_then(Value::as_str) {
                    if !exists(p) {
                        return fault(format!("Drive config error: No such file {p}"));
                    }
                    d["path_on_host"] = json!(p);
                }
                (204, Vec::new())
            }
            // Vsock: required guest_cid (>= 3), uds_path.
            ("PUT", ["vsock"]) => {
                let b = body!();
                check!(schema::object(
                    &b,
                    &["guest_cid", "uds_path"],
                    &["guest_cid", "uds_path", "vsock_id"]
                ));
                check!(schema::typed(&b, "guest_cid", "integer"));
                if booted {
                    return fault(POST_BOOT);
                }
                if let Err(e) = schema::range(&b, "guest_cid", 3, i64::from(u32::MAX)) {
                    return fault(format!("Vsock config error: {e}"));
                }
                fc.configured = true;
                fc.vsock = Some(b);
                (204, Vec::new())
            }
            // NetworkInterface: required host_dev_name, iface_id.
            ("PUT", ["network-interfaces", id]) => {
                let b = body!();
                check!(schema::object(
                    &b,
                    &["host_dev_name", "iface_id"],
                    &[
                        "guest_mac",
                        "host_dev_name",
                        "iface_id",
                        "mtu",
                        "rx_rate_limiter",
                        "tx_rate_limiter"
                    ]
                ));
                if b["iface_id"].as_str() != Some(id) {
                    return fault("The id from the path does not match the id from the body!");
                }
                if booted {
                    return fault(POST_BOOT);
                }
                fc.configured = true;
                fc.net.insert(id.to_string(), b);
                (204, Vec::new())
            }
            // InstanceActionInfo: required action_type (enum).
            ("PUT", ["actions"]) => {
                let b = body!();
                check!(schema::object(&b, &["action_type"], &["action_type"]));
                check!(schema::one_of(
                    &b,
                    "action_type",
                    &["FlushMetrics", "InstanceStart", "SendCtrlAltDel"]
                ));
                match b["action_type"].as_str() {
                    Some("InstanceStart") => {
                        if booted {
                            return fault(POST_BOOT);
                        }
                        if fc.boot_source.is_none() {
                            return fault(
                                "Start microvm error: Cannot start microvm without kernel configuration.",
                            );
                        }
                        fc.state = State::Running;
                        if let Some(p) = fc.vsock.as_ref().and_then(|v| v["uds_path"].as_str()) {
                            serve_vsock(p);
                        }
                        (204, Vec::new())
                    }
                    _ if !booted => fault(PRE_BOOT),
                    _ => (204, Vec::new()),
                }
            }
            // Vm: required state (Paused | Resumed); post-boot only.
            ("PATCH", ["vm"]) => {
                let b = body!();
                check!(schema::object(&b, &["state"], &["state"]));
                check!(schema::one_of(&b, "state", &["Paused", "Resumed"]));
                if !booted {
                    return fault(PRE_BOOT);
                }
                fc.state = if b["state"] == "Paused" {
                    State::Paused
                } else {
                    State::Running
                };
                (204, Vec::new())
            }
            // SnapshotCreateParams: required mem_file_path, snapshot_path; post-boot, Paused.
            ("PUT", ["snapshot", "create"]) => {
                let b = body!();
                check!(schema::object(
                    &b,
                    &["mem_file_path", "snapshot_path"],
                    &["mem_file_path", "snapshot_path", "snapshot_type"]
                ));
                check!(schema::one_of(&b, "snapshot_type", &["Full", "Diff"]));
                if !booted {
                    return fault(PRE_BOOT);
                }
                if fc.state != State::Paused {
                    return fault(
                        "Create snapshot error: Cannot save the microVM state: the microVM must be Paused.",
                    );
                }
                let state = json!({
                    "machine": fc.machine, "drives": fc.drives, "vsock": fc.vsock, "net": fc.net,
                });
                let mem = vec![0u8; 4096];
                let (sp, mp) = (
                    b["snapshot_path"].as_str().unwrap_or_default(),
                    b["mem_file_path"].as_str().unwrap_or_default(),
                );
                if let Err(e) =
                    std::fs::write(sp, state.to_string()).and_then(|()| std::fs::write(mp, mem))
                {
                    return fault(format!("Create snapshot error: {e}"));
                }
                (204, Vec::new())
            }
            // SnapshotLoadParams: required snapshot_path, exactly one of mem_file_path and
            // mem_backend; only on a fresh process; the VM arrives Paused unless resume_vm.
            ("PUT", ["snapshot", "load"]) => {
                let b = body!();
                check!(schema::object(
                    &b,
                    &["snapshot_path"],
                    &[
                        "enable_diff_snapshots",
                        "track_dirty_pages",
                        "mem_file_path",
                        "mem_backend",
                        "snapshot_path",
                        "resume_vm",
                        "network_overrides",
                        "vsock_override",
                        "clock_realtime",
                        "huge_pages"
                    ]
                ));
                if booted {
                    return fault(POST_BOOT);
                }
                if fc.configured {
                    return fault(
                        "Loading a microVM snapshot not allowed after configuring boot-specific resources.",
                    );
                }
                let mem = match (b.get("mem_file_path"), b.get("mem_backend")) {
                    (Some(p), None) => p.as_str().unwrap_or_default().to_string(),
                    (None, Some(m)) => {
                        check!(schema::object(
                            m,
                            &["backend_type", "backend_path"],
                            &["backend_type", "backend_path"]
                        ));
                        check!(schema::one_of(m, "backend_type", &["File", "Uffd"]));
                        m["backend_path"].as_str().unwrap_or_default().to_string()
                    }
                    _ => {
                        return fault(
                            "Load snapshot error: exactly one of mem_file_path and mem_backend must be given",
                        );
                    }
                };
                if let Some(o) = b.get("vsock_override") {
                    check!(schema::object(o, &["uds_path"], &["uds_path"]));
                }
                let Ok(state) = std::fs::read(b["snapshot_path"].as_str().unwrap_or_default())
                else {
                    return fault(
                        "Load snapshot error: Cannot open the snapshot file: No such file or directory (os error 2)",
                    );
                };
                if !exists(&mem) {
                    return fault(
                        "Load snapshot error: Cannot open the memory file: No such file or directory (os error 2)",
                    );
                }
                let Ok(state) = serde_json::from_slice::<Value>(&state) else {
                    return fault("Load snapshot error: Cannot deserialize the microVM state");
                };
                let drives: BTreeMap<String, Value> =
                    serde_json::from_value(state["drives"].clone()).unwrap_or_default();
                // The block devices are reopened at the recorded paths.
                for d in drives.values() {
                    let p = d["path_on_host"].as_str().unwrap_or_default();
                    if !exists(p) {
                        return fault(format!(
                            "Load snapshot error: Failed to restore the microVM: Cannot restore devices: Block: No such file or directory (os error 2) {p}"
                        ));
                    }
                }
                fc.drives = drives;
                fc.machine = Some(state["machine"].clone());
                let mut vsock = state["vsock"].clone();
                if let Some(p) = b.get("vsock_override").and_then(|o| o.get("uds_path")) {
                    vsock["uds_path"] = p.clone();
                }
                if let Some(p) = vsock["uds_path"].as_str() {
                    serve_vsock(p);
                }
                fc.vsock = Some(vsock);
                fc.state = if b.get("resume_vm") == Some(&json!(true)) {
                    State::Running
                } else {
                    State::Paused
                };
                (204, Vec::new())
            }
            _ => fault("Invalid request method and/or path"),
        }
    }
}
