//! The qemu provider's `plugin_config`, parsed and checked.

use flotilla_fleet::FleetError;
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The longest path a unix socket may have (`sun_path` less its NUL).
const SOCKET_PATH_MAX: usize = 107;

/// The qemu provider's settings: the `plugin_config` table of its instance group.
///
/// ```toml
/// [runners.autoscaler.plugin_config]
/// disk = "/var/cache/flotilla/vm/4d8b175e1ab2/disk.img"   # the base disk, never written
/// kernel = "/var/cache/flotilla/vm/4d8b175e1ab2/vmlinuz"
/// initrd = "/var/cache/flotilla/vm/4d8b175e1ab2/initrd.img"
/// memory_mb = 512
/// cpus = 1
/// max_size = 4
/// ```
///
/// Unknown keys are refused, so a typo does not silently fall back to a default.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QemuSettings {
    /// The group's name: its provider id is `qemu/<name>`. Letters, digits, `_`, `.`, `-`.
    pub name: String,
    /// The base disk every VM starts from (raw or qcow2, told apart by its first bytes). VMs
    /// never write to it: each writes to a qcow2 overlay of its own, which QEMU deletes when
    /// the VM ends.
    pub disk: PathBuf,
    /// The kernel, booted directly (`-kernel`).
    pub kernel: PathBuf,
    /// The initramfs, if the kernel needs one to mount the disk.
    #[serde(default)]
    pub initrd: Option<PathBuf>,
    /// Extra kernel command-line words, after flotilla's own.
    #[serde(default)]
    pub append: String,
    /// Memory per VM, in MiB.
    #[serde(default = "default_memory_mb")]
    pub memory_mb: u32,
    /// Virtual CPUs per VM.
    #[serde(default = "default_cpus")]
    pub cpus: u32,
    /// The most VMs the group runs.
    #[serde(default = "default_max_size")]
    pub max_size: usize,
    /// `tcg` (emulation, works everywhere) or `kvm`.
    #[serde(default = "default_accel")]
    pub accel: String,
    /// The QEMU binary.
    #[serde(default = "default_qemu")]
    pub qemu: PathBuf,
    /// Where each VM's directory (pid file, QMP socket, console log, overlay) lives.
    pub vm_dir: PathBuf,
    /// Where the group's SSH key is kept, so VMs that outlive a restart still accept it;
    /// `None` makes a fresh key at every start.
    #[serde(default)]
    pub key_file: Option<PathBuf>,
    /// Seconds a VM may take from start to sshd answering before it is reported `timeout`.
    #[serde(default = "default_startup_timeout")]
    pub startup_timeout: u64,
    /// Seconds after which the guest powers itself off; 0 for never. A failsafe that holds
    /// even when nothing on the host is left to stop the VM.
    #[serde(default)]
    pub max_lifetime: u64,
    /// Cut the guest off from every network but the forwarded SSH port (`restrict=on`).
    #[serde(default)]
    pub restrict_network: bool,
}

fn default_memory_mb() -> u32 {
    512
}
fn default_cpus() -> u32 {
    1
}
fn default_max_size() -> usize {
    4
}
fn default_accel() -> String {
    "tcg".into()
}
fn default_qemu() -> PathBuf {
    PathBuf::from("qemu-system-x86_64")
}
fn default_startup_timeout() -> u64 {
    300
}

impl QemuSettings {
    /// Parses `plugin_config` (as JSON) and checks it.
    pub fn from_plugin_config(config: &serde_json::Value) -> Result<Self, FleetError> {
        let settings: QemuSettings = serde_json::from_value(config.clone())
            .map_err(|e| FleetError::Config(format!("qemu plugin_config: {e}")))?;
        settings.validate()?;
        Ok(settings)
    }

