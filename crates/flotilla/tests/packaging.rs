//! How flotilla is deployed, run for real: the manager's container image, built offline from
//! the repository's Dockerfile (`packaging/container/`, `scripts/build-manager-image.sh`) and
//! this build's binary, takes a job from the fake GitLab and stops as `docker stop` (or a pod's
//! termination) stops it.

use crate::run_support;
use flotilla_testkit::containers::LabelGuard;
use flotilla_testkit::fake_gitlab::{FakeGitLab, FakeJobState, JobBuilder};
use flotilla_testkit::infra::{self, Infra};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

fn docker(args: &[&str]) -> (bool, String) {
    let out = Command::new("docker").args(args).output().unwrap();
    let mut text = String::from_utf8_lossy(&out.stdout).to_string();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

/// Removes an image when the test ends, however it ends.
struct ImageGuard(String);

impl Drop for ImageGuard {
    fn drop(&mut self) {
        let _ = Command::new("docker").args(["rmi", "-f", &self.0]).output();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn infra_docker_the_manager_image_takes_a_job_and_stops_on_sigterm() {
    if !infra::require(Infra::Docker) {
        return;
    }
    let token = "glrt-in-a-container-0123456789";
    let gl = FakeGitLab::builder()
        .runner_token(token)
        .poll_duration(Duration::from_millis(500))
        .start()
        .await
        .unwrap();
    let unique = run_support::now_nanos();
    let tag = format!("local/flotilla-manager-test:{unique}");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/build-manager-image.sh");
    let out = Command::new(&script)
        .arg(env!("CARGO_BIN_EXE_flotilla"))
        .arg(&tag)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), tag);
    let _image = ImageGuard(tag.clone());
    let (ok, history) = docker(&[
        "image",
        "inspect",
        "--format",
        "{{json .Config.Entrypoint}} {{json .Config.Cmd}} {{.Config.StopSignal}}",
        &tag,
    ]);
    assert!(ok, "{history}");
    assert_eq!(
        history.trim(),
        r#"["/usr/local/bin/flotilla"] ["run"] SIGTERM"#
    );

    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    std::fs::write(
        &config,
        format!(
            r#"concurrent = 1
check_interval = 1
shutdown_timeout = 30

[[runners]]
  name = "contained"
  url = "{url}"
  token = "{token}"
  executor = "shell"
"#,
            url = gl.url()
        ),
    )
    .unwrap();
    let label = format!("flotilla.test=manager-image-{unique}");
    let _containers = LabelGuard::new(label.clone());
    let name = format!("flotilla-manager-{unique}");
    let mount = format!("{}:/etc/flotilla/config.toml:ro", config.display());
    // The host's network: the fake GitLab listens on its loopback.
    let (ok, id) = docker(&[
        "run",
        "-d",
        "--name",
        &name,
        "--label",
        &label,
        "--network",
        "host",
        "-v",
        &mount,
        &tag,
    ]);
    assert!(ok, "{id}");
    let logs = || docker(&["logs", &name]).1;

    let job = gl.enqueue(
        token,
        JobBuilder::new("contained").script([
            "echo in a container as $(id -u)",
            "test -f /.dockerenv || test -f /proc/1/cgroup",
        ]),
    );
    assert!(
        gl.wait_finished(&[job], Duration::from_secs(90)).await,
        "{}",
        logs()
    );
    let finished = gl.job(job).unwrap();
    assert_eq!(finished.state, FakeJobState::Success, "{}", logs());
    assert!(
        String::from_utf8_lossy(&finished.trace).contains("in a container as 0"),
        "{}",
        String::from_utf8_lossy(&finished.trace)
    );
    // The state went to the image's volume, not beside the read-only configuration.
    let (ok, listing) = docker(&["exec", &name, "ls", "/var/lib/flotilla"]);
    assert!(ok && listing.contains("flotilla.db"), "{listing}");

    // `docker stop`: SIGTERM, then a clean exit within the grace period.
    let (ok, out) = docker(&["stop", "-t", "60", &name]);
    assert!(ok, "{out}");
    let (_, code) = docker(&["inspect", "--format", "{{.State.ExitCode}}", &name]);
    assert_eq!(code.trim(), "0", "{}", logs());
    assert!(logs().contains("stopping: no new jobs"), "{}", logs());
}
