//! One job's VM at the `vm` level: the slot's earlier VM stomped, a fresh one booted from the
//! job's VM image, every stage run in it at the shell level's layout, the VM deleted after.

use super::{VmLevelConfig, vm_image};
use crate::layout::BuildLayout;
use crate::microvm::boot::{BootCache, BootWanted, agent_words, boot_pieces, not_up};
use crate::microvm::cleanup::remove_dir;
use crate::shell::{CleanSlots, ShellEnvironment};
use crate::{IsolateError, IsolatedEnvironment, PrepareRequest};
use async_trait::async_trait;
use flotilla_connect::shell::quote;
use flotilla_connect::{Connector, ForwardTarget};
use flotilla_guest::{Dialer, GuestConnector};
use flotilla_job::script::{ANSI_RESET, ANSI_YELLOW};
use flotilla_job::{EnvError, EnvPaths, Environment, ExecSpec, ExitStatus};
use flotilla_vmm::qemu::Qemu;
use flotilla_vmm::{Accel, Disk, Machine, Vm, VmSpec, Vmm, disk};
use std::sync::{Arc, OnceLock};
use std::time::Instant;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

/// One job's environment at the `vm` level.
pub(crate) struct VmEnvironment {
    connector: Arc<dyn Connector>,
    instance: String,
    slot: usize,
    config: Arc<VmLevelConfig>,
    qemu: Qemu,
    boot_cache: BootCache,
    job_image: Option<String>,
    guest: Arc<GuestConnector>,
    /// The job's stages, as the shell level runs them, in the VM.
    inner: ShellEnvironment,
    vm: OnceLock<Box<dyn Vm>>,
}

impl std::fmt::Debug for VmEnvironment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VmEnvironment")
            .field("instance", &self.instance)
            .field("slot", &self.slot)
            .field("vm", &self.vm.get().map(|v| v.pid()))
            .finish_non_exhaustive()
    }
}

impl VmEnvironment {
    pub(crate) fn new(
        req: &PrepareRequest<'_>,
        layout: BuildLayout,
        config: Arc<VmLevelConfig>,
        qemu: Qemu,
        clean: CleanSlots,
        boot_cache: BootCache,
    ) -> VmEnvironment {
        let dir = config.vm_dir(req.slot);
        // The agent's socket is known before the VM runs: the guest is dialed when first used.
        let socket = format!("{dir}/agent.sock");
        let host = req.connector.clone();
        let dial: Dialer = Arc::new(move || {
            let (host, socket) = (host.clone(), socket.clone());
            Box::pin(async move { host.forward(&ForwardTarget::Unix(socket)).await })
        });
        let guest = Arc::new(GuestConnector::new(
            format!("vm slot {} on {}", req.slot, req.instance_id),
            dial,
        ));
        let in_vm = PrepareRequest {
            job: req.job,
            instance_id: req.instance_id,
            slot: req.slot,
            connector: guest.clone(),
            builds_dir: super::VM_BUILDS_DIR.to_string(),
            custom_build_dir: req.custom_build_dir,
        };
        let inner = ShellEnvironment::unconfined(&in_vm, layout, clean);
        VmEnvironment {
            connector: req.connector.clone(),
            instance: req.instance_id.to_string(),
            slot: req.slot,
            config,
            qemu,
            boot_cache,
            job_image: req
                .job
                .image
                .as_ref()
                .map(|i| i.name.clone())
                .filter(|n| !n.is_empty()),
            guest,
            inner,
            vm: OnceLock::new(),
        }
    }

