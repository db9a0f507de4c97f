//! `flotilla run` (the real binary) end to end on docker fleets, against the fake GitLab.
//!
//! Two runners in one manager: an `instance` runner on a docker-provider fleet at shell
//! isolation (two instances, four slots each), and a `docker-autoscaler` runner on a fleet
//! whose instances run an inner dockerd (docker isolation, busybox jobs, services). Fifty
//! checked jobs (a mix of `exit 0` and `exit N`, masked variables, stdout and stderr, one
//! log over a megabyte) go through them: each job's log as GitLab received it holds exactly
//! the job's own output with the secret masked, the final update's checksum and size match
//! the received log, and each job ends exactly once with the right state and exit code.
//! Around them: a graceful cancel (after_script runs), a forced cancel (the job's processes
//! are gone from the instance, no final update), a job timeout, artifacts passed from one
//! job to its dependant, and two services listening on the same port. Every container of
//! both groups is removed at the end, even when the test fails.

use crate::run_support;

use flotilla_provider_docker::GROUP_LABEL;
use flotilla_testkit::containers::{LabelGuard, labelled};
use flotilla_testkit::fake_gitlab::{FakeGitLab, FakeJob, FakeJobState, JobBuilder};
use flotilla_testkit::images::{busybox_image, instance_image};
use flotilla_testkit::infra::{Infra, require};
use run_support::Manager;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const SHELL_TOKEN: &str = "glrt-run-docker-shell-token";
const DOCKER_TOKEN: &str = "glrt-run-docker-isolation-token";

/// Checked jobs on the shell-isolation fleet and on the docker-isolation fleet (50 in all).
const SHELL_JOBS: usize = 42;
const DOCKER_JOBS: usize = 8;

/// Removes every container of a docker group when dropped (also on panic).
fn group_guard(group: &str) -> LabelGuard {
    LabelGuard::new(format!("{GROUP_LABEL}={group}"))
}

/// The ids of every container of a docker group, in any state.
fn group_containers(group: &str) -> Vec<String> {
    labelled(&format!("{GROUP_LABEL}={group}"))
}

fn write_config(dir: &Path, url: &str, shell_group: &str, docker_group: &str) -> PathBuf {
    let path = dir.join("config.toml");
    let image = instance_image();
    let busybox = busybox_image();
    std::fs::write(
        &path,
        format!(
            r#"concurrent = 16
check_interval = 1
shutdown_timeout = 30

[flotilla]
state_dir = "{state}"

[[runners]]
  name = "docker-fleet-shell"
  url = "{url}"
  token = "{SHELL_TOKEN}"
  executor = "instance"
  request_concurrency = 4

  [runners.autoscaler]
    plugin = "docker"
    capacity_per_instance = 4
    max_instances = 2

    [runners.autoscaler.plugin_config]
      name = "{shell_group}"
      image = "{image}"

    [[runners.autoscaler.policy]]
      idle_count = 8
      idle_time = "1h"

[[runners]]
  name = "docker-fleet-docker"
  url = "{url}"
  token = "{DOCKER_TOKEN}"
  executor = "docker-autoscaler"
  request_concurrency = 2

  [runners.docker]
    image = "{busybox}"
    pull_policy = ["if-not-present"]

  [runners.autoscaler]
    plugin = "docker"
    capacity_per_instance = 3
    max_instances = 1
    # The inner dockerd loads its preloaded images after it starts; wait for that.
    instance_ready_command = "i=0; while [ ! -e /run/flotilla-dockerd-ready ]; do i=$((i+1)); [ $i -gt 900 ] && exit 1; sleep 0.2; done"

    [runners.autoscaler.plugin_config]
      name = "{docker_group}"
      image = "{image}"
      inner_dockerd = true

    [[runners.autoscaler.policy]]
      idle_count = 3
      idle_time = "1h"
"#,
            state = dir.join("state").display(),
        ),
    )
    .unwrap();
    path
}

/// A checked job: its script and the output it must produce.
struct Checked {
    id: i64,
    name: String,
    secret: String,
    /// The isolation level its log must name.
    isolation: &'static str,
    /// Its script's output lines (stdout and stderr), in order, as the log must show them.
    output: Vec<String>,
    exit: i64,
}

