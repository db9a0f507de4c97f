//! The metrics of a real scaler on the fake provider in virtual time: the values a
//! dashboard reads, GitLab's names and labels, and the exposition judged by Prometheus's own
//! parser (`promtool check metrics`).

use chrono::{TimeZone, Utc};
use flotilla_monitor::jobs::JobEnd;
use flotilla_monitor::{InstanceBuckets, Monitor, RunnerLabels, RunnerSpec};
use flotilla_scaler::{Clock, Policy, Scaler, ScalerBuilder, ScalerConfig, Schedule};
use flotilla_testkit::infra::{self, Infra};
use flotilla_testkit::{FakeConfig, FakeInstanceGroup};
use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

async fn scaler(group: Arc<FakeInstanceGroup>, config: ScalerConfig, policy: Policy) -> Scaler {
    ScalerBuilder::new(group, config)
        .schedule(Schedule::single(policy))
        .clock(Clock::anchored(
            Utc.with_ymd_and_hms(2026, 11, 23, 12, 0, 0).unwrap(),
        ))
        .start()
        .await
        .unwrap()
}

fn spec(name: &str, token: &str) -> RunnerSpec {
    RunnerSpec {
        labels: RunnerLabels::new(token, name, "s_0123456789ab"),
        limit: 7,
        request_concurrency: 2,
        buckets: InstanceBuckets::from_config(
            None,
            Some(&[1.0, 5.0, 10.0, 60.0]),
            None,
            None,
            None,
            None,
        ),
    }
}

/// The value of the sample `series` (`name{k="v",...}`, labels in any order), if present.
fn sample(text: &str, series: &str) -> Option<f64> {
    let (want_name, want_labels) = split_series(series);
    text.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        let (s, v) = l.rsplit_once(' ')?;
        let (name, labels) = split_series(s);
        (name == want_name && labels == want_labels).then(|| v.parse().ok())?
    })
}

/// A series' name and its labels, sorted.
fn split_series(series: &str) -> (&str, Vec<String>) {
    match series.split_once('{') {
        None => (series, Vec::new()),
        Some((name, rest)) => {
            let inner = rest.trim_end_matches('}');
            let mut labels: Vec<String> = inner
                .split("\",")
                .filter(|p| !p.is_empty())
                .map(|p| p.trim_end_matches('"').to_string())
                .collect();
            labels.sort();
            (name, labels)
        }
    }
}

const LABELS: &str = r#"runner="abcdefghi",runner_name="east",system_id="s_0123456789ab""#;

