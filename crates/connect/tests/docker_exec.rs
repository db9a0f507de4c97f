//! The docker-exec connector against containers of the real Docker engine.

use crate::common;

use bollard::Docker;
use common::{Cleanup, conformance, docker};
use flotilla_connect::docker_exec::DockerExecConnector;
use flotilla_connect::{ConnectError, Connector, ConnectorExt, ForwardTarget};
use flotilla_testkit::infra::{Infra, require};

/// A running busybox container (removed when the returned guard drops).
fn busybox(tag: &str) -> (String, Cleanup) {
    let label = format!("flotilla.test=dx{}-{tag}", std::process::id());
    let cleanup = Cleanup::new(label.clone());
    let image = flotilla_testkit::images::busybox_image();
    let id = docker(&["run", "-d", "--label", &label, &image, "sleep", "3600"]);
    (id, cleanup)
}

async fn connector(id: &str) -> DockerExecConnector {
    let docker = Docker::connect_with_local_defaults()
        .unwrap()
        .negotiate_version()
        .await
        .unwrap();
    DockerExecConnector::new(docker, id)
}

#[tokio::test]
async fn infra_docker_exec_output_env_and_exit_codes() {
    if !require(Infra::Docker) {
        return;
    }
    let (id, _c) = busybox("basics");
    let c = connector(&id).await;
    conformance::output_and_env(&c).await;
    conformance::exit_statuses(&c, false).await;
    let c = c.with_working_dir("/tmp").with_user("0:0");
    assert_eq!(
        c.output("pwd; id -u").await.unwrap().stdout_str(),
        "/tmp\n0\n"
    );
}

#[tokio::test]
async fn infra_docker_exec_stdin_and_streaming() {
    if !require(Infra::Docker) {
        return;
    }
    let (id, _c) = busybox("stream");
    let c = connector(&id).await;
    conformance::stdin(&c, "sh").await;
    conformance::streaming(&c, 32 * 1024 * 1024).await;
}

#[tokio::test]
async fn infra_docker_exec_cancellation() {
    if !require(Infra::Docker) {
        return;
    }
    let (id, _c) = busybox("cancel");
    let c = connector(&id).await;
    conformance::cancellation(&c, "flotilla-dx-cancel").await;
}

/// The same in a Debian image, whose `sh` is dash: it refuses `kill -KILL -- -PID`, which
/// once left the cancelled command running there (busybox's `sh` accepts it).
#[tokio::test]
async fn infra_docker_exec_cancellation_under_dash() {
    if !require(Infra::Docker) {
        return;
    }
    let label = format!("flotilla.test=dx{}-dash", std::process::id());
    let _cleanup = Cleanup::new(label.clone());
    let image = flotilla_testkit::images::instance_image();
    let id = docker(&[
        "run",
        "-d",
        "--label",
        &label,
        "--entrypoint",
        "sleep",
        &image,
        "3600",
    ]);
    let c = connector(&id).await;
    assert!(
        c.output("readlink -f /bin/sh")
            .await
            .unwrap()
            .stdout_str()
            .contains("dash"),
        "the instance image's sh is dash"
    );
    conformance::cancellation(&c, "flotilla-dx-dash").await;
}

#[tokio::test]
async fn infra_docker_exec_dial_stdio() {
    if !require(Infra::Docker) {
        return;
    }
    let (id, _c) = busybox("dial");
    let c = connector(&id).await;
    conformance::dial_stdio(&c).await;
    let e = c
        .forward(&ForwardTarget::Unix("/x".into()))
        .await
        .err()
        .unwrap();
    assert!(matches!(e, ConnectError::Unsupported(_)), "{e}");
}

#[tokio::test]
async fn infra_docker_exec_missing_container_is_a_remote_error() {
    if !require(Infra::Docker) {
        return;
    }
    let c = connector("flotilla-no-such-container").await;
    let e = c.output("true").await.unwrap_err();
    assert!(matches!(e, ConnectError::Remote { .. }), "{e}");
}
