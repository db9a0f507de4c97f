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
  script:
    - echo "container $(hostname)"
    - test -f /.dockerenv && echo "in docker"
    - cat checked-out.txt
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
    let missing = p.log("missing-image");
    assert!(
        missing.contains("`docker pull local/flotilla-not-built:nope` there puts it on it"),
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
