//! The levels `flotilla exec` offers with no configuration (issue 33): on a host whose Docker
//! engine answers, jobs that name an `image:` run at the docker level, in a container of that
//! image from this host's engine (never pulled), with the rest on the shell; as root with
//! cgroups it can make, the cgroup level too; the first line says which levels this host
//! offers and why any is missing.

use crate::exec_support;

use exec_support::{Project, statuses};
use flotilla_testkit::images::busybox_image;
use flotilla_testkit::infra::{Infra, require};

#[test]
fn infra_docker_exec_runs_image_jobs_in_containers_with_no_configuration() {
    if !require(Infra::Docker) {
        return;
    }
    let image = busybox_image();
    let p = Project::with_pipeline(&format!(
        r#"
in-the-image:
  image: {image}
  services:
    - name: {image}
      alias: web
      command: ["sh", "-c", "mkdir -p /www && echo from-the-service > /www/index.html && exec httpd -f -p 8080 -h /www"]
  script:
    - echo "container $(hostname)"
    - test -f /.dockerenv && echo "in docker"
    - cat checked-out.txt
    - for i in $(seq 1 100); do nslookup web >/dev/null 2>&1 || break; wget -qO- http://web:8080/ && break; sleep 0.1; done
on-the-host:
  script:
    - echo "host $(hostname)"
missing-image:
  image: local/flotilla-not-built:nope
  script: [echo never]
"#
    ));
    p.write("checked-out.txt", "from the repository\n");
    p.commit("the file");
    let list = p.exec(&["--list"]);
    list.expect_code(0);
    assert!(
        list.stderr.lines().next().is_some_and(|l| {
            l.starts_with("this host offers shell, ") && l.contains("docker (jobs with an image:)")
        }),
        "{list}"
    );
    let rows: Vec<&str> = list.stdout.lines().collect();
    let level = |job: &str| {
        rows.iter()
            .find(|l| l.starts_with(&format!("{job} ")))
            .and_then(|l| l.split_whitespace().last())
            .unwrap_or_default()
            .to_string()
    };
    assert_eq!(level("in-the-image"), "docker", "{list}");
    assert_eq!(level("on-the-host"), "shell", "{list}");

    let run = p.exec(&[]);
    run.expect_code(1);
    assert_eq!(
        run.statuses(),
        statuses(&[
            ("in-the-image", "passed"),
            ("on-the-host", "passed"),
            ("missing-image", "failed"),
        ])
    );
    let log = p.log("in-the-image");
    assert!(log.contains("\nin docker"), "{log}");
    assert!(log.contains("\nfrom the repository"), "{log}");
    // Its service, from this host's engine too, reached by its alias.
    assert!(log.contains("\nfrom-the-service"), "{log}");
    let missing = p.log("missing-image");
    assert!(
        run.stdout
            .lines()
            .any(|l| l.starts_with("missing-image failed: ") && l.contains("No such image")),
        "the summary says why: {}",
        run.stdout
    );
    // The engine's words, and the command that puts the image there.
    assert!(
        missing.contains("(the engine says: ")
            && missing.contains("No such image: local/flotilla-not-built:nope")
            && missing.contains(
                "`docker pull local/flotilla-not-built:nope` on the instance puts it there"
            ),
        "{missing}"
    );

    // Forced to the shell, the image is not honoured, and the terminal says so.
    let forced = p.exec(&["--isolation", "shell", "in-the-image"]);
    assert!(
        forced.stderr.contains(&format!(
            "warning: job in-the-image names image {image}, which runs at the shell level here"
        )),
        "{forced}"
    );
}

/// Without a Docker engine (here: `DOCKER_HOST` naming a socket nobody listens on) the first
/// line says why there is no docker level, and a job with an image runs on the shell with a
/// warning on the terminal naming the image.
#[test]
fn exec_without_docker_says_why_and_names_the_image_it_cannot_honour() {
    let p = Project::with_pipeline(
        r#"
job:
  image: python:3.12
  script: [echo "on the host"]
"#,
    );
    let nowhere = p.outside().join("no-docker.sock");
    let run = p.exec_with_env(
        &[],
        &[("DOCKER_HOST", &format!("unix://{}", nowhere.display()))],
    );
    run.expect_code(0);
    let first = run.stderr.lines().next().unwrap_or_default();
    assert!(
        first.starts_with("this host offers shell")
            && first.contains("docker: no Docker engine at"),
        "{run}"
    );
    assert!(
        run.stderr.contains(
            "warning: job job names image python:3.12, which runs at the shell level here: on \
             this host, not in the image (no Docker engine answers; see the first line)"
        ),
        "{run}"
    );
    assert_eq!(run.statuses(), statuses(&[("job", "passed")]));
}