/// Builds checked job `n`: it prints to stdout and stderr, with the masked variable at the
/// start, middle and end of lines; every fourth job prints a few hundred lines, one prints
/// over a megabyte; every third fails with its own exit code.
fn checked_job(n: usize, prefix: &str, isolation: &'static str) -> (JobBuilder, Checked) {
    let name = format!("{prefix}{n}");
    let secret = format!("s3cr3t-{n}-{}-xyzzy", std::process::id());
    let mut script = vec![
        format!("echo \"OUT|{name}|hello\""),
        format!("echo \"OUT|{name}|secret=$SECRET|again:$SECRET\""),
        format!("echo \"$SECRET ERR|{name}|on stderr\" >&2"),
        format!("echo \"$SECRET|OUT|{name}|secret first\""),
    ];
    let mut output = vec![
        format!("OUT|{name}|hello"),
        format!("OUT|{name}|secret=[MASKED]|again:[MASKED]"),
        format!("[MASKED] ERR|{name}|on stderr"),
        format!("[MASKED]|OUT|{name}|secret first"),
    ];
    let lines = if n == 1 {
        30_000
    } else if n.is_multiple_of(4) {
        300
    } else {
        0
    };
    if lines > 0 {
        script.push(format!(
            "i=1; while [ $i -le {lines} ]; do echo \"OUT|{name}|line $i of a long log with $SECRET inside\"; \
             [ $((i % 1000)) -eq 0 ] && echo \"ERR|{name}|$i lines\" >&2; i=$((i+1)); done"
        ));
        for i in 1..=lines {
            output.push(format!(
                "OUT|{name}|line {i} of a long log with [MASKED] inside"
            ));
            if i % 1000 == 0 {
                output.push(format!("ERR|{name}|{i} lines"));
            }
        }
    }
    let exit = if n.is_multiple_of(3) {
        (n % 7 + 1) as i64
    } else {
        0
    };
    script.push(format!("echo \"OUT|{name}|done\""));
    output.push(format!("OUT|{name}|done"));
    if exit != 0 {
        script.push(format!("exit {exit}"));
    }
    let builder = JobBuilder::new(&name)
        .masked_variable("SECRET", &secret)
        .script(script);
    (
        builder,
        Checked {
            id: 0,
            name,
            secret,
            isolation,
            output,
            exit,
        },
    )
}

/// The output of a job's script as its log shows it: the lines of the `step_script` section
/// that the runner did not write itself (its header and command echoes start with an escape
/// sequence).
fn script_output(trace: &str) -> Vec<String> {
    section_output(trace, "step_script")
}

/// The lines of section `name` that the runner did not write itself.
fn section_output(trace: &str, name: &str) -> Vec<String> {
    let Some(start) = trace.find(&format!(":{name}\r\x1b[0K")) else {
        return Vec::new();
    };
    let section = &trace[start..];
    let end = section.find("section_end:").unwrap_or(section.len());
    section[..end]
        .split('\n')
        .skip(1)
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
        .filter(|l| !l.is_empty() && !l.starts_with('\x1b'))
        .map(String::from)
        .collect()
}

/// The final update's checksum and size describe exactly the log GitLab received.
fn assert_checksum(j: &FakeJob) {
    let f = j.final_update.as_ref().expect("a final update");
    assert_eq!(
        f.checksum.as_deref(),
        Some(format!("crc32:{:08x}", crc32fast::hash(&j.trace)).as_str()),
        "job {}: checksum",
        j.id
    );
    assert_eq!(f.bytesize, Some(j.trace.len() as u64), "job {}: size", j.id);
}

/// Taken once, accepted once, ended once, reported once.
fn assert_once(j: &FakeJob) {
    assert_eq!(
        j.handouts, 1,
        "job {} handed out {} times",
        j.id, j.handouts
    );
    assert_eq!(j.accepts, 1, "job {} accepted {} times", j.id, j.accepts);
    assert_eq!(j.times_finished(), 1, "job {}: {:?}", j.id, j.history);
}

fn assert_checked(gl: &FakeGitLab, c: &Checked) {
    let j = gl.job(c.id).unwrap();
    let trace = j.trace_text();
    assert_once(&j);
    assert_eq!(j.final_updates, 1, "job {}", c.name);
    assert_checksum(&j);
    assert!(
        !trace.contains(&c.secret),
        "job {}: the secret leaked into the log",
        c.name
    );
    assert!(
        trace.starts_with("Running with flotilla "),
        "job {}: {trace}",
        c.name
    );
    assert!(
        trace.contains(&format!("Using {} isolation", c.isolation)),
        "job {}: {trace}",
        c.name
    );
    let output = script_output(&trace);
    assert!(
        output == c.output,
        "job {}: the output differs: {} lines received, {} expected; first difference at {:?}\n{}",
        c.name,
        output.len(),
        c.output.len(),
        output
            .iter()
            .zip(&c.output)
            .position(|(a, b)| a != b)
            .map(|i| (&output[i], &c.output[i])),
        if trace.len() < 20_000 { &trace } else { "" }
    );
    let f = j.final_update.unwrap();
    if c.exit == 0 {
        assert_eq!(j.state, FakeJobState::Success, "job {}:\n{trace}", c.name);
        assert_eq!(f.state, "success");
        assert_eq!(f.failure_reason, None);
    } else {
        assert_eq!(j.state, FakeJobState::Failed, "job {}:\n{trace}", c.name);
        assert_eq!(f.state, "failed");
        assert_eq!(f.failure_reason.as_deref(), Some("script_failure"));
        assert_eq!(f.exit_code, Some(c.exit), "job {}", c.name);
    }
}

