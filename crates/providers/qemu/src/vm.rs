//! One VM's directory under `vm_dir`, and the QEMU process it names.
//!
//! `<vm_dir>/<id>/` holds `vm.json` (the group, the forwarded SSH port, when it was made),
//! `qemu.pid` (written by QEMU), `qmp.sock` (QEMU's control socket), `console.log` (the
//! guest's serial console), `qemu.log` (QEMU's own messages) and, while the VM runs, its
//! unlinked disk overlay (QEMU's `snapshot=on` with `TMPDIR` set here). The directory is the
//! only trace the provider leaves; the listing is what these directories and the processes
//! they name say now.

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The record file.
pub(crate) const RECORD: &str = "vm.json";
/// The pid file QEMU writes.
pub(crate) const PID_FILE: &str = "qemu.pid";
/// QEMU's QMP socket.
pub(crate) const QMP_SOCKET: &str = "qmp.sock";
/// The guest's serial console.
pub(crate) const CONSOLE_LOG: &str = "console.log";
/// QEMU's standard output and error.
pub(crate) const QEMU_LOG: &str = "qemu.log";

/// What the provider writes about a VM before starting it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VmRecord {
    /// The group it belongs to (a `vm_dir` shared by mistake never mixes groups).
    pub group: String,
    /// The host port forwarded to the guest's port 22, on 127.0.0.1.
    pub ssh_port: u16,
    /// When it was made, in seconds since the epoch.
    pub created: u64,
}

/// A VM's directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VmDir {
    /// The instance id (the directory's name).
    pub id: String,
    /// The directory.
    pub path: PathBuf,
}

/// The name QEMU is given for VM `id` (`-name`), by which its process is recognised.
pub fn process_name(id: &str) -> String {
    format!("flotilla-{id}")
}

/// Whether `id` looks like an id this provider makes (`vm-` and eight hex digits).
pub fn is_vm_id(id: &str) -> bool {
    id.strip_prefix("vm-")
        .is_some_and(|hex| hex.len() == 8 && hex.chars().all(|c| c.is_ascii_hexdigit()))
}

impl VmDir {
    /// The directory of VM `id` under `vm_dir`.
    pub fn new(vm_dir: &Path, id: &str) -> VmDir {
        VmDir {
            id: id.to_string(),
            path: vm_dir.join(id),
        }
    }

    /// Every VM directory under `vm_dir` (none when it does not exist).
    pub fn all(vm_dir: &Path) -> std::io::Result<Vec<VmDir>> {
        let entries = match std::fs::read_dir(vm_dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let mut out = Vec::new();
        for e in entries {
            let e = e?;
            let name = e.file_name().to_string_lossy().into_owned();
            if is_vm_id(&name) && e.file_type()?.is_dir() {
                out.push(VmDir::new(vm_dir, &name));
            }
        }
        out.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(out)
    }

    /// A file of the directory.
    pub fn file(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// The record, if it was written and reads back.
    pub fn record(&self) -> Option<VmRecord> {
        let bytes = std::fs::read(self.file(RECORD)).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// Writes the record (atomically).
    pub fn write_record(&self, record: &VmRecord) -> std::io::Result<()> {
        let tmp = self.file("vm.json.tmp");
        std::fs::write(&tmp, serde_json::to_vec(record)?)?;
        std::fs::rename(&tmp, self.file(RECORD))
    }

    /// The pid of the VM's QEMU if it is alive: the pid file names a process whose command
    /// line carries this VM's name (so a recycled pid is never taken for the VM).
    pub fn live_pid(&self) -> Option<u32> {
        let pid: u32 = std::fs::read_to_string(self.file(PID_FILE))
            .ok()?
            .trim()
            .parse()
            .ok()?;
        is_process_of(pid, &self.id).then_some(pid)
    }

    /// The last `lines` lines of a log file of the directory (for error messages).
    pub fn tail(&self, name: &str, lines: usize) -> String {
        let text = std::fs::read_to_string(self.file(name)).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

/// Whether process `pid` is the QEMU of VM `id` (its command line names it). A zombie's
/// command line is empty: it is not the VM any more.
pub(crate) fn is_process_of(pid: u32, id: &str) -> bool {
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    let name = process_name(id);
    cmdline.split(|b| *b == 0).any(|arg| arg == name.as_bytes())
}

/// Seconds since the epoch.
pub(crate) fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs()
}

/// How long ago `created` (seconds since the epoch) was.
pub(crate) fn age(created: u64) -> Duration {
    Duration::from_secs(now_secs().saturating_sub(created))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids() {
        assert!(is_vm_id("vm-0a1b2c3d"));
        assert!(!is_vm_id("vm-0a1b2c3"));
        assert!(!is_vm_id("vm-0a1b2c3g"));
        assert!(!is_vm_id("x-0a1b2c3d"));
        assert!(!is_vm_id(".vm-0a1b2c3d"));
    }

    #[test]
    fn directories_records_and_processes() {
        let dir = tempfile::tempdir().unwrap();
        assert!(VmDir::all(&dir.path().join("absent")).unwrap().is_empty());
        let vm = VmDir::new(dir.path(), "vm-00000001");
        std::fs::create_dir(&vm.path).unwrap();
        std::fs::create_dir(dir.path().join("not-a-vm")).unwrap();
        assert_eq!(VmDir::all(dir.path()).unwrap(), vec![vm.clone()]);
        assert_eq!(vm.record(), None);
        let r = VmRecord {
            group: "g".into(),
            ssh_port: 2222,
            created: 5,
        };
        vm.write_record(&r).unwrap();
        assert_eq!(vm.record(), Some(r));
        // No pid file, then a pid that is not this VM's QEMU (this test process).
        assert_eq!(vm.live_pid(), None);
        std::fs::write(vm.file(PID_FILE), std::process::id().to_string()).unwrap();
        assert_eq!(vm.live_pid(), None, "a recycled pid is not the VM");
        assert!(!is_process_of(u32::MAX, "vm-00000001"));
        std::fs::write(vm.file(QEMU_LOG), "a\nb\nc\n").unwrap();
        assert_eq!(vm.tail(QEMU_LOG, 2), "b\nc");
    }
}
