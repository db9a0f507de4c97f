//! What a VM is made of (pure data; kept with a snapshot, since a restore must rebuild the
//! same machine).

use serde::{Deserialize, Serialize};

/// The machine type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Machine {
    /// QEMU's `microvm`: no PCI, no firmware, virtio-mmio devices (the `microvm` level).
    Microvm,
    /// QEMU's `q35`: a full PC with PCI and firmware (the `vm` level).
    Q35,
}

/// How guest code runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Accel {
    /// Emulation (QEMU's TCG): works everywhere, slowly.
    Tcg,
    /// Hardware virtualisation.
    Kvm,
}

/// A disk of the VM.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Disk {
    /// Its image on the instance.
    pub path: String,
    /// `qcow2` or `raw`.
    pub format: String,
    /// Attached read-only.
    pub read_only: bool,
}

/// One VM.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VmSpec {
    /// A name for logs and the process list.
    pub name: String,
    /// The machine type.
    pub machine: Machine,
    /// The accelerator.
    pub accel: Accel,
    /// Virtual CPUs.
    pub vcpus: u32,
    /// Guest memory in MiB.
    pub memory_mib: u32,
    /// The kernel on the instance.
    pub kernel: String,
    /// The initramfs on the instance.
    pub initrd: String,
    /// The kernel command line.
    pub cmdline: String,
    /// Disks, in order (`/dev/vda`, `/dev/vdb`...).
    pub disks: Vec<Disk>,
    /// User-mode networking for the guest (outbound only, NAT by the VMM).
    pub user_net: bool,
    /// The VM's directory on the instance: its sockets, pid file and console log.
    pub dir: String,
}

impl VmSpec {
    /// The VMM's API socket (QMP for QEMU).
    pub fn api_socket(&self) -> String {
        format!("{}/api.sock", self.dir)
    }

    /// The socket the guest agent is reached on.
    pub fn agent_socket(&self) -> String {
        format!("{}/agent.sock", self.dir)
    }

    /// The VMM's pid file.
    pub fn pid_file(&self) -> String {
        format!("{}/vmm.pid", self.dir)
    }

    /// The guest's console output.
    pub fn console_log(&self) -> String {
        format!("{}/console.log", self.dir)
    }

    /// The VMM's own output (errors before it started).
    pub fn vmm_log(&self) -> String {
        format!("{}/vmm.log", self.dir)
    }

    /// The same machine in another directory with other disks (a restore).
    pub fn relocated(&self, dir: &str, disks: Vec<Disk>) -> VmSpec {
        VmSpec {
            dir: dir.to_string(),
            disks,
            ..self.clone()
        }
    }
}

/// The kernel command line flotilla's guests boot with: a serial console, no reboot on
/// panic, and `tsc_early_khz` (without it most boots under TCG hang calibrating the TSC),
/// then `extra` (`flotilla.*` words for the agent).
pub fn kernel_cmdline(tsc_khz: u32, extra: &[String]) -> String {
    let mut words = vec![
        "console=ttyS0".to_string(),
        "quiet".into(),
        "panic=-1".into(),
        "reboot=t".into(),
        format!("tsc_early_khz={tsc_khz}"),
        "rdinit=/init".into(),
    ];
    words.extend(extra.iter().cloned());
    words.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_pins_the_tsc() {
        let c = kernel_cmdline(2_000_000, &["flotilla.hostname=job-1".into()]);
        assert!(c.contains("tsc_early_khz=2000000"), "{c}");
        assert!(c.ends_with("flotilla.hostname=job-1"), "{c}");
        assert!(c.starts_with("console=ttyS0"), "{c}");
    }
}