/// Paths of the processes on any instance of `group` whose command line contains `marker`.
fn processes_with(group: &str, marker: &str) -> Vec<String> {
    // `[x]` keeps grep (whose own command line holds the pattern) from matching itself.
    let (head, last) = marker.split_at(marker.len() - 1);
    let pattern = format!("{head}[{last}]");
    let mut found = Vec::new();
    for id in group_containers(group) {
        let out = Command::new("docker")
            .args(["exec", &id, "sh", "-c"])
            .arg(format!(
                "grep -l -a -e '{pattern}' /proc/[0-9]*/cmdline 2>/dev/null || true"
            ))
            .output()
            .expect("docker exec");
        found.extend(
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .map(|l| format!("{id}:{l}")),
        );
    }
    found
}

/// Waits until no process on the group's instances mentions `marker`; false on timeout.
async fn processes_gone(group: &str, marker: &str, timeout: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if processes_with(group, marker).is_empty() {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn infra_run_on_docker_fleets_end_to_end() {
    if !require(Infra::Docker) {
        return;
    }
    let pid = std::process::id();
    let shell_group = format!("run-docker-{pid}-shell");
    let docker_group = format!("run-docker-{pid}-docker");
    let _guard = group_guard(&shell_group).and(format!("{GROUP_LABEL}={docker_group}"));
    let gl = run_support::fake_gitlab(&[SHELL_TOKEN, DOCKER_TOKEN], Duration::from_secs(2)).await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), gl.url(), &shell_group, &docker_group);
    let mut m = Manager::start(&config, &[]);

    // The checked jobs, queued at once: the fleets come up while they wait.
    let mut checked = Vec::new();
    for n in 0..SHELL_JOBS {
        let (b, mut c) = checked_job(n, "shell-", "shell");
        c.id = gl.enqueue(SHELL_TOKEN, b);
        checked.push(c);
    }
    for n in 0..DOCKER_JOBS {
        let (b, mut c) = checked_job(n + 100, "docker-", "docker");
        c.id = gl.enqueue(DOCKER_TOKEN, b);
        checked.push(c);
    }
    assert_eq!(checked.len(), 50);

    // Two services on the same port, each in its own network namespace.
    let services = gl.enqueue(
        DOCKER_TOKEN,
        run_support::services_pair_job("services", &[]),
    );

    // Artifacts: the producer uploads, its dependant (queued once it ended) downloads.
    let payload = format!("artifact-payload-{pid}");
    let producer = gl.enqueue(
        SHELL_TOKEN,
        JobBuilder::new("producer")
            .artifact_paths(["out/"])
            .script([format!(
                "mkdir -p out && echo 'OUT|artifact|{payload}' > out/data.txt"
            )]),
    );

    // A job timeout: the job's processes are killed and it fails as a timeout.
    let timeout_marker = format!("timeout-marker-{pid}x");
    let timed_out = gl.enqueue(
        SHELL_TOKEN,
        JobBuilder::new("too-slow").timeout_secs(4).script([
            "echo 'OUT|too-slow|before'".to_string(),
            format!("sh -c 'sleep 300' {timeout_marker}"),
        ]),
    );

    let ids: Vec<i64> = checked.iter().map(|c| c.id).collect();
    let all = [ids.as_slice(), &[services, producer, timed_out]].concat();
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
    for c in &checked {
        assert_checked(&gl, c);
    }

    // Services.
    let j = gl.job(services).unwrap();
    let trace = j.trace_text();
    assert_eq!(j.state, FakeJobState::Success, "{trace}");
    assert_once(&j);
    assert_checksum(&j);
    assert_eq!(
        script_output(&trace),
        ["OUT|services|alpha", "OUT|services|beta"],
        "{trace}"
    );

    // The timeout.
    let j = gl.job(timed_out).unwrap();
    let trace = j.trace_text();
    assert_eq!(j.state, FakeJobState::Failed, "{trace}");
    assert_once(&j);
    assert_checksum(&j);
    let f = j.final_update.clone().unwrap();
    assert_eq!(
        f.failure_reason.as_deref(),
        Some("job_execution_timeout"),
        "{trace}"
    );
    assert_eq!(script_output(&trace), ["OUT|too-slow|before"]);
    assert!(
        processes_gone(&shell_group, &timeout_marker, Duration::from_secs(20)).await,
        "the timed-out job's processes are still running: {:?}",
        processes_with(&shell_group, &timeout_marker)
    );

    // The dependant downloads the producer's artifacts.
    let j = gl.job(producer).unwrap();
    assert_eq!(j.state, FakeJobState::Success, "{}", j.trace_text());
    assert_once(&j);
    assert_checksum(&j);
    assert_eq!(j.artifacts.len(), 1, "{:?}", j.artifacts);
    assert_eq!(j.artifacts[0].artifact_type, "archive");
    assert_eq!(j.artifacts[0].artifact_format, "zip");
    let consumer = gl.enqueue(
        SHELL_TOKEN,
        JobBuilder::new("consumer")
            .stage("deploy")
            .dependency(producer)
            .script(["cat out/data.txt"]),
    );
    assert!(
        gl.wait_finished(&[consumer], Duration::from_secs(120))
            .await
    );
    let j = gl.job(consumer).unwrap();
    let trace = j.trace_text();
    assert_eq!(j.state, FakeJobState::Success, "{trace}");
    assert_once(&j);
    assert_checksum(&j);
    assert_eq!(
        script_output(&trace),
        [format!("OUT|artifact|{payload}")],
        "{trace}"
    );
    let downloads: Vec<_> = gl
        .requests_to("GET", &format!("/api/v4/jobs/{producer}/artifacts"))
        .into_iter()
        .filter(|r| r.status == 200)
        .collect();
    assert_eq!(
        downloads.len(),
        1,
        "one download of the producer's artifacts"
    );

    // Graceful cancel: the script stops, after_script runs, the job ends canceled.
    let graceful_marker = format!("graceful-marker-{pid}x");
    let graceful = gl.enqueue(
        SHELL_TOKEN,
        JobBuilder::new("cancel-graceful")
            .script([format!(
                "sh -c 'while true; do echo OUT-tick; sleep 0.2; done' {graceful_marker}"
            )])
            .after_script(["echo 'OUT|cancel-graceful|after-script-ran'"]),
    );
    // Forced cancel: everything stops at once, after_script does not run.
    let forced_marker = format!("forced-marker-{pid}x");
    let forced = gl.enqueue(
        SHELL_TOKEN,
        JobBuilder::new("cancel-forced")
            .script([format!(
                "sh -c 'while true; do echo OUT-tick; sleep 0.2; done' {forced_marker}"
            )])
            .after_script(["echo 'OUT|cancel-forced|after-script-ran'"]),
    );
    for id in [graceful, forced] {
        gl.wait_for_job(id, Duration::from_secs(120), |j| {
            j.trace_text().contains("OUT-tick")
        })
        .await
        .unwrap_or_else(|| panic!("job {id} never started:\n{}", m.log_tail()));
    }
    gl.cancel(graceful);
    gl.abort(forced);
    assert!(
        gl.wait_finished(&[graceful], Duration::from_secs(60)).await,
        "{}",
        m.log_tail()
    );
    let j = gl.job(graceful).unwrap();
    let trace = j.trace_text();
    assert_eq!(j.state, FakeJobState::Canceled, "{:?}\n{trace}", j.history);
    assert_once(&j);
    assert_eq!(j.final_updates, 1);
    assert_checksum(&j);
    assert_eq!(
        section_output(&trace, "after_script"),
        ["OUT|cancel-graceful|after-script-ran"],
        "{trace}"
    );
    assert_eq!(j.final_update.unwrap().state, "failed");
    assert!(
        processes_gone(&shell_group, &graceful_marker, Duration::from_secs(20)).await,
        "the canceled job's processes are still running: {:?}",
        processes_with(&shell_group, &graceful_marker)
    );
    assert!(
        processes_gone(&shell_group, &forced_marker, Duration::from_secs(20)).await,
        "the aborted job's processes are still running: {:?}",
        processes_with(&shell_group, &forced_marker)
    );
    let j = gl.job(forced).unwrap();
    assert_eq!(j.state, FakeJobState::Canceled, "{:?}", j.history);
    assert_eq!(j.times_finished(), 1);
    assert_eq!(j.handouts, 1);
    assert_eq!(
        j.final_updates, 0,
        "a canceled job's token is revoked: no final update"
    );
    assert!(!j.trace_text().contains("after-script-ran"));

    // A graceful stop with nothing running exits at once, successfully, and no secret
    // reached the log.
    m.signal(libc::SIGTERM);
    let status = m.wait(Duration::from_secs(60)).await.expect("exits");
    assert!(status.success(), "exit {status:?}; log:\n{}", m.log_tail());
    let log = m.log();
    for secret in [SHELL_TOKEN, DOCKER_TOKEN] {
        assert!(
            !log.contains(secret),
            "the runner token leaked into the log"
        );
    }
    for c in &checked {
        assert!(!log.contains(&c.secret), "a masked variable leaked");
    }
    for j in gl.jobs() {
        assert!(!log.contains(&j.token), "job {}'s token leaked", j.id);
    }
}

