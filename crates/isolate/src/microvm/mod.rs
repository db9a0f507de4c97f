//! MicroVM isolation: each job's build stages run in a QEMU `microvm` machine of their own,
//! booted fresh for the job on its slot of the instance and killed after it.
//!
//! - **Root file system**: the job's image (or the level's default), exported from the
//!   instance's Docker engine into a sparse ext4 image cached by the image's id
//!   ([`rootfs`]); each VM writes to a qcow2 layer of its own over it, so the cached image is
//!   never changed and a VM's disk costs only what the job writes.
//! - **Kernel and init**: the instance's kernel (Debian's cloud kernel) booted directly, with
//!   an initramfs whose `/init` is flotilla's guest agent ([`flotilla_guest::AGENT`]), made
//!   once per kernel and agent ([`flotilla_vmm::initramfs`]).
//! - **Reaching the job**: manager → instance → guest. The instance's connector forwards to
//!   the VM's virtio-serial socket, where the agent serves `exec`, `dial_stdio` and copies
//!   ([`flotilla_guest::GuestConnector`]).
//! - **Helper stages** (sources, caches, artifacts) run on the instance in the slot's build
//!   directory, as at the `shell` level; the project and temporary directories are copied
//!   into the VM (a tar stream through the agent) before a build stage that follows a helper
//!   stage, and back after, so both sides see the same paths ([`sync`]).
//! - **Cleanup**: the VM is killed and its directory removed after the job; a VM an earlier
//!   job or a dead manager left in the slot is killed before the next job boots there, and
//!   [`Isolation::cleanup_instance`] kills every VM of this runner's on an instance met for
//!   the first time.
//!
//! - **Snapshots** ([`snapshot`]): `FLOTILLA_SNAPSHOT` saves the VM after `step_script`,
//!   `FLOTILLA_RESTORE_FROM` starts a job's VM from a saved one instead of booting. With a
//!   store ([`MicrovmIsolation::with_snapshot_store`]) a snapshot is also carried to the
//!   manager, self-contained, and any instance restores it from there (`shipping`).
//!
//! - **Debugging** ([`debug`]): a snapshot restored into a VM of its own for a person
//!   (`flotilla debug`), thrown away after.
//! - **Services** ([`services`]): each in the job's VM from its own image, on a disk of its
//!   own, in a network namespace of its own, named by its aliases in `/etc/hosts`.

pub(crate) mod boot;
pub(crate) mod cleanup;
pub mod debug;
mod environment;
mod restore;
pub mod rootfs;
pub mod services;
pub mod settings;
pub(crate) mod shipping;
pub mod sizing;
pub mod snapshot;
pub mod sync;

use crate::layout::BuildLayout;
use crate::shell::ShellEnvironment;
use crate::{IsolateError, IsolatedEnvironment, Isolation, PrepareRequest};
use async_trait::async_trait;
use environment::MicrovmEnvironment;
use flotilla_connect::Connector;
use flotilla_job::CacheStore;
use flotilla_vmm::qemu::Qemu;
use std::sync::Arc;
use std::time::Duration;

/// Where the level keeps its files on an instance by default.
pub const DEFAULT_STATE_DIR: &str = "/var/lib/flotilla/microvm";