    /// Checks what serde cannot (files are checked for existence at `init`).
    pub fn validate(&self) -> Result<(), FleetError> {
        let bad = |m: String| Err(FleetError::Config(format!("qemu plugin_config: {m}")));
        if self.name.is_empty()
            || !self
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
        {
            return bad(format!(
                "name {:?} must be non-empty and use only letters, digits, '_', '.' and '-'",
                self.name
            ));
        }
        for (key, path) in [
            ("disk", Some(&self.disk)),
            ("kernel", Some(&self.kernel)),
            ("initrd", self.initrd.as_ref()),
            ("vm_dir", Some(&self.vm_dir)),
            ("key_file", self.key_file.as_ref()),
        ] {
            if let Some(p) = path
                && !p.is_absolute()
            {
                return bad(format!("{key} {} must be an absolute path", p.display()));
            }
        }
        if self.memory_mb < 128 {
            return bad(format!(
                "memory_mb must be at least 128, not {}",
                self.memory_mb
            ));
        }
        if self.cpus == 0 {
            return bad("cpus must be at least 1".into());
        }
        if self.max_size == 0 {
            return bad("max_size must be at least 1".into());
        }
        if !matches!(self.accel.as_str(), "tcg" | "kvm") {
            return bad(format!(
                "accel must be \"tcg\" or \"kvm\", not {:?}",
                self.accel
            ));
        }
        if self.startup_timeout == 0 {
            return bad("startup_timeout must be at least 1 (second)".into());
        }
        let socket = self.vm_dir.join("vm-00000000").join(crate::vm::QMP_SOCKET);
        if socket.as_os_str().len() > SOCKET_PATH_MAX {
            return bad(format!(
                "vm_dir {} is too long for the VMs' QMP sockets ({} bytes at most); choose a \
                 shorter one",
                self.vm_dir.display(),
                SOCKET_PATH_MAX - (socket.as_os_str().len() - self.vm_dir.as_os_str().len())
            ));
        }
        Ok(())
    }

    /// The startup timeout.
    pub fn startup_timeout(&self) -> Duration {
        Duration::from_secs(self.startup_timeout)
    }

    /// The files that must exist at `init`.
    pub fn files(&self) -> Vec<(&'static str, &Path)> {
        let mut files = vec![
            ("disk", self.disk.as_path()),
            ("kernel", self.kernel.as_path()),
        ];
        if let Some(initrd) = &self.initrd {
            files.push(("initrd", initrd.as_path()));
        }
        files
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn base() -> serde_json::Value {
        json!({"name": "vms", "disk": "/i/disk.img", "kernel": "/i/vmlinuz", "vm_dir": "/s/qemu/vms"})
    }

    fn with(key: &str, value: serde_json::Value) -> serde_json::Value {
        let mut v = base();
        v[key] = value;
        v
    }

    #[test]
    fn minimal_config_gets_defaults() {
        let s = QemuSettings::from_plugin_config(&base()).unwrap();
        assert_eq!(s.memory_mb, 512);
        assert_eq!(s.cpus, 1);
        assert_eq!(s.max_size, 4);
        assert_eq!(s.accel, "tcg");
        assert_eq!(s.qemu, Path::new("qemu-system-x86_64"));
        assert_eq!(s.startup_timeout(), Duration::from_secs(300));
        assert_eq!(s.max_lifetime, 0);
        assert!(!s.restrict_network);
        assert_eq!(s.files().len(), 2);
    }

    #[test]
    fn mistakes_are_refused_with_what_is_wrong() {
        for (bad, says) in [
            (with("name", json!("a b")), "name"),
            (
                with("disk", json!("disk.img")),
                "disk disk.img must be an absolute path",
            ),
            (with("initrd", json!("i")), "initrd"),
            (with("memory_mb", json!(64)), "memory_mb"),
            (with("cpus", json!(0)), "cpus"),
            (with("max_size", json!(0)), "max_size"),
            (with("accel", json!("hvf")), "accel"),
            (with("startup_timeout", json!(0)), "startup_timeout"),
            (with("memroy_mb", json!(512)), "memroy_mb"),
            (
                with("vm_dir", json!(format!("/{}", "d".repeat(120)))),
                "too long",
            ),
        ] {
            let e = QemuSettings::from_plugin_config(&bad).unwrap_err();
            assert!(matches!(e, FleetError::Config(_)), "{bad}");
            assert!(e.to_string().contains(says), "{bad}: {e}");
        }
        let e = QemuSettings::from_plugin_config(&json!({"name": "v"})).unwrap_err();
        assert!(e.to_string().contains("disk"), "{e}");
    }
}