/// A slot that takes longer than 30 s to come (a cold instance: its ready-up command waits
/// 35 s) with GitLab as installed, which considers the job running from the 201 on: the job
/// is accepted at once, its log says it waits, keep-alives go out meanwhile, and when the
/// slot comes the job runs and is reported. (Keeping the job `pending` until the slot came
/// would get a 400 from such a GitLab and leave the job running there with an empty log.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn infra_a_job_waits_for_a_cold_instance_and_still_runs() {
    if !require(Infra::Docker) {
        return;
    }
    const TOKEN: &str = "glrt-run-docker-cold-token";
    let group = format!("run-docker-{}-cold", std::process::id());
    let _guard = group_guard(&group);
    let gl = FakeGitLab::builder()
        .runner_token(TOKEN)
        .start()
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    std::fs::write(
        &config,
        format!(
            r#"concurrent = 2
check_interval = 1
shutdown_timeout = 30

[flotilla]
state_dir = "{state}"

[[runners]]
  name = "cold"
  url = "{url}"
  token = "{TOKEN}"
  executor = "instance"

  [runners.autoscaler]
    plugin = "docker"
    capacity_per_instance = 1
    max_instances = 1
    instance_acquire_timeout = "3m"
    instance_ready_command = "sleep 35"
    delete_instances_on_shutdown = true

    [runners.autoscaler.plugin_config]
      name = "{group}"
      image = "{image}"

    [[runners.autoscaler.policy]]
      idle_count = 0
      idle_time = "1m"
"#,
            state = dir.path().join("state").display(),
            url = gl.url(),
            image = instance_image(),
        ),
    )
    .unwrap();
    let mut m = Manager::start(&config, &[]);
    let id = gl.enqueue(
        TOKEN,
        JobBuilder::new("cold-start").script(["echo ran on $(hostname)"]),
    );
    let j = gl
        .wait_for_job(id, Duration::from_secs(180), |j| j.state.is_finished())
        .await
        .unwrap_or_else(|| panic!("the job never ended:\n{}", m.log_tail()));
    assert_eq!(
        j.state,
        FakeJobState::Success,
        "{}\n{}",
        j.trace_text(),
        m.log_tail()
    );
    let text = j.trace_text();
    assert!(text.contains("Waiting for a job slot"), "{text}");
    assert!(text.contains("ran on "), "{text}");
    assert_checksum(&j);
    assert_once(&j);
    let reqs = gl.requests();
    let handout = reqs
        .iter()
        .find(|r| r.path == "/api/v4/jobs/request" && r.status == 201)
        .unwrap();
    let path = format!("/api/v4/jobs/{id}");
    let puts: Vec<_> = reqs
        .iter()
        .filter(|r| r.method == "PUT" && r.path == path)
        .collect();
    assert_eq!(puts[0].json().unwrap()["state"], "running");
    assert!(puts[0].at - handout.at < Duration::from_secs(2));
    assert!(puts.iter().all(|r| r.json().unwrap()["state"] != "pending"));
    // A keep-alive (`PUT state=running` with the log's size) while the slot came.
    let final_put = puts.last().unwrap();
    assert!(
        puts.iter()
            .filter(|r| r.seq != final_put.seq && r.seq != puts[0].seq)
            .any(|r| r.json().unwrap().get("output").is_some()),
        "no keep-alive while waiting: {:?}",
        puts.iter().map(|r| r.json().cloned()).collect::<Vec<_>>()
    );
    assert!(
        final_put.at - handout.at >= Duration::from_secs(30),
        "the slot came after {:?}",
        final_put.at - handout.at
    );
    m.signal(libc::SIGTERM);
    let status = m.wait(Duration::from_secs(90)).await.expect("exits");
    assert!(status.success(), "{}", m.log_tail());
}
