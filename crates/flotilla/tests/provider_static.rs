//! The `static` provider in the real binary: `flotilla exec` of `examples/hello` and
//! `flotilla run` against the fake GitLab on a pool of real sshd hosts (containers with a
//! published port), at shell and docker isolation; and `max_use_count` refused, by
//! capability, before any host is contacted.

use crate::exec_support;
use crate::run_support;

use exec_support::{Project, statuses};
use flotilla_ssh_machine::GroupKey;
use flotilla_testkit::fake_gitlab::{FakeJobState, JobBuilder};
use flotilla_testkit::images::busybox_image;
use flotilla_testkit::infra::{Infra, require};
use flotilla_testkit::ssh_hosts::SshHosts;
use run_support::Manager;
use std::path::Path;
use std::time::Duration;

/// A key pair written to `dir/key` (the private half); returns the public half.
fn key_in(dir: &Path) -> String {
    let key = GroupKey::generate("flotilla/provider-static-test").unwrap();
    std::fs::write(dir.join("key"), key.private_openssh.expose()).unwrap();
    key.public_openssh
}

/// The `[[...plugin_config.hosts]]` tables of `hosts`, named `host-<i>`.
fn host_tables(hosts: &SshHosts, indent: &str) -> String {
    hosts
        .hosts
        .iter()
        .enumerate()
        .map(|(i, h)| {
            format!(
                "{indent}[[runners.autoscaler.plugin_config.hosts]]\n{indent}  name = \"host-{i}\"\n\
                 {indent}  address = \"127.0.0.1\"\n{indent}  port = {}\n",
                h.port
            )
        })
        .collect()
}

#[test]
fn max_use_count_is_refused_for_a_static_pool() {
    let p = Project::example("hello");
    p.write(
        "config.toml",
        r#"[[runners]]
  name = "static-retire"
  executor = "flotilla"
  [runners.autoscaler]
    plugin = "static"
    isolation = "shell"
    max_use_count = 1
    [runners.autoscaler.connector_config]
      username = "ci"
      password = "not-a-real-password"
    [runners.autoscaler.plugin_config]
      [[runners.autoscaler.plugin_config.hosts]]
        address = "127.0.0.1"
        port = 1
"#,
    );
    let run = p.exec(&["--config", "config.toml"]);
    assert_ne!(run.code, 0, "{run}");
    assert!(
        run.stderr.contains(
            "max_use_count = 1 cannot be used with plugin \"static\": its instances \
             (machines of a fixed pool) cannot be thrown away"
        ),
        "{run}"
    );
    assert!(!run.stderr.contains("not-a-real-password"), "{run}");
    assert!(
        p.pipelines().is_empty() || p.logs().is_empty(),
        "no job ran"
    );
}

#[test]
fn config_check_prints_a_static_pool_with_its_passwords_redacted() {
    let p = Project::empty();
    p.write(
        "config.toml",
        r#"[[runners]]
  name = "static-check"
  executor = "flotilla"
  [runners.autoscaler]
    plugin = "static"
    isolation = "shell"
    [runners.autoscaler.plugin_config]
      [[runners.autoscaler.plugin_config.hosts]]
        address = "10.0.0.5"
        username = "ci"
        password = "host-password-123"
"#,
    );
    let run = p.flotilla(&["config", "check", "config.toml"]);
    assert_eq!(run.code, 0, "{run}");
    assert!(run.stdout.contains("10.0.0.5"), "{run}");
    assert!(run.stdout.contains("[REDACTED]"), "{run}");
    assert!(!run.stdout.contains("host-password-123"), "{run}");
    assert!(!run.stderr.contains("host-password-123"), "{run}");
}