/// The `microvm` level's configuration (`[runners.microvm]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MicrovmConfig {
    /// The image of jobs that name none.
    pub default_image: Option<String>,
    /// The kernel on the instance; `None`: the newest `/boot/vmlinuz-*` (cloud kernels first).
    pub kernel: Option<String>,
    /// The emulator on the instance.
    pub qemu: String,
    /// Hardware acceleration (KVM); off, QEMU emulates (TCG).
    pub kvm: bool,
    /// Virtual CPUs per VM (a job may ask for fewer: [`sizing`]).
    pub vcpus: u32,
    /// Guest memory per VM, in MiB (a job may ask for less: [`sizing`]).
    pub memory_mib: u32,
    /// Outbound network for the guest (QEMU user-mode networking: NAT, no inbound).
    pub network: bool,
    /// Free space in each VM's root file system beyond the image's files, in MiB (sparse:
    /// it costs the instance only what the job writes).
    pub disk_free_mib: u64,
    /// The TSC frequency the guest kernel is told (`tsc_early_khz`): without it most boots
    /// under TCG hang calibrating.
    pub tsc_khz: u32,
    /// Where the level keeps its files on the instance (cached root file systems and
    /// initramfs images, each VM's directory).
    pub state_dir: String,
    /// Names this runner's VMs, so runners sharing an instance leave each other's alone.
    pub owner: String,
    /// Several processes of the same owner may use the instance at once (`flotilla exec`
    /// runs on this host, each its own manager): each names its VMs `<owner>.pid<pid>`, and
    /// sweeps only its own and those of processes that are gone. Only for an instance that is
    /// the manager's own host, where its process ids mean something.
    pub per_process: bool,
    /// How long a VM may take to boot to its agent.
    pub boot_timeout: Duration,
    /// How long the job waits for its services' ports before it starts anyway.
    pub wait_for_services_timeout: Duration,
}

impl Default for MicrovmConfig {
    fn default() -> Self {
        MicrovmConfig {
            default_image: None,
            kernel: None,
            qemu: "qemu-system-x86_64".into(),
            kvm: false,
            vcpus: 1,
            memory_mib: 512,
            network: true,
            disk_free_mib: 1024,
            tsc_khz: 2_000_000,
            state_dir: DEFAULT_STATE_DIR.into(),
            owner: "flotilla".into(),
            per_process: false,
            boot_timeout: Duration::from_secs(90),
            wait_for_services_timeout: Duration::from_secs(30),
        }
    }
}

impl MicrovmConfig {
    /// The directory of slot `slot`'s VM on an instance.
    pub fn vm_dir(&self, slot: usize) -> String {
        format!("{}/vms/{}-slot-{slot}", self.state_dir, self.owner)
    }

    /// Where initramfs images are cached.
    pub fn boot_dir(&self) -> String {
        format!("{}/boot", self.state_dir)
    }

    /// Where root file systems are cached.
    pub fn rootfs_dir(&self) -> String {
        format!("{}/rootfs", self.state_dir)
    }

    /// Where snapshots are kept.
    pub fn snapshots_dir(&self) -> String {
        format!("{}/snapshots", self.state_dir)
    }
}

/// Checks what a VM level's configuration must hold (`level` names it in the message): an
/// absolute state directory, an owner that can be part of a path, at least one vCPU and
/// [`sizing::MIN_MEMORY_MIB`].
pub(crate) fn check_machine(
    level: &str,
    state_dir: &str,
    owner: &str,
    vcpus: u32,
    memory_mib: u32,
) -> Result<(), String> {
    if !state_dir.starts_with('/') || state_dir.split('/').any(|c| c == "..") {
        return Err(format!(
            "the {level} state directory {state_dir:?} must be an absolute path"
        ));
    }
    check_owner(owner)?;
    if vcpus == 0 || memory_mib < sizing::MIN_MEMORY_MIB {
        return Err(format!(
            "a {level} VM needs at least 1 vCPU and {} MiB (asked: {vcpus} vCPU, \
             {memory_mib} MiB)",
            sizing::MIN_MEMORY_MIB
        ));
    }
    Ok(())
}

/// Checks a name that goes into paths: letters, digits and `._-`.
fn check_owner(owner: &str) -> Result<(), String> {
    if owner.is_empty()
        || owner.starts_with('.')
        || !owner
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
    {
        return Err(format!(
            "the VM owner name {owner:?} may hold only letters, digits and `._-`"
        ));
    }
    Ok(())
}

/// The `microvm` isolation level.
#[derive(Clone)]
pub struct MicrovmIsolation {
    config: Arc<MicrovmConfig>,
    /// The owner before this process's id was added, when [`MicrovmConfig::per_process`].
    shared_owner: Option<String>,
    qemu: Qemu,
    clean: crate::shell::CleanSlots,
    boot_cache: boot::BootCache,
    store: Option<Arc<dyn CacheStore>>,
}

