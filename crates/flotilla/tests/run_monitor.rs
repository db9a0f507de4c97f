//! `flotilla run` with `listen_address`, as a process against the fake GitLab: `/metrics`
//! scraped before and after two jobs, its figures checked against what the fake GitLab
//! itself recorded, and the exposition judged by two parsers that are not ours: Prometheus's
//! `promtool check metrics` (Go, `prometheus/common/expfmt`) and the Python client's
//! `text_string_to_metric_families`. `/debug/health` answers 200 once the runner takes jobs.
//! On a docker fleet, the fleeting and taskscaler histograms and the removals follow real
//! instances' lives; the status page is checked in Chromium.

use crate::run_support;

use flotilla_testkit::fake_gitlab::JobBuilder;
use flotilla_testkit::infra::{self, Infra};
use run_support::Manager;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

const TOKEN: &str = "glrt-monitor-e2e-token";
/// GitLab's short token of [`TOKEN`] (`helpers/shorten_token.go`: prefix off, 9 characters).
const SHORT: &str = "monitor-e";

fn write_config(dir: &Path, url: &str) -> PathBuf {
    let path = dir.join("config.toml");
    std::fs::write(
        &path,
        format!(
            r#"concurrent = 2
check_interval = 1
shutdown_timeout = 30
listen_address = "127.0.0.1:0"

[flotilla]
state_dir = "{state}"

[[runners]]
  name = "metrics-e2e"
  url = "{url}"
  token = "{TOKEN}"
  executor = "instance"
  limit = 2
  [runners.autoscaler]
    plugin = "local"
    isolation = "shell"
    capacity_per_instance = 2
    max_instances = 1
    instance_creation_time_buckets = [0.5, 2, 30]
    [[runners.autoscaler.policy]]
      idle_count = 2
      idle_time = "10m"
"#,
            state = dir.join("state").display(),
        ),
    )
    .unwrap();
    path
}

