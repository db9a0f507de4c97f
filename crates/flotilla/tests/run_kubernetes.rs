//! `flotilla run` (the real binary) on the `kubernetes` provider, end to end: pods of the
//! fake API server (containers of the instance image with an inner dockerd) as instances,
//! reached only through kube-exec (no SSH), jobs at docker isolation driving each pod's own
//! dockerd through `docker system dial-stdio` over exec. The headline: two services listening
//! on the same port in one job, each in its own network namespace inside the pod's Docker
//! (on the Kubernetes executor they share the pod's network namespace and clash).
//!
//! Per-job pod sizing: a job asking for resources with GitLab's `KUBERNETES_*` variables
//! runs on a pod of its own shape, one asking above the runner's maximum fails with GitLab's
//! message, and sized pods a killed manager left are deleted by the next one.
#![cfg(feature = "kubernetes")]

use crate::run_support;

use flotilla_testkit::fake_gitlab::{FakeJobState, JobBuilder};
use flotilla_testkit::fake_kube::FakeKube;
use flotilla_testkit::images::{busybox_image, instance_image};
use flotilla_testkit::infra::{Infra, require};
use run_support::Manager;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::Duration;

const TOKEN: &str = "glrt-run-kubernetes-token";

/// The configuration of these tests; `plugin_config` lines in `extra` (TOML).
fn write_config(dir: &Path, url: &str, kube: &FakeKube, extra: &str) -> PathBuf {
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
{extra}
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
    let gl = run_support::fake_gitlab(&[TOKEN], Duration::from_secs(2)).await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), gl.url(), &kube, "");
    let mut m = Manager::start(&config, &[]);

    let services = gl.enqueue(TOKEN, run_support::services_pair_job("services", &[]));
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

/// The sizing rules of the sizing tests (GitLab's `[runners.kubernetes]` keys).
const SIZING: &str = r#"      cpu_request_overwrite_max_allowed = "2"
      memory_limit_overwrite_max_allowed = "2Gi""#;

/// The sized pods the fake API server holds, as it returns them (plain HTTP, not our
/// client).
async fn sized_pods(kube: &FakeKube) -> Vec<serde_json::Value> {
    let list: serde_json::Value = reqwest::Client::new()
        .get(format!(
            "{}/api/v1/namespaces/ci/pods?labelSelector=flotilla.shape",
            kube.url()
        ))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    list["items"].as_array().cloned().unwrap_or_default()
}

