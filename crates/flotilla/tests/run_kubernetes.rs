//! `flotilla run` (the real binary) on the `kubernetes` provider, end to end: pods of the
//! fake API server (containers of the instance image with an inner dockerd) as instances,
//! reached only through kube-exec (no SSH), jobs at docker isolation driving each pod's own
//! dockerd through `docker system dial-stdio` over exec. The headline: two services listening
//! on the same port in one job, each in its own network namespace inside the pod's Docker
//! (on the Kubernetes executor they share the pod's network namespace and clash).
#![cfg(feature = "kubernetes")]

mod run_support;

use flotilla_testkit::fake_gitlab::{FakeGitLab, FakeJobState, JobBuilder};
use flotilla_testkit::fake_kube::FakeKube;
use flotilla_testkit::images::{busybox_image, instance_image};
use flotilla_testkit::infra::{Infra, require};
use run_support::Manager;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::Duration;

const TOKEN: &str = "glrt-run-kubernetes-token";

fn write_config(dir: &Path, url: &str, kube: &FakeKube) -> PathBuf {
    let path = dir.join("config.toml");
    std::fs::write(
        &path,
        format!(
            r#"concurrent = 4
check_interval = 1
shutdown_timeout = 30

[flotilla]
state_dir = "{state}"

[[runners]]
  name = "kube-fleet"
  url = "{url}"
  token = "{TOKEN}"
  executor = "docker-autoscaler"
  request_concurrency = 2

  [runners.docker]
    image = "{busybox}"
    pull_policy = ["if-not-present"]

  [runners.autoscaler]
    plugin = "kubernetes"
    capacity_per_instance = 1
    max_instances = 2
    instance_ready_command = "i=0; while [ ! -e /run/flotilla-dockerd-ready ]; do i=$((i+1)); [ $i -gt 900 ] && exit 1; sleep 0.2; done"

    [runners.autoscaler.plugin_config]
      namespace = "ci"
      kubeconfig = "{kubeconfig}"
      pending_timeout = "2m"
      pod_template = '''
apiVersion: v1
kind: PodTemplate
template:
  spec:
    containers:
    - name: dind
      image: {image}
      env:
      - name: FLOTILLA_INNER_DOCKERD
        value: "1"
'''

    [[runners.autoscaler.policy]]
      idle_count = 2
      idle_time = "1h"
"#,
            state = dir.join("state").display(),
            busybox = busybox_image(),
            image = instance_image(),
            kubeconfig = kube.kubeconfig().display(),
        ),
    )
    .unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn infra_run_on_kubernetes_pods_with_two_services_on_one_port() {
    if !require(Infra::Docker) {
        return;
    }
    let kube = FakeKube::start().await.unwrap();
    let gl = FakeGitLab::builder()
        .runner_token(TOKEN)
        .poll_duration(Duration::from_secs(2))
        .trace_update_interval(1)
        .start()
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), gl.url(), &kube);
    let mut m = Manager::start(&config, &[]);

    let services = gl.enqueue(
        TOKEN,
        JobBuilder::new("services")
            .field("image", json!({"name": busybox_image()}))
            .field(
                "services",
                json!([
                    run_support::web_service("svc-a", "alpha"),
                    run_support::web_service("svc-b", "beta")
                ]),
            )
            .script([
                "wget -qO- http://svc-a:6379/",
                "wget -qO- http://svc-b:6379/",
            ]),
    );
    let failing = gl.enqueue(
        TOKEN,
        JobBuilder::new("failing")
            .field("image", json!({"name": busybox_image()}))
            .script([
                "echo 'OUT|failing|to stdout'",
                "echo 'ERR|failing|to stderr' >&2",
                "exit 3",
            ]),
    );
    let finished = gl
        .wait_finished(&[services, failing], Duration::from_secs(300))
        .await;
    let log = m.log_tail();
    assert!(
        finished,
        "jobs did not finish: {:?}\nmanager log:\n{log}",
        gl.jobs()
            .iter()
            .map(|j| (j.id, j.state))
            .collect::<Vec<_>>()
    );

    let j = gl.job(services).unwrap();
    let trace = j.trace_text();
    assert_eq!(j.state, FakeJobState::Success, "{trace}\n{log}");
    assert!(
        trace.contains("OUT|services|alpha") && trace.contains("OUT|services|beta"),
        "{trace}"
    );

    let j = gl.job(failing).unwrap();
    let trace = j.trace_text();
    assert_eq!(j.state, FakeJobState::Failed, "{trace}");
    assert_eq!(
        j.final_update.as_ref().and_then(|f| f.exit_code),
        Some(3),
        "{trace}"
    );
    assert!(
        trace.contains("OUT|failing|to stdout") && trace.contains("ERR|failing|to stderr"),
        "{trace}"
    );

    // Everything went through the API server's exec: pods were made there and commands ran
    // in them (the instance image's sshd was never asked for).
    let requests = kube.requests();
    assert!(
        requests
            .iter()
            .any(|r| r == "POST /api/v1/namespaces/ci/pods"),
        "{requests:?}"
    );
    assert!(
        requests.iter().filter(|r| r.ends_with("/exec")).count() >= 4,
        "{requests:?}"
    );
    m.signal(libc::SIGTERM);
    let _ = m.wait(Duration::from_secs(30)).await;
}
