//! QEMU: started daemonized on the instance, driven over QMP.
//!
//! - **Boot**: [`cmdline::args`]; QEMU daemonizes once its sockets exist, so the QMP
//!   connection follows at once.
//! - **Snapshot** (`stop`, then `migrate` to `exec:cat > state.bin`): each writable disk's
//!   current layer is frozen by a hard link into the snapshot; a VM that resumes continues
//!   in a new qcow2 layer over it (`blockdev-add` + `blockdev-snapshot`), so neither the VM
//!   nor later restores ever write to a snapshot's files.
//! - **Restore**: the same command line with `-incoming defer`, `migrate-incoming` from the
//!   state file, then `cont` (an incoming VM arrives paused).

pub mod cmdline;

use crate::disk;
use crate::process::kill_pid;
use crate::qmp::Qmp;
use crate::vmm::{AfterSnapshot, AgentEndpoint, SnapshotFiles, SnapshotReport, Vm, Vmm};
use crate::{VmSpec, VmmError, host};
use async_trait::async_trait;
use flotilla_connect::{Connector, ForwardTarget};
use flotilla_shell::quote;
use serde_json::json;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The QEMU backend.
#[derive(Debug, Clone)]
pub struct Qemu {
    /// The emulator (`qemu-system-x86_64`).
    pub binary: String,
    /// How long QEMU may take to start and to answer.
    pub timeout: Duration,
}

impl Default for Qemu {
    fn default() -> Self {
        Qemu {
            binary: "qemu-system-x86_64".into(),
            timeout: Duration::from_secs(30),
        }
    }
}

/// One writable disk's current top layer.
#[derive(Debug, Clone)]
struct Top {
    node: String,
    path: String,
}

/// A VM run by QEMU.
pub struct QemuVm {
    host: Arc<dyn Connector>,
    spec: VmSpec,
    pid: u32,
    qmp: Qmp,
    tops: Mutex<Vec<Option<Top>>>,
    generation: std::sync::atomic::AtomicU32,
    timeout: Duration,
}

impl std::fmt::Debug for QemuVm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QemuVm")
            .field("name", &self.spec.name)
            .field("pid", &self.pid)
            .finish_non_exhaustive()
    }
}

impl Qemu {
    /// Starts QEMU for `spec` and connects to its QMP socket.
    async fn start(
        &self,
        host: Arc<dyn Connector>,
        spec: VmSpec,
        incoming: bool,
    ) -> Result<QemuVm, VmmError> {
        let mut line = format!(
            "mkdir -p {} && exec {}",
            quote(&spec.dir),
            quote(&self.binary)
        );
        for a in cmdline::args(&spec, incoming) {
            line.push(' ');
            line.push_str(&quote(&a));
        }
        line.push_str(&format!(" >{} 2>&1", quote(&spec.vmm_log())));
        if let Err(e) = host::run(&*host, "starting QEMU", &line).await {
            let log = host::read(&*host, &spec.vmm_log())
                .await
                .unwrap_or_default();
            let log = String::from_utf8_lossy(&log).trim().to_string();
            return Err(match e {
                VmmError::Command { what, status, .. } => VmmError::Command {
                    what,
                    status,
                    stderr: log,
                },
                other => other,
            });
        }
        let pid: u32 = String::from_utf8_lossy(&host::read(&*host, &spec.pid_file()).await?)
            .trim()
            .parse()
            .map_err(|_| VmmError::Protocol("QEMU wrote no pid".into(), "qemu"))?;
        let stream = host
            .forward(&ForwardTarget::Unix(spec.api_socket()))
            .await
            .map_err(|e| VmmError::connect("connecting to QEMU's QMP socket", e))?;
        let qmp = match Qmp::connect(stream, self.timeout).await {
            Ok(q) => q,
            Err(e) => {
                let _ = kill_pid(&*host, pid, &spec.dir).await;
                return Err(e);
            }
        };
        let tops = spec
            .disks
            .iter()
            .enumerate()
            .map(|(i, d)| {
                (!d.read_only).then(|| Top {
                    node: cmdline::disk_node(i),
                    path: d.path.clone(),
                })
            })
            .collect();
        Ok(QemuVm {
            host,
            spec,
            pid,
            qmp,
            tops: Mutex::new(tops),
            generation: std::sync::atomic::AtomicU32::new(0),
            timeout: self.timeout,
        })
    }
}

