//! The QEMU command line of one VM (pure).

use crate::settings::QemuSettings;
use crate::vm::{CONSOLE_LOG, PID_FILE, QMP_SOCKET, process_name};
use base64::Engine;

/// What differs from one VM to the next.
#[derive(Debug, Clone, Copy)]
pub struct Launch<'a> {
    /// The group's settings.
    pub settings: &'a QemuSettings,
    /// The VM's id.
    pub id: &'a str,
    /// The host port on 127.0.0.1 forwarded to the guest's port 22.
    pub ssh_port: u16,
    /// The `authorized_keys` line the guest installs for root.
    pub authorized_key: &'a str,
    /// The host's TSC frequency in kHz, for `tsc_early_khz` under TCG.
    pub tsc_khz: u64,
    /// `raw` or `qcow2`: the base disk's format.
    pub disk_format: &'static str,
}

/// The TSC frequency `tsc_early_khz` gets when the host's cannot be read.
pub const DEFAULT_TSC_KHZ: u64 = 2_000_000;

/// The guest's kernel command line: the console, no reboot on panic (the VM ends instead),
/// `tsc_early_khz` under TCG (without it most boots hang calibrating the TSC), then what the
/// guest's init reads (`flotilla.hostname`, `flotilla.authorized_key` in base64 so that it is
/// one word, `flotilla.max_lifetime`), then the user's `append`.
pub fn kernel_cmdline(l: &Launch<'_>) -> String {
    let mut words = vec![
        "console=ttyS0".to_string(),
        "quiet".into(),
        "panic=-1".into(),
        "reboot=t".into(),
    ];
    if l.settings.accel == "tcg" {
        words.push(format!("tsc_early_khz={}", l.tsc_khz));
    }
    words.push(format!("flotilla.hostname={}", l.id));
    words.push(format!(
        "flotilla.authorized_key={}",
        base64::engine::general_purpose::STANDARD.encode(l.authorized_key.trim())
    ));
    if l.settings.max_lifetime > 0 {
        words.push(format!("flotilla.max_lifetime={}", l.settings.max_lifetime));
    }
    let append = l.settings.append.trim();
    if !append.is_empty() {
        words.push(append.to_string());
    }
    words.join(" ")
}

/// QEMU's arguments for the VM, to be run with the VM's directory as working directory (so
/// every path of the VM is relative and short) and `TMPDIR` pointing there (so the disk
/// overlay `snapshot=on` makes lives there, unlinked: it goes when QEMU goes, even on
/// SIGKILL).
///
/// A `microvm` machine with virtio-mmio devices: the root disk, and a user-mode network whose
/// only way in is the guest's port 22 forwarded from 127.0.0.1.
pub fn args(l: &Launch<'_>) -> Vec<String> {
    let s = l.settings;
    let mut netdev = format!("user,id=net0,hostfwd=tcp:127.0.0.1:{}-:22", l.ssh_port);
    if s.restrict_network {
        netdev.push_str(",restrict=on");
    }
    let mut args: Vec<String> = vec![
        "-name".into(),
        process_name(l.id),
        "-machine".into(),
        "microvm".into(),
        "-accel".into(),
        s.accel.clone(),
        "-m".into(),
        s.memory_mb.to_string(),
        "-smp".into(),
        s.cpus.to_string(),
        "-nodefaults".into(),
        "-no-user-config".into(),
        "-display".into(),
        "none".into(),
        "-no-reboot".into(),
        "-kernel".into(),
        s.kernel.to_string_lossy().into_owned(),
    ];
    if let Some(initrd) = &s.initrd {
        args.extend(["-initrd".into(), initrd.to_string_lossy().into_owned()]);
    }
    args.extend([
        "-append".into(),
        kernel_cmdline(l),
        "-drive".into(),
        format!(
            "id=root,file={},format={},if=none,snapshot=on",
            escape_option(&s.disk.to_string_lossy()),
            l.disk_format
        ),
        "-device".into(),
        "virtio-blk-device,drive=root".into(),
        "-netdev".into(),
        netdev,
        "-device".into(),
        "virtio-net-device,netdev=net0".into(),
        "-serial".into(),
        format!("file:{CONSOLE_LOG}"),
        "-qmp".into(),
        format!("unix:{QMP_SOCKET},server=on,wait=off"),
        "-pidfile".into(),
        PID_FILE.into(),
    ]);
    args
}

/// A value inside a QEMU option list: commas are doubled.
fn escape_option(value: &str) -> String {
    value.replace(',', ",,")
}

