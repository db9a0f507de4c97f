//! The `vm` level: GitLab's VM isolation (the nesting role) done by flotilla itself. Each job
//! gets a full VM (QEMU `q35`) in its slot of the instance, booted from a prepared disk image,
//! and runs every stage in it, helper stages included, as the instance executor runs a job in
//! a nested VM.
//!
//! - **Image**: the job's `image:` names the VM image, checked against
//!   `[runners.instance] allowed_images`; a job without one gets
//!   `[runners.autoscaler.vm_isolation] image` ([`vm_image`]). A name is a file under the
//!   level's images directory (or an absolute path on the instance): a root file system as a
//!   raw ext4 image, or a qcow2 holding one. The image needs `/bin/sh`, `git` and `tar` for
//!   the job's helper stages.
//! - **Boot**: the instance's kernel directly, with flotilla's agent as `/init` (the same
//!   initramfs as the `microvm` level's, with the PCI transport); the VM writes to a qcow2
//!   layer of its own over the image, so the image is never changed.
//! - **Slots**: as nesting ties VMs to slots, a VM an earlier job left in the slot is
//!   stomped (killed, its layer removed) before the next job's boots, and the job's log says
//!   so; the VM is deleted after the job. A manager meeting an instance for the first time
//!   deletes every VM of its runner there ([`Isolation::cleanup_instance`]), as GitLab Runner
//!   deletes the nesting VMs it cannot reattach to.
//! - **Stages**: all of them in the VM, through the agent (manager → instance → guest), at
//!   the shell level's build directory layout under `/builds` in the VM.
//!
//! `nesting_host` is accepted and not used: no nesting daemon is needed, flotilla is the
//! daemon (its gRPC protocol is not public; see docs/isolation.md).

mod environment;
pub mod settings;

use crate::layout::BuildLayout;
use crate::microvm::boot::BootCache;
use crate::microvm::cleanup;
use crate::{IsolateError, IsolatedEnvironment, Isolation, PrepareRequest};
use async_trait::async_trait;
use environment::VmEnvironment;
use flotilla_connect::Connector;
use flotilla_vmm::qemu::Qemu;
use std::sync::Arc;
use std::time::Duration;

/// Where the level keeps its files on an instance by default.
pub const DEFAULT_STATE_DIR: &str = "/var/lib/flotilla/vm";

/// The `vm` level's configuration (`[runners.autoscaler.vm_isolation]`,
/// `[runners.instance] allowed_images`, and flotilla's `[runners.vm]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VmLevelConfig {
    /// The VM image of jobs that name none (`vm_isolation.image`).
    pub default_image: Option<String>,
    /// Patterns of the images jobs may name (`allowed_images`); empty allows any.
    pub allowed_images: Vec<String>,
    /// Where image names are looked up on the instance (default `<state_dir>/images`).
    pub images_dir: Option<String>,
    /// The kernel on the instance; `None`: the newest `/boot/vmlinuz-*` (cloud kernels first).
    pub kernel: Option<String>,
    /// The emulator on the instance.
    pub qemu: String,
    /// Hardware acceleration (KVM); off, QEMU emulates (TCG).
    pub kvm: bool,
    /// Virtual CPUs per VM.
    pub vcpus: u32,
    /// Guest memory per VM, in MiB.
    pub memory_mib: u32,
    /// Outbound network for the guest (QEMU user-mode networking).
    pub network: bool,
    /// The TSC frequency the guest kernel is told (`tsc_early_khz`).
    pub tsc_khz: u32,
    /// Where the level keeps its files on the instance.
    pub state_dir: String,
    /// Names this runner's VMs.
    pub owner: String,
    /// How long a VM may take to boot to its agent.
    pub boot_timeout: Duration,
}

impl Default for VmLevelConfig {
    fn default() -> Self {
        VmLevelConfig {
            default_image: None,
            allowed_images: Vec::new(),
            images_dir: None,
            kernel: None,
            qemu: "qemu-system-x86_64".into(),
            kvm: false,
            vcpus: 1,
            memory_mib: 1024,
            network: true,
            tsc_khz: 2_000_000,
            state_dir: DEFAULT_STATE_DIR.into(),
            owner: "flotilla".into(),
            boot_timeout: Duration::from_secs(120),
        }
    }
}

impl VmLevelConfig {
    /// The directory of slot `slot`'s VM on an instance.
    pub fn vm_dir(&self, slot: usize) -> String {
        format!("{}/vms/{}-slot-{slot}", self.state_dir, self.owner)
    }

    /// Where initramfs images are cached.
    fn boot_dir(&self) -> String {
        format!("{}/boot", self.state_dir)
    }

    /// Where image names are looked up.
    pub fn images_dir(&self) -> String {
        self.images_dir
            .clone()
            .unwrap_or_else(|| format!("{}/images", self.state_dir))
    }
}

/// A VM image on the instance: its file and format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VmImage {
    /// The name the job or the configuration gave.
    pub name: String,
    /// The file on the instance.
    pub path: String,
    /// `raw` or `qcow2` (by the file's extension).
    pub format: &'static str,
}