#[async_trait]
impl Vmm for Qemu {
    fn name(&self) -> &'static str {
        "qemu"
    }

    async fn boot(&self, host: Arc<dyn Connector>, spec: VmSpec) -> Result<Box<dyn Vm>, VmmError> {
        Ok(Box::new(self.start(host, spec, false).await?))
    }

    async fn restore(
        &self,
        host: Arc<dyn Connector>,
        spec: VmSpec,
        from: &SnapshotFiles,
    ) -> Result<Box<dyn Vm>, VmmError> {
        let vm = self.start(host, spec, true).await?;
        let restored = async {
            vm.qmp
                .execute(
                    "migrate-incoming",
                    Some(json!({ "uri": format!("exec:cat {}", quote(&from.state())) })),
                )
                .await?;
            vm.qmp.wait_migration(self.timeout).await?;
            vm.qmp.execute("cont", None).await.map(drop)
        }
        .await;
        if let Err(e) = restored {
            let _ = vm.kill().await;
            return Err(e);
        }
        Ok(Box::new(vm))
    }

    async fn kill_dir(&self, host: &dyn Connector, dir: &str) -> Result<bool, VmmError> {
        crate::process::kill_dir(host, dir).await
    }
}

#[async_trait]
impl Vm for QemuVm {
    fn spec(&self) -> &VmSpec {
        &self.spec
    }

    fn pid(&self) -> u32 {
        self.pid
    }

    fn agent(&self) -> AgentEndpoint {
        AgentEndpoint {
            socket: self.spec.agent_socket(),
            connect_line: None,
        }
    }

    async fn pause(&self) -> Result<(), VmmError> {
        self.qmp.execute("stop", None).await.map(drop)
    }

    async fn resume(&self) -> Result<(), VmmError> {
        self.qmp.execute("cont", None).await.map(drop)
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
        self.qmp.execute("stop", None).await?;
        let tops = self.tops.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let generation = self
            .generation
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst)
            + 1;
        let mut frozen = Vec::new();
        let mut new_tops = tops.clone();
        for (i, top) in tops.iter().enumerate() {
            let Some(top) = top else { continue };
            let dest = to.disk(i);
            // A second name for the layer as it is now: the snapshot keeps it when the VM's
            // directory goes. Never written again: the VM moves on to a new layer, or stops.
            host::run(
                host,
                "freezing a disk layer",
                &format!("ln -f {} {}", quote(&top.path), quote(&dest)),
            )
            .await?;
            frozen.push(dest.clone());
            if after == AfterSnapshot::Resume {
                let size = disk::virtual_size(host, &top.path).await?;
                let path = format!("{}/disk-{i}.{generation}.qcow2", self.spec.dir);
                disk::overlay(host, &path, &dest, "qcow2", Some(size)).await?;
                let node = format!("{}-s{generation}", cmdline::disk_node(i));
                self.qmp
                    .execute(
                        "blockdev-add",
                        Some(json!({
                            "driver": "qcow2",
                            "node-name": node,
                            "file": { "driver": "file", "filename": path },
                            "backing": null,
                        })),
                    )
                    .await?;
                self.qmp
                    .execute(
                        "blockdev-snapshot",
                        Some(json!({ "node": top.node, "overlay": node })),
                    )
                    .await?;
                new_tops[i] = Some(Top { node, path });
            }
        }
        *self.tops.lock().unwrap_or_else(|e| e.into_inner()) = new_tops;
        self.qmp
            .execute(
                "migrate",
                Some(json!({ "uri": format!("exec:cat > {}", quote(&to.state())) })),
            )
            .await?;
        self.qmp.wait_migration(self.timeout).await?;
        let took = started.elapsed();
        if after == AfterSnapshot::Resume {
            self.qmp.execute("cont", None).await?;
        }
        let state_bytes = disk::allocated(host, &[to.state()]).await?;
        let disk_bytes = disk::allocated(host, &frozen).await?;
        Ok(SnapshotReport {
            state_bytes,
            disk_bytes,
            took,
        })
    }

    async fn kill(&self) -> Result<(), VmmError> {
        kill_pid(&*self.host, self.pid, &self.spec.dir)
            .await
            .map(drop)
    }
}