    /// Stomps the slot's earlier VM, boots the job's; adds lines for the job's log.
    async fn boot(&self, text: &mut String) -> Result<(), EnvError> {
        let host = &*self.connector;
        let started = Instant::now();
        let image = vm_image(
            self.job_image.as_deref(),
            self.config.default_image.as_deref(),
            &self.config.allowed_images,
            &self.config.images_dir(),
        )
        .map_err(EnvError::System)?;
        let dir = self.config.vm_dir(self.slot);
        if self
            .qemu
            .kill_dir(host, &dir)
            .await
            .map_err(|e| EnvError::System(format!("stomping the slot's VM: {e}")))?
        {
            tracing::warn!(instance = %self.instance, slot = self.slot, "stomped the VM an earlier job left in the slot");
            text.push_str(&format!(
                "{ANSI_YELLOW}WARNING: Stomped the VM an earlier job left in slot {}{ANSI_RESET}\n",
                self.slot
            ));
        }
        remove_dir(host, &self.instance, &dir)
            .await
            .map_err(|e| EnvError::System(e.to_string()))?;
        let check = format!(
            "mkdir -p {d} && test -f {i}",
            d = quote(&dir),
            i = quote(&image.path)
        );
        let found = flotilla_vmm::host::run(host, "making the VM's directory", &check).await;
        if found.is_err() {
            return Err(EnvError::System(format!(
                "no VM image {:?} on instance {} (looked for {})",
                image.name, self.instance, image.path
            )));
        }
        let boot_dir = self.config.boot_dir();
        let wanted = BootWanted {
            kernel: self.config.kernel.as_deref(),
            boot_dir: &boot_dir,
            machine: Machine::Q35,
            network: self.config.network,
        };
        let (kernel, initrd) = boot_pieces(host, &self.instance, &wanted, &self.boot_cache).await?;
        let top = format!("{dir}/disk-0.qcow2");
        disk::overlay(host, &top, &image.path, image.format, None)
            .await
            .map_err(|e| EnvError::System(format!("making the VM's disk: {e}")))?;
        let extra = agent_words(&self.config.owner, self.slot, self.config.network);
        let spec = VmSpec {
            name: format!("flotilla-{}-vm-slot-{}", self.config.owner, self.slot),
            machine: Machine::Q35,
            accel: if self.config.kvm {
                Accel::Kvm
            } else {
                Accel::Tcg
            },
            vcpus: self.config.vcpus,
            memory_mib: self.config.memory_mib,
            kernel,
            initrd,
            cmdline: flotilla_vmm::kernel_cmdline(self.config.tsc_khz, &extra),
            disks: vec![Disk {
                path: top,
                format: "qcow2".into(),
                read_only: false,
            }],
            user_net: self.config.network,
            dir: dir.clone(),
        };
        let vm = self
            .qemu
            .boot(self.connector.clone(), spec)
            .await
            .map_err(|e| EnvError::System(format!("starting QEMU: {e}")))?;
        let pid = vm.pid();
        let _ = self.vm.set(vm);
        let info = match self.guest.wait_ready(self.config.boot_timeout).await {
            Ok(info) => info,
            Err(e) => return Err(not_up(host, &dir, "VM", e).await),
        };
        text.push_str(&format!(
            "VM of image {} up in {:.2} s ({} vCPU, {} MiB, {}, pid {pid}): {}\n",
            image.name,
            started.elapsed().as_secs_f64(),
            self.config.vcpus,
            self.config.memory_mib,
            if self.config.kvm { "KVM" } else { "TCG" },
            info.info
        ));
        Ok(())
    }
}

#[async_trait]
impl Environment for VmEnvironment {
    fn paths(&self) -> &EnvPaths {
        self.inner.paths()
    }

    fn disposable(&self) -> bool {
        true
    }

    async fn prepare(
        &self,
        log: &mut (dyn AsyncWrite + Send + Unpin),
        cancel: CancellationToken,
    ) -> Result<(), EnvError> {
        let mut text = format!(
            "Using vm isolation on instance {} (slot {})\n",
            self.instance, self.slot
        );
        let booted = tokio::select! {
            r = self.boot(&mut text) => r,
            () = cancel.cancelled() => Err(EnvError::Canceled),
        };
        log.write_all(text.as_bytes())
            .await
            .map_err(|source| EnvError::Io {
                context: "writing to the job log".into(),
                source,
            })?;
        booted?;
        // The shell level's own preparation, in the VM; its first line names it, which would
        // only confuse the log.
        let mut inner_log = Vec::new();
        self.inner.prepare(&mut inner_log, cancel).await?;
        for line in String::from_utf8_lossy(&inner_log).lines() {
            if line.contains("WARNING") {
                log.write_all(format!("{line}\n").as_bytes())
                    .await
                    .map_err(|source| EnvError::Io {
                        context: "writing to the job log".into(),
                        source,
                    })?;
            }
        }
        Ok(())
    }

    async fn exec(&self, spec: ExecSpec<'_>) -> Result<ExitStatus, EnvError> {
        self.inner.exec(spec).await
    }
}

#[async_trait]
impl IsolatedEnvironment for VmEnvironment {
    async fn cleanup(&self) -> Result<(), IsolateError> {
        self.guest.disconnect().await;
        // Deleted after the job, as GitLab Runner deletes its nesting VM; by the directory,
        // so a VM whose boot was interrupted goes too.
        let dir = self.config.vm_dir(self.slot);
        let killed = self
            .qemu
            .kill_dir(&*self.connector, &dir)
            .await
            .map_err(|e| IsolateError::Cleanup {
                instance: self.instance.clone(),
                message: format!("deleting the job's VM: {e}"),
            });
        let removed = remove_dir(&*self.connector, &self.instance, &dir).await;
        killed?;
        removed
    }
}
