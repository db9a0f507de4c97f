//! QEMU's command line for a [`VmSpec`] (pure). Boot and restore use the same line (a
//! restore adds `-incoming defer`): the migrated state only fits the machine it came from.

use crate::spec::{Accel, Machine, VmSpec};

/// Node name of disk `i`'s format layer (`disk0`); its file layer is `disk0-file`.
pub fn disk_node(i: usize) -> String {
    format!("disk{i}")
}

/// The arguments (without the program) that start `spec`'s VM, daemonized with a pid file;
/// `incoming`: wait for migrated state instead of booting.
pub fn args(spec: &VmSpec, incoming: bool) -> Vec<String> {
    let (machine, bus) = match spec.machine {
        Machine::Microvm => ("microvm", "device"),
        Machine::Q35 => ("q35", "pci"),
    };
    let accel = match spec.accel {
        Accel::Tcg => "tcg",
        Accel::Kvm => "kvm",
    };
    let mut a: Vec<String> = Vec::new();
    let mut push = |items: &[&str]| a.extend(items.iter().map(|s| s.to_string()));
    push(&["-name", &spec.name]);
    push(&["-machine", machine, "-accel", accel]);
    push(&["-m", &spec.memory_mib.to_string()]);
    push(&["-smp", &spec.vcpus.to_string()]);
    push(&["-nodefaults", "-no-user-config", "-nographic", "-no-reboot"]);
    push(&["-kernel", &spec.kernel, "-initrd", &spec.initrd]);
    push(&["-append", &spec.cmdline]);
    push(&[
        "-chardev",
        &format!("file,id=console,path={}", spec.console_log()),
        "-serial",
        "chardev:console",
    ]);
    push(&[
        "-chardev",
        &format!(
            "socket,id=qmp,path={},server=on,wait=off",
            spec.api_socket()
        ),
        "-mon",
        "chardev=qmp,mode=control",
    ]);
    push(&["-device", &format!("virtio-serial-{bus},id=vser0")]);
    push(&[
        "-chardev",
        &format!(
            "socket,id=agent,path={},server=on,wait=off",
            spec.agent_socket()
        ),
        "-device",
        &format!(
            "virtserialport,chardev=agent,name={}",
            crate::AGENT_PORT_NAME
        ),
    ]);
    for (i, d) in spec.disks.iter().enumerate() {
        let node = disk_node(i);
        let ro = if d.read_only { "on" } else { "off" };
        push(&[
            "-blockdev",
            &format!(
                "driver=file,node-name={node}-file,filename={},read-only={ro}",
                d.path
            ),
            "-blockdev",
            &format!(
                "driver={},node-name={node},file={node}-file,read-only={ro}",
                d.format
            ),
            "-device",
            // The serial names the disk in the guest (`/sys/block/*/serial`): a microVM's
            // kernel need not find its disks in this order.
            &format!("virtio-blk-{bus},drive={node},id=vd{i},serial=vd{i}"),
        ]);
    }
    if spec.user_net {
        push(&[
            "-netdev",
            "user,id=net0",
            "-device",
            &format!("virtio-net-{bus},netdev=net0"),
        ]);
    }
    if incoming {
        push(&["-incoming", "defer"]);
    }
    push(&["-daemonize", "-pidfile", &spec.pid_file()]);
    a
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::Disk;

    fn spec() -> VmSpec {
        VmSpec {
            name: "flotilla-job-1".into(),
            machine: Machine::Microvm,
            accel: Accel::Tcg,
            vcpus: 1,
            memory_mib: 256,
            kernel: "/boot/vmlinuz-6.1.0-56-cloud-amd64".into(),
            initrd: "/var/lib/flotilla/boot/initrd-abc.img".into(),
            cmdline: "console=ttyS0 tsc_early_khz=2000000".into(),
            disks: vec![Disk {
                path: "/v/disk-0.qcow2".into(),
                format: "qcow2".into(),
                read_only: false,
            }],
            user_net: false,
            dir: "/v".into(),
        }
    }

    #[test]
    fn a_microvm_line_has_mmio_devices_and_sockets_in_its_dir() {
        let a = args(&spec(), false);
        let line = a.join(" ");
        assert!(line.contains("-machine microvm -accel tcg"), "{line}");
        assert!(line.contains("virtio-serial-device"), "{line}");
        assert!(
            line.contains("virtio-blk-device,drive=disk0,id=vd0,serial=vd0"),
            "{line}"
        );
        assert!(
            line.contains("path=/v/api.sock,server=on,wait=off"),
            "{line}"
        );
        assert!(line.contains("path=/v/agent.sock"), "{line}");
        assert!(line.contains("-pidfile /v/vmm.pid"), "{line}");
        assert!(!line.contains("-incoming"), "{line}");
        assert!(!line.contains("netdev"), "{line}");
        // The command line is one argument, spaces and all.
        let i = a.iter().position(|x| x == "-append").unwrap();
        assert_eq!(a[i + 1], "console=ttyS0 tsc_early_khz=2000000");
    }

    #[test]
    fn a_restore_is_the_same_machine_waiting_for_its_state() {
        let boot = args(&spec(), false);
        let restore = args(&spec(), true);
        let i = restore.iter().position(|x| x == "-incoming").unwrap();
        let mut without = restore.clone();
        without.drain(i..i + 2);
        assert_eq!(without, boot);
        let mut q = spec();
        q.machine = Machine::Q35;
        q.user_net = true;
        let line = args(&q, false).join(" ");
        assert!(
            line.contains("virtio-blk-pci") && line.contains("virtio-net-pci"),
            "{line}"
        );
    }
}