/// The VM image a job runs in: the job's `image:` if `allowed` lets it (GitLab's
/// `allowed_images`, `**`-style patterns; an empty list allows any, as GitLab Runner's
/// `verifyAllowedImage` does), else `default` (`vm_isolation.image`). A name is a file under
/// `images_dir`, or an absolute path.
pub fn vm_image(
    job_image: Option<&str>,
    default: Option<&str>,
    allowed: &[String],
    images_dir: &str,
) -> Result<VmImage, String> {
    let name = match job_image.filter(|n| !n.is_empty()) {
        Some(name) => {
            if !allowed.is_empty() && !allowed.iter().any(|p| matches(p, name)) {
                return Err(format!(
                    "the job's image {name:?} is not allowed: it matches none of \
                     [runners.instance] allowed_images ({})",
                    allowed.join(", ")
                ));
            }
            name
        }
        None => default.filter(|d| !d.is_empty()).ok_or_else(|| {
            "the vm level needs a VM image: name one in the job (image:) or set \
             [runners.autoscaler.vm_isolation] image"
                .to_string()
        })?,
    };
    if name.split('/').any(|c| c == "..") {
        return Err(format!("the VM image {name:?} may not contain `..`"));
    }
    let path = if name.starts_with('/') {
        name.to_string()
    } else {
        format!(
            "{}/{}",
            images_dir.trim_end_matches('/'),
            name.replace(':', "_")
        )
    };
    let format = if path.ends_with(".qcow2") {
        "qcow2"
    } else {
        "raw"
    };
    Ok(VmImage {
        name: name.to_string(),
        path,
        format,
    })
}

/// Whether `name` matches the glob `pattern` (`*` within a path component, `**` across).
fn matches(pattern: &str, name: &str) -> bool {
    globset::GlobBuilder::new(pattern)
        .literal_separator(true)
        .build()
        .is_ok_and(|g| g.compile_matcher().is_match(name))
}

/// The `vm` isolation level.
#[derive(Debug, Clone)]
pub struct VmLevel {
    config: Arc<VmLevelConfig>,
    qemu: Qemu,
    clean: crate::shell::CleanSlots,
    boot_cache: BootCache,
}

impl VmLevel {
    /// The level with `config`; fails for a state directory that is not absolute, an owner
    /// that cannot be part of a path, or no CPUs or memory.
    pub fn new(config: VmLevelConfig) -> Result<VmLevel, IsolateError> {
        crate::microvm::check_machine(
            "vm",
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
        Ok(VmLevel {
            config: Arc::new(config),
            qemu,
            clean: Default::default(),
            boot_cache: Default::default(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &VmLevelConfig {
        &self.config
    }
}

/// The build directory inside every VM.
pub const VM_BUILDS_DIR: &str = "/builds";

#[async_trait]
impl Isolation for VmLevel {
    fn name(&self) -> &'static str {
        "vm"
    }

    async fn prepare(
        &self,
        req: PrepareRequest<'_>,
    ) -> Result<Box<dyn IsolatedEnvironment>, IsolateError> {
        let layout = BuildLayout::new(
            VM_BUILDS_DIR,
            req.slot,
            req.job,
            req.custom_build_dir.unwrap_or(false),
        )?;
        Ok(Box::new(VmEnvironment::new(
            &req,
            layout,
            self.config.clone(),
            self.qemu.clone(),
            self.clean.clone(),
            self.boot_cache.clone(),
        )))
    }

    async fn cleanup_instance(
        &self,
        connector: Arc<dyn Connector>,
        instance_id: &str,
    ) -> Result<usize, IsolateError> {
        cleanup::sweep(
            &*connector,
            instance_id,
            &format!("{}/vms", self.config.state_dir),
            &format!("{}-slot-", self.config.owner),
            &self.qemu,
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allowed(p: &[&str]) -> Vec<String> {
        p.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_job_names_its_image_within_the_allowed_ones() {
        let img = vm_image(
            Some("macos-14-xcode"),
            Some("base"),
            &allowed(&["macos-*"]),
            "/img",
        )
        .unwrap();
        assert_eq!(img.path, "/img/macos-14-xcode");
        assert_eq!(img.format, "raw");
        let e = vm_image(Some("ubuntu"), None, &allowed(&["macos-*"]), "/img").unwrap_err();
        assert!(e.contains("not allowed") && e.contains("macos-*"), "{e}");
        // No list: any image, as GitLab Runner's verifyAllowedImage.
        assert!(vm_image(Some("ubuntu"), None, &[], "/img").is_ok());
        // `*` stays within a path component, `**` crosses them.
        assert!(vm_image(Some("/vm/a/b.qcow2"), None, &allowed(&["/vm/*"]), "/i").is_err());
        let q = vm_image(Some("/vm/a/b.qcow2"), None, &allowed(&["/vm/**"]), "/i").unwrap();
        assert_eq!((q.path.as_str(), q.format), ("/vm/a/b.qcow2", "qcow2"));
    }

    #[test]
    fn without_one_the_configured_image_is_used_or_the_job_fails_with_the_fix() {
        let img = vm_image(None, Some("debian:12"), &[], "/img/").unwrap();
        assert_eq!(img.path, "/img/debian_12");
        assert_eq!(vm_image(Some(""), Some("d"), &[], "/i").unwrap().name, "d");
        let e = vm_image(None, None, &[], "/i").unwrap_err();
        assert!(e.contains("vm_isolation] image"), "{e}");
        assert!(vm_image(Some("../etc/shadow"), None, &[], "/i").is_err());
    }

    #[test]
    fn configurations_that_cannot_work_are_refused() {
        assert!(VmLevel::new(VmLevelConfig::default()).is_ok());
        let e = VmLevel::new(VmLevelConfig {
            state_dir: "rel".into(),
            ..VmLevelConfig::default()
        })
        .unwrap_err();
        assert!(e.to_string().contains("vm state directory"), "{e}");
        assert!(
            VmLevel::new(VmLevelConfig {
                vcpus: 0,
                ..VmLevelConfig::default()
            })
            .is_err()
        );
    }
}