#[test]
fn infra_hello_example_runs_on_a_static_pool() {
    if !require(Infra::Docker) {
        return;
    }
    let p = Project::example("hello");
    let public = key_in(&p.outside());
    let hosts = SshHosts::start("exec-static", 2, &public, false);
    p.write(
        "config.toml",
        &format!(
            r#"concurrent = 4

[[runners]]
  name = "static-exec"
  executor = "flotilla"
  [runners.autoscaler]
    plugin = "static"
    isolation = "shell"
    capacity_per_instance = 2
    max_instances = 2
    delete_instances_on_shutdown = true
    shutdown_deletion_interval = "1s"
    [runners.autoscaler.connector_config]
      username = "root"
      key_path = "{key}"
    [runners.autoscaler.plugin_config]
      probe_timeout = 2
{hosts}"#,
            key = p.outside().join("key").display(),
            hosts = host_tables(&hosts, "      "),
        ),
    );
    let run = p.exec(&["--config", "config.toml"]);
    run.expect_code(0);
    assert_eq!(
        run.statuses(),
        statuses(&[("build", "passed"), ("test", "passed")])
    );
    assert!(
        run.stderr.contains("plugin static, shell isolation"),
        "{run}"
    );
    let build = p.log("build");
    assert!(build.contains("hello from build on Linux"), "{build}");
    let on_host = |log: &str| {
        (0..2).find(|i| {
            log.contains(&format!(
                "Using shell isolation on instance host-{i} in /builds/"
            ))
        })
    };
    let host = on_host(&build).unwrap_or_else(|| panic!("not on a pool host:\n{build}"));
    let test = p.log("test");
    assert!(on_host(&test).is_some(), "{test}");
    assert!(test.contains("the working tree is here"), "{test}");
    // The checkout is on that host, not here.
    let found = hosts.exec(host, "find /builds -name result.txt");
    assert!(
        found.contains("/out/result.txt"),
        "no build on host-{host}: {found:?}"
    );
    // Every host was given back at the end.
    let state =
        std::fs::read_to_string(p.path().join(".flotilla/static/static-exec.json")).unwrap();
    assert_eq!(state, r#"{"lent":[]}"#);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn infra_run_on_a_static_pool_at_shell_and_docker_isolation() {
    if !require(Infra::Docker) {
        return;
    }
    const SHELL_TOKEN: &str = "glrt-static-shell-token";
    const DOCKER_TOKEN: &str = "glrt-static-docker-token";
    let dir = tempfile::tempdir().unwrap();
    let public = key_in(dir.path());
    let hosts = SshHosts::start("run-static", 2, &public, true);
    let gl = run_support::fake_gitlab(&[SHELL_TOKEN, DOCKER_TOKEN], Duration::from_secs(2)).await;
    let busybox = busybox_image();
    let config = dir.path().join("config.toml");
    // Two runners lend the same two hosts; their builds directories keep them apart.
    std::fs::write(
        &config,
        format!(
            r#"concurrent = 8
check_interval = 1
shutdown_timeout = 30

[flotilla]
state_dir = "{state}"

[[runners]]
  name = "static-shell"
  url = "{url}"
  token = "{SHELL_TOKEN}"
  executor = "instance"
  builds_dir = "/builds/shell"
  request_concurrency = 4
  [runners.autoscaler]
    plugin = "static"
    capacity_per_instance = 2
    max_instances = 2
    [runners.autoscaler.connector_config]
      username = "root"
      key_path = "{key}"
    [runners.autoscaler.plugin_config]
      probe_timeout = 2
{hosts}
    [[runners.autoscaler.policy]]
      idle_count = 4
      idle_time = "1h"

[[runners]]
  name = "static-docker"
  url = "{url}"
  token = "{DOCKER_TOKEN}"
  executor = "docker-autoscaler"
  builds_dir = "/builds/docker"
  request_concurrency = 2
  [runners.docker]
    image = "{busybox}"
    pull_policy = ["if-not-present"]
  [runners.autoscaler]
    plugin = "static"
    capacity_per_instance = 1
    max_instances = 2
    instance_ready_command = "i=0; while [ ! -e /run/flotilla-dockerd-ready ]; do i=$((i+1)); [ $i -gt 900 ] && exit 1; sleep 0.2; done"
    [runners.autoscaler.connector_config]
      username = "root"
      key_path = "{key}"
    [runners.autoscaler.plugin_config]
      probe_timeout = 2
{hosts}
    [[runners.autoscaler.policy]]
      idle_count = 2
      idle_time = "1h"
"#,
            state = dir.path().join("state").display(),
            url = gl.url(),
            key = dir.path().join("key").display(),
            hosts = host_tables(&hosts, "      "),
        ),
    )
    .unwrap();
    let mut m = Manager::start(&config, &[]);

    let mut shell = Vec::new();
    for n in 0..8 {
        shell.push(
            gl.enqueue(
                SHELL_TOKEN,
                JobBuilder::new(format!("shell-{n}"))
                    .masked_variable("SECRET", "s3cr3t-static-value")
                    .script([
                        format!("echo OUT-shell-{n}-$SECRET"),
                        "sleep 1".to_string(),
                        if n == 5 {
                            "exit 4".to_string()
                        } else {
                            "true".to_string()
                        },
                    ]),
            ),
        );
    }
    let mut docker = Vec::new();
    for n in 0..2 {
        docker.push(
            gl.enqueue(
                DOCKER_TOKEN,
                JobBuilder::new(format!("docker-{n}"))
                    .field("image", serde_json::json!({"name": busybox}))
                    .script([format!(
                        "echo OUT-docker-{n}; cat /proc/1/cgroup >/dev/null"
                    )]),
            ),
        );
    }
    let all = [shell.as_slice(), docker.as_slice()].concat();
    assert!(
        gl.wait_finished(&all, Duration::from_secs(600)).await,
        "jobs did not finish: {:?}\nmanager log:\n{}",
        gl.jobs()
            .iter()
            .filter(|j| !j.state.is_finished())
            .map(|j| (j.id, j.state))
            .collect::<Vec<_>>(),
        m.log_tail()
    );
    let mut hosts_used = std::collections::BTreeSet::new();
    for (n, id) in shell.iter().enumerate() {
        let j = gl.job(*id).unwrap();
        let trace = j.trace_text();
        assert_eq!(j.times_finished(), 1, "{trace}");
        assert!(
            trace.contains(&format!("OUT-shell-{n}-[MASKED]")),
            "{trace}"
        );
        assert!(!trace.contains("s3cr3t-static-value"), "{trace}");
        let host = (0..2)
            .find(|i| {
                trace.contains(&format!(
                    "Using shell isolation on instance host-{i} in /builds/shell/"
                ))
            })
            .unwrap_or_else(|| panic!("not on a pool host:\n{trace}"));
        hosts_used.insert(host);
        if n == 5 {
            assert_eq!(j.state, FakeJobState::Failed, "{trace}");
            assert_eq!(j.final_update.unwrap().exit_code, Some(4));
        } else {
            assert_eq!(j.state, FakeJobState::Success, "{trace}");
        }
    }
    assert_eq!(
        hosts_used.len(),
        2,
        "eight jobs on four slots use both hosts"
    );
    for (n, id) in docker.iter().enumerate() {
        let j = gl.job(*id).unwrap();
        let trace = j.trace_text();
        assert_eq!(j.state, FakeJobState::Success, "{trace}");
        assert!(
            trace.contains(&format!(
                "Using docker isolation with image {busybox} on instance host-"
            )),
            "{trace}"
        );
        assert!(trace.contains(&format!("OUT-docker-{n}")), "{trace}");
    }

    // Both runners lent hosts, recorded in their own state files.
    for runner in ["static-shell", "static-docker"] {
        let lent = std::fs::read_to_string(dir.path().join(format!("state/static/{runner}.json")))
            .unwrap();
        assert!(lent.contains("host-"), "{runner}: {lent}");
    }
    m.signal(libc::SIGTERM);
    let status = m.wait(Duration::from_secs(60)).await.expect("exits");
    assert!(status.success(), "exit {status:?}; log:\n{}", m.log_tail());
    let log = m.log();
    assert!(
        !log.contains(SHELL_TOKEN) && !log.contains(DOCKER_TOKEN),
        "a token leaked"
    );
    assert!(
        !log.contains("s3cr3t-static-value"),
        "a masked variable leaked"
    );
    assert!(!log.contains("BEGIN OPENSSH PRIVATE KEY"), "the key leaked");
}