/// On a PATH with no `docker`, `tar`, `find` or `xargs`, the embedded default does not offer
/// the docker level (it reaches the engine through `docker system dial-stdio`; offered on the
/// socket alone, it waited a minute for the engine at every run), and artifacts pass between
/// shell jobs all the same: the helper's file work is done in flotilla there, through every
/// wrapper between the runner and the shell level.
#[test]
fn a_bare_path_gets_no_docker_level_and_passes_artifacts_without_tar() {
    let p = Project::with_pipeline(
        r"
stages: [build, test]
build:
  stage: build
  script: [mkdir -p out, echo made > out/a.txt]
  artifacts:
    paths: [out/]
test:
  stage: test
  script: [cat out/a.txt]
",
    );
    let bin = p.outside().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    for tool in ["bash", "sh", "git", "mkdir", "rm", "cat"] {
        let found = std::env::var("PATH")
            .unwrap_or_default()
            .split(':')
            .map(|d| std::path::Path::new(d).join(tool))
            .find(|p| p.is_file())
            .unwrap_or_else(|| panic!("no {tool} on PATH"));
        std::os::unix::fs::symlink(found, bin.join(tool)).unwrap();
    }
    let run = p.exec_with_env(&["--quiet"], &[("PATH", bin.to_str().unwrap())]);
    run.expect_code(0);
    let first = run.stderr.lines().next().unwrap_or_default();
    assert!(
        first.contains("not docker: missing docker (the command the level reaches the engine"),
        "{run}"
    );
    assert_eq!(
        run.statuses(),
        statuses(&[("build", "passed"), ("test", "passed")])
    );
    assert!(p.log("test").contains("made"), "{}", p.log("test"));
}

/// As root with cgroups it can make, the embedded default offers the `cgroup` level: a job
/// asking for it runs in a cgroup of its slot, named after this exec run.
#[test]
fn infra_cgroup_the_embedded_default_offers_cgroup_as_root() {
    if !require(Infra::Cgroups) {
        return;
    }
    let p = Project::with_pipeline(
        r"
boxed:
  variables:
    FLOTILLA_ISOLATION: cgroup
  script:
    - cat /proc/self/cgroup
",
    );
    let run = p.exec(&[]);
    run.expect_code(0);
    let first = run.stderr.lines().next().unwrap_or_default();
    assert!(first.starts_with("this host offers shell, cgroup"), "{run}");
    let log = p.log("boxed");
    assert!(log.contains("/flotilla-exec-"), "the job's cgroup: {log}");
    // Runs that are over leave no cgroup behind (this one's process is gone now).
    for root in ["/sys/fs/cgroup/cpu", "/sys/fs/cgroup"] {
        for entry in std::fs::read_dir(root).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Some(pid) = name
                .strip_prefix("flotilla-exec-")
                .filter(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
            {
                assert!(
                    std::path::Path::new(&format!("/proc/{pid}")).exists(),
                    "{} is left from a run that is over",
                    entry.path().display()
                );
            }
        }
    }
}

/// A configured fleet that cannot make its first instance (here the docker provider's
/// instance image is not on this host) stops the run with the provider's error, instead of
/// waiting for an instance that never comes (issue 33).
#[test]
fn infra_docker_exec_stops_when_the_fleet_cannot_make_an_instance() {
    if !require(Infra::Docker) {
        return;
    }
    let p = Project::with_pipeline("job:\n  script: [echo never]\n");
    let group = format!("exec-no-instance-{}", std::process::id());
    p.write(
        "fleet.toml",
        &format!(
            r#"
[[runners]]
  name = "missing-image"
  executor = "flotilla"
  [runners.autoscaler]
    plugin = "docker"
    capacity_per_instance = 1
    [runners.autoscaler.plugin_config]
      name = "{group}"
      image = "local/flotilla-no-such-instance:1"
    [runners.autoscaler.connector_config]
      username = "root"
"#
        ),
    );
    p.commit("config");
    let started = std::time::Instant::now();
    let run = p.exec(&["--config", "fleet.toml"]);
    run.expect_code(2);
    assert!(
        run.stderr
            .contains("error: the fleet cannot make an instance")
            && run
                .stderr
                .contains("No such image: local/flotilla-no-such-instance:1"),
        "{run}"
    );
    assert!(
        started.elapsed() < std::time::Duration::from_secs(60),
        "gave up in {:?}",
        started.elapsed()
    );
}

