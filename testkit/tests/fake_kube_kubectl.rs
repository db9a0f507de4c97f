//! The fake Kubernetes API server judged by a real kubectl (1.31 or newer, which speaks
//! WebSocket exec): create, get with selectors and JSONPath, wait (a watch on conditions),
//! exec with separate stdout and stderr, exit code and stdin, Status errors, delete.
#![cfg(feature = "fake-kube")]

use flotilla_testkit::fake_kube::FakeKube;
use flotilla_testkit::images;
use flotilla_testkit::infra::{self, Infra};
use std::process::Stdio;
use tokio::io::AsyncWriteExt;

struct Ran {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

async fn kubectl(kube: &FakeKube, args: &[&str], stdin: Option<&str>) -> Ran {
    let path = infra::kubectl_path().expect("kubectl was probed");
    let mut child = tokio::process::Command::new(path)
        .arg("--kubeconfig")
        .arg(kube.kubeconfig())
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("kubectl starts");
    if let Some(input) = stdin {
        let mut pipe = child.stdin.take().expect("stdin piped");
        pipe.write_all(input.as_bytes())
            .await
            .expect("stdin written");
        drop(pipe);
    }
    let out = tokio::time::timeout(std::time::Duration::from_secs(90), child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("kubectl {args:?} did not finish in 90 s"))
        .expect("kubectl ran");
    Ran {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn pod_yaml(name: &str, image: &str) -> String {
    format!(
        "apiVersion: v1
kind: Pod
metadata:
  name: {name}
  labels:
    app: judge
spec:
  restartPolicy: Never
  containers:
  - name: main
    image: {image}
"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn infra_kubectl_creates_gets_waits_execs_and_deletes_pods() {
    if !infra::require(Infra::Docker) || !infra::require(Infra::Kubectl) {
        return;
    }
    let image = images::instance_image();
    let kube = FakeKube::start().await.expect("fake API server starts");
    let dir = tempfile::tempdir().unwrap();
    let manifest = dir.path().join("pod.yaml");
    std::fs::write(&manifest, pod_yaml("judge-1", &image)).unwrap();
    let manifest = manifest.to_str().unwrap();

    // The fake serves no OpenAPI documents, which kubectl's schema validation downloads:
    // without them it must be told not to validate (it then asks fieldValidation=Ignore).
    let created = kubectl(&kube, &["create", "--validate=false", "-f", manifest], None).await;
    assert_eq!(created.code, Some(0), "create: {}", created.stderr);
    assert_eq!(created.stdout.trim(), "pod/judge-1 created");

    let again = kubectl(&kube, &["create", "--validate=false", "-f", manifest], None).await;
    assert_eq!(again.code, Some(1));
    assert!(
        again.stderr.contains("(AlreadyExists)")
            && again.stderr.contains("pods \"judge-1\" already exists"),
        "{}",
        again.stderr
    );

    let waited = kubectl(
        &kube,
        &[
            "wait",
            "--for=condition=Ready",
            "pod/judge-1",
            "--timeout=60s",
        ],
        None,
    )
    .await;
    assert_eq!(
        waited.code,
        Some(0),
        "wait: {} {}",
        waited.stdout,
        waited.stderr
    );
    assert_eq!(waited.stdout.trim(), "pod/judge-1 condition met");

    let phase = kubectl(
        &kube,
        &[
            "get",
            "pod",
            "judge-1",
            "-o",
            "jsonpath={.status.phase} {.status.podIP}",
        ],
        None,
    )
    .await;
    assert_eq!(phase.code, Some(0), "{}", phase.stderr);
    let (p, ip) = phase.stdout.split_once(' ').expect("phase and IP");
    assert_eq!(p, "Running");
    assert!(ip.parse::<std::net::Ipv4Addr>().is_ok(), "pod IP: {ip:?}");

    let selected = kubectl(
        &kube,
        &["get", "pods", "-l", "app=judge", "-o", "name"],
        None,
    )
    .await;
    assert_eq!(selected.stdout.trim(), "pod/judge-1", "{}", selected.stderr);
    let none = kubectl(&kube, &["get", "pods", "-l", "app in (other)"], None).await;
    assert_eq!(none.code, Some(0));
    assert_eq!(none.stdout.trim(), "");
    assert!(
        none.stderr
            .contains("No resources found in default namespace."),
        "{}",
        none.stderr
    );
    let table = kubectl(&kube, &["get", "pods"], None).await;
    assert!(
        table.stdout.contains("judge-1"),
        "{}{}",
        table.stdout,
        table.stderr
    );

    let exec = kubectl(
        &kube,
        &[
            "exec",
            "judge-1",
            "--",
            "sh",
            "-c",
            "echo out; echo err >&2; exit 7",
        ],
        None,
    )
    .await;
    assert_eq!(
        exec.code,
        Some(7),
        "exec: {} / {}",
        exec.stdout,
        exec.stderr
    );
    assert_eq!(exec.stdout, "out\n");
    assert!(
        exec.stderr.starts_with("err\n"),
        "stderr kept apart: {:?}",
        exec.stderr
    );
    let ok = kubectl(
        &kube,
        &["exec", "judge-1", "-c", "main", "--", "true"],
        None,
    )
    .await;
    assert_eq!(ok.code, Some(0), "{}", ok.stderr);
    let piped = kubectl(
        &kube,
        &["exec", "-i", "judge-1", "--", "sh", "-c", "wc -c"],
        Some("hello"),
    )
    .await;
    assert_eq!(piped.code, Some(0), "{}", piped.stderr);
    assert_eq!(
        piped.stdout.trim(),
        "5",
        "stdin reached the command and was closed"
    );

    let missing = kubectl(&kube, &["get", "pod", "nope"], None).await;
    assert_eq!(missing.code, Some(1));
    assert!(
        missing
            .stderr
            .contains("Error from server (NotFound): pods \"nope\" not found"),
        "{}",
        missing.stderr
    );
    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: bad\nspec:\n  containers: []\n",
    )
    .unwrap();
    let invalid = kubectl(
        &kube,
        &["create", "--validate=false", "-f", bad.to_str().unwrap()],
        None,
    )
    .await;
    assert_eq!(invalid.code, Some(1));
    assert!(
        invalid
            .stderr
            .contains("Pod \"bad\" is invalid: spec.containers: Required value"),
        "{}",
        invalid.stderr
    );

    let container = kube
        .container_of("default", "judge-1")
        .expect("a running pod has a container");
    // Docker lists the pod's container now, so an empty list below means it went (not that
    // Docker could not be asked).
    let listed = || flotilla_testkit::containers::labelled(&kube.container_label());
    assert!(
        listed().iter().any(|id| container.starts_with(id.as_str())),
        "the pod's container {container} is listed by its label: {:?}",
        listed()
    );
    let deleted = kubectl(&kube, &["delete", "pod", "judge-1"], None).await;
    assert_eq!(deleted.code, Some(0), "{}", deleted.stderr);
    assert_eq!(deleted.stdout.trim(), "pod \"judge-1\" deleted");
    let gone = kubectl(&kube, &["get", "pod", "judge-1"], None).await;
    assert_eq!(gone.code, Some(1));
    for _ in 0..100 {
        if listed().is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(listed().is_empty(), "the pod's container was removed");
}

/// Deletion is graceful, as the registry and the kubelet make it: a bound pod stays, marked
/// with `deletionTimestamp` and `deletionGracePeriodSeconds` (its `terminationGracePeriodSeconds`),
/// while its container gets SIGTERM and the period to stop; `kubectl delete` waits until it is
/// gone. The container here is a `sleep` as PID 1, which ignores SIGTERM, so it lasts the
/// whole period.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn infra_kubectl_sees_a_graceful_deletion() {
    if !infra::require(Infra::Docker) || !infra::require(Infra::Kubectl) {
        return;
    }
    let image = images::instance_image();
    let kube = FakeKube::start().await.expect("fake API server starts");
    let dir = tempfile::tempdir().unwrap();
    let manifest = dir.path().join("pod.yaml");
    std::fs::write(
        &manifest,
        format!(
            "apiVersion: v1
kind: Pod
metadata:
  name: judge-grace
spec:
  terminationGracePeriodSeconds: 5
  containers:
  - name: main
    image: {image}
    command: [\"sleep\", \"3600\"]
"
        ),
    )
    .unwrap();
    let manifest = manifest.to_string_lossy().to_string();
    let created = kubectl(
        &kube,
        &["create", "--validate=false", "-f", &manifest],
        None,
    )
    .await;
    assert_eq!(created.code, Some(0), "{}", created.stderr);
    let ready = kubectl(
        &kube,
        &[
            "wait",
            "--for=condition=Ready",
            "pod/judge-grace",
            "--timeout=60s",
        ],
        None,
    )
    .await;
    assert_eq!(ready.code, Some(0), "{}", ready.stderr);
    let node = kubectl(
        &kube,
        &[
            "get",
            "pod",
            "judge-grace",
            "-o",
            "jsonpath={.spec.nodeName}",
        ],
        None,
    )
    .await;
    assert_eq!(node.stdout, "fake-node", "bound by the scheduler");

    let deleted = kubectl(
        &kube,
        &["delete", "pod", "judge-grace", "--wait=false"],
        None,
    )
    .await;
    assert_eq!(deleted.code, Some(0), "{}", deleted.stderr);
    let terminating = kubectl(
        &kube,
        &[
            "get",
            "pod",
            "judge-grace",
            "-o",
            "jsonpath={.metadata.deletionGracePeriodSeconds} {.metadata.deletionTimestamp}",
        ],
        None,
    )
    .await;
    assert_eq!(
        terminating.code,
        Some(0),
        "still there: {}",
        terminating.stderr
    );
    let (period, at) = terminating
        .stdout
        .split_once(' ')
        .expect("period and timestamp");
    assert_eq!(period, "5", "{}", terminating.stdout);
    assert!(at.ends_with('Z') && at.len() == 20, "{at}");
    // A second delete waits for the end of the period, when the pod is removed.
    let waited = kubectl(
        &kube,
        &["delete", "pod", "judge-grace", "--timeout=60s"],
        None,
    )
    .await;
    assert_eq!(waited.code, Some(0), "{}", waited.stderr);
    let gone = kubectl(&kube, &["get", "pod", "judge-grace"], None).await;
    assert_eq!(gone.code, Some(1), "{}", gone.stdout);
    assert!(
        gone.stderr.contains("NotFound") || gone.stderr.contains("not found"),
        "{}",
        gone.stderr
    );
}
