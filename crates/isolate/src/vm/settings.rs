//! `[runners.vm]` (flotilla's table): the full VMs of the `vm` level, read, checked and turned
//! into the level's [`VmLevelConfig`] here.

use super::VmLevelConfig;
use crate::quantity::MemoryQuantity;
use crate::settings::{SettingError, SettingErrors};
use serde::{Deserialize, Serialize};

/// The least memory a VM boots with.
const MIN_MEMORY_MIB: u64 = 64;

/// `[runners.vm]`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct VmSettings {
    /// Where VM image names are looked up on the instances (default `<state_dir>/images`):
    /// raw ext4 root file systems, or qcow2 files holding one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub images_dir: Option<String>,
    /// The guest kernel on the instances (default: the newest `/boot/vmlinuz-*`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel: Option<String>,
    /// The emulator on the instances (default `qemu-system-x86_64`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub qemu: Option<String>,
    /// Use KVM; without it QEMU emulates (TCG).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub kvm: bool,
    /// Virtual CPUs per VM (default 1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpus: Option<u32>,
    /// Guest memory per VM (default 1 GiB).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryQuantity>,
    /// Outbound network for jobs (QEMU user-mode networking; default on).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network: Option<bool>,
    /// Where the level keeps its files on the instances (default `/var/lib/flotilla/vm`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state_dir: Option<String>,
}

/// What the level's configuration takes from outside its table.
#[derive(Debug, Clone, Default)]
pub struct VmContext {
    /// The image of jobs that name none (`[runners.autoscaler.vm_isolation] image`).
    pub default_image: Option<String>,
    /// The images jobs may name (`[runners.instance] allowed_images`).
    pub allowed_images: Vec<String>,
    /// Names the runner's VMs.
    pub owner: String,
}

impl VmSettings {
    /// The level's configuration.
    pub fn build(&self, cx: &VmContext) -> Result<VmLevelConfig, SettingErrors> {
        let VmSettings {
            images_dir,
            kernel,
            qemu,
            kvm,
            cpus,
            memory,
            network,
            state_dir,
        } = self;
        let defaults = VmLevelConfig::default();
        let mut errors = SettingErrors::default();
        let memory_mib = match memory {
            None => defaults.memory_mib,
            Some(q) => q.mib_at_least(MIN_MEMORY_MIB).unwrap_or_else(|| {
                errors.push(SettingError::new(
                    "memory",
                    "memory must be a quantity of at least 64 MiB, such as \"1Gi\"",
                ));
                defaults.memory_mib
            }),
        };
        if *cpus == Some(0) {
            errors.push(SettingError::new("cpus", "cpus must be 1 or more"));
        }
        for (key, dir) in [("state_dir", state_dir), ("images_dir", images_dir)] {
            if dir.as_ref().is_some_and(|d| !d.starts_with('/')) {
                errors.push(SettingError::new(
                    key,
                    format!("{key} must be an absolute path"),
                ));
            }
        }
        errors.or(|| VmLevelConfig {
            default_image: cx.default_image.clone().filter(|i| !i.is_empty()),
            allowed_images: cx.allowed_images.clone(),
            images_dir: images_dir.clone(),
            kernel: kernel.clone(),
            qemu: qemu.clone().unwrap_or(defaults.qemu.clone()),
            kvm: *kvm,
            vcpus: cpus.unwrap_or(defaults.vcpus),
            memory_mib,
            network: network.unwrap_or(defaults.network),
            state_dir: state_dir.clone().unwrap_or(defaults.state_dir.clone()),
            owner: cx.owner.clone(),
            ..defaults
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_reaches_the_level_or_is_named() {
        let settings = VmSettings {
            images_dir: Some("/srv/images".into()),
            kernel: Some("/boot/k".into()),
            qemu: Some("/opt/qemu".into()),
            kvm: true,
            cpus: Some(4),
            memory: Some(MemoryQuantity::Bytes(2 << 30)),
            network: Some(false),
            state_dir: Some("/srv/vm".into()),
        };
        let cx = VmContext {
            default_image: Some("debian-12".into()),
            allowed_images: vec!["debian-*".into()],
            owner: "flotilla-r".into(),
        };
        let c = settings.build(&cx).unwrap();
        assert_eq!(c.images_dir.as_deref(), Some("/srv/images"));
        assert_eq!(
            (
                c.kernel.as_deref(),
                c.qemu.as_str(),
                c.kvm,
                c.vcpus,
                c.memory_mib
            ),
            (Some("/boot/k"), "/opt/qemu", true, 4, 2048)
        );
        assert_eq!((c.network, c.state_dir.as_str()), (false, "/srv/vm"));
        assert_eq!(c.default_image.as_deref(), Some("debian-12"));
        assert_eq!(c.allowed_images, ["debian-*"]);
        let bad = VmSettings {
            images_dir: Some("images".into()),
            cpus: Some(0),
            memory: Some(MemoryQuantity::Quantity("1Mi".into())),
            ..VmSettings::default()
        };
        assert_eq!(bad.build(&cx).unwrap_err().0.len(), 3);
    }
}
