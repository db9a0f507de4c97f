//! How flotilla is deployed, run for real: the manager's container image, built offline from
//! the repository's Dockerfile (`packaging/container/`, `scripts/build-manager-image.sh`) and
//! this build's binary, takes a job from the fake GitLab and stops as `docker stop` (or a pod's
//! termination) stops it.

use crate::run_support;
use flotilla_testkit::containers::LabelGuard;
use flotilla_testkit::fake_gitlab::{FakeJobState, JobBuilder};
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
    let gl = run_support::fake_gitlab(&[token], Duration::from_millis(500)).await;
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
        r#"["/usr/bin/tini","--","/usr/local/bin/flotilla"] ["run"] SIGTERM"#
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
        // The image has no apt-get and its own flotilla: the job ran in it, not on the host.
        JobBuilder::new("contained").script([
            "echo in a container as $(id -u)",
            "test ! -e /usr/bin/apt-get",
            "test -x /usr/local/bin/flotilla",
            // An orphan: its parent exits at once, it ends a moment later.
            "(sleep 1 &)",
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
    // The orphan ended after the job and was reaped (PID 1 is tini, not flotilla).
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (ok, states) = docker(&["exec", &name, "ps", "-o", "stat,comm"]);
    assert!(ok, "{states}");
    assert!(
        !states
            .lines()
            .skip(1)
            .any(|l| l.trim_start().starts_with('Z')),
        "a zombie: {states}"
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

/// Runs kubectl against `kube`, returning (success, stdout, stderr).
async fn kubectl(
    kube: &flotilla_testkit::fake_kube::FakeKube,
    args: &[&str],
) -> (bool, String, String) {
    let path = infra::kubectl_path().expect("kubectl was probed");
    let out = tokio::time::timeout(
        Duration::from_secs(90),
        tokio::process::Command::new(path)
            .arg("--kubeconfig")
            .arg(kube.kubeconfig())
            .args(args)
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("kubectl finished within 90 s")
    .expect("kubectl ran");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The Kubernetes manifests (`packaging/kubernetes/flotilla.yaml`) applied by a real kubectl
/// to the fake API server: every object is created; the configuration in the Secret is one
/// `flotilla config check` accepts; the StatefulSet mounts that Secret and a volume where the
/// state goes, runs as the ServiceAccount the Role is bound to, and leaves running jobs
/// `shutdown_timeout` and two minutes more to stop; the Role grants what the kubernetes provider
/// does (no real API server or authorizer checked them: see README).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn infra_kubectl_applies_the_manifests_and_they_hold_together() {
    if !infra::require(Infra::Docker) || !infra::require(Infra::Kubectl) {
        return;
    }
    let kube = flotilla_testkit::fake_kube::FakeKube::start()
        .await
        .unwrap();
    let manifest =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../packaging/kubernetes/flotilla.yaml");
    // The fake serves no OpenAPI documents, which kubectl's schema validation downloads.
    let (ok, out, err) = kubectl(
        &kube,
        &[
            "apply",
            "-n",
            "ci",
            "--validate=false",
            "-f",
            manifest.to_str().unwrap(),
        ],
    )
    .await;
    assert!(ok, "{out}{err}");
    for made in [
        "serviceaccount/flotilla created",
        "role.rbac.authorization.k8s.io/flotilla created",
        "rolebinding.rbac.authorization.k8s.io/flotilla created",
        "secret/flotilla-config created",
        "service/flotilla created",
        "statefulset.apps/flotilla created",
    ] {
        assert!(out.contains(made), "{made}: {out}");
    }
    let get = |kind: &'static str, name: &'static str| {
        let kube = &kube;
        async move {
            let (ok, out, err) =
                kubectl(kube, &["get", kind, name, "-n", "ci", "-o", "json"]).await;
            assert!(ok, "{kind}/{name}: {err}");
            serde_json::from_str::<serde_json::Value>(&out).unwrap()
        }
    };

    // The configuration the Secret carries loads.
    let secret = get("secret", "flotilla-config").await;
    assert!(
        secret.get("stringData").is_none(),
        "the API server writes stringData into data"
    );
    use base64::Engine;
    let config_text = String::from_utf8(
        base64::engine::general_purpose::STANDARD
            .decode(secret["data"]["config.toml"].as_str().unwrap())
            .unwrap(),
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    std::fs::write(&config, &config_text).unwrap();
    let check = Command::new(env!("CARGO_BIN_EXE_flotilla"))
        .args(["config", "check", "-c", config.to_str().unwrap()])
        .env("FLOTILLA_STATE_DIR", dir.path().join("state"))
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
    let shutdown_timeout: u64 = config_text
        .lines()
        .find_map(|l| l.trim().strip_prefix("shutdown_timeout = "))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .expect("the configuration sets shutdown_timeout");

    // The StatefulSet holds together with the rest.
    let set = get("statefulset", "flotilla").await;
    let pod = &set["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], "flotilla");
    assert_eq!(
        pod["terminationGracePeriodSeconds"].as_u64(),
        Some(shutdown_timeout + 120),
        "running jobs get shutdown_timeout, and two minutes to report and shut the fleet down"
    );
    let container = &pod["containers"][0];
    assert_eq!(container["args"], serde_json::json!(["run"]));
    let env = |name: &str| {
        container["env"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == name)
            .and_then(|e| e["value"].as_str())
            .unwrap_or_default()
            .to_string()
    };
    let mount = |name: &str| {
        container["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == name)
            .and_then(|m| m["mountPath"].as_str())
            .unwrap_or_default()
            .to_string()
    };
    assert_eq!(
        env("FLOTILLA_CONFIG"),
        format!("{}/config.toml", mount("config"))
    );
    assert_eq!(env("FLOTILLA_STATE_DIR"), mount("state"));
    assert_eq!(pod["volumes"][0]["secret"]["secretName"], "flotilla-config");
    assert_eq!(
        set["spec"]["volumeClaimTemplates"][0]["metadata"]["name"],
        "state"
    );
    assert_eq!(set["spec"]["replicas"], 1, "one manager per runner");

    // The Role, bound to that account, grants what the kubernetes provider does.
    let binding = get("rolebinding", "flotilla").await;
    assert_eq!(binding["roleRef"]["name"], "flotilla");
    assert_eq!(binding["subjects"][0]["name"], "flotilla");
    let role = get("role", "flotilla").await;
    let grants = |resource: &str, verb: &str| {
        role["rules"].as_array().unwrap().iter().any(|r| {
            r["resources"]
                .as_array()
                .unwrap()
                .iter()
                .any(|x| x == resource)
                && r["verbs"].as_array().unwrap().iter().any(|x| x == verb)
        })
    };
    for (resource, verb) in [
        ("pods", "create"),
        ("pods", "delete"),
        ("pods", "get"),
        ("pods", "list"),
        ("pods", "watch"),
        ("pods/exec", "create"),
        ("pods/exec", "get"),
        ("pods/portforward", "create"),
        ("pods/portforward", "get"),
        ("events", "list"),
    ] {
        assert!(grants(resource, verb), "{verb} {resource}");
    }
    assert!(!grants("secrets", "get"), "no more than the provider needs");
}

/// The Debian package (`scripts/build-deb.sh`, with Debian's dpkg-deb) judged by lintian, then
/// installed by dpkg on Debian 12 (the instance image, a debootstrap of bookworm): the binary
/// runs, the example configuration (a conffile) loads, the unit is the one `flotilla install`
/// writes for it, the man pages are there; removing keeps the configuration, purging removes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn infra_docker_the_debian_package_passes_lintian_and_installs_on_debian() {
    if !infra::require(Infra::Docker) {
        return;
    }
    let out_dir = tempfile::tempdir().unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/build-deb.sh");
    let built = Command::new(&script)
        .arg(env!("CARGO_BIN_EXE_flotilla"))
        .arg(out_dir.path())
        .output()
        .unwrap();
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
    let deb = String::from_utf8_lossy(&built.stdout).trim().to_string();
    assert!(
        deb.ends_with("_amd64.deb") || deb.ends_with(".deb"),
        "{deb}"
    );

    let lintian = Command::new("lintian")
        .args(["--tag-display-limit", "0", &deb])
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&lintian.stdout),
        String::from_utf8_lossy(&lintian.stderr)
    );
    let complaints: Vec<&str> = said
        .lines()
        .filter(|l| l.starts_with("E:") || l.starts_with("W:"))
        .collect();
    assert!(complaints.is_empty(), "lintian: {said}");

    let unique = run_support::now_nanos();
    let label = format!("flotilla.test=deb-{unique}");
    let _containers = LabelGuard::new(label.clone());
    let mount = format!("{deb}:/tmp/flotilla.deb:ro");
    let steps = [
        "dpkg -i /tmp/flotilla.deb",
        "flotilla --version",
        "FLOTILLA_STATE_DIR=/tmp/state flotilla config check -c /etc/flotilla/config.toml >/dev/null",
        "grep -qx 'ExecStart=\"/usr/bin/flotilla\" run --config \"/etc/flotilla/config.toml\"' /lib/systemd/system/flotilla.service",
        "test -s /usr/share/man/man1/flotilla-register.1.gz",
        "test -s /usr/share/bash-completion/completions/flotilla",
        "dpkg -r flotilla",
        "test -f /etc/flotilla/config.toml && ! test -e /usr/bin/flotilla",
        "dpkg -P flotilla",
        "! test -e /etc/flotilla/config.toml",
        "echo installed-removed-purged",
    ];
    let image = flotilla_testkit::images::instance_image();
    let (ok, out) = docker(&[
        "run",
        "--rm",
        "--label",
        &label,
        "-v",
        &mount,
        "--entrypoint",
        "sh",
        &image,
        "-ec",
        &steps.join("\n"),
    ]);
    assert!(ok && out.contains("installed-removed-purged"), "{out}");
    assert!(out.contains("flotilla 0.1.0"), "{out}");
}
