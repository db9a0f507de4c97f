//! The kubernetes provider and its kube-exec connector against the fake API server of
//! `flotilla-testkit` (pods are containers of the instance image with an inner dockerd).

use flotilla_connect::docker_api::{DockerRoute, docker_client};
use flotilla_connect::{
    ConnectError, Connector, ConnectorExt, ExecRequest, ExitStatus, ForwardTarget,
};
use flotilla_fleet::{InstanceGroup, Settings, State};
use flotilla_provider_kubernetes::{KubernetesGroup, KubernetesSettings, connector};
use flotilla_testkit::fake_kube::FakeKube;
use flotilla_testkit::images;
use flotilla_testkit::infra::{Infra, require};
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::AsyncReadExt;

fn template(image: &str) -> String {
    format!(
        "apiVersion: v1
kind: PodTemplate
template:
  metadata:
    labels:
      team: ci
  spec:
    restartPolicy: Never
    containers:
    - name: main
      image: {image}
      env:
      - name: FLOTILLA_INNER_DOCKERD
        value: \"1\"
"
    )
}

fn group(kube: &FakeKube, name: &str, extra: serde_json::Value) -> KubernetesGroup {
    let mut config = json!({
        "name": name,
        "namespace": "ci",
        "kubeconfig": kube.kubeconfig(),
        "pod_template": template(&images::instance_image()),
    });
    if let (Some(c), Some(e)) = (config.as_object_mut(), extra.as_object()) {
        c.extend(e.clone());
    }
    KubernetesGroup::new(KubernetesSettings::from_plugin_config(&config).unwrap()).unwrap()
}