/// A registry on loopback that wants a login (Debian's docker-registry with an htpasswd file),
/// its storage in a directory of the test's; stopped when dropped.
struct Registry {
    child: std::process::Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Registry {
    fn start(user: &str, password: &str) -> Registry {
        let dir = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let htpasswd = std::process::Command::new("htpasswd")
            .args(["-Bbn", user, password])
            .output()
            .expect("htpasswd runs");
        assert!(htpasswd.status.success());
        std::fs::write(dir.path().join("htpasswd"), &htpasswd.stdout).unwrap();
        std::fs::write(
            dir.path().join("config.yml"),
            format!(
                "version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {data}\n\
                 http:\n  addr: 127.0.0.1:{port}\nauth:\n  htpasswd:\n    realm: flotilla-test\n\
                 \x20   path: {htpasswd}\n",
                data = dir.path().join("data").display(),
                htpasswd = dir.path().join("htpasswd").display(),
            ),
        )
        .unwrap();
        let child = std::process::Command::new("docker-registry")
            .arg("serve")
            .arg(dir.path().join("config.yml"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("docker-registry starts");
        let started = std::time::Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                started.elapsed() < std::time::Duration::from_secs(30),
                "the registry did not listen"
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        Registry {
            child,
            port,
            _dir: dir,
        }
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The docker CLI with a configuration directory of its own (the machine's is left alone).
fn docker_cli(config: &std::path::Path, args: &[&str], stdin: Option<&str>) -> String {
    use std::io::Write;
    let mut child = std::process::Command::new("docker")
        .arg("--config")
        .arg(config)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("docker runs");
    if let Some(input) = stdin {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "docker {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Registry credentials as GitLab Runner resolves them: a job whose image is in a registry
/// that wants a login is refused by the registry without credentials, and pulls it with the
/// login in `DOCKER_AUTH_CONFIG`, saying where the credentials came from. Before, no
/// credentials were ever sent, so private images could not be pulled.
#[test]
fn infra_registry_a_private_image_is_pulled_with_docker_auth_config() {
    if !require(Infra::Docker) || !require(Infra::Registry) {
        return;
    }
    use base64::Engine;
    let registry = Registry::start("ci-user", "ci-secret-pass");
    let host = format!("127.0.0.1:{}", registry.port);
    let image = format!("{host}/flotilla/busybox:private");
    let cli = tempfile::tempdir().unwrap();
    docker_cli(
        cli.path(),
        &["login", &host, "-u", "ci-user", "--password-stdin"],
        Some("ci-secret-pass"),
    );
    docker_cli(cli.path(), &["tag", &busybox_image(), &image], None);
    docker_cli(cli.path(), &["push", &image], None);
    docker_cli(cli.path(), &["rmi", &image], None);

    let p = Project::with_pipeline(&format!(
        "private:\n  image: {image}\n  script: [echo ran-from-the-private-image]\n"
    ));
    p.write(
        ".flotilla.toml",
        "concurrent = 1\n[[runners]]\n  name = \"private\"\n  executor = \"flotilla\"\n  \
         [runners.docker]\n    pull_policy = [\"always\"]\n  [runners.autoscaler]\n    \
         plugin = \"local\"\n    isolation = [\"shell\", \"docker\"]\n    \
         image_isolation = \"docker\"\n    capacity_per_instance = 1\n    max_instances = 1\n",
    );
    p.commit("the fleet");

    let refused = p.exec(&["private"]);
    refused.expect_code(1);
    let log = p.log("private");
    assert!(
        log.contains("no basic auth credentials") || log.contains("unauthorized"),
        "the registry refuses a pull without a login:\n{log}"
    );

    let auth = base64::engine::general_purpose::STANDARD.encode("ci-user:ci-secret-pass");
    let config = format!(r#"{{"auths": {{"{host}": {{"auth": "{auth}"}}}}}}"#);
    let pulled = p.exec(&[
        "--variable",
        &format!("DOCKER_AUTH_CONFIG={config}"),
        "private",
    ]);
    pulled.expect_code(0);
    let log = p.log("private");
    assert!(
        log.contains("Authenticating with credentials from $DOCKER_AUTH_CONFIG"),
        "{log}"
    );
    assert!(log.contains("ran-from-the-private-image"), "{log}");
    assert!(
        !log.contains("ci-secret-pass") && !log.contains(&auth),
        "{log}"
    );
    let _ = std::process::Command::new("docker")
        .args(["rmi", &image])
        .output();
}