/// The base disk's format from its first bytes: qcow2 files start with `QFI\xfb`.
pub fn disk_format(head: &[u8]) -> &'static str {
    if head.starts_with(b"QFI\xfb") {
        "qcow2"
    } else {
        "raw"
    }
}

/// The host's TSC frequency in kHz from `/proc/cpuinfo` (the first `cpu MHz` line).
pub fn tsc_khz_from_cpuinfo(cpuinfo: &str) -> Option<u64> {
    cpuinfo.lines().find_map(|l| {
        let (key, value) = l.split_once(':')?;
        if key.trim() != "cpu MHz" {
            return None;
        }
        let mhz: f64 = value.trim().parse().ok()?;
        (mhz.is_finite() && mhz > 0.0).then(|| (mhz * 1000.0).round() as u64)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn settings() -> QemuSettings {
        QemuSettings::from_plugin_config(&json!({
            "name": "vms", "disk": "/img/d,isk.img", "kernel": "/img/vmlinuz",
            "initrd": "/img/initrd.img", "vm_dir": "/state/qemu/vms", "max_lifetime": 600,
            "append": "loglevel=3"
        }))
        .unwrap()
    }

    #[test]
    fn the_command_line() {
        let s = settings();
        let l = Launch {
            settings: &s,
            id: "vm-0000abcd",
            ssh_port: 40022,
            authorized_key: "ssh-ed25519 AAAA flotilla/qemu/vms\n",
            tsc_khz: 2_500_000,
            disk_format: "raw",
        };
        let a = args(&l);
        let at = |flag: &str| &a[a.iter().position(|x| x == flag).unwrap() + 1];
        assert_eq!(at("-name"), "flotilla-vm-0000abcd");
        assert_eq!(at("-machine"), "microvm");
        assert_eq!(at("-accel"), "tcg");
        assert_eq!(at("-m"), "512");
        assert_eq!(at("-initrd"), "/img/initrd.img");
        assert_eq!(
            at("-drive"),
            "id=root,file=/img/d,,isk.img,format=raw,if=none,snapshot=on"
        );
        assert_eq!(
            at("-netdev"),
            "user,id=net0,hostfwd=tcp:127.0.0.1:40022-:22"
        );
        assert_eq!(at("-pidfile"), "qemu.pid");
        assert_eq!(at("-qmp"), "unix:qmp.sock,server=on,wait=off");
        let cmdline = at("-append");
        assert!(
            cmdline.starts_with("console=ttyS0 quiet panic=-1 reboot=t tsc_early_khz=2500000 "),
            "{cmdline}"
        );
        assert!(
            cmdline.contains(" flotilla.hostname=vm-0000abcd "),
            "{cmdline}"
        );
        let key = cmdline
            .split(' ')
            .find_map(|w| w.strip_prefix("flotilla.authorized_key="))
            .unwrap();
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(key)
            .unwrap();
        assert_eq!(decoded, b"ssh-ed25519 AAAA flotilla/qemu/vms");
        assert!(
            cmdline.ends_with(" flotilla.max_lifetime=600 loglevel=3"),
            "{cmdline}"
        );
    }

    #[test]
    fn kvm_needs_no_tsc_hint_and_a_restricted_network_says_so() {
        let mut s = settings();
        s.accel = "kvm".into();
        s.restrict_network = true;
        s.max_lifetime = 0;
        s.append.clear();
        let l = Launch {
            settings: &s,
            id: "vm-00000001",
            ssh_port: 1,
            authorized_key: "k",
            tsc_khz: 1,
            disk_format: "qcow2",
        };
        assert!(!kernel_cmdline(&l).contains("tsc_early_khz"));
        assert!(!kernel_cmdline(&l).contains("max_lifetime"));
        let a = args(&l);
        assert!(a.iter().any(|x| x.ends_with(",restrict=on")));
        assert!(a.iter().any(|x| x.contains("format=qcow2")));
    }

    #[test]
    fn formats_and_frequencies() {
        assert_eq!(disk_format(b"QFI\xfb\0\0\0\x03"), "qcow2");
        assert_eq!(disk_format(b"\0\0\0\0"), "raw");
        assert_eq!(disk_format(b""), "raw");
        assert_eq!(
            tsc_khz_from_cpuinfo("processor\t: 0\ncpu MHz\t\t: 2495.998\nflags: x\n"),
            Some(2_495_998)
        );
        assert_eq!(tsc_khz_from_cpuinfo("processor: 0\n"), None);
        assert_eq!(tsc_khz_from_cpuinfo("cpu MHz : nope\n"), None);
    }
}