/// Polls the sized pods until one appears (90 s at most).
async fn first_sized_pod(kube: &FakeKube) -> serde_json::Value {
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    loop {
        if let Some(pod) = sized_pods(kube).await.into_iter().next() {
            return pod;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no sized pod was made"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn infra_a_job_asking_for_resources_runs_on_a_pod_of_that_size() {
    if !require(Infra::Docker) {
        return;
    }
    let kube = FakeKube::start().await.unwrap();
    let gl = run_support::fake_gitlab(&[TOKEN], Duration::from_secs(2)).await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), gl.url(), &kube, SIZING);
    let mut m = Manager::start(&config, &[]);

    let sized = gl.enqueue(
        TOKEN,
        JobBuilder::new("sized")
            .field("image", json!({"name": busybox_image()}))
            .variable("KUBERNETES_CPU_REQUEST", "500m")
            .variable("KUBERNETES_MEMORY_LIMIT", "1Gi")
            .script(["echo 'OUT|sized|ran'"]),
    );
    let plain = gl.enqueue(
        TOKEN,
        JobBuilder::new("plain")
            .field("image", json!({"name": busybox_image()}))
            .script(["echo 'OUT|plain|ran'"]),
    );
    let too_big = gl.enqueue(
        TOKEN,
        JobBuilder::new("too-big")
            .field("image", json!({"name": busybox_image()}))
            .variable("KUBERNETES_CPU_REQUEST", "3")
            .script(["echo 'OUT|too-big|ran'"]),
    );
    let pod = first_sized_pod(&kube).await;
    let finished = gl
        .wait_finished(&[sized, plain, too_big], Duration::from_secs(300))
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

    // The sized pod, as the API server holds it: the job's resources on its container, its
    // shape in its label and annotation.
    assert_eq!(
        pod["spec"]["containers"][0]["resources"],
        json!({"requests": {"cpu": "500m"}, "limits": {"memory": "1Gi"}}),
        "{pod:#}"
    );
    assert_eq!(
        pod["metadata"]["annotations"]["flotilla.shape"],
        "cpu_request=500m,memory_limit=1Gi"
    );
    assert_eq!(pod["metadata"]["labels"]["flotilla.group"], "kube-fleet");
    let sized_name = pod["metadata"]["name"].as_str().unwrap().to_string();

    let j = gl.job(sized).unwrap();
    let trace = j.trace_text();
    assert_eq!(j.state, FakeJobState::Success, "{trace}\n{log}");
    assert!(trace.contains("OUT|sized|ran"), "{trace}");
    assert!(
        trace.contains(r#""CPURequest" overwritten with "500m""#)
            && trace.contains(r#""MemoryLimit" overwritten with "1Gi""#)
            && trace
                .contains("Running on a pod sized for this job: cpu_request=500m,memory_limit=1Gi"),
        "{trace}"
    );

    let j = gl.job(plain).unwrap();
    let trace = j.trace_text();
    assert_eq!(j.state, FakeJobState::Success, "{trace}\n{log}");
    assert!(
        trace.contains("OUT|plain|ran") && !trace.contains("sized"),
        "{trace}"
    );

    // Above the maximum: GitLab's message (`executors/kubernetes/overwrites.go`), a system
    // failure, and nothing ran.
    let j = gl.job(too_big).unwrap();
    let trace = j.trace_text();
    assert_eq!(j.state, FakeJobState::Failed, "{trace}");
    assert!(
        trace.contains(
            r#"couldn't prepare overwrites: invalid build requests specified: the resource "CPURequest" requested "3" is higher than limit allowed "2""#
        ),
        "{trace}"
    );
    assert_eq!(
        j.final_update
            .as_ref()
            .and_then(|f| f.failure_reason.as_deref()),
        Some("runner_system_failure")
    );
    assert!(!trace.contains("OUT|too-big|ran"), "{trace}");

    // The sized pod served its one job and was deleted (max_use_count 1); the default pods
    // are no sized pods.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while sized_pods(&kube)
        .await
        .iter()
        .any(|p| p["metadata"]["name"] == sized_name)
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the sized pod {sized_name} was not deleted after its job"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        kube.requests()
            .iter()
            .any(|r| r == &format!("DELETE /api/v1/namespaces/ci/pods/{sized_name}")),
        "deleted by name"
    );
    m.signal(libc::SIGTERM);
    let _ = m.wait(Duration::from_secs(30)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn infra_sized_pods_a_killed_manager_left_are_deleted_by_the_next() {
    if !require(Infra::Docker) {
        return;
    }
    let kube = FakeKube::start().await.unwrap();
    let gl = run_support::fake_gitlab(&[TOKEN], Duration::from_secs(2)).await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), gl.url(), &kube, SIZING);
    let mut m = Manager::start(&config, &[]);
    let long = gl.enqueue(
        TOKEN,
        JobBuilder::new("long")
            .field("image", json!({"name": busybox_image()}))
            .variable("KUBERNETES_MEMORY_LIMIT", "1Gi")
            .script(["sleep 600"]),
    );
    let pod = first_sized_pod(&kube).await;
    let name = pod["metadata"]["name"].as_str().unwrap().to_string();
    // Killed while its sized pod exists: nothing could delete it.
    m.kill9().await;
    assert!(
        sized_pods(&kube)
            .await
            .iter()
            .any(|p| p["metadata"]["name"] == name.as_str()),
        "the sized pod outlived the manager"
    );

    let mut next = Manager::start(&config, &[]);
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    while !sized_pods(&kube).await.is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the next manager left the sized pods: {:?}\n{}",
            sized_pods(&kube).await,
            next.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        next.log()
            .contains("deleting sized pods an earlier process left"),
        "{}",
        next.log_tail()
    );
    // The job the killed manager ran is reported by the next one, as any orphan is.
    assert!(
        gl.wait_finished(&[long], Duration::from_secs(60)).await,
        "{}",
        next.log_tail()
    );
    next.signal(libc::SIGTERM);
    let _ = next.wait(Duration::from_secs(30)).await;
}

/// GitLab's job contract on pods reached through kube-exec: a sample of the conformance cases
/// a job payload carries as it is (exit status, after_script, `GITLAB_ENV`, variables, the
/// environment's kind), each job's final update and trace judged as `run_conformance` judges
/// them on the shell.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn infra_a_sample_of_conformance_cases_holds_on_kubernetes_pods() {
    if !require(Infra::Docker) {
        return;
    }
    // The sample's cases a job payload carries as it is (no `.gitlab-ci.yml` keys).
    let cases: Vec<&flotilla_conformance::Case> = flotilla_conformance::sample()
        .into_iter()
        .filter(|c| c.extra.is_empty())
        .collect();
    assert!(cases.len() >= 10, "only {} cases", cases.len());
    let kube = FakeKube::start().await.unwrap();
    let gl = run_support::fake_gitlab(&[TOKEN], Duration::from_secs(2)).await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), gl.url(), &kube, "");
    let mut m = Manager::start(&config, &[]);
    let busybox = busybox_image();
    let runs = run_support::run_cases(&gl, TOKEN, &cases, Some(&busybox), || m.log_tail()).await;
    run_support::assert_conform(&runs);
    let kind = runs
        .iter()
        .find(|r| r.case.name == "predefined-shared-or-disposable")
        .expect("the environment's kind is in the sample");
    assert!(
        kind.trace.contains("\nenvironment-is-disposable"),
        "a job's container on a pod is disposable: {}",
        kind.trace
    );
    m.signal(libc::SIGTERM);
    let _ = m.wait(Duration::from_secs(30)).await;
}
