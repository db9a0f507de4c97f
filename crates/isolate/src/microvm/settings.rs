//! `[runners.microvm]` (flotilla's table): each job's microVM, read, checked and turned into
//! the level's [`MicrovmConfig`] here.

use super::MicrovmConfig;
use crate::quantity::MemoryQuantity;
use crate::settings::{SettingError, SettingErrors};
use serde::{Deserialize, Serialize};

/// The least memory a microVM boots with.
const MIN_MEMORY_MIB: u64 = 64;

/// `[runners.microvm]`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MicrovmSettings {
    /// The image of jobs that name none (else `[runners.docker] image`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// The guest kernel on the instances (default: the newest `/boot/vmlinuz-*`, cloud
    /// kernels first).
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
    /// Guest memory per VM, as a Kubernetes quantity (`"512Mi"`) or bytes (default 512 MiB).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryQuantity>,
    /// Outbound network for jobs (QEMU user-mode networking; default on).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network: Option<bool>,
    /// Free space in each VM's root file system beyond the image's files (default 1 GiB;
    /// sparse).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disk_free: Option<MemoryQuantity>,
    /// Where the level keeps its files on the instances (default `/var/lib/flotilla/microvm`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state_dir: Option<String>,
    /// Also keep each snapshot, self-contained, in the runner's cache store on the manager,
    /// so a job on any instance (and `flotilla debug`) can start from it (default on; the
    /// embedded default of `flotilla exec`, whose only instance is this host, turns it off).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub snapshot_store: Option<bool>,
}

/// What the level's configuration takes from outside its table.
#[derive(Debug, Clone, Default)]
pub struct MicrovmContext {
    /// The image of jobs that name none when the table names none (`[runners.docker] image`).
    pub fallback_image: Option<String>,
    /// Names the runner's VMs.
    pub owner: String,
    /// Other processes of the runner use its instances at the same time (`flotilla exec`).
    pub per_process: bool,
}

/// The level's configuration, and whether its snapshots also go to the manager's store.
#[derive(Debug, Clone)]
pub struct MicrovmBuild {
    /// The level's configuration.
    pub config: MicrovmConfig,
    /// `snapshot_store`.
    pub snapshot_store: bool,
}

impl MicrovmSettings {
    /// The level's configuration.
    pub fn build(&self, cx: &MicrovmContext) -> Result<MicrovmBuild, SettingErrors> {
        let MicrovmSettings {
            image,
            kernel,
            qemu,
            kvm,
            cpus,
            memory,
            network,
            disk_free,
            state_dir,
            snapshot_store,
        } = self;
        let defaults = MicrovmConfig::default();
        let mut errors = SettingErrors::default();
        let memory_mib = match memory {
            None => defaults.memory_mib,
            Some(q) => q.mib_at_least(MIN_MEMORY_MIB).unwrap_or_else(|| {
                errors.push(SettingError::new(
                    "memory",
                    "memory must be a quantity of at least 64 MiB, such as \"512Mi\"",
                ));
                defaults.memory_mib
            }),
        };
        let disk_free_mib = match disk_free {
            None => defaults.disk_free_mib,
            Some(q) => q.bytes().map(|b| b >> 20).unwrap_or_else(|| {
                errors.push(SettingError::new(
                    "disk_free",
                    "disk_free must be a positive quantity such as \"1Gi\"",
                ));
                defaults.disk_free_mib
            }),
        };
        if *cpus == Some(0) {
            errors.push(SettingError::new("cpus", "cpus must be 1 or more"));
        }
        if state_dir.as_ref().is_some_and(|d| !d.starts_with('/')) {
            errors.push(SettingError::new(
                "state_dir",
                "state_dir must be an absolute path",
            ));
        }
        errors.or(|| MicrovmBuild {
            config: MicrovmConfig {
                default_image: image.clone().or_else(|| cx.fallback_image.clone()),
                kernel: kernel.clone(),
                qemu: qemu.clone().unwrap_or(defaults.qemu.clone()),
                kvm: *kvm,
                vcpus: cpus.unwrap_or(defaults.vcpus),
                memory_mib,
                network: network.unwrap_or(defaults.network),
                disk_free_mib,
                state_dir: state_dir.clone().unwrap_or(defaults.state_dir.clone()),
                owner: cx.owner.clone(),
                per_process: cx.per_process,
                ..defaults
            },
            snapshot_store: snapshot_store.unwrap_or(true),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_reaches_the_level_or_is_named() {
        let settings = MicrovmSettings {
            image: None,
            kernel: Some("/boot/k".into()),
            qemu: Some("/opt/qemu".into()),
            kvm: true,
            cpus: Some(2),
            memory: Some(MemoryQuantity::Quantity("1Gi".into())),
            network: Some(false),
            disk_free: Some(MemoryQuantity::Quantity("2Gi".into())),
            state_dir: Some("/srv/microvm".into()),
            snapshot_store: Some(false),
        };
        let cx = MicrovmContext {
            fallback_image: Some("alpine".into()),
            owner: "flotilla-r".into(),
            per_process: true,
        };
        let built = settings.build(&cx).unwrap();
        let c = &built.config;
        assert_eq!(c.default_image.as_deref(), Some("alpine"));
        assert_eq!(
            (c.kernel.as_deref(), c.qemu.as_str(), c.kvm, c.vcpus),
            (Some("/boot/k"), "/opt/qemu", true, 2)
        );
        assert_eq!(
            (c.memory_mib, c.disk_free_mib, c.network),
            (1024, 2048, false)
        );
        assert_eq!(
            (c.state_dir.as_str(), c.owner.as_str()),
            ("/srv/microvm", "flotilla-r")
        );
        assert!(c.per_process && !built.snapshot_store);

        let bad = MicrovmSettings {
            cpus: Some(0),
            memory: Some(MemoryQuantity::Quantity("32Mi".into())),
            disk_free: Some(MemoryQuantity::Bytes(0)),
            state_dir: Some("rel".into()),
            ..MicrovmSettings::default()
        };
        let e = bad.build(&cx).unwrap_err();
        let keys: Vec<String> = e.0.iter().map(|e| e.to_string()).collect();
        assert_eq!(keys.len(), 4, "{keys:?}");
    }
}
