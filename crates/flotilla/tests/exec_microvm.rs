//! The `microvm` level in the real binary: `flotilla exec` of a pipeline whose jobs ask for
//! it (`FLOTILLA_ISOLATION: microvm`) boots a QEMU microVM per job under TCG from the job's
//! image, runs the job's script in it (the checkout made on the instance is there), and
//! reports the script's output and exit status as any other job's; no VM is left after.

use crate::exec_support;

use exec_support::{Project, statuses};
use flotilla_testkit::images::busybox_image;
use flotilla_testkit::infra::{Infra, require};

/// QEMU processes whose command line names `dir`.
fn vms_under(dir: &str) -> Vec<u32> {
    let mut pids = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(cmd) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        let cmd = String::from_utf8_lossy(&cmd);
        if cmd.contains("qemu-system") && cmd.contains(dir) {
            pids.push(pid);
        }
    }
    pids
}

#[test]
fn infra_microvm_exec_runs_jobs_in_their_own_vms() {
    if !require(Infra::Qemu) || !require(Infra::Docker) {
        return;
    }
    let image = busybox_image();
    let state = tempfile::Builder::new()
        .prefix("fl-exec-microvm-")
        .tempdir_in("/tmp")
        .unwrap();
    let state_dir = state.path().to_str().unwrap().to_string();
    let p = Project::with_pipeline(&format!(
        r#"
on-the-host:
  script: [uname -r, hostname]
in-a-vm:
  image: {image}
  variables:
    FLOTILLA_ISOLATION: microvm
  script:
    - cat checked-out.txt
    - uname -r
    - hostname
    - echo "pid 1 is $(cat /proc/1/comm)"
fails-in-a-vm:
  image: {image}
  variables:
    FLOTILLA_ISOLATION: microvm
  script:
    - echo about to fail
    - exit 7
"#
    ));
    p.write("checked-out.txt", "this came from the repository\n");
    p.write(
        "fleet.toml",
        &format!(
            r#"
[[runners]]
  name = "vms"
  executor = "flotilla"
  [runners.autoscaler]
    plugin = "local"
    capacity_per_instance = 2
    isolation = ["shell", "microvm"]
  [runners.microvm]
    memory = "256Mi"
    network = false
    state_dir = "{state_dir}"
"#
        ),
    );
    p.commit("pipeline, file and config");
    let config = p.path().join("fleet.toml");
    let run = p.exec(&["--config", config.to_str().unwrap()]);
    run.expect_code(1);
    assert_eq!(
        run.statuses(),
        statuses(&[
            ("on-the-host", "passed"),
            ("in-a-vm", "passed"),
            ("fails-in-a-vm", "failed"),
        ])
    );
    let vm = p.log("in-a-vm");
    assert!(vm.contains("Using microvm isolation"), "{vm}");
    assert!(vm.contains("microVM up in"), "{vm}");
    assert!(vm.contains("\nthis came from the repository"), "{vm}");
    // Named after the runner and this exec process (runs side by side keep apart).
    assert!(
        vm.contains("\nflotilla-vms.pid") && vm.contains("-slot-"),
        "the VM's host name: {vm}"
    );
    assert!(vm.contains("\npid 1 is init"), "{vm}");
    let host = p.log("on-the-host");
    assert!(!host.contains("microvm"), "{host}");
    let failed = p.log("fails-in-a-vm");
    assert!(failed.contains("\nabout to fail"), "{failed}");
    assert!(failed.contains("exit code 7"), "{failed}");
    assert!(vms_under(&state_dir).is_empty(), "every VM is gone");
    let left: Vec<_> = std::fs::read_dir(state.path().join("vms"))
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "VM directories left: {left:?}");
}

