//! Firecracker's and Cloud Hypervisor's backends, end to end through a `LocalConnector`,
//! against fakes written from their OpenAPI files (no KVM here, so never against the real
//! VMMs). The "VMM process" each backend starts is a shell script that records its
//! arguments and waits to be killed; the fake API listens on the socket that process was
//! told to serve.

mod fake_cloud_hypervisor;
mod fake_firecracker;
mod http;

use fake_cloud_hypervisor::FakeCloudHypervisor;
use fake_firecracker::FakeFirecracker;
use flotilla_connect::local::LocalConnector;
use flotilla_connect::{Connector, ForwardTarget};
use flotilla_vmm::cloud_hypervisor::CloudHypervisor;
use flotilla_vmm::firecracker::Firecracker;
use flotilla_vmm::{Accel, AfterSnapshot, Disk, Machine, SnapshotFiles, VmSpec, Vmm, VmmError};
use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;
use std::time::Duration;

#[test]
fn the_vsock_port_is_the_agents() {
    assert_eq!(
        flotilla_vmm::AGENT_VSOCK_PORT,
        flotilla_guest::protocol::VSOCK_PORT
    );
}

struct Rig {
    tmp: tempfile::TempDir,
    host: Arc<dyn Connector>,
    bin: String,
}

impl Rig {
    fn new() -> Rig {
        let tmp = tempfile::Builder::new()
            .prefix("fl-rest-")
            .tempdir_in("/tmp")
            .unwrap();
        let bin = tmp.path().join("vmm");
        std::fs::write(
            &bin,
            // Gone by itself after two minutes, should a failed test leave it behind.
            "#!/bin/sh\nprintf '%s\\n' \"$@\" > \"$PWD/args.tmp\" && mv \"$PWD/args.tmp\" \"$PWD/args\"\ni=0; while [ $i -lt 120 ]; do sleep 1; i=$((i+1)); done\n",
        )
        .unwrap();
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
        for f in ["vmlinux", "initrd"] {
            std::fs::write(tmp.path().join(f), b"boot").unwrap();
        }
        std::fs::write(tmp.path().join("base.raw"), vec![7u8; 65536]).unwrap();
        Rig {
            host: Arc::new(LocalConnector::new()),
            bin: bin.to_string_lossy().into_owned(),
            tmp,
        }
    }

    fn path(&self, p: &str) -> String {
        self.tmp.path().join(p).to_string_lossy().into_owned()
    }

    /// A VM directory with a writable disk `disk-1.<format>` holding `content`.
    fn vm_dir(&self, name: &str, format: &str, content: &[u8]) -> (String, String) {
        let dir = self.path(name);
        std::fs::create_dir_all(&dir).unwrap();
        let disk = format!("{dir}/disk-1.{format}");
        std::fs::write(&disk, content).unwrap();
        (dir, disk)
    }

    fn spec(&self, dir: &str, disk: &str, format: &str) -> VmSpec {
        VmSpec {
            name: "rest-test".into(),
            machine: Machine::Microvm,
            accel: Accel::Kvm,
            vcpus: 2,
            memory_mib: 128,
            kernel: self.path("vmlinux"),
            initrd: self.path("initrd"),
            cmdline: "console=ttyS0 reboot=k panic=1".into(),
            disks: vec![
                Disk {
                    path: self.path("base.raw"),
                    format: "raw".into(),
                    read_only: true,
                },
                Disk {
                    path: disk.into(),
                    format: format.into(),
                    read_only: false,
                },
            ],
            user_net: false,
            dir: dir.into(),
        }
    }
}