impl MicrovmIsolation {
    /// The level with `config`; fails for a state directory that is not absolute, an owner
    /// that cannot be part of a path, or no CPUs or memory.
    pub fn new(config: MicrovmConfig) -> Result<MicrovmIsolation, IsolateError> {
        check_machine(
            "microvm",
            &config.state_dir,
            &config.owner,
            config.vcpus,
            config.memory_mib,
        )
        .map_err(IsolateError::Configuration)?;
        let qemu = Qemu {
            binary: config.qemu.clone(),
            ..Qemu::default()
        };
        let mut config = config;
        let shared_owner = config.per_process.then(|| config.owner.clone());
        if config.per_process {
            config.owner = format!("{}.pid{}", config.owner, std::process::id());
        }
        Ok(MicrovmIsolation {
            shared_owner,
            config: Arc::new(config),
            qemu,
            clean: Default::default(),
            boot_cache: Default::default(),
            store: None,
        })
    }

    /// Snapshots are also kept in `store` (the runner's snapshot store on the manager, a
    /// `CacheStore` of its own), so a job on any instance, or `flotilla debug`, can start from
    /// them (`shipping`).
    pub fn with_snapshot_store(mut self, store: Arc<dyn CacheStore>) -> MicrovmIsolation {
        self.store = Some(store);
        self
    }

    /// The configuration.
    pub fn config(&self) -> &MicrovmConfig {
        &self.config
    }
}

impl std::fmt::Debug for MicrovmIsolation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MicrovmIsolation")
            .field("config", &self.config)
            .field("snapshot_store", &self.store.is_some())
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl Isolation for MicrovmIsolation {
    fn name(&self) -> &'static str {
        "microvm"
    }

    async fn prepare(
        &self,
        req: PrepareRequest<'_>,
    ) -> Result<Box<dyn IsolatedEnvironment>, IsolateError> {
        let layout = BuildLayout::new(
            &req.builds_dir,
            req.slot,
            req.job,
            req.custom_build_dir.unwrap_or(false),
        )?;
        let helper = ShellEnvironment::unconfined(&req, layout.clone(), self.clean.clone());
        Ok(Box::new(MicrovmEnvironment::new(
            &req,
            layout,
            helper,
            self.config.clone(),
            self.qemu.clone(),
            self.boot_cache.clone(),
            self.store.clone(),
        )))
    }

    async fn cleanup_instance(
        &self,
        connector: Arc<dyn Connector>,
        instance_id: &str,
    ) -> Result<usize, IsolateError> {
        let vms = format!("{}/vms", self.config.state_dir);
        match &self.shared_owner {
            // Processes sharing the owner: this one's VMs and those of processes gone.
            Some(shared) => {
                cleanup::sweep_per_process(&*connector, instance_id, &vms, shared, &self.qemu).await
            }
            None => {
                cleanup::sweep(
                    &*connector,
                    instance_id,
                    &vms,
                    &format!("{}-slot-", self.config.owner),
                    &self.qemu,
                )
                .await
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configurations_that_cannot_work_are_refused() {
        assert!(MicrovmIsolation::new(MicrovmConfig::default()).is_ok());
        for bad in [
            MicrovmConfig {
                state_dir: "relative".into(),
                ..MicrovmConfig::default()
            },
            MicrovmConfig {
                owner: "a/../b".into(),
                ..MicrovmConfig::default()
            },
            MicrovmConfig {
                memory_mib: 16,
                ..MicrovmConfig::default()
            },
            MicrovmConfig {
                vcpus: 0,
                ..MicrovmConfig::default()
            },
        ] {
            assert!(MicrovmIsolation::new(bad.clone()).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn each_slot_has_its_own_vm_directory() {
        let c = MicrovmConfig {
            owner: "flotilla-r1".into(),
            ..MicrovmConfig::default()
        };
        assert_eq!(
            c.vm_dir(3),
            "/var/lib/flotilla/microvm/vms/flotilla-r1-slot-3"
        );
        assert_ne!(c.vm_dir(0), c.vm_dir(1));
    }
}