/// Polls `update` until `count` instances are `state` (60 s at most).
async fn wait_for(group: &KubernetesGroup, state: State, count: usize) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let listing = group.update().await.unwrap();
        let matching: Vec<String> = listing
            .iter()
            .filter(|s| s.state == state)
            .map(|s| s.id.clone())
            .collect();
        if matching.len() == count {
            return matching;
        }
        assert!(
            Instant::now() < deadline,
            "waiting for {count} {state:?}: {listing:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn connect(group: &KubernetesGroup, id: &str) -> Arc<dyn Connector> {
    let info = group.connect_info(id).await.unwrap();
    assert!(
        info.external_addr.starts_with("kube-exec://kubernetes/ci/"),
        "{}",
        info.external_addr
    );
    assert!(
        info.internal_addr.parse::<std::net::Ipv4Addr>().is_ok(),
        "pod IP {}",
        info.internal_addr
    );
    Arc::new(connector(&info).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn infra_pods_are_made_listed_reached_and_deleted_by_name() {
    if !require(Infra::Docker) {
        return;
    }
    let kube = FakeKube::start().await.unwrap();
    let group = group(&kube, "Pods Test", json!({"max_size": 2}));
    let info = group.init(&Settings::default()).await.unwrap();
    assert_eq!(info.id, "kubernetes/ci/Pods Test");
    assert_eq!(
        info.capabilities.connector,
        flotilla_fleet::ConnectorKind::KubeExec
    );
    assert_eq!(
        group.increase(3).await.unwrap(),
        2,
        "max_size bounds the increase"
    );
    let running = wait_for(&group, State::Running, 2).await;
    for id in &running {
        assert!(id.starts_with("flotilla-pods-test-"), "{id}");
        group.heartbeat(id).await.unwrap();
    }

    let pod = connect(&group, &running[0]).await;
    let mut out = Vec::new();
    let mut err = Vec::new();
    let status = pod
        .exec(
            ExecRequest::new("echo \"out $GREETING\"; echo err >&2; exit 3")
                .env("GREETING", "it's me")
                .stdout(&mut out)
                .stderr(&mut err),
        )
        .await
        .unwrap();
    assert_eq!(status, ExitStatus::Code(3));
    assert_eq!(String::from_utf8_lossy(&out), "out it's me\n");
    assert_eq!(String::from_utf8_lossy(&err), "err\n");
    let mut echoed = Vec::new();
    let status = pod
        .exec(
            ExecRequest::new("cat; echo done")
                .stdin_bytes("fed through stdin\n")
                .stdout(&mut echoed),
        )
        .await
        .unwrap();
    assert_eq!(status, ExitStatus::Code(0));
    assert_eq!(
        String::from_utf8_lossy(&echoed),
        "fed through stdin\ndone\n",
        "stdin was closed after the input"
    );

    // sshd answers on the pod's port 22: port-forward reaches it.
    let mut ssh = pod
        .forward(&ForwardTarget::Tcp {
            host: "localhost".into(),
            port: 22,
        })
        .await
        .unwrap();
    let mut banner = [0u8; 8];
    tokio::time::timeout(Duration::from_secs(10), ssh.read_exact(&mut banner))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&banner, b"SSH-2.0-");
    drop(ssh);

    let deleted = group
        .decrease(&[running[0].clone(), "flotilla-never-was".into()])
        .await
        .unwrap();
    assert_eq!(
        deleted,
        vec![running[0].clone(), "flotilla-never-was".to_string()]
    );
    // Deletion is graceful: the pod is listed `deleting` while its container stops (SIGTERM,
    // then its grace period), then it is gone and reported `deleted`.
    let mut listing = group.update().await.unwrap();
    for _ in 0..400 {
        let st = listing.iter().find(|s| s.id == running[0]).map(|s| s.state);
        assert!(
            matches!(st, Some(State::Deleting | State::Deleted)),
            "{listing:?}"
        );
        if st == Some(State::Deleted) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        listing = group.update().await.unwrap();
    }
    assert!(
        listing
            .iter()
            .any(|s| s.id == running[0] && s.state == State::Deleted),
        "{listing:?}"
    );
    assert!(
        listing
            .iter()
            .any(|s| s.id == running[1] && s.state == State::Running),
        "{listing:?}"
    );
    assert!(matches!(
        group.heartbeat(&running[0]).await,
        Err(flotilla_fleet::FleetError::InstanceNotFound(_))
    ));
    let requests = kube.requests();
    assert!(
        requests
            .iter()
            .any(|r| r == &format!("DELETE /api/v1/namespaces/ci/pods/{}", running[0])),
        "deleted by name: {requests:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn infra_a_pod_pending_too_long_times_out_with_its_reason() {
    if !require(Infra::Docker) {
        return;
    }
    let kube = FakeKube::start().await.unwrap();
    kube.hold_pending(Some((
        "Unschedulable",
        "0/1 nodes are available: 1 Insufficient cpu.",
    )));
    let group = group(&kube, "pending", json!({"pending_timeout": 1}));
    group.init(&Settings::default()).await.unwrap();
    assert_eq!(group.increase(1).await.unwrap(), 1);
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let timed_out = wait_for(&group, State::Timeout, 1).await;
    let why = group
        .timeout_reason(&timed_out[0])
        .expect("the reason is kept");
    assert!(
        why.contains(
            "PodScheduled False (Unschedulable): 0/1 nodes are available: 1 Insufficient cpu."
        ),
        "{why}"
    );
    assert!(
        why.contains("event Warning FailedScheduling"),
        "events are read too: {why}"
    );
    let err = group
        .heartbeat(&timed_out[0])
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("Unschedulable"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn infra_dial_stdio_drives_the_pods_dockerd_and_a_lost_stream_is_an_error() {
    if !require(Infra::Docker) {
        return;
    }
    let kube = FakeKube::start().await.unwrap();
    let group = group(&kube, "dind", json!({}));
    group.init(&Settings::default()).await.unwrap();
    group.increase(1).await.unwrap();
    let id = wait_for(&group, State::Running, 1).await.remove(0);
    let pod = connect(&group, &id).await;
    let ready = pod
        .output("for i in $(seq 1 120); do [ -e /run/flotilla-dockerd-ready ] && exit 0; sleep 0.5; done; exit 1")
        .await
        .unwrap();
    assert_eq!(
        ready.status,
        ExitStatus::Code(0),
        "the inner dockerd came up"
    );
    let docker = docker_client(pod.clone(), DockerRoute::default(), 30)
        .await
        .unwrap();
    let version = docker.version().await.unwrap();
    assert!(version.api_version.is_some(), "{version:?}");
    let images = docker
        .list_images(None::<bollard::query_parameters::ListImagesOptions>)
        .await
        .unwrap();
    assert!(
        !images.is_empty(),
        "the pod's own daemon, with its preloaded images"
    );

    // A stream the server drops mid-command: a clear error, not a hang or a made-up code.
    let severing = async {
        tokio::time::sleep(Duration::from_millis(800)).await;
        kube.sever_streams();
    };
    let (result, ()) = tokio::join!(
        pod.exec(ExecRequest::new("echo started; sleep 31")),
        severing
    );
    match result {
        Err(ConnectError::Network { message, .. }) => {
            assert!(message.contains("without an exit status"), "{message}");
        }
        other => panic!("expected a lost-stream error, got {other:?}"),
    }
    // The command the lost stream ran is stopped too: a retry must not meet it still running.
    let left = pod
        .output("for p in /proc/[0-9]*; do tr '\\0' ' ' <$p/cmdline 2>/dev/null; echo; done | grep -c '^sleep 31 $' || true")
        .await
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&left.stdout).trim(),
        "0",
        "the command of the lost stream was killed"
    );

    // Cancellation stops the command in the pod.
    let cancel = tokio_util::sync::CancellationToken::new();
    let started = Instant::now();
    let stop = async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        cancel.cancel();
    };
    let mut req = ExecRequest::new("sleep 29; touch /tmp/not-cancelled");
    req.cancel = cancel.clone();
    let (result, ()) = tokio::join!(pod.exec(req), stop);
    assert!(matches!(result, Err(ConnectError::Cancelled)), "{result:?}");
    assert!(started.elapsed() < Duration::from_secs(20));
    let left = pod
        .output("for p in /proc/[0-9]*; do tr '\\0' ' ' <$p/cmdline 2>/dev/null; echo; done | grep -c '^sleep 29 $' || true")
        .await
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&left.stdout).trim(),
        "0",
        "the cancelled command was killed"
    );
}