/// The pipeline issue 16 asks for, end to end: a setup job with two services on the same
/// port, snapshotted; a job failing with a snapshot taken; a job restored from that one; and a
/// three-way matrix branched from the setup's snapshot, its services running in every branch.
#[test]
fn infra_microvm_exec_branches_a_matrix_from_a_snapshot() {
    if !require(Infra::Qemu) || !require(Infra::Docker) {
        return;
    }
    let image = busybox_image();
    let state = tempfile::Builder::new()
        .prefix("fl-exec-microvm-")
        .tempdir_in("/tmp")
        .unwrap();
    let state_dir = state.path().to_str().unwrap().to_string();
    let p = Project::with_pipeline(&format!(
        r#"
stages: [setup, test]
default:
  image: {image}
variables:
  FLOTILLA_ISOLATION: microvm
setup:
  stage: setup
  variables:
    FLOTILLA_SNAPSHOT: always
  services:
    - name: {image}
      alias: web-a
      command: ["sh", "-c", "mkdir -p /w && echo service A > /w/index.html && exec httpd -f -p 80 -h /w"]
    - name: {image}
      alias: web-b
      command: ["sh", "-c", "mkdir -p /w && echo service B > /w/index.html && exec httpd -f -p 80 -h /w"]
  script:
    - echo "made by setup" > /root/state
    - for i in 1 2 3 4 5 6; do wget -qO- http://web-a/ && break; sleep 1; done
    - wget -qO- http://web-b/
broken:
  stage: setup
  allow_failure: true
  variables:
    FLOTILLA_SNAPSHOT: on_failure
  script:
    - echo "left for debugging" > /root/clue
    - exit 2
test:
  stage: test
  variables:
    FLOTILLA_RESTORE_FROM: setup
  parallel:
    matrix:
      - SHARD: [a, b, c]
  script:
    - cat /root/state
    - echo "shard $SHARD"
    - wget -qO- http://web-b/
look:
  stage: test
  variables:
    FLOTILLA_RESTORE_FROM: broken
  script:
    - cat /root/clue
"#
    ));
    p.write(
        "fleet.toml",
        &format!(
            r#"
[[runners]]
  name = "snap"
  executor = "flotilla"
  [runners.autoscaler]
    plugin = "local"
    capacity_per_instance = 3
    isolation = ["microvm"]
  [runners.microvm]
    memory = "256Mi"
    network = false
    state_dir = "{state_dir}"
"#
        ),
    );
    p.commit("pipeline and config");
    let config = p.path().join("fleet.toml");
    let run = p.exec(&["--config", config.to_str().unwrap()]);
    eprintln!("{}", run.stdout);
    let statuses_seen = run.statuses();
    for (slug, log) in p.logs() {
        eprintln!("--- {slug}\n{log}");
    }
    assert_eq!(
        statuses_seen.get("setup").map(String::as_str),
        Some("passed"),
        "{statuses_seen:?}"
    );
    assert_eq!(
        statuses_seen.get("broken").map(String::as_str),
        Some("failed (allowed)"),
        "{statuses_seen:?}"
    );
    assert_eq!(
        statuses_seen.get("look").map(String::as_str),
        Some("passed"),
        "{statuses_seen:?}"
    );
    let setup = p.log("setup");
    assert!(setup.contains("Saved snapshot setup of the VM"), "{setup}");
    // Two services on port 80, each in its own network namespace of the job's VM.
    assert!(
        setup.contains("\nservice A\n") && setup.contains("\nservice B\n"),
        "{setup}"
    );
    let broken = p.log("broken");
    assert!(
        broken.contains("Saved snapshot broken of the VM"),
        "{broken}"
    );
    assert!(
        p.log("look").contains("\nleft for debugging"),
        "{}",
        p.log("look")
    );
    let matrix: Vec<(String, String)> = p
        .logs()
        .into_iter()
        .filter(|(slug, _)| slug.contains("test---"))
        .collect();
    assert_eq!(matrix.len(), 3, "{:?}", p.logs().keys().collect::<Vec<_>>());
    for (slug, log) in &matrix {
        assert!(
            log.contains("microVM restored from snapshot setup"),
            "{slug}: {log}"
        );
        assert!(log.contains("\nmade by setup"), "{slug}: {log}");
        // The services came with the snapshot, running.
        assert!(log.contains("\nservice B\n"), "{slug}: {log}");
    }
    for shard in ["a", "b", "c"] {
        assert!(
            matrix
                .iter()
                .any(|(_, log)| log.contains(&format!("\nshard {shard}"))),
            "shard {shard}"
        );
    }
    assert!(vms_under(&state_dir).is_empty(), "every VM is gone");

    // `flotilla debug` starts the failed job's VM again: a command, a shell reading its
    // input, and a shell on a terminal (util-linux `script` gives it one).
    let cfg = config.to_str().unwrap();
    let cmd = p.flotilla(&[
        "debug",
        "--config",
        cfg,
        "broken",
        "--",
        "sh",
        "-c",
        "cat /root/clue; pwd; exit 5",
    ]);
    assert_eq!(cmd.code, 5, "{}\n{}", cmd.stdout, cmd.stderr);
    assert!(
        cmd.stdout.starts_with("left for debugging\n"),
        "{}",
        cmd.stdout
    );
    assert!(
        cmd.stdout.contains("/project"),
        "the shell starts in the job's project directory: {}",
        cmd.stdout
    );
    assert!(
        cmd.stderr.contains("Restored snapshot broken"),
        "{}",
        cmd.stderr
    );
    let piped = debug_with_input(
        p.path(),
        &["debug", "--config", cfg, "broken"],
        "echo changed > /root/clue; cat /root/clue; exit 3\n",
    );
    assert_eq!(piped.0, 3, "{piped:?}");
    assert_eq!(piped.1, "changed\n", "{piped:?}");
    let line = format!(
        "{} debug --config {cfg} broken",
        env!("CARGO_BIN_EXE_flotilla")
    );
    let on_terminal = debug_with_input(
        p.path(),
        &["script", "-qec", &line, "/dev/null"],
        "tty; cat /root/clue; exit 4\n",
    );
    assert_eq!(on_terminal.0, 4, "{on_terminal:?}");
    assert!(
        on_terminal.1.contains("/dev/pts/") && on_terminal.1.contains("left for debugging"),
        "a terminal in the VM, and the snapshot as it was (the change above was thrown \
         away): {on_terminal:?}"
    );
    assert!(vms_under(&state_dir).is_empty(), "every debug VM is gone");

    // The snapshot was also kept in the runner's store: with the instance's copy gone,
    // `flotilla debug --project` brings it from there.
    assert!(
        p.log("broken")
            .contains("Kept snapshot broken in the runner's store for any instance"),
        "{}",
        p.log("broken")
    );
    std::fs::remove_dir_all(state.path().join("snapshots/broken")).unwrap();
    let project = format!("local/{}", p.path().file_name().unwrap().to_string_lossy());
    let store = p.path().join(".flotilla/snapshots");
    let from_store = p.flotilla(&[
        "debug",
        "--config",
        cfg,
        "--project",
        &project,
        "--store",
        store.to_str().unwrap(),
        "broken",
        "--",
        "cat",
        "/root/clue",
    ]);
    assert_eq!(
        (from_store.code, from_store.stdout.as_str()),
        (0, "left for debugging\n"),
        "{}",
        from_store.stderr
    );
    assert!(vms_under(&state_dir).is_empty(), "every debug VM is gone");
}

