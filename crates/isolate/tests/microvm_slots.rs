//! The microvm level on this host, for real (QEMU under TCG, the Debian cloud kernel, the
//! busybox test image as the root file system): a job's helper stages run on the instance and
//! its build stages in a VM of its own, the job's files follow the stages both ways, the
//! script's output and exit status come back, and the VM is gone after cleanup; a VM a dead
//! manager left is killed by the next manager's sweep.

use crate::vm_support;

use flotilla_connect::Connector;
use flotilla_connect::local::LocalConnector;
use flotilla_isolate::Isolation;
use flotilla_isolate::microvm::{MicrovmConfig, MicrovmIsolation};
use flotilla_job::model::{Image, JobInfo, Port};
use flotilla_job::{ExecCommand, ExecSpec, ExitStatus, JobPayload, Place};
use flotilla_testkit::images::busybox_image;
use flotilla_testkit::infra::{Infra, require};
use flotilla_testkit::vms::VmGuard;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;
use tokio_util::sync::CancellationToken;
use vm_support::{alive, stage, vmm_pid as qemu_of};

fn job(id: i64, image: &str) -> JobPayload {
    JobPayload {
        id,
        job_info: JobInfo {
            project_full_path: "group/project".into(),
            ..Default::default()
        },
        image: Some(Image {
            name: image.into(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn level(state: &Path, owner: &str) -> MicrovmIsolation {
    MicrovmIsolation::new(MicrovmConfig {
        state_dir: state.to_str().unwrap().to_string(),
        owner: owner.into(),
        memory_mib: 256,
        network: false,
        ..MicrovmConfig::default()
    })
    .unwrap()
}

async fn prepared_in(
    iso: &MicrovmIsolation,
    builds: &Path,
    job: &JobPayload,
    slot: usize,
) -> (Box<dyn flotilla_isolate::IsolatedEnvironment>, String) {
    vm_support::prepared(iso, builds.to_str().unwrap(), job, slot).await
}

fn scratch(prefix: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in("/tmp")
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn infra_microvm_a_job_runs_in_its_own_vm_and_its_files_follow_the_stages() {
    if !require(Infra::Qemu) || !require(Infra::Docker) {
        return;
    }
    let state = scratch("fl-microvm-state-");
    // A failed assertion must not leave VMs running.
    let _vms = VmGuard::new(state.path());
    let builds = scratch("fl-microvm-builds-");
    let iso = level(state.path(), "test-run");
    let image = busybox_image();
    let j = job(7, &image);
    let started = Instant::now();
    let (env, log) = prepared_in(&iso, builds.path(), &j, 1).await;
    eprintln!("prepared in {:?}:\n{log}", started.elapsed());
    assert!(
        log.contains("Using microvm isolation on instance this-host (slot 1)"),
        "{log}"
    );
    assert!(
        log.contains(&format!("Using image {image} (sha256:")),
        "{log}"
    );
    assert!(log.contains("microVM up in"), "{log}");
    let project = env.paths().project_dir.clone();
    let vm_dir = iso.config().vm_dir(1);
    let pid = qemu_of(&vm_dir).expect("the VM's pid file");
    assert!(alive(pid));

    // A helper stage on the instance (as get_sources would) writes the project.
    let (st, _) = stage(
        &*env,
        Place::Helper,
        &format!("mkdir -p {project} && cd {project} && echo from-the-helper > source.txt && echo stale > gone.txt"),
    )
    .await;
    assert!(st.success());

    // The build stage runs in the VM: another kernel, its own host name, the image's files,
    // and the project the helper wrote.
    let (st, out) = stage(
        &*env,
        Place::Build,
        &format!(
            "cd {project}\ncat source.txt\nuname -r\nhostname\ncat /proc/1/comm\n\
             echo built-in-the-vm > result.txt\nrm gone.txt\nexit 3\n"
        ),
    )
    .await;
    assert_eq!(st, ExitStatus::Code(3), "{out}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "from-the-helper", "{out}");
    assert!(lines[1].contains("cloud-amd64"), "{out}");
    assert_eq!(lines[2], "test-run-slot-1", "{out}");
    assert_eq!(lines[3], "init", "PID 1 is the agent (/init): {out}");
    // Nothing of the build touched the instance yet.
    assert!(!Path::new(&project).join("result.txt").exists());

    // The next helper stage (as artifacts would) sees what the build wrote and deleted.
    let (st, out) = stage(
        &*env,
        Place::Helper,
        &format!("cd {project} && cat result.txt && ls"),
    )
    .await;
    assert!(st.success(), "{out}");
    assert_eq!(out, "built-in-the-vm\nresult.txt\nsource.txt\n");
    assert_eq!(
        std::fs::read_to_string(Path::new(&project).join("result.txt")).unwrap(),
        "built-in-the-vm\n"
    );

    // The job is root in its VM. What it writes in the project's .git (a hook the
    // instance's git would run) never reaches the instance; the instance keeps its own.
    let (st, _) = stage(
        &*env,
        Place::Helper,
        &format!("cd {project} && mkdir -p .git/hooks && echo ours > .git/config"),
    )
    .await;
    assert!(st.success());
    let (st, out) = stage(
        &*env,
        Place::Build,
        &format!(
            "cd {project} && printf '#!/bin/sh\\necho owned\\n' > .git/hooks/post-checkout \
             && echo theirs > .git/config && echo kept > kept.txt"
        ),
    )
    .await;
    assert!(st.success(), "{out}");
    let (st, out) = stage(
        &*env,
        Place::Helper,
        &format!("cd {project} && cat kept.txt .git/config && ls .git/hooks"),
    )
    .await;
    assert!(st.success(), "{out}");
    assert_eq!(out, "kept\nours\n", "the instance's .git is its own");

    // A device node and a setuid file the job made as root in its VM come back as nothing
    // and as a plain file: with the old copy, the instance's root tar made the device (a
    // block device reads the instance's disk) and kept the setuid bit.
    let (st, out) = stage(
        &*env,
        Place::Build,
        &format!(
            "cd {project} && mknod disk b 8 0 && cp /bin/busybox suid && chmod 4755 suid && ls -l disk suid"
        ),
    )
    .await;
    assert!(st.success(), "{out}");
    let (st, out) = stage(&*env, Place::Helper, "true").await;
    assert!(st.success(), "{out}");
    let project_path = Path::new(&project);
    assert!(
        std::fs::symlink_metadata(project_path.join("disk")).is_err(),
        "a device node reached the instance"
    );
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(project_path.join("suid"))
            .unwrap()
            .permissions(),
    );
    assert_eq!(mode & 0o7777, 0o755, "the setuid bit reached the instance");

    env.cleanup().await.unwrap();
    for _ in 0..200 {
        if !alive(pid) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(!alive(pid), "the VM is killed");
    assert!(!Path::new(&vm_dir).exists(), "its files are removed");
    // The cached root file system stays for the next job of the image.
    let cached: Vec<_> = std::fs::read_dir(state.path().join("rootfs"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".ext4"))
        .collect();
    assert_eq!(cached.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn infra_microvm_a_dead_managers_vm_is_killed_by_the_sweep() {
    if !require(Infra::Qemu) || !require(Infra::Docker) {
        return;
    }
    let state = scratch("fl-microvm-state-");
    // A failed assertion must not leave VMs running.
    let _vms = VmGuard::new(state.path());
    let builds = scratch("fl-microvm-builds-");
    let iso = level(state.path(), "test-sweep");
    let (env, _) = prepared_in(&iso, builds.path(), &job(8, &busybox_image()), 0).await;
    let vm_dir = iso.config().vm_dir(0);
    let pid = qemu_of(&vm_dir).unwrap();
    // The manager dies: its environment is never cleaned up.
    std::mem::forget(env);
    assert!(alive(pid));
    // Another runner's VMs are not this one's to kill.
    let other = level(state.path(), "someone-else");
    let host: Arc<dyn Connector> = Arc::new(LocalConnector::new());
    assert_eq!(
        other
            .cleanup_instance(host.clone(), "this-host")
            .await
            .unwrap(),
        0
    );
    assert!(alive(pid));
    let next = level(state.path(), "test-sweep");
    assert_eq!(
        next.cleanup_instance(host.clone(), "this-host")
            .await
            .unwrap(),
        1
    );
    for _ in 0..200 {
        if !alive(pid) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(!alive(pid));
    assert!(!Path::new(&vm_dir).exists());
    assert_eq!(next.cleanup_instance(host, "this-host").await.unwrap(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn infra_microvm_a_job_reaches_out_through_user_mode_networking() {
    if !require(Infra::Qemu) || !require(Infra::Docker) {
        return;
    }
    // A server on the instance's loopback, which QEMU's user-mode network shows the guest
    // as 10.0.2.2.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (mut s, _) = listener.accept().await.unwrap();
        let mut buf = [0u8; 1024];
        let _ = s.read(&mut buf).await;
        s.write_all(b"HTTP/1.0 200 OK\r\nContent-Length: 14\r\n\r\nfrom the host\n")
            .await
            .unwrap();
    });
    let state = scratch("fl-microvm-state-");
    // A failed assertion must not leave VMs running.
    let _vms = VmGuard::new(state.path());
    let builds = scratch("fl-microvm-builds-");
    let iso = MicrovmIsolation::new(MicrovmConfig {
        state_dir: state.path().to_str().unwrap().to_string(),
        owner: "test-net".into(),
        memory_mib: 256,
        network: true,
        ..MicrovmConfig::default()
    })
    .unwrap();
    // The job also asks for a smaller VM than the level's, which it gets.
    let mut small = job(9, &busybox_image());
    small.variables.push(flotilla_job::Variable {
        key: "KUBERNETES_MEMORY_LIMIT".into(),
        value: "160Mi".into(),
        ..Default::default()
    });
    let (env, log) = prepared_in(&iso, builds.path(), &small, 0).await;
    assert!(log.contains("1 vCPU, 160 MiB"), "{log}");
    let (st, out) = stage(
        &*env,
        Place::Build,
        &format!(
            "cat /etc/resolv.conf\nwget -q -O - http://10.0.2.2:{port}/\n\
             awk '/MemTotal/ {{ print ($2 < 163840) }}' /proc/meminfo\n"
        ),
    )
    .await;
    env.cleanup().await.unwrap();
    assert!(st.success(), "{out}");
    assert_eq!(out, "nameserver 10.0.2.3\nfrom the host\n1\n");
    server.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn infra_microvm_a_cancelled_stage_stops_in_the_vm() {
    if !require(Infra::Qemu) || !require(Infra::Docker) {
        return;
    }
    let state = scratch("fl-microvm-state-");
    // A failed assertion must not leave VMs running.
    let _vms = VmGuard::new(state.path());
    let builds = scratch("fl-microvm-builds-");
    let iso = level(state.path(), "test-cancel");
    let (env, _) = prepared_in(&iso, builds.path(), &job(11, &busybox_image()), 0).await;
    let cancel = CancellationToken::new();
    let fire = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        fire.cancel();
    });
    let started = Instant::now();
    let mut out = Vec::new();
    let r = env
        .exec(ExecSpec {
            place: Place::Build,
            command: ExecCommand::Script("echo started\nsleep 60\necho never\n".into()),
            stdin: None,
            stdout: Box::new(&mut out),
            stderr: Box::new(tokio::io::sink()),
            cancel,
        })
        .await;
    assert!(matches!(r, Err(flotilla_job::EnvError::Canceled)), "{r:?}");
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
    assert_eq!(String::from_utf8_lossy(&out), "started\n");
    // The VM goes on, and the cancelled stage's processes are gone from it.
    let (st, out) = stage(
        &*env,
        Place::Build,
        "ps -o comm | grep -c '^sleep$' || true\n",
    )
    .await;
    assert!(st.success());
    assert_eq!(out, "0\n");
    env.cleanup().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn infra_microvm_services_share_a_port_each_in_its_own_namespace() {
    if !require(Infra::Qemu) || !require(Infra::Docker) {
        return;
    }
    let state = scratch("fl-microvm-state-");
    // A failed assertion must not leave VMs running.
    let _vms = VmGuard::new(state.path());
    let builds = scratch("fl-microvm-builds-");
    let iso = MicrovmIsolation::new(MicrovmConfig {
        state_dir: state.path().to_str().unwrap().to_string(),
        owner: "test-services".into(),
        memory_mib: 256,
        network: false,
        wait_for_services_timeout: std::time::Duration::from_secs(4),
        ..MicrovmConfig::default()
    })
    .unwrap();
    let image = busybox_image();
    // Two web servers on port 80, each saying who it is and what job it serves (from the
    // environment GitLab gives services), and one that dies at once.
    let web = |alias: &str, word: &str| Image {
        name: image.clone(),
        alias: alias.into(),
        command: vec![
            "sh".into(),
            "-c".into(),
            format!(
                "mkdir -p /www && echo \"{word} for job $CI_JOB_ID\" >/www/index.html && \
                 exec httpd -f -p 80 -h /www"
            ),
        ],
        ports: vec![Port {
            number: 80,
            ..Default::default()
        }],
        ..Default::default()
    };
    let mut j = job(31, &image);
    j.services = vec![
        web("first", "one"),
        web("second,also-second", "two"),
        Image {
            name: image.clone(),
            alias: "broken".into(),
            command: vec![
                "sh".into(),
                "-c".into(),
                "echo the broken one gives up; exit 3".into(),
            ],
            ports: vec![Port {
                number: 81,
                ..Default::default()
            }],
            ..Default::default()
        },
    ];
    let (env, log) = prepared_in(&iso, builds.path(), &j, 0).await;
    eprintln!("{log}");
    assert_eq!(log.matches("Starting service").count(), 3, "{log}");
    assert!(
        log.contains("Waiting for services to be up and running"),
        "{log}"
    );
    assert!(
        log.contains("nothing listens on port 81") && log.contains("the broken one gives up"),
        "the service that died is named with its output: {log}"
    );
    assert!(
        !log.contains("port 80;"),
        "both web servers answered: {log}"
    );
    let (st, out) = stage(
        &*env,
        Place::Build,
        "wget -qO- http://first/; wget -qO- http://second/; wget -qO- http://also-second/; \
         nc -z 127.0.0.1 80 || echo nothing on port 80 of the job itself",
    )
    .await;
    assert!(st.success(), "{out}");
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        [
            "one for job 31",
            "two for job 31",
            "two for job 31",
            "nothing on port 80 of the job itself"
        ],
        "{out}"
    );
    let vm_dir = iso.config().vm_dir(0);
    let pid = qemu_of(&vm_dir).expect("the VM's pid file");
    env.cleanup().await.unwrap();
    assert!(!alive(pid), "the VM and its services are gone");
    assert!(!Path::new(&vm_dir).exists());
}
