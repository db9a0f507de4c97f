//! A command start through the kube-exec connector vs `kubectl exec <pod> -- true`, against
//! the same fake API server and the same ready pod, side by side (alternated rounds, medians).
//!
//! Measured per round: (a) `exec("true")` through `KubeExecConnector` (a new WebSocket exec
//! session, the wrapper shell, the status), which is what each stage and helper command of a
//! job costs at start; (b) a Docker API ping through `dial_stdio` (`docker system dial-stdio`
//! over exec), the first thing docker isolation does on a pod; (c) `kubectl exec <pod> --
//! true`, the reference (a process start, kubeconfig, discovery from its cache, the exec).
//!
//! `cargo bench -p flotilla-provider-kubernetes --bench exec_vs_kubectl` (needs Docker and a
//! kubectl 1.31+; see scripts/setup.d/kubernetes.sh).

use flotilla_connect::docker_api::{DockerRoute, docker_client};
use flotilla_connect::{Connector, ConnectorExt};
use flotilla_fleet::{InstanceGroup, Settings, State};
use flotilla_provider_kubernetes::{KubernetesGroup, KubernetesSettings, connector};
use flotilla_testkit::fake_kube::FakeKube;
use flotilla_testkit::{images, infra};
use std::sync::Arc;
use std::time::{Duration, Instant};

const ROUNDS: usize = 15;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    if !infra::available(infra::Infra::Docker) || infra::kubectl_path().is_none() {
        eprintln!("exec_vs_kubectl needs Docker and kubectl 1.31+ (scripts/setup.d/kubernetes.sh)");
        std::process::exit(if infra::in_ci() { 1 } else { 0 });
    }
    let kubectl = infra::kubectl_path().expect("probed");
    let kube = FakeKube::start().await.expect("fake API server");
    let template = format!(
        "spec:\n  containers:\n  - name: main\n    image: {}\n    env:\n    - name: FLOTILLA_INNER_DOCKERD\n      value: \"1\"\n",
        images::instance_image()
    );
    let settings = KubernetesSettings::from_plugin_config(&serde_json::json!({
        "name": "bench", "kubeconfig": kube.kubeconfig(), "pod_template": template,
    }))
    .expect("settings");
    let group = KubernetesGroup::new(settings).expect("group");
    group.init(&Settings::default()).await.expect("init");
    group.increase(1).await.expect("increase");
    let pod = loop {
        let listing = group.update().await.expect("update");
        if let Some(s) = listing.iter().find(|s| s.state == State::Running) {
            break s.id.clone();
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let info = group.connect_info(&pod).await.expect("connect info");
    let conn: Arc<dyn Connector> = Arc::new(connector(&info).expect("connector"));
    let ready = conn
        .output("for i in $(seq 1 240); do [ -e /run/flotilla-dockerd-ready ] && exit 0; sleep 0.5; done; exit 1")
        .await
        .expect("dockerd wait");
    assert!(ready.status.success(), "the pod's dockerd came up");
    let docker = docker_client(conn.clone(), DockerRoute::default(), 30)
        .await
        .expect("docker client");
    // Warm both sides once (kubectl's discovery cache, the exec path).
    let _ = conn.output("true").await;
    let _ = tokio::process::Command::new(&kubectl)
        .arg("--kubeconfig")
        .arg(kube.kubeconfig())
        .args(["exec", &pod, "--", "true"])
        .output()
        .await;

    let (mut ours, mut ping, mut theirs) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        let t = Instant::now();
        let out = conn.output("true").await.expect("exec");
        assert!(out.status.success());
        ours.push(t.elapsed());

        let t = Instant::now();
        docker.ping().await.expect("docker ping");
        ping.push(t.elapsed());

        let t = Instant::now();
        let out = tokio::process::Command::new(&kubectl)
            .arg("--kubeconfig")
            .arg(kube.kubeconfig())
            .args(["exec", &pod, "--", "true"])
            .output()
            .await
            .expect("kubectl");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        theirs.push(t.elapsed());
    }
    let (a, b, c) = (median(ours), median(ping), median(theirs));
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "kube-exec `true` on a ready pod:        median {:>8.1} ms",
        a.as_secs_f64() * 1e3
    );
    println!(
        "Docker API ping through dial-stdio:     median {:>8.1} ms",
        b.as_secs_f64() * 1e3
    );
    println!(
        "kubectl exec <pod> -- true (reference): median {:>8.1} ms",
        c.as_secs_f64() * 1e3
    );
    println!(
        "ratio kube-exec / kubectl: {:.2} (target <= 1.2); {ROUNDS} alternated rounds; load {}",
        a.as_secs_f64() / c.as_secs_f64(),
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
}