/// The arguments the "VMM process" in `dir` was started with (it may still be starting).
async fn args(dir: &str) -> String {
    for _ in 0..500 {
        if let Ok(a) = std::fs::read_to_string(format!("{dir}/args")) {
            return a;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the VMM process in {dir} never started");
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map(|s| {
            !s.lines()
                .any(|l| l.starts_with("State:") && l.contains('Z'))
        })
        .unwrap_or(false)
}

/// Whether process `pid` is gone within a few seconds: a killed process takes a moment to
/// take its signal and exit, so looking once right after the kill races it.
fn gone(pid: u32) -> bool {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while alive(pid) {
        if std::time::Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    true
}

fn pid_of(dir: &str) -> u32 {
    std::fs::read_to_string(format!("{dir}/vmm.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

mod firecracker {
    use super::*;
    use fake_firecracker::State;

    fn backend(r: &Rig) -> Firecracker {
        Firecracker {
            binary: r.bin.clone(),
            timeout: Duration::from_secs(10),
            tap: None,
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn boots_pauses_snapshots_restores_and_kills() {
        let r = Rig::new();
        let (dir1, disk1) = r.vm_dir("vm1", "raw", &[1u8; 8192]);
        let spec = r.spec(&dir1, &disk1, "raw");
        let fake = FakeFirecracker::new();
        let _srv = http::serve(&spec.api_socket(), fake.handler());
        let fc = backend(&r);

        let vm = fc.boot(r.host.clone(), spec.clone()).await.unwrap();
        assert_eq!(fake.state(), State::Running);
        {
            let f = fake.0.lock().unwrap();
            assert_eq!(
                f.calls,
                [
                    "PUT /machine-config",
                    "PUT /boot-source",
                    "PUT /serial",
                    "PUT /drives/disk0",
                    "PUT /drives/disk1",
                    "PUT /vsock",
                    "PUT /actions"
                ]
            );
            assert_eq!(f.drives["disk0"]["is_read_only"], true);
            assert_eq!(f.drives["disk1"]["path_on_host"], disk1.as_str());
            let vs = f.vsock.as_ref().unwrap();
            assert_eq!(vs["uds_path"], spec.agent_socket().as_str());
            assert_eq!(f.machine.as_ref().unwrap()["vcpu_count"], 2);
        }
        let args = args(&dir1).await;
        assert_eq!(args, format!("--api-sock\n{}\n", spec.api_socket()));
        assert_eq!(vm.agent().socket, spec.agent_socket());
        assert_eq!(vm.agent().connect_line.as_deref(), Some("CONNECT 1024\n"));
        echo_through_vsock(&r, &vm.agent().socket).await;

        vm.pause().await.unwrap();
        assert_eq!(fake.state(), State::Paused);
        vm.resume().await.unwrap();
        assert_eq!(fake.state(), State::Running);

        let snap = SnapshotFiles {
            dir: r.path("snap"),
        };
        let report = vm.snapshot(&snap, AfterSnapshot::Resume).await.unwrap();
        assert_eq!(fake.state(), State::Running, "resumed after the snapshot");
        assert!(
            report.state_bytes > 0 && report.disk_bytes > 0,
            "{report:?}"
        );
        for f in ["vmstate.bin", "state.bin", "disk-1.raw", "firecracker.json"] {
            assert!(
                std::path::Path::new(&format!("{}/{f}", snap.dir)).exists(),
                "{f}"
            );
        }
        // The VM writes on after the snapshot; a restore must see the disk as it was.
        std::fs::write(&disk1, [9u8; 8192]).unwrap();

        vm.pause().await.unwrap();
        let again = SnapshotFiles {
            dir: r.path("snap-paused"),
        };
        vm.snapshot(&again, AfterSnapshot::Resume).await.unwrap();
        assert_eq!(
            fake.state(),
            State::Paused,
            "paused by its owner, it stays so"
        );

        let pid = vm.pid();
        assert!(alive(pid));
        vm.kill().await.unwrap();
        assert!(gone(pid), "the VMM process is gone");
        // The snapshotted VM's directory goes, as at a job's cleanup.
        std::fs::remove_dir_all(&dir1).unwrap();

        let dir2 = r.path("vm2");
        std::fs::create_dir_all(&dir2).unwrap();
        let mut disks = spec.disks.clone();
        disks[1].path = format!("{dir2}/disk-1.raw");
        let spec2 = spec.relocated(&dir2, disks);
        let fake2 = FakeFirecracker::new();
        let _srv2 = http::serve(&spec2.api_socket(), fake2.handler());
        let vm2 = fc
            .restore(r.host.clone(), spec2.clone(), &snap)
            .await
            .unwrap();
        assert_eq!(fake2.state(), State::Running);
        {
            let f = fake2.0.lock().unwrap();
            assert_eq!(
                f.calls,
                ["PUT /snapshot/load", "PATCH /drives/disk1", "PATCH /vm"]
            );
            assert_eq!(
                f.drives["disk1"]["path_on_host"],
                spec2.disks[1].path.as_str()
            );
            assert_eq!(
                f.drives["disk0"]["path_on_host"],
                r.path("base.raw").as_str()
            );
            let vs = f.vsock.as_ref().unwrap();
            assert_eq!(vs["uds_path"], spec2.agent_socket().as_str());
        }
        assert_eq!(std::fs::read(&spec2.disks[1].path).unwrap(), [1u8; 8192]);
        echo_through_vsock(&r, &vm2.agent().socket).await;
        assert!(
            std::fs::symlink_metadata(&disk1).is_err(),
            "the bridge to the old drive path is removed"
        );
        let pid2 = vm2.pid();
        assert!(fc.kill_dir(&*r.host, &dir2).await.unwrap());
        assert!(gone(pid2));
        assert!(!fc.kill_dir(&*r.host, &dir2).await.unwrap());
    }

    /// The agent's port through the connector and the VMM's hybrid vsock; another port is
    /// refused.
    async fn echo_through_vsock(r: &Rig, socket: &str) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let target = ForwardTarget::Unix(socket.to_string());
        let mut s = r.host.forward(&target).await.unwrap();
        flotilla_vmm::vsock::connect(&mut *s, flotilla_vmm::AGENT_VSOCK_PORT)
            .await
            .unwrap();
        s.write_all(b"ping").await.unwrap();
        let mut back = [0u8; 4];
        s.read_exact(&mut back).await.unwrap();
        assert_eq!(&back, b"ping");
        let mut other = r.host.forward(&target).await.unwrap();
        let e = flotilla_vmm::vsock::connect(&mut *other, 22)
            .await
            .unwrap_err();
        assert!(e.to_string().contains("nothing listens"), "{e}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_refused_call_names_itself_and_carries_the_fault_message() {
        let r = Rig::new();
        let (dir, disk) = r.vm_dir("vm", "raw", b"x");
        let mut spec = r.spec(&dir, &disk, "raw");
        spec.kernel = r.path("no-such-vmlinux");
        let fake = FakeFirecracker::new();
        let _srv = http::serve(&spec.api_socket(), fake.handler());
        let e = backend(&r).boot(r.host.clone(), spec).await.unwrap_err();
        match &e {
            VmmError::Api {
                vmm,
                call,
                status,
                message,
            } => {
                assert_eq!(
                    (*vmm, call.as_str(), *status),
                    ("firecracker", "PUT /boot-source", 400)
                );
                assert!(message.contains("no-such-vmlinux"), "{message}");
            }
            other => panic!("not an API error: {other:?}"),
        }
        assert!(gone(pid_of(&dir)), "a failed boot kills its process");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn what_it_cannot_do_is_refused_before_a_process_starts() {
        let r = Rig::new();
        let (dir, disk) = r.vm_dir("vm", "qcow2", b"x");
        let spec = r.spec(&dir, &disk, "qcow2");
        let e = backend(&r).boot(r.host.clone(), spec).await.unwrap_err();
        assert!(matches!(e, VmmError::Unsupported(_)), "{e}");
        assert!(e.to_string().contains("raw disk images only"), "{e}");
        assert!(!std::path::Path::new(&format!("{dir}/vmm.pid")).exists());
    }

    #[tokio::test]
    async fn the_fake_refuses_what_the_api_refuses() {
        let r = Rig::new();
        let sock = r.path("api.sock");
        let fake = FakeFirecracker::new();
        let _srv = http::serve(&sock, fake.handler());
        let fault = |(s, b): (u16, String)| {
            assert_eq!(s, 400, "{b}");
            b
        };
        // A required field missing, an enum value outside the schema, an unknown field.
        let b = fault(http::raw(&sock, "PUT", "/boot-source", r#"{"boot_args":"quiet"}"#).await);
        assert!(b.contains("missing field `kernel_image_path`"), "{b}");
        let b = fault(http::raw(&sock, "PUT", "/actions", r#"{"action_type":"Start"}"#).await);
        assert!(b.contains("unknown variant"), "{b}");
        let b = fault(
            http::raw(
                &sock,
                "PUT",
                "/machine-config",
                r#"{"vcpu_count":1,"mem_size_mib":128,"memory":1}"#,
            )
            .await,
        );
        assert!(b.contains("unknown field `memory`"), "{b}");
        let b = fault(
            http::raw(
                &sock,
                "PUT",
                "/machine-config",
                r#"{"vcpu_count":33,"mem_size_mib":128}"#,
            )
            .await,
        );
        assert!(b.contains("outside 1..=32"), "{b}");
        // Post-boot calls before boot; a start without a kernel.
        let b = fault(http::raw(&sock, "PATCH", "/vm", r#"{"state":"Paused"}"#).await);
        assert!(b.contains("not supported before starting"), "{b}");
        let b = fault(
            http::raw(
                &sock,
                "PUT",
                "/actions",
                r#"{"action_type":"InstanceStart"}"#,
            )
            .await,
        );
        assert!(b.contains("without kernel configuration"), "{b}");
        let kernel = format!(r#"{{"kernel_image_path":"{}"}}"#, r.path("vmlinux"));
        assert_eq!(
            http::raw(&sock, "PUT", "/boot-source", &kernel).await.0,
            204
        );
        // A load after configuring is refused.
        let load = format!(
            r#"{{"snapshot_path":"{0}/s","mem_backend":{{"backend_type":"File","backend_path":"{0}/m"}}}}"#,
            r.path("")
        );
        let b = fault(http::raw(&sock, "PUT", "/snapshot/load", &load).await);
        assert!(b.contains("not allowed after configuring"), "{b}");
        assert_eq!(
            http::raw(
                &sock,
                "PUT",
                "/actions",
                r#"{"action_type":"InstanceStart"}"#
            )
            .await
            .0,
            204
        );
        // Pre-boot calls after boot; a snapshot of a running VM.
        let b = fault(http::raw(&sock, "PUT", "/boot-source", &kernel).await);
        assert!(b.contains("not supported after starting"), "{b}");
        let snap = format!(
            r#"{{"snapshot_path":"{0}/s","mem_file_path":"{0}/m","snapshot_type":"Full"}}"#,
            r.path("")
        );
        let b = fault(http::raw(&sock, "PUT", "/snapshot/create", &snap).await);
        assert!(b.contains("must be Paused"), "{b}");
        assert_eq!(
            http::raw(&sock, "PATCH", "/vm", r#"{"state":"Paused"}"#)
                .await
                .0,
            204
        );
        assert_eq!(
            http::raw(&sock, "PUT", "/snapshot/create", &snap).await.0,
            204
        );
    }
}

mod cloud_hypervisor {
    use super::*;
    use fake_cloud_hypervisor::State;

    fn backend(r: &Rig) -> CloudHypervisor {
        CloudHypervisor {
            binary: r.bin.clone(),
            timeout: Duration::from_secs(10),
            tap: None,
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn boots_pauses_snapshots_restores_and_kills() {
        let r = Rig::new();
        let (dir1, disk1) = r.vm_dir("vm1", "qcow2", &[1u8; 8192]);
        let spec = r.spec(&dir1, &disk1, "qcow2");
        let fake = FakeCloudHypervisor::new();
        let _srv = http::serve(&spec.api_socket(), fake.handler());
        let ch = backend(&r);

        let vm = ch.boot(r.host.clone(), spec.clone()).await.unwrap();
        assert_eq!(fake.state(), State::Running);
        {
            let f = fake.0.lock().unwrap();
            assert_eq!(f.calls, ["PUT /api/v1/vm.create", "PUT /api/v1/vm.boot"]);
            let c = f.config.as_ref().unwrap();
            assert_eq!(c["payload"]["kernel"], r.path("vmlinux").as_str());
            assert_eq!(c["payload"]["initramfs"], r.path("initrd").as_str());
            assert_eq!(c["memory"]["size"], 128u64 << 20);
            assert_eq!(c["disks"][1]["path"], disk1.as_str());
            assert_eq!(c["disks"][1]["image_type"], "Qcow2");
            assert_eq!(c["disks"][0]["readonly"], true);
            assert_eq!(c["vsock"]["socket"], spec.agent_socket().as_str());
            assert_eq!(c["serial"]["file"], spec.console_log().as_str());
        }
        let args = args(&dir1).await;
        assert_eq!(args, format!("--api-socket\npath={}\n", spec.api_socket()));
        assert_eq!(vm.agent().connect_line.as_deref(), Some("CONNECT 1024\n"));

        vm.pause().await.unwrap();
        assert_eq!(fake.state(), State::Paused);
        vm.resume().await.unwrap();
        assert_eq!(fake.state(), State::Running);

        let snap = SnapshotFiles {
            dir: r.path("snap"),
        };
        let report = vm.snapshot(&snap, AfterSnapshot::Stop).await.unwrap();
        assert_eq!(fake.state(), State::Paused, "it stays stopped");
        assert!(
            report.state_bytes > 0 && report.disk_bytes > 0,
            "{report:?}"
        );
        for f in [
            "cloud-hypervisor/config.json",
            "cloud-hypervisor/state.json",
            "cloud-hypervisor/memory-ranges",
            "disk-1.qcow2",
        ] {
            assert!(
                std::path::Path::new(&format!("{}/{f}", snap.dir)).exists(),
                "{f}"
            );
        }
        std::fs::write(&disk1, [9u8; 8192]).unwrap();
        let pid = vm.pid();
        vm.kill().await.unwrap();
        assert!(
            fake.0.lock().unwrap().vmm_shut_down,
            "asked to shut down first"
        );
        assert!(gone(pid));
        std::fs::remove_dir_all(&dir1).unwrap();

        let dir2 = r.path("vm2");
        std::fs::create_dir_all(&dir2).unwrap();
        let mut disks = spec.disks.clone();
        disks[1].path = format!("{dir2}/disk-1.qcow2");
        let spec2 = spec.relocated(&dir2, disks);
        let fake2 = FakeCloudHypervisor::new();
        let _srv2 = http::serve(&spec2.api_socket(), fake2.handler());
        let vm2 = ch
            .restore(r.host.clone(), spec2.clone(), &snap)
            .await
            .unwrap();
        assert_eq!(fake2.state(), State::Running);
        {
            let f = fake2.0.lock().unwrap();
            assert_eq!(f.calls, ["PUT /api/v1/vm.restore", "PUT /api/v1/vm.resume"]);
            let c = f.config.as_ref().unwrap();
            assert_eq!(c["disks"][1]["path"], spec2.disks[1].path.as_str());
            assert_eq!(c["vsock"]["socket"], spec2.agent_socket().as_str());
            assert_eq!(c["serial"]["file"], spec2.console_log().as_str());
        }
        assert_eq!(std::fs::read(&spec2.disks[1].path).unwrap(), [1u8; 8192]);
        // The snapshot itself is untouched: another restore would find the old paths there.
        let kept =
            std::fs::read_to_string(format!("{}/cloud-hypervisor/config.json", snap.dir)).unwrap();
        assert!(kept.contains(&disk1), "{kept}");
        let pid2 = vm2.pid();
        vm2.kill().await.unwrap();
        assert!(gone(pid2));
        assert!(!ch.kill_dir(&*r.host, &dir2).await.unwrap());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_call_in_the_wrong_state_names_itself_and_carries_the_error_chain() {
        let r = Rig::new();
        let (dir, disk) = r.vm_dir("vm", "raw", b"x");
        let spec = r.spec(&dir, &disk, "raw");
        let fake = FakeCloudHypervisor::new();
        let _srv = http::serve(&spec.api_socket(), fake.handler());
        let vm = backend(&r).boot(r.host.clone(), spec).await.unwrap();
        let e = vm.resume().await.unwrap_err();
        match &e {
            VmmError::Api {
                vmm,
                call,
                status,
                message,
            } => {
                assert_eq!(
                    (*vmm, call.as_str(), *status),
                    ("cloud-hypervisor", "PUT /api/v1/vm.resume", 405)
                );
                assert!(
                    message.contains("The VM could not resume: The VM is not paused"),
                    "{message}"
                );
            }
            other => panic!("not an API error: {other:?}"),
        }
        // A snapshot of a VM paused by its owner leaves it paused.
        vm.pause().await.unwrap();
        let snap = SnapshotFiles {
            dir: r.path("snap"),
        };
        vm.snapshot(&snap, AfterSnapshot::Resume).await.unwrap();
        assert_eq!(fake.state(), State::Paused);
        vm.kill().await.unwrap();
    }

    #[tokio::test]
    async fn the_fake_refuses_what_the_api_refuses() {
        let r = Rig::new();
        let sock = r.path("api.sock");
        let fake = FakeCloudHypervisor::new();
        let _srv = http::serve(&sock, fake.handler());
        let raw = |m: &'static str, op: &'static str, body: String| {
            let sock = sock.clone();
            async move { http::raw(&sock, m, &format!("/api/v1/{op}"), &body).await }
        };
        let (s, b) = raw("PUT", "vm.boot", String::new()).await;
        assert_eq!(s, 404, "{b}");
        assert!(b.contains("The VM is not created"), "{b}");
        let (s, b) = raw(
            "PUT",
            "vm.create",
            r#"{"cpus":{"boot_vcpus":1,"max_vcpus":1}}"#.into(),
        )
        .await;
        assert_eq!(s, 400, "{b}");
        assert!(b.contains("missing field `payload`"), "{b}");
        let kernel = r.path("vmlinux");
        let (s, b) = raw(
            "PUT",
            "vm.create",
            format!(r#"{{"payload":{{"kernel":"{kernel}"}},"cpus":{{"boot_vcpus":1}}}}"#),
        )
        .await;
        assert_eq!(s, 400, "{b}");
        assert!(b.contains("missing field `max_vcpus`"), "{b}");
        let (s, b) = raw(
            "PUT",
            "vm.create",
            format!(r#"{{"payload":{{"kernel":"{kernel}"}},"serial":{{"mode":"Screen"}}}}"#),
        )
        .await;
        assert_eq!(s, 400, "{b}");
        assert!(b.contains("unknown variant"), "{b}");
        let (s, _) = raw(
            "PUT",
            "vm.create",
            format!(r#"{{"payload":{{"kernel":"{kernel}"}}}}"#),
        )
        .await;
        assert_eq!(s, 204);
        let (s, b) = raw("PUT", "vm.pause", String::new()).await;
        assert_eq!(s, 405, "created, not booted: {b}");
        assert_eq!(raw("PUT", "vm.boot", String::new()).await.0, 204);
        let dest = r.path("");
        let (s, b) = raw(
            "PUT",
            "vm.snapshot",
            format!(r#"{{"destination_url":"file://{dest}"}}"#),
        )
        .await;
        assert_eq!(s, 500, "{b}");
        assert!(b.contains("Trying to snapshot while VM is running"), "{b}");
        let (s, b) = raw(
            "PUT",
            "vm.restore",
            format!(r#"{{"source_url":"file://{dest}"}}"#),
        )
        .await;
        assert_eq!(s, 404, "a VM exists: {b}");
        assert_eq!(raw("PUT", "vm.pause", String::new()).await.0, 204);
        let (s, b) = raw(
            "PUT",
            "vm.snapshot",
            format!(r#"{{"destination_url":"file://{dest}"}}"#),
        )
        .await;
        assert_eq!(s, 204, "{b}");
    }
}