/// The address the manager logged it serves on (`listen_address` asked for port 0).
async fn served_address(m: &Manager) -> String {
    for _ in 0..300 {
        let log = m.log();
        if let Some(line) = log.lines().find(|l| l.contains("serving /metrics")) {
            // The log may be coloured: take the digits after the host.
            let at = line
                .find("127.0.0.1:")
                .unwrap_or_else(|| panic!("no address in {line}"));
            let port: String = line[at + "127.0.0.1:".len()..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            return format!("127.0.0.1:{port}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the manager never said where it serves; log:\n{}", m.log());
}

/// One sample line: its name, its labels (as `name="value"` strings, sorted) and value.
fn parse_line(line: &str) -> Option<(&str, Vec<String>, f64)> {
    if line.starts_with('#') || line.is_empty() {
        return None;
    }
    let (series, value) = line.rsplit_once(' ')?;
    let value = value.parse().ok()?;
    let (name, labels) = match series.split_once('{') {
        Some((name, rest)) => (name, rest.strip_suffix('}')?),
        None => (series, ""),
    };
    // No label value here holds `",`: splitting on it is enough.
    let mut labels: Vec<String> = labels
        .split("\",")
        .filter(|p| !p.is_empty())
        .map(|p| format!("{}\"", p.trim_end_matches('"')))
        .collect();
    labels.sort();
    Some((name, labels, value))
}

/// The value of the sample of `name` whose labels are exactly `labels` (`k="v"` strings).
fn sample(text: &str, name: &str, labels: &[String]) -> Option<f64> {
    let mut want = labels.to_vec();
    want.sort();
    text.lines()
        .filter_map(parse_line)
        .find(|(n, l, _)| *n == name && *l == want)
        .map(|(_, _, v)| v)
}

/// The sum of every sample of `name` whose labels contain all of `having`.
fn sum(text: &str, name: &str, having: &[&str]) -> f64 {
    text.lines()
        .filter_map(parse_line)
        .filter(|(n, l, _)| *n == name && having.iter().all(|h| l.iter().any(|x| x == h)))
        .map(|(_, _, v)| v)
        .sum()
}

/// Pipes `text` into `program args` and returns its exit status and everything it said.
fn judge(program: &str, args: &[&str], text: &str) -> (bool, String) {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// The Python client's parser: every family's name, type and sample count, one per line;
/// fails on anything it cannot parse. It also checks what a dashboard relies on: every
/// sample of a histogram family is a `_bucket`, `_sum` or `_count`, and buckets never
/// decrease.
const PY_PARSE: &str = r#"
import sys
from prometheus_client.parser import text_string_to_metric_families
for f in text_string_to_metric_families(sys.stdin.read()):
    if f.type == "histogram":
        last = {}
        for s in f.samples:
            assert s.name.endswith(("_bucket", "_sum", "_count")), s
            if s.name.endswith("_bucket"):
                key = tuple(sorted((k, v) for k, v in s.labels.items() if k != "le"))
                assert s.value >= last.get(key, 0), ("buckets decrease", s)
                last[key] = s.value
    print(f.name, f.type, len(f.samples))
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_serves_gitlab_metrics_that_real_parsers_accept() {
    let gl = run_support::fake_gitlab(&[TOKEN], Duration::from_millis(500)).await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), gl.url());
    let mut m = Manager::start(&config, &[]);
    let base = format!("http://{}", served_address(&m).await);
    let http = reqwest::Client::new();

    // Health: 200 once the runner takes jobs (GitLab Runner's /debug/health).
    let mut healthy = false;
    for _ in 0..200 {
        if let Ok(r) = http.get(format!("{base}/debug/health")).send().await
            && r.status() == 200
        {
            healthy = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(healthy, "never healthy; log:\n{}", m.log_tail());
    let system_id = gl.system_ids().first().cloned().expect("a system id");
    let l = |extra: &[&str]| -> Vec<String> {
        let mut v = vec![
            format!(r#"runner="{SHORT}""#),
            r#"runner_name="metrics-e2e""#.to_string(),
            format!(r#"system_id="{system_id}""#),
        ];
        v.extend(extra.iter().map(|e| e.to_string()));
        v
    };

    // Before any job: the settings, and the idle target's instance with its two idle slots.
    let mut text = String::new();
    for _ in 0..200 {
        let r = http.get(format!("{base}/metrics")).send().await.unwrap();
        assert_eq!(r.status(), 200);
        let ct = r.headers()["content-type"].to_str().unwrap().to_string();
        assert!(ct.starts_with("text/plain; version=0.0.4"), "{ct}");
        text = r.text().await.unwrap();
        // The job source's long poll holds a reservation (taskscaler's `reserved`).
        if sum(&text, "fleeting_taskscaler_tasks", &[r#"state="idle""#])
            + sum(&text, "fleeting_taskscaler_tasks", &[r#"state="reserved""#])
            == 2.0
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        sample(&text, "gitlab_runner_concurrent", &[]),
        Some(2.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, "gitlab_runner_limit", &l(&[])),
        Some(2.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, "fleeting_provisioner_max_instances", &l(&[])),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, "fleeting_taskscaler_max_tasks_per_instance", &l(&[])),
        Some(2.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, "fleeting_taskscaler_tasks", &l(&[r#"state="idle""#]))
            .zip(sample(
                &text,
                "fleeting_taskscaler_tasks",
                &l(&[r#"state="reserved""#])
            ))
            .map(|(i, r)| i + r),
        Some(2.0),
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            "fleeting_provisioner_instances",
            &l(&[r#"state="running""#])
        ),
        Some(1.0),
        "{text}"
    );
    // The buckets of `instance_creation_time_buckets`, not the defaults.
    for le in ["0.5", "2", "30", "+Inf"] {
        let le = format!(r#"le="{le}""#);
        assert!(
            sample(
                &text,
                "fleeting_provisioner_instance_creation_time_seconds_bucket",
                &l(&[&le])
            )
            .is_some(),
            "{le} missing:\n{text}"
        );
    }
    assert_eq!(
        text.matches("fleeting_provisioner_instance_creation_time_seconds_bucket{")
            .count(),
        4
    );

    // Two jobs, one that fails.
    let ok = gl.enqueue(
        TOKEN,
        JobBuilder::new("ok")
            .masked_variable("SECRET", "s3cr3t-value-123")
            .script(["echo hello from $CI_JOB_NAME, $SECRET", "sleep 1"]),
    );
    // Only this one asks for GitLab's stage durations (FF_EXPORT_HIGH_CARDINALITY_METRICS).
    let bad = gl.enqueue(
        TOKEN,
        JobBuilder::new("bad")
            .variable("FF_EXPORT_HIGH_CARDINALITY_METRICS", "true")
            .script(["exit 3"]),
    );
    assert!(
        gl.wait_finished(&[ok, bad], Duration::from_secs(60)).await,
        "jobs did not finish; log:\n{}",
        m.log_tail()
    );
    // The job leaves the monitor after its final update is answered: wait for that.
    for _ in 0..200 {
        text = http
            .get(format!("{base}/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        if sample(&text, "gitlab_runner_job_duration_seconds_count", &l(&[])) == Some(2.0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // GitLab Runner's job series.
    assert_eq!(
        sample(&text, "gitlab_runner_jobs_total", &l(&[])),
        Some(2.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, "gitlab_runner_job_duration_seconds_count", &l(&[])),
        Some(2.0),
        "{text}"
    );
    // The `exit 3` job, by GitLab's failure reason (issue 34).
    assert_eq!(
        sample(
            &text,
            "gitlab_runner_failed_jobs_total",
            &l(&[r#"failure_reason="script_failure""#])
        ),
        Some(1.0),
        "{text}"
    );
    // Stage durations of the job with the feature flag, and of it only.
    for stage in ["prepare_executor", "get_sources", "step_script"] {
        assert_eq!(
            sample(
                &text,
                "gitlab_runner_job_stage_duration_seconds_count",
                &l(&[&format!(r#"stage="{stage}""#)])
            ),
            Some(1.0),
            "{stage}: {text}"
        );
    }
    assert!(sample(&text, "process_resident_memory_bytes", &[]).is_some_and(|v| v > 0.0));
    assert_eq!(
        sum(&text, "gitlab_runner_job_queue_duration_seconds_count", &[]),
        2.0,
        "{text}"
    );
    assert_eq!(
        sum(&text, "gitlab_runner_jobs", &[r#"state="running""#]),
        0.0,
        "{text}"
    );
    // The request metrics agree with what the fake GitLab itself recorded: two jobs handed
    // out (201), and every final update (PUT /jobs/:id) it answered.
    let handed_out = gl
        .requests_to("POST", "/api/v4/jobs/request")
        .iter()
        .filter(|r| r.status == 201)
        .count();
    assert_eq!(handed_out, 2);
    assert_eq!(
        sum(
            &text,
            "gitlab_runner_api_request_statuses_total",
            &[
                r#"endpoint="request_job""#,
                r#"status="201""#,
                r#"method="post""#
            ],
        ),
        handed_out as f64,
        "{text}"
    );
    let updates_seen = gl
        .requests()
        .iter()
        .filter(|r| {
            r.method == "PUT"
                && r.path.starts_with("/api/v4/jobs/")
                && !r.path["/api/v4/jobs/".len()..].contains('/')
        })
        .count();
    let updates_metric = sum(
        &text,
        "gitlab_runner_api_request_statuses_total",
        &[r#"endpoint="update_job""#],
    );
    assert!(
        updates_metric >= 2.0 && updates_metric <= updates_seen as f64,
        "update_job {updates_metric} vs {updates_seen} seen by GitLab:\n{text}"
    );
    assert_eq!(
        sum(
            &text,
            "gitlab_runner_api_request_duration_seconds_count",
            &[r#"endpoint="request_job""#, r#"status_class="2xx""#],
        ),
        [r#"status="200""#, r#"status="201""#, r#"status="204""#]
            .iter()
            .map(|status| sum(
                &text,
                "gitlab_runner_api_request_statuses_total",
                &[r#"endpoint="request_job""#, status],
            ))
            .sum::<f64>(),
        "{text}"
    );

    // flotilla's own: every job's first byte timed, at the shell level; the log bytes are
    // the bytes GitLab received (after masking: `[MASKED]` is shorter than the secret).
    assert_eq!(
        sample(&text, "flotilla_job_first_byte_seconds_count", &l(&[])),
        Some(2.0),
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            "flotilla_isolation_start_seconds_count",
            &l(&[r#"level="shell""#])
        ),
        Some(2.0),
        "{text}"
    );
    assert!(
        gl.job(ok)
            .unwrap()
            .trace_text()
            .contains("hello from ok, [MASKED]")
    );
    let received: usize = [ok, bad]
        .iter()
        .map(|id| gl.job(*id).unwrap().trace_text().len())
        .sum();
    assert_eq!(
        sample(&text, "flotilla_trace_bytes_total", &l(&[])),
        Some(received as f64),
        "{text}"
    );
    // This host is the local provider's one instance, there from the start: the scaler
    // decided (and held) but requested and removed nothing.
    assert!(
        sum(&text, "flotilla_scaler_decisions_total", &[]) >= 1.0,
        "{text}"
    );
    assert_eq!(
        sum(
            &text,
            "flotilla_scaler_decisions_total",
            &[r#"reason="scale_up""#]
        ),
        0.0,
        "{text}"
    );
    assert_eq!(
        sum(&text, "flotilla_instance_removals_total", &[]),
        0.0,
        "{text}"
    );
    // The job source's task operations: a slot acquired per job, and released; each job
    // was asked for with a reservation (and long polls that got none reserve too).
    let ops = |op: &str| {
        sum(
            &text,
            "fleeting_taskscaler_task_operations_total",
            &[&format!(r#"operation="{op}""#)],
        )
    };
    assert_eq!(ops("acquire"), 2.0, "{text}");
    assert!(ops("release") >= 2.0, "{text}");
    assert!(ops("reserve") >= 2.0, "{text}");
    assert!(!text.contains(TOKEN), "the runner token is in /metrics");
    // The build, labelled as GitLab labels its own (`common/version.go`).
    let build = text
        .lines()
        .find(|l| l.starts_with("gitlab_runner_version_info{"))
        .unwrap_or_else(|| panic!("no version_info:\n{text}"));
    for label in [
        format!(r#"revision="{}""#, env!("FLOTILLA_COMMIT")),
        format!(r#"built_at="{}""#, env!("FLOTILLA_COMMIT_DATE")),
        format!(r#"version="{}""#, env!("CARGO_PKG_VERSION")),
        r#"go_version="rustc "#.to_string(),
        r#"branch=""#.to_string(),
    ] {
        assert!(build.contains(&label), "{label} not in {build}");
    }

    // Two parsers that are not ours accept it.
    if infra::require(Infra::Promtool) {
        let (ok, said) = judge("promtool", &["check", "metrics"], &text);
        assert!(ok && said.trim().is_empty(), "promtool: {said}\n{text}");
    }
    if infra::require(Infra::PythonPrometheusClient) {
        let (ok, said) = judge(infra::DEBIAN_PYTHON, &["-c", PY_PARSE], &text);
        assert!(ok, "prometheus_client: {said}\n{text}");
        for family in [
            "fleeting_provisioner_instances gauge",
            "fleeting_taskscaler_tasks gauge",
            "fleeting_provisioner_instance_creation_time_seconds histogram",
            "gitlab_runner_jobs counter",
            "gitlab_runner_job_duration_seconds histogram",
            "gitlab_runner_api_request_statuses counter",
            "flotilla_instance_removals counter",
            "gitlab_runner_failed_jobs counter",
            "gitlab_runner_version_info gauge",
            "gitlab_runner_job_stage_duration_seconds histogram",
            "process_resident_memory_bytes gauge",
            "process_open_fds gauge",
            "process_cpu_seconds counter",
        ] {
            assert!(
                said.lines().any(|l| l.starts_with(&format!("{family} "))),
                "{family} not parsed:\n{said}"
            );
        }
        // The parser can fail: a sample with a broken value is refused.
        let broken = text.replacen(
            "gitlab_runner_concurrent 2",
            "gitlab_runner_concurrent x",
            1,
        );
        assert!(!judge(infra::DEBIAN_PYTHON, &["-c", PY_PARSE], &broken).0);
    }

    m.signal(libc::SIGTERM);
    let status = m.wait(Duration::from_secs(30)).await.expect("exits");
    assert!(status.success(), "exit {status:?}; log:\n{}", m.log_tail());
}

/// Reads the next line the browser driver printed, up to `timeout`.
async fn next_line(
    lines: &mut tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
    timeout: Duration,
) -> String {
    match tokio::time::timeout(timeout, lines.next_line()).await {
        Ok(Ok(Some(line))) => line,
        other => panic!("the browser driver said nothing more: {other:?}"),
    }
}

/// The status page in a real browser (Debian's Chromium driven by `playwright-core`,
/// `testkit/browser/status_page.mjs`): what a person sees of a running `flotilla run`.
/// The page is loaded once; the fleet, a job appearing with its isolation level and
/// instance, and the job moving to the last hour's ended jobs with its result and a link to
/// its GitLab page must all arrive through its own live refresh. Screenshots
/// are kept under `target/tmp/status-page/`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn infra_status_page_in_chromium() {
    if !infra::require(Infra::Browser) {
        return;
    }
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    let gl = run_support::fake_gitlab(&[TOKEN], Duration::from_millis(500)).await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), gl.url());
    let mut m = Manager::start(&config, &[]);
    let url = format!("http://{}/", served_address(&m).await);
    let shots = Path::new(env!("CARGO_TARGET_TMPDIR")).join("status-page");
    std::fs::create_dir_all(&shots).unwrap();

    let mut driver = tokio::process::Command::new("node")
        .arg(infra::browser_dir().join("status_page.mjs"))
        .arg(&url)
        .arg(&shots)
        .current_dir(infra::browser_dir())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut to_driver = driver.stdin.take().unwrap();
    let mut lines = tokio::io::BufReader::new(driver.stdout.take().unwrap()).lines();

    // The fleet: this host, the local provider's one instance.
    let ready = next_line(&mut lines, Duration::from_secs(90)).await;
    assert_eq!(ready, "READY instances=1", "log:\n{}", m.log_tail());

    let id = gl.enqueue(
        TOKEN,
        JobBuilder::new("seen-in-a-browser").script(["echo visible", "sleep 4"]),
    );
    to_driver
        .write_all(format!("JOB {id}\n").as_bytes())
        .await
        .unwrap();
    let running = next_line(&mut lines, Duration::from_secs(90)).await;
    let words: Vec<&str> = running.split(' ').collect();
    assert_eq!(
        words.get(..3),
        Some(&["RUNNING", &id.to_string(), "shell"][..]),
        "{running}"
    );
    let finished = next_line(&mut lines, Duration::from_secs(90)).await;
    // Then the page's own errors, one a line, until the driver exits.
    let mut page_errors = Vec::new();
    while let Ok(Ok(Some(line))) =
        tokio::time::timeout(Duration::from_secs(30), lines.next_line()).await
    {
        page_errors.push(line);
    }
    assert!(
        finished.starts_with(&format!("FINISHED {id} ")) && finished.ends_with(" errors=0"),
        "{finished}\n{}",
        page_errors.join("\n")
    );
    let decisions: usize = finished
        .split("decisions=")
        .nth(1)
        .and_then(|d| d.split(' ').next())
        .and_then(|d| d.parse().ok())
        .unwrap_or(0);
    assert!(decisions >= 1, "no decision shown: {finished}");
    // The same decision taken again and again (the idle fleet held) is one row with its
    // count, not a row a second.
    let collapsed: usize = finished
        .split("collapsed=")
        .nth(1)
        .and_then(|d| d.split(' ').next())
        .and_then(|d| d.parse().ok())
        .unwrap_or(0);
    assert!(collapsed >= 2, "no run of one decision shown: {finished}");
    // The ended job says where it ran and how long it took.
    assert!(
        finished.contains(" level=shell ")
            && finished.contains(&format!(" ran_on={} ", words[3]))
            && !finished.contains(" took=none "),
        "{finished}"
    );
    // The job stays on the page after it ended, with its result and a link to its page on
    // GitLab (the payload's CI_JOB_URL).
    assert!(
        finished.contains(" result=success ")
            && finished.contains(&format!(" link={}/group/project/-/jobs/{id} ", gl.url())),
        "{finished}"
    );
    assert!(gl.wait_finished(&[id], Duration::from_secs(30)).await);
    let status = driver.wait().await.unwrap();
    assert!(status.success(), "the browser driver failed");
    for shot in ["status-page-job-running.png", "status-page-after.png"] {
        let len = std::fs::metadata(shots.join(shot))
            .map(|m| m.len())
            .unwrap_or(0);
        assert!(len > 10_000, "{shot}: {len} bytes");
    }

    m.signal(libc::SIGTERM);
    let status = m.wait(Duration::from_secs(30)).await.expect("exits");
    assert!(status.success(), "exit {status:?}; log:\n{}", m.log_tail());
}

/// Scrapes `/metrics` until `done` holds for it, up to `timeout`; returns the last text.
async fn scrape_until(
    http: &reqwest::Client,
    base: &str,
    timeout: Duration,
    done: impl Fn(&str) -> bool,
) -> String {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let text = match http.get(format!("{base}/metrics")).send().await {
            Ok(r) => r.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        };
        if done(&text) || tokio::time::Instant::now() >= deadline {
            return text;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The fleeting and taskscaler series of a fleet that really creates and deletes instances:
/// `flotilla run` on the docker provider, each instance used once (`max_use_count = 1`).
/// Every instance's life shows in the histograms (requested → listed → running → ready →
/// removed → gone), every removal is counted with its reason, and the counts agree with
/// the containers Docker made for the group.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn infra_metrics_follow_a_docker_fleet_through_its_instances_lives() {
    if !infra::require(Infra::Docker) {
        return;
    }
    let token = "glrt-monitor-docker-fleet";
    let gl = run_support::fake_gitlab(&[token], Duration::from_millis(500)).await;
    let dir = tempfile::tempdir().unwrap();
    let group = format!("flotilla-monitor-{}", run_support::now_nanos());
    let _guard = flotilla_testkit::containers::LabelGuard::new(format!("flotilla.group={group}"));
    let config = dir.path().join("config.toml");
    std::fs::write(
        &config,
        format!(
            r#"concurrent = 2
check_interval = 1
shutdown_timeout = 30
listen_address = "127.0.0.1:0"

[flotilla]
state_dir = "{state}"

[[runners]]
  name = "docker-lives"
  url = "{url}"
  token = "{token}"
  executor = "instance"
  [runners.autoscaler]
    plugin = "docker"
    capacity_per_instance = 1
    max_instances = 2
    max_use_count = 1
    instance_operation_time_buckets = [0.25, 0.5, 1, 2, 5, 10, 30, 60]
    [runners.autoscaler.plugin_config]
      name = "{group}"
      image = "{image}"
    [[runners.autoscaler.policy]]
      idle_count = 1
      idle_time = "1h"
"#,
            state = dir.path().join("state").display(),
            url = gl.url(),
            image = flotilla_testkit::images::instance_image(),
        ),
    )
    .unwrap();
    let mut m = Manager::start(&config, &[]);
    let base = format!("http://{}", served_address(&m).await);
    let http = reqwest::Client::new();
    let count = |text: &str, name: &str| sum(text, name, &[]);

    // The idle target's instance: requested, listed, running, ready.
    let text = scrape_until(&http, &base, Duration::from_secs(120), |t| {
        count(
            t,
            "fleeting_taskscaler_task_instance_readiness_time_seconds_count",
        ) >= 1.0
    })
    .await;
    for name in [
        "fleeting_provisioner_instance_creation_time_seconds_count",
        "fleeting_provisioner_instance_is_running_time_seconds_count",
        "fleeting_taskscaler_task_instance_readiness_time_seconds_count",
    ] {
        assert!(
            count(&text, name) >= 1.0,
            "{name}:\n{text}\nlog:\n{}",
            m.log_tail()
        );
    }
    // `instance_operation_time_buckets` sets every operation's buckets.
    assert!(
        text.contains(r#"fleeting_provisioner_instance_deletion_time_seconds_bucket{runner="monitor-d",runner_name="docker-lives",system_id"#)
            && text.contains(r#"le="0.25"} "#),
        "{text}"
    );
    assert_eq!(
        sum(
            &text,
            "fleeting_provisioner_instance_operations_total",
            &[r#"operation="create""#]
        ),
        count(
            &text,
            "fleeting_provisioner_instance_creation_time_seconds_count"
        ) + sum(
            &text,
            "fleeting_provisioner_instances",
            &[r#"state="requested""#]
        ),
        "every instance requested was listed or is still awaited:\n{text}"
    );

    // Two jobs, one after the other: each uses an instance up, which is then removed.
    for name in ["first", "second"] {
        let id = gl.enqueue(token, JobBuilder::new(name).script(["echo on $HOSTNAME"]));
        assert!(
            gl.wait_finished(&[id], Duration::from_secs(120)).await,
            "{name} did not finish; log:\n{}",
            m.log_tail()
        );
        assert_eq!(gl.job(id).unwrap().final_update.unwrap().state, "success");
    }
    let removed = r#"reason="max_use_count""#;
    let text = scrape_until(&http, &base, Duration::from_secs(120), |t| {
        sum(t, "flotilla_instance_removals_total", &[removed]) >= 2.0
            && count(
                t,
                "fleeting_provisioner_instance_deletion_time_seconds_count",
            ) >= 2.0
    })
    .await;
    assert_eq!(
        sum(&text, "flotilla_instance_removals_total", &[removed]),
        2.0,
        "{text}\nlog:\n{}",
        m.log_tail()
    );
    // Only the used-up instances left the fleet, and each is in the removal histograms.
    assert_eq!(
        sum(&text, "flotilla_instance_removals_total", &[]),
        2.0,
        "{text}"
    );
    assert_eq!(
        count(
            &text,
            "fleeting_provisioner_instance_deletion_time_seconds_count"
        ),
        2.0
    );
    assert_eq!(
        count(
            &text,
            "fleeting_provisioner_instance_life_duration_seconds_count"
        ),
        2.0
    );
    assert!(
        sum(
            &text,
            "fleeting_provisioner_instance_operations_total",
            &[r#"operation="delete""#]
        ) >= 2.0,
        "{text}"
    );
    // Docker agrees: the containers still there are those the metrics count as live.
    let live = sum(
        &text,
        "fleeting_provisioner_instances",
        &[r#"state="running""#],
    ) + sum(
        &text,
        "fleeting_provisioner_instances",
        &[r#"state="creating""#],
    ) + sum(
        &text,
        "fleeting_provisioner_instances",
        &[r#"state="deleting""#],
    );
    let containers = flotilla_testkit::containers::labelled(&format!("flotilla.group={group}"));
    assert!(
        live >= 1.0 && (containers.len() as f64 - live).abs() <= 1.0,
        "{live} live instances in the metrics, {} containers: {text}",
        containers.len()
    );
    // The scaler scaled up for the idle target and after each removal.
    assert!(
        sum(
            &text,
            "fleeting_taskscaler_scale_operations_total",
            &[r#"operation="up""#]
        ) >= 2.0,
        "{text}"
    );

    m.signal(libc::SIGTERM);
    let status = m.wait(Duration::from_secs(60)).await.expect("exits");
    assert!(status.success(), "exit {status:?}; log:\n{}", m.log_tail());
}