#[tokio::test(start_paused = true)]
async fn a_dashboard_reads_the_fleet_as_gitlab_names_it() {
    let group = Arc::new(FakeInstanceGroup::new(
        FakeConfig {
            create_latency: (Duration::from_secs(8), Duration::from_secs(8)),
            delete_latency: (Duration::from_secs(3), Duration::from_secs(3)),
            ..FakeConfig::default()
        },
        7,
    ));
    let config = ScalerConfig {
        capacity_per_instance: 2,
        max_instances: 5,
        max_use_count: 2,
        ..ScalerConfig::default()
    };
    let policy = Policy {
        idle_count: 2,
        idle_time: Duration::from_secs(60),
        ..Policy::default()
    };
    let s = scaler(group.clone(), config, policy).await;
    let monitor = Monitor::new(10, "test").unwrap();
    let runner = monitor
        .add_runner(&spec("east", "glrt-abcdefghijklmnop"))
        .unwrap();
    runner.attach(s.clone());

    // Before anything: GitLab's series exist at zero.
    let text = monitor.metrics_text().unwrap();
    assert_eq!(sample(&text, "gitlab_runner_concurrent 10"), None);
    assert_eq!(
        sample(&text, "gitlab_runner_concurrent"),
        Some(10.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, &format!("gitlab_runner_limit{{{LABELS}}}")),
        Some(7.0)
    );
    assert_eq!(
        sample(
            &text,
            &format!("fleeting_taskscaler_max_tasks_per_instance{{{LABELS}}}")
        ),
        Some(2.0)
    );
    assert_eq!(
        sample(
            &text,
            &format!("fleeting_provisioner_max_instances{{{LABELS}}}")
        ),
        Some(5.0)
    );
    assert_eq!(
        sample(
            &text,
            &format!("fleeting_taskscaler_max_use_count_per_instance{{{LABELS}}}")
        ),
        Some(2.0)
    );

    // The idle target brings one instance up: it is requested, created, then runs.
    tokio::time::sleep(Duration::from_secs(20)).await;
    let text = monitor.metrics_text().unwrap();
    assert_eq!(
        sample(
            &text,
            &format!("fleeting_provisioner_instances{{{LABELS},state=\"running\"}}")
        ),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            &format!("fleeting_taskscaler_tasks{{{LABELS},state=\"idle\"}}")
        ),
        Some(2.0)
    );
    // Requested at t=0: the fake lists it (creating) at the next fast listing, 2 s later,
    // and running after its 8 s creation: the two histograms differ as GitLab's do.
    let creation = "fleeting_provisioner_instance_creation_time_seconds";
    let running = "fleeting_provisioner_instance_is_running_time_seconds";
    for (name, le, n) in [
        (creation, "1", 0.0),
        (creation, "5", 1.0),
        (running, "5", 0.0),
        (running, "10", 1.0),
    ] {
        assert_eq!(
            sample(&text, &format!("{name}_bucket{{{LABELS},le=\"{le}\"}}")),
            Some(n),
            "{name} le={le}"
        );
    }
    assert_eq!(
        sample(&text, &format!("{creation}_count{{{LABELS}}}")),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &text,
            &format!("fleeting_taskscaler_scale_operations_total{{{LABELS},operation=\"up\"}}")
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &text,
            &format!("flotilla_scaler_decisions_total{{{LABELS},reason=\"scale_up\"}}")
        ),
        Some(1.0)
    );

    // Two jobs use the instance up (max_use_count = 2): it is removed for that reason.
    for n in 0..2 {
        let key = format!("job-{n}");
        s.reserve(&key).unwrap();
        let a = s.acquire(&key, None).await.unwrap();
        runner.job_received(100 + n, "build");
        runner.job_started(100 + n, "shell", a.instance_id(), a.slot(), &key);
        runner.job_page(
            100 + n,
            &format!("https://gitlab.example/g/p/-/jobs/{}", 100 + n),
        );
        runner.job_output(100 + n, 42);
        let text = monitor.metrics_text().unwrap();
        assert_eq!(
            sample(
                &text,
                &format!("fleeting_taskscaler_tasks{{{LABELS},state=\"acquired\"}}")
            ),
            Some(1.0)
        );
        assert_eq!(
            sample(
                &text,
                &format!(
                    "gitlab_runner_jobs{{{LABELS},executor_stage=\"\",stage=\"\",state=\"running\"}}"
                )
            ),
            Some(1.0),
            "{text}"
        );
        tokio::time::sleep(Duration::from_secs(5)).await;
        drop(a);
        s.release(&key);
        runner.job_ended(100 + n, (n == 1).then_some("script_failure"));
        runner.job_done(100 + n);
    }
    tokio::time::sleep(Duration::from_secs(60)).await;
    let text = monitor.metrics_text().unwrap();
    assert_eq!(
        sample(
            &text,
            &format!("flotilla_instance_removals_total{{{LABELS},reason=\"max_use_count\"}}")
        ),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, &format!("gitlab_runner_jobs_total{{{LABELS}}}")),
        Some(2.0)
    );
    assert_eq!(
        sample(&text, &format!("flotilla_trace_bytes_total{{{LABELS}}}")),
        Some(84.0)
    );
    assert_eq!(
        sample(
            &text,
            &format!("flotilla_isolation_start_seconds_count{{{LABELS},level=\"shell\"}}")
        ),
        Some(2.0)
    );
    assert_eq!(
        sample(
            &text,
            &format!("gitlab_runner_job_duration_seconds_count{{{LABELS}}}")
        ),
        Some(2.0)
    );
    assert_eq!(
        sample(
            &text,
            &format!("fleeting_provisioner_instance_deletion_time_seconds_count{{{LABELS}}}")
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &text,
            &format!("fleeting_provisioner_instance_life_duration_seconds_count{{{LABELS}}}")
        ),
        Some(1.0)
    );

    // The status page shows the removal with its reason, and the decisions.
    let status = monitor.status();
    let r = &status.runners[0];
    assert_eq!(r.removals[0].reason, "max_use_count");
    assert!(r.decisions.iter().any(|d| d.kind == "scale_up"));
    assert!(!r.chart.is_empty());
    // Ended jobs stay on the page, newest first, with how they ended, where they ran and a
    // link to their page on GitLab.
    assert!(r.jobs.is_empty());
    let ended: Vec<_> = r
        .ended
        .iter()
        .map(|j| {
            (
                j.id,
                j.result,
                j.failure_reason.as_deref(),
                j.level.as_deref(),
                j.url.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        ended,
        [
            (
                101,
                Some(JobEnd::Failed),
                Some("script_failure"),
                Some("shell"),
                Some("https://gitlab.example/g/p/-/jobs/101")
            ),
            (
                100,
                Some(JobEnd::Success),
                None,
                Some("shell"),
                Some("https://gitlab.example/g/p/-/jobs/100")
            ),
        ]
    );
    assert!(r.ended.iter().all(|j| j.instance.is_some()));
    s.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(start_paused = true)]
async fn two_runners_share_one_exposition_and_the_parser_accepts_it() {
    let monitor = Monitor::new(4, "test").unwrap();
    for (name, token) in [("east", "glrt-abcdefghijk"), ("west", "glrt-zyxwvutsrqp")] {
        let group = Arc::new(FakeInstanceGroup::new(FakeConfig::default(), 1));
        let s = scaler(
            group,
            ScalerConfig {
                capacity_per_instance: 3,
                max_instances: 2,
                ..ScalerConfig::default()
            },
            Policy {
                idle_count: 1,
                idle_time: Duration::from_secs(30),
                ..Policy::default()
            },
        )
        .await;
        let r = monitor.add_runner(&spec(name, token)).unwrap();
        r.attach(s);
        r.api_request("request_job", "POST", 204, Duration::from_millis(30));
        r.api_request("request_job", "POST", 201, Duration::from_millis(800));
        r.job_received(1, "test");
        r.job_queue_facts(Duration::from_secs(4), "0");
        if name == "east" {
            r.job_ended(1, Some("script_failure"));
            r.job_ended(2, Some("script_failure"));
            r.job_ended(3, Some("runner_system_failure"));
            // A job with FF_EXPORT_HIGH_CARDINALITY_METRICS: its stages, timed; a section
            // of the job's own is not a label.
            r.job_stage_durations([
                ("get_sources", Duration::from_secs(2)),
                ("step_script", Duration::from_secs(12)),
                ("my own section", Duration::from_secs(1)),
            ]);
        }
    }
    tokio::time::sleep(Duration::from_secs(30)).await;
    let text = monitor.metrics_text().unwrap();
    // Issue 34: the error-rate series of GitLab's runbooks, the version, the process.
    let failed = |reason: &str| {
        sample(
            &text,
            &format!("gitlab_runner_failed_jobs_total{{failure_reason=\"{reason}\",{LABELS}}}"),
        )
    };
    assert_eq!(failed("script_failure"), Some(2.0), "{text}");
    assert_eq!(failed("runner_system_failure"), Some(1.0), "{text}");
    let stage_count = |stage: &str| {
        text.lines()
            .filter(|l| {
                l.starts_with("gitlab_runner_job_stage_duration_seconds_count{")
                    && l.contains(&format!("stage=\"{stage}\""))
            })
            .map(|l| l.rsplit(' ').next().unwrap_or("").to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(stage_count("step_script"), ["1"], "{text}");
    assert_eq!(stage_count("get_sources"), ["1"], "{text}");
    assert!(stage_count("my own section").is_empty(), "{text}");
    let stage_buckets: Vec<&str> = text
        .lines()
        .filter(|l| {
            l.starts_with("gitlab_runner_job_stage_duration_seconds_bucket{")
                && l.contains("stage=\"step_script\"")
        })
        .filter_map(|l| l.split("le=\"").nth(1)?.split('"').next())
        .collect();
    assert_eq!(
        stage_buckets,
        [
            "1", "3", "10", "30", "60", "120", "300", "900", "1800", "3600", "+Inf"
        ],
        "GitLab's buckets: {text}"
    );
    assert!(
        !text.contains("failure_reason=\"script_failure\",runner=\"zyxwvutsr\""),
        "{text}"
    );
    let version = format!(
        "gitlab_runner_version_info{{architecture=\"{}\",branch=\"unknown\",built_at=\"unknown\",go_version=\"unknown\",name=\"flotilla\",os=\"{}\",revision=\"unknown\",version=\"test\"}}",
        std::env::consts::ARCH,
        std::env::consts::OS
    );
    assert_eq!(sample(&text, &version), Some(1.0), "{text}");
    for series in [
        "process_resident_memory_bytes",
        "process_virtual_memory_bytes",
        "process_open_fds",
        "process_max_fds",
        "process_start_time_seconds",
    ] {
        assert!(
            sample(&text, series).is_some_and(|v| v > 0.0),
            "{series}:\n{text}"
        );
    }
    assert!(
        text.contains("# TYPE process_cpu_seconds_total counter"),
        "{text}"
    );
    for runner in ["abcdefghi", "zyxwvutsr"] {
        assert!(
            text.contains(&format!(
                "gitlab_runner_api_request_statuses_total{{endpoint=\"request_job\",method=\"post\",runner=\"{runner}\",status=\"201\",system_id=\"s_0123456789ab\"}} 1"
            )),
            "{text}"
        );
    }
    assert!(text.contains("status_class=\"2xx\""), "{text}");
    // A second runner with the same labels cannot register (its series would collide).
    assert!(
        monitor
            .add_runner(&spec("east", "glrt-abcdefghijk"))
            .is_err()
    );

    if !infra::require(Infra::Promtool) {
        return;
    }
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
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
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && said.trim().is_empty(),
        "promtool: {said}\n{text}"
    );

    // The parser can fail: a broken exposition is refused.
    let broken = text.replacen(
        "gitlab_runner_concurrent 4",
        "gitlab_runner_concurrent four",
        1,
    );
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(broken.as_bytes())
        .unwrap();
    assert!(!child.wait().unwrap().success());
}

/// Refused reservations are told apart as GitLab's runbook defines them: none free now
/// though the fleet may grow (`reserve_available_capacity_failure`), or none even
/// potentially, every slot the fleet may have being promised (`reserve_iop_capacity_failure`).
#[tokio::test(start_paused = true)]
async fn refused_reservations_are_told_apart() {
    let group = Arc::new(FakeInstanceGroup::new(
        FakeConfig {
            create_latency: (Duration::from_secs(30), Duration::from_secs(30)),
            ..FakeConfig::default()
        },
        5,
    ));
    // Non-preemptive, one instance of two slots at most: two reservations are promises, the
    // third has no capacity even potentially.
    let s = scaler(
        group,
        ScalerConfig {
            capacity_per_instance: 2,
            max_instances: 1,
            ..ScalerConfig::default()
        },
        Policy::default(),
    )
    .await;
    let monitor = Monitor::new(4, "test").unwrap();
    let runner = monitor
        .add_runner(&spec("east", "glrt-abcdefghijklmnop"))
        .unwrap();
    runner.attach(s.clone());
    s.reserve("a").unwrap();
    s.reserve("b").unwrap();
    assert!(s.reserve("c").is_err());
    // Preemptive now (an idle target), with the instance still being created: no idle
    // slot for a fourth, though the fleet has room to grow once it is up.
    s.configure_schedule(Schedule::single(Policy {
        idle_count: 1,
        ..Policy::default()
    }));
    s.unreserve("a");
    s.unreserve("b");
    assert!(s.reserve("d").is_err());
    let text = monitor.metrics_text().unwrap();
    let op = |name: &str| {
        sample(
            &text,
            &format!("fleeting_taskscaler_task_operations_total{{{LABELS},operation=\"{name}\"}}"),
        )
    };
    assert_eq!(op("reserve"), Some(2.0), "{text}");
    assert_eq!(op("reserve_iop_capacity_failure"), Some(1.0), "{text}");
    assert_eq!(
        op("reserve_available_capacity_failure"),
        Some(1.0),
        "{text}"
    );
    assert_eq!(op("acquire"), Some(0.0), "{text}");
    s.shutdown(Duration::from_secs(1)).await;
}