/// The pod `name` as the API server returns it.
async fn get_pod(kube: &FakeKube, name: &str) -> k8s_openapi::api::core::v1::Pod {
    let kubeconfig = kube::config::Kubeconfig::read_from(kube.kubeconfig()).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    let client = kube::Client::try_from(config).unwrap();
    kube::Api::<k8s_openapi::api::core::v1::Pod>::namespaced(client, "ci")
        .get(name)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn infra_sized_pods_carry_their_resources_and_are_listed_apart() {
    if !require(Infra::Docker) {
        return;
    }
    use flotilla_provider_kubernetes::{SHAPE_ANNOTATION, SHAPE_LABEL, Shape};
    let kube = FakeKube::start().await.unwrap();
    let default = group(
        &kube,
        "Sizes",
        json!({"memory_limit": "2Gi", "memory_limit_overwrite_max_allowed": "4Gi"}),
    );
    let shape = Shape::from_annotation("cpu_request=250m,cpu_limit=1,memory_limit=1Gi").unwrap();
    let sized = default.sized(shape.clone());
    let default_info = default.init(&Settings::default()).await.unwrap();
    let sized_info = sized.init(&Settings::default()).await.unwrap();
    assert_eq!(default_info.id, "kubernetes/ci/Sizes");
    assert_eq!(
        sized_info.id,
        format!("kubernetes/ci/Sizes/shape-{}", shape.hash()),
        "the store keys journals by the id: each shape has its own"
    );

    assert_eq!(default.increase(1).await.unwrap(), 1);
    assert_eq!(sized.increase(1).await.unwrap(), 1);
    let default_pod = wait_for(&default, State::Running, 1).await.remove(0);
    let sized_pod = wait_for(&sized, State::Running, 1).await.remove(0);
    assert_ne!(default_pod, sized_pod);
    // Each listing has its own pod only.
    let ids = |l: Vec<flotilla_fleet::InstanceStatus>| -> Vec<String> {
        l.into_iter().map(|s| s.id).collect()
    };
    assert_eq!(
        ids(default.update().await.unwrap()),
        vec![default_pod.clone()]
    );
    assert_eq!(ids(sized.update().await.unwrap()), vec![sized_pod.clone()]);
    let other = default.sized(Shape::from_annotation("cpu_request=2").unwrap());
    other.init(&Settings::default()).await.unwrap();
    assert!(other.update().await.unwrap().is_empty());

    // The API server keeps what was sent: the shape's resources on the job container.
    let pod = get_pod(&kube, &sized_pod).await;
    let resources =
        serde_json::to_value(&pod.spec.as_ref().unwrap().containers[0].resources).unwrap();
    assert_eq!(
        resources,
        json!({"requests": {"cpu": "250m"}, "limits": {"cpu": "1", "memory": "1Gi"}})
    );
    assert_eq!(
        pod.metadata.labels.as_ref().unwrap()[SHAPE_LABEL],
        shape.hash()
    );
    assert_eq!(
        pod.metadata.annotations.as_ref().unwrap()[SHAPE_ANNOTATION],
        shape.annotation()
    );
    let pod = get_pod(&kube, &default_pod).await;
    let resources =
        serde_json::to_value(&pod.spec.as_ref().unwrap().containers[0].resources).unwrap();
    assert_eq!(
        resources,
        json!({"limits": {"memory": "2Gi"}}),
        "the default pod has the configured default"
    );

    // The fake makes the limits the container's: the pod really is that size.
    let docker = bollard::Docker::connect_with_local_defaults().unwrap();
    let container = kube.container_of("ci", &sized_pod).unwrap();
    let host = docker
        .inspect_container(
            &container,
            None::<bollard::query_parameters::InspectContainerOptions>,
        )
        .await
        .unwrap()
        .host_config
        .unwrap();
    assert_eq!(host.nano_cpus, Some(1_000_000_000));
    assert_eq!(host.memory, Some(1 << 30));

    // A manager started later finds the sized pods and their shapes from the cluster alone.
    let found = default.sized_pods().await.unwrap();
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].name, sized_pod);
    assert_eq!(found[0].shape, Ok(shape));

    assert_eq!(
        sized
            .decrease(std::slice::from_ref(&sized_pod))
            .await
            .unwrap(),
        vec![sized_pod]
    );
    assert_eq!(
        default
            .decrease(std::slice::from_ref(&default_pod))
            .await
            .unwrap(),
        vec![default_pod]
    );
}
