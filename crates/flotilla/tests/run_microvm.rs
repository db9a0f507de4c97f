//! The `microvm` level under `flotilla run`, for real under TCG, against the fake GitLab: a
//! job with two services on one port fails and is saved (`FLOTILLA_SNAPSHOT: on_failure`),
//! a later job starts from that snapshot with the services running, and `flotilla debug
//! --project` restores it from the runner's store after the instance's copy is gone.

use crate::run_support;

use flotilla_testkit::fake_gitlab::{FakeJobState, JobBuilder};
use flotilla_testkit::images::busybox_image;
use flotilla_testkit::infra::{Infra, require};
use flotilla_testkit::vms::VmGuard;
use run_support::Manager;
use serde_json::json;
use std::path::Path;
use std::time::Duration;

const TOKEN: &str = "glrt-run-microvm-token";

fn write_config(dir: &Path, url: &str, vm_state: &Path) -> std::path::PathBuf {
    let path = dir.join("config.toml");
    std::fs::write(
        &path,
        format!(
            r#"concurrent = 2
check_interval = 1
shutdown_timeout = 30

[flotilla]
state_dir = "{state}"

[[runners]]
  name = "vms"
  url = "{url}"
  token = "{TOKEN}"
  executor = "instance"
  [runners.autoscaler]
    plugin = "local"
    capacity_per_instance = 2
    isolation = ["microvm"]
  [runners.microvm]
    memory = "256Mi"
    network = false
    state_dir = "{vm_state}"
"#,
            state = dir.join("state").display(),
            vm_state = vm_state.display(),
        ),
    )
    .unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn infra_microvm_run_saves_a_failed_job_and_starts_another_from_it() {
    if !require(Infra::Qemu) || !require(Infra::Docker) {
        return;
    }
    let vm_state = tempfile::Builder::new()
        .prefix("fl-run-microvm-")
        .tempdir_in("/tmp")
        .unwrap();
    let _vms = VmGuard::new(vm_state.path());
    let gl = run_support::fake_gitlab(&[TOKEN], Duration::from_millis(500)).await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), gl.url(), vm_state.path());
    let mut m = Manager::start(&config, &[]);

    let setup = gl.enqueue(
        TOKEN,
        run_support::services_pair_job("setup", &["echo 'made by setup' > /root/state", "exit 3"])
            .variable("FLOTILLA_SNAPSHOT", "on_failure"),
    );
    assert!(
        gl.wait_finished(&[setup], Duration::from_secs(300)).await,
        "setup did not finish; manager log:\n{}",
        m.log_tail()
    );
    let j = gl.job(setup).unwrap();
    let trace = j.trace_text();
    assert_eq!(j.state, FakeJobState::Failed, "{trace}");
    for expected in [
        "OUT|services|alpha",
        "OUT|services|beta",
        "Saved snapshot setup of the VM",
        "Kept snapshot setup in the runner's store for any instance",
    ] {
        assert!(trace.contains(expected), "{expected}: {trace}");
    }

    let look = gl.enqueue(
        TOKEN,
        JobBuilder::new("look")
            .variable("FLOTILLA_RESTORE_FROM", "setup")
            .field("image", json!({"name": busybox_image()}))
            .script(["cat /root/state", "wget -qO- http://svc-b:6379/"]),
    );
    assert!(
        gl.wait_finished(&[look], Duration::from_secs(300)).await,
        "look did not finish; manager log:\n{}",
        m.log_tail()
    );
    let j = gl.job(look).unwrap();
    let trace = j.trace_text();
    assert_eq!(j.state, FakeJobState::Success, "{trace}");
    assert!(
        trace.contains("microVM restored from snapshot setup"),
        "{trace}"
    );
    assert!(trace.contains("\nmade by setup"), "{trace}");
    assert!(trace.contains("OUT|services|beta"), "{trace}");

    m.signal(libc::SIGTERM);
    let status = m.wait(Duration::from_secs(60)).await.expect("exits");
    assert!(status.success(), "exit {status:?}; log:\n{}", m.log_tail());

    // The instance's copy gone, `flotilla debug` finds the snapshot in the runner's store.
    std::fs::remove_dir_all(vm_state.path().join("snapshots/setup")).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_flotilla"))
        .args(["debug", "--config"])
        .arg(&config)
        .args([
            "--project",
            "group/project",
            "setup",
            "--",
            "cat",
            "/root/state",
        ])
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert_eq!(stdout, "made by setup\n", "{stderr}");
    let wrong = std::process::Command::new(env!("CARGO_BIN_EXE_flotilla"))
        .args(["debug", "--config"])
        .arg(&config)
        .args(["--project", "other/project", "setup", "--", "true"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&wrong.stderr);
    assert_eq!(wrong.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("no snapshot \"setup\" of project \"other/project\""),
        "{stderr}"
    );
}
