//! The qemu provider's test VM image (built by `scripts/build-vm-image.sh`), and a guard that
//! makes sure no VM outlives the test that made it.
//!
//! The guard finds VMs the way the provider does: every `qemu.pid` (or flotilla-vmm's
//! `vmm.pid`) file under a directory,
//! whose process is alive and a QEMU. It kills them when dropped (passed or failed). If the
//! test process itself is killed, the guard cannot run: tests also give their VMs a
//! `max_lifetime`, after which the guest powers itself off.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The test VM image's files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VmImage {
    /// The root disk (raw ext4).
    pub disk: PathBuf,
    /// The kernel, booted directly.
    pub kernel: PathBuf,
    /// The initramfs that mounts the disk.
    pub initrd: PathBuf,
}

/// The test VM image, built once per machine (the script reuses an unchanged recipe) and
/// looked up once per process.
pub fn vm_image() -> VmImage {
    static IMAGE: OnceLock<VmImage> = OnceLock::new();
    IMAGE
        .get_or_init(|| {
            let script = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("..")
                .join("scripts")
                .join("build-vm-image.sh");
            let out = Command::new("bash")
                .arg(&script)
                .output()
                .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(
                out.status.success(),
                "{} failed ({}):\n{stderr}",
                script.display(),
                out.status
            );
            let stdout = String::from_utf8_lossy(&out.stdout);
            let dir = PathBuf::from(
                stdout
                    .lines()
                    .rev()
                    .find(|l| !l.trim().is_empty())
                    .unwrap_or_else(|| panic!("no image directory printed; stderr:\n{stderr}"))
                    .trim(),
            );
            VmImage {
                disk: dir.join("disk.img"),
                kernel: dir.join("vmlinuz"),
                initrd: dir.join("initrd.img"),
            }
        })
        .clone()
}

/// The pids of the QEMU processes alive under `dir` (any depth), by their pid files: the qemu
/// provider's `qemu.pid` and flotilla-vmm's `vmm.pid` (the VM isolation levels).
pub fn running_vms(dir: &Path) -> Vec<u32> {
    let mut pids = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let path = e.path();
            if path.is_dir() {
                stack.push(path);
            } else if path
                .file_name()
                .is_some_and(|n| n == "qemu.pid" || n == "vmm.pid")
                && let Some(pid) = std::fs::read_to_string(&path)
                    .ok()
                    .and_then(|s| s.trim().parse::<u32>().ok())
                && is_qemu(pid)
            {
                pids.push(pid);
            }
        }
    }
    pids
}

fn is_qemu(pid: u32) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|c| String::from_utf8_lossy(&c).contains("qemu-system"))
        .unwrap_or(false)
}

/// Kills every VM under its directory when dropped.
#[derive(Debug)]
pub struct VmGuard {
    dir: PathBuf,
}

impl VmGuard {
    /// A guard for the VMs under `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> VmGuard {
        VmGuard { dir: dir.into() }
    }
}

impl Drop for VmGuard {
    fn drop(&mut self) {
        for pid in running_vms(&self.dir) {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
        }
    }
}