/// Runs `flotilla ARGS` (or `script` when `args[0]` is) in `dir` with `input` on stdin: its
/// exit code, stdout and stderr.
fn debug_with_input(dir: &std::path::Path, args: &[&str], input: &str) -> (i32, String, String) {
    use std::io::Write;
    let (program, rest) = if args[0] == "script" {
        ("script", &args[1..])
    } else {
        (env!("CARGO_BIN_EXE_flotilla"), args)
    };
    let mut child = std::process::Command::new(program)
        .args(rest)
        .current_dir(dir)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Without `--config`, on a host that has QEMU, a kernel and Docker, the embedded default
/// offers `microvm` beside `shell`: a job asks for it and runs in a VM.
#[test]
fn infra_microvm_the_embedded_default_offers_microvm_on_a_host_that_can_boot_vms() {
    if !require(Infra::Qemu) || !require(Infra::Docker) {
        return;
    }
    let image = busybox_image();
    let p = Project::with_pipeline(&format!(
        r#"
on-the-host:
  script: [echo "host pid 1 is $(cat /proc/1/comm)"]
in-a-vm:
  image: {image}
  variables:
    FLOTILLA_ISOLATION: microvm
  script:
    - echo "vm pid 1 is $(cat /proc/1/comm)"
"#
    ));
    p.commit("pipeline");
    let run = p.exec(&[]);
    run.expect_code(0);
    let first = run.stderr.lines().next().unwrap_or_default();
    assert!(
        first.starts_with("this host offers shell, ")
            && first.contains("docker (jobs with an image:), microvm")
            && run.stderr.contains("| docker | microvm isolation"),
        "the embedded default names the levels it found: {}",
        run.stderr
    );
    let vm = p.log("in-a-vm");
    assert!(vm.contains("Using microvm isolation"), "{vm}");
    assert!(vm.contains("\nvm pid 1 is init"), "{vm}");
    let host = p.log("on-the-host");
    assert!(
        !host.contains("microvm") && !host.contains("pid 1 is init"),
        "{host}"
    );
}

/// The `vm` level in the real binary: a job asking for it runs every stage, the checkout
/// included, in a full VM (`q35`) booted from the configured image, which is deleted after.
#[test]
fn infra_vm_exec_runs_a_job_in_a_full_vm() {
    if !require(Infra::Qemu) {
        return;
    }
    let disk = flotilla_testkit::vms::vm_image().disk;
    let state = tempfile::Builder::new()
        .prefix("fl-exec-vm-")
        .tempdir_in("/tmp")
        .unwrap();
    let _vms = flotilla_testkit::vms::VmGuard::new(state.path());
    let state_dir = state.path().to_str().unwrap().to_string();
    let p = Project::with_pipeline(
        r#"
in-a-vm:
  variables:
    FLOTILLA_ISOLATION: vm
  script:
    - cat checked-out.txt
    - echo "pid 1 is $(cat /proc/1/comm) on $(hostname)"
"#,
    );
    p.write("checked-out.txt", "this came from the repository\n");
    p.write(
        "fleet.toml",
        &format!(
            r#"
[[runners]]
  name = "full"
  executor = "flotilla"
  [runners.autoscaler]
    plugin = "local"
    capacity_per_instance = 1
    isolation = ["shell", "vm"]
    [runners.autoscaler.vm_isolation]
      enabled = true
      image = "{disk}"
  [runners.vm]
    memory = "512Mi"
    network = false
    state_dir = "{state_dir}"
"#,
            disk = disk.display()
        ),
    );
    p.commit("pipeline, file and config");
    let config = p.path().join("fleet.toml");
    let run = p.exec(&["--config", config.to_str().unwrap()]);
    let log = p.log("in-a-vm");
    assert_eq!(run.code, 0, "{}\n{}\n{log}", run.stdout, run.stderr);
    assert!(log.contains("Using vm isolation"), "{log}");
    assert!(log.contains("\nthis came from the repository"), "{log}");
    assert!(
        log.contains("\npid 1 is init on flotilla-full-slot-0"),
        "{log}"
    );
    assert!(
        vms_under(&state_dir).is_empty(),
        "the VM is deleted after the job"
    );
}

/// Two `flotilla exec` runs side by side on one host, as root, share the microvm level's state
/// directory: each names its VMs after its own process and sweeps only its own and those of
/// runs that are gone, so a run starting while another's VM is up leaves that VM alone
/// (before, the second run's start-up sweep killed the first run's VM: "the microVM did not
/// come up").
#[test]
fn infra_microvm_exec_runs_side_by_side_leave_each_others_vms_alone() {
    if !require(Infra::Qemu) || !require(Infra::Docker) {
        return;
    }
    let image = busybox_image();
    let slow = Project::with_pipeline(&format!(
        r#"
in-a-vm:
  image: {image}
  variables:
    FLOTILLA_ISOLATION: microvm
  script:
    - sleep 6
    - echo "still here"
"#
    ));
    let quick = Project::with_pipeline(
        r"
on-the-host:
  script: [echo quick]
also-on-the-host:
  script: [echo quick]
",
    );
    let slow = std::sync::Arc::new(slow);
    let first = std::thread::spawn({
        let slow = std::sync::Arc::clone(&slow);
        move || slow.exec(&[])
    });
    // Once the first run's VM is up (its job log says so), other runs start and sweep.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(180);
    while !vm_is_up(&slow) {
        assert!(
            !first.is_finished() && std::time::Instant::now() < deadline,
            "the slow run's microVM never came up"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    for _ in 0..2 {
        quick.exec(&[]).expect_code(0);
    }
    let run = first.join().unwrap();
    run.expect_code(0);
    assert!(slow.log("in-a-vm").contains("\nstill here"), "{run}");
}

/// Whether the latest pipeline of `project` has a job log saying its microVM is up.
fn vm_is_up(project: &Project) -> bool {
    let Some(latest) = project.pipelines().pop() else {
        return false;
    };
    std::fs::read_dir(latest).is_ok_and(|entries| {
        entries.flatten().any(|e| {
            std::fs::read_to_string(e.path()).is_ok_and(|log| log.contains("microVM up in"))
        })
    })
}
