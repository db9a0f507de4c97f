//! QEMU for real (TCG): a microVM booted with the embedded agent as init, reached through
//! its socket, snapshotted while it runs on, restored, and killed.

use flotilla_connect::local::LocalConnector;
use flotilla_connect::{Connector, ConnectorExt, ForwardTarget};
use flotilla_guest::{AGENT, Dialer, GuestConnector};
use flotilla_testkit::infra::{Infra, kernel_path, require};
use flotilla_vmm::qemu::Qemu;
use flotilla_vmm::{
    Accel, AfterSnapshot, Disk, Machine, SnapshotFiles, VmSpec, Vmm, disk, initramfs, kernel,
    kernel_cmdline,
};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[test]
fn the_port_name_is_the_agents() {
    assert_eq!(
        flotilla_vmm::AGENT_PORT_NAME,
        flotilla_guest::protocol::PORT_NAME
    );
}

/// A root file system of busybox alone, as a raw ext4 image.
fn busybox_root(dir: &std::path::Path) -> String {
    let root = dir.join("root");
    std::fs::create_dir_all(root.join("bin")).unwrap();
    std::fs::create_dir_all(root.join("etc")).unwrap();
    std::fs::copy("/bin/busybox", root.join("bin/busybox")).unwrap();
    for applet in ["sh", "echo", "cat", "ls", "id", "sleep", "touch", "rm"] {
        std::os::unix::fs::symlink("busybox", root.join("bin").join(applet)).unwrap();
    }
    std::fs::write(root.join("etc/passwd"), "root:x:0:0:root:/root:/bin/sh\n").unwrap();
    let image = dir.join("base.ext4");
    let st = std::process::Command::new("mke2fs")
        .args(["-q", "-F", "-t", "ext4", "-O", "^has_journal", "-d"])
        .arg(&root)
        .arg(&image)
        .arg("64M")
        .status()
        .unwrap();
    assert!(st.success());
    image.to_string_lossy().into_owned()
}

fn guest(host: Arc<dyn Connector>, socket: String) -> GuestConnector {
    let dial: Dialer = Arc::new(move || {
        let (host, socket) = (host.clone(), socket.clone());
        Box::pin(async move { host.forward(&ForwardTarget::Unix(socket)).await })
    });
    GuestConnector::new("microvm", dial).with_env(vec![("PATH".into(), "/bin".into())])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn infra_a_microvm_boots_snapshots_and_restores() {
    if !require(Infra::Qemu) {
        return;
    }
    let tmp = tempfile::Builder::new()
        .prefix("fl-vmm-")
        .tempdir_in("/tmp")
        .unwrap();
    let dir = tmp.path().to_string_lossy().into_owned();
    let host: Arc<dyn Connector> = Arc::new(LocalConnector::new());
    let k = kernel::find(&*host, kernel_path().as_deref().and_then(|p| p.to_str()))
        .await
        .unwrap();
    let wanted = initramfs::wanted_modules(Machine::Microvm, false, false);
    let initrd = initramfs::ensure(&*host, &dir, &k, AGENT, &wanted)
        .await
        .unwrap();
    let base = busybox_root(tmp.path());
    let vm_dir = format!("{dir}/vm1");
    std::fs::create_dir_all(&vm_dir).unwrap();
    let top = format!("{vm_dir}/disk-0.qcow2");
    disk::overlay(&*host, &top, &base, "raw", None)
        .await
        .unwrap();
    let spec = VmSpec {
        name: "flotilla-test".into(),
        machine: Machine::Microvm,
        accel: Accel::Tcg,
        vcpus: 1,
        memory_mib: 128,
        kernel: k.path.clone(),
        initrd: initrd.path.clone(),
        cmdline: kernel_cmdline(2_000_000, &["flotilla.hostname=vm1".into()]),
        disks: vec![Disk {
            path: top,
            format: "qcow2".into(),
            read_only: false,
        }],
        user_net: false,
        dir: vm_dir.clone(),
    };
    let qemu = Qemu::default();
    let started = Instant::now();
    let vm = qemu.boot(host.clone(), spec.clone()).await.unwrap();
    let g = guest(host.clone(), vm.agent().socket);
    let info = g.wait_ready(Duration::from_secs(60)).await.unwrap();
    eprintln!(
        "booted to the agent in {:?}: {}",
        started.elapsed(),
        info.info
    );
    let out = g
        .output("echo hi from $(cat /proc/sys/kernel/hostname); id -u")
        .await
        .unwrap();
    assert_eq!(out.stdout_str(), "hi from vm1\n0\n", "{}", out.stderr_str());
    assert!(
        g.output("echo before > /before")
            .await
            .unwrap()
            .status
            .success()
    );

    // A snapshot while the VM runs on.
    let snap = SnapshotFiles {
        dir: format!("{dir}/snap"),
    };
    let report = vm.snapshot(&snap, AfterSnapshot::Resume).await.unwrap();
    eprintln!("snapshot: {report:?}");
    assert!(report.state_bytes > 1_000_000, "{report:?}");
    assert!(
        g.output("echo after > /after")
            .await
            .unwrap()
            .status
            .success()
    );
    let out = g.output("cat /before /after").await.unwrap();
    assert_eq!(out.stdout_str(), "before\nafter\n", "{}", out.stderr_str());

    // A restore in a directory of its own, over the frozen layer: it has the file from
    // before the snapshot, not the one written after.
    let vm2_dir = format!("{dir}/vm2");
    std::fs::create_dir_all(&vm2_dir).unwrap();
    let top2 = format!("{vm2_dir}/disk-0.qcow2");
    disk::overlay(&*host, &top2, &snap.disk(0), "qcow2", None)
        .await
        .unwrap();
    let spec2 = spec.relocated(
        &vm2_dir,
        vec![Disk {
            path: top2,
            format: "qcow2".into(),
            read_only: false,
        }],
    );
    let started = Instant::now();
    let vm2 = qemu.restore(host.clone(), spec2, &snap).await.unwrap();
    let g2 = guest(host.clone(), vm2.agent().socket);
    g2.wait_ready(Duration::from_secs(20)).await.unwrap();
    let out = g2
        .output("cat /before; ls /after 2>&1 || true")
        .await
        .unwrap();
    eprintln!("restored to a command in {:?}", started.elapsed());
    assert!(out.stdout_str().starts_with("before\n"), "{out:?}");
    assert!(out.stdout_str().contains("No such file"), "{out:?}");
    // Both run on side by side, each writing its own layer.
    assert!(g.output("cat /after").await.unwrap().status.success());

    // Killing finds the VMs by their directory; a second kill finds nothing.
    assert!(qemu.kill_dir(&*host, &vm_dir).await.unwrap());
    assert!(!qemu.kill_dir(&*host, &vm_dir).await.unwrap());
    vm2.kill().await.unwrap();
    assert!(
        !std::path::Path::new(&format!("/proc/{}", vm2.pid())).exists()
            || std::fs::read_to_string(format!("/proc/{}/status", vm2.pid()))
                .unwrap_or_default()
                .contains("zombie")
    );
}
