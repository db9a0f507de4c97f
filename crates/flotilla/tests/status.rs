//! `flotilla status` (the real binary) on a state file written through the store's API the way
//! `flotilla run` writes it: the lease holder, the instances with their slots held, the jobs
//! not yet reported; and its answers without a configuration or without a state file.

use flotilla_fleet::State;
use flotilla_scaler::{Cause, InstanceRecord, JournalEvent, RemovalReason};
use flotilla_store::{Identity, JobOutcome, JobStart, LeaseHolder, Store, StoreOptions};
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, SystemTime};

fn status(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_flotilla"))
        .arg("status")
        .args(args)
        .env_remove("RUST_LOG")
        .env_remove("FLOTILLA_CONFIG")
        .output()
        .unwrap()
}

fn config(dir: &Path) -> String {
    let path = dir.join("config.toml");
    std::fs::write(
        &path,
        format!(
            r#"concurrent = 4
[flotilla]
state_dir = "{}"

[[runners]]
  name = "ci"
  url = "https://gitlab.example.com"
  token = "glrt-status-test"
  executor = "flotilla"
  [runners.autoscaler]
    plugin = "local"
    capacity_per_instance = 4
    max_instances = 1
"#,
            dir.join("state").display()
        ),
    )
    .unwrap();
    path.to_str().unwrap().to_string()
}

#[test]
fn without_a_configuration_it_says_what_it_needs() {
    let out = status(&[]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--config"), "{stderr}");
}

/// Without `--config`, `status` reads the configuration where a user's is found: flotilla's
/// own place (`$XDG_CONFIG_HOME/flotilla/config.toml`) first, then gitlab-runner's
/// (`~/.gitlab-runner/config.toml`). Run as `nobody` with a home of its own, since as root the
/// places are under `/etc`, where a test writes nothing.
#[test]
fn without_config_it_reads_the_one_found_where_a_user_keeps_it() {
    use std::os::unix::fs::PermissionsExt;
    let home = tempfile::tempdir().unwrap();
    let runner_dir = home.path().join(".gitlab-runner");
    std::fs::create_dir_all(&runner_dir).unwrap();
    let gitlab_runners = config(&runner_dir);
    let xdg = home.path().join("xdg");
    let status_as_user = |with_xdg: bool| {
        let mut cmd = if nix::unistd::geteuid().is_root() {
            let mut c = Command::new("setpriv");
            c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
                .arg(env!("CARGO_BIN_EXE_flotilla"));
            c
        } else {
            Command::new(env!("CARGO_BIN_EXE_flotilla"))
        };
        cmd.arg("status")
            .env_remove("RUST_LOG")
            .env_remove("FLOTILLA_CONFIG")
            .env_remove("FLOTILLA_STATE_DIR")
            .env("HOME", home.path());
        if with_xdg {
            cmd.env("XDG_CONFIG_HOME", &xdg);
        } else {
            cmd.env_remove("XDG_CONFIG_HOME");
        }
        cmd.output().unwrap()
    };
    let open_up = |path: &Path| {
        for entry in walk(path) {
            let mode = if entry.is_dir() { 0o755 } else { 0o644 };
            std::fs::set_permissions(&entry, std::fs::Permissions::from_mode(mode)).unwrap();
        }
    };
    open_up(home.path());
    let out = status_as_user(false);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let runner_state = runner_dir.join("state");
    assert!(
        stdout.contains(&format!("no state at {}", runner_state.display())),
        "not gitlab-runner's file ({gitlab_runners}):\n{stdout}"
    );
    // flotilla's own place comes first.
    let own = xdg.join("flotilla");
    std::fs::create_dir_all(&own).unwrap();
    config(&own);
    open_up(home.path());
    let out = status_as_user(true);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(&format!("no state at {}", own.join("state").display())),
        "not flotilla's own file:\n{stdout}"
    );
}

/// `path` and everything under it.
fn walk(path: &Path) -> Vec<std::path::PathBuf> {
    let mut out = vec![path.to_path_buf()];
    if path.is_dir() {
        for entry in std::fs::read_dir(path).unwrap() {
            out.extend(walk(&entry.unwrap().path()));
        }
    }
    out
}

#[test]
fn without_state_it_says_so_and_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    let out = status(&["--config", &config]);
    assert_eq!(out.status.code(), Some(0));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("no state at") && stdout.contains("has not run"),
        "{stdout}"
    );
    assert!(!dir.path().join("state").exists(), "status created state");
}

#[test]
fn it_shows_the_lease_instances_slots_and_unreported_jobs() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    std::fs::create_dir_all(dir.path().join("state")).unwrap();
    let store = Store::open(
        dir.path().join("state/flotilla.db"),
        StoreOptions::default(),
    )
    .unwrap();
    let scope = store
        .scope(&Identity::new(
            "https://gitlab.example.com/",
            "77",
            "docker/ci-fleet",
        ))
        .unwrap();
    let now = SystemTime::now();
    let holder = LeaseHolder::this_process();
    store
        .acquire_lease(scope, &holder, Duration::from_secs(600), now)
        .unwrap();
    for (id, removal) in [("inst-a", None), ("inst-b", Some(RemovalReason::IdleTime))] {
        store
            .record(
                scope,
                &JournalEvent::Instance(InstanceRecord {
                    id: id.into(),
                    state: State::Running,
                    cause: Cause::Requested,
                    use_count: 3,
                    removal,
                }),
            )
            .unwrap();
    }
    store
        .record(scope, &JournalEvent::RequestedInFlight(2))
        .unwrap();
    store
        .record(
            scope,
            &JournalEvent::Acquired {
                key: "job-1".into(),
                instance: "inst-a".into(),
                slot: 2,
                use_count: 4,
            },
        )
        .unwrap();
    for (job, outcome) in [
        ("1001", None),
        (
            "1002",
            Some(JobOutcome::Failed {
                failure_reason: "script_failure".into(),
                exit_code: Some(3),
            }),
        ),
    ] {
        store
            .job_started(
                scope,
                &JobStart {
                    source: "gitlab:ci".into(),
                    job_id: job.into(),
                    key: format!("key-{job}"),
                    instance: "inst-a".into(),
                    slot: 2,
                    started_at: now - Duration::from_secs(125),
                },
            )
            .unwrap();
        if let Some(o) = outcome {
            store
                .job_finished(scope, "gitlab:ci", job, &o, now)
                .unwrap();
        }
    }
    store
        .record_decision(scope, "scale up by 1: demand 5 vs free 4", now)
        .unwrap();
    drop(store);

    let out = status(&["--config", &config]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for expected in [
        "fleet docker/ci-fleet (runner 77 at https://gitlab.example.com)",
        &format!("managed by the manager with pid {}", std::process::id()),
        "instances: 2 known, 2 requested and not seen yet",
        "jobs not yet reported: 2",
        "script_failure (exit code 3)",
        "last decision (0s ago): scale up by 1: demand 5 vs free 4",
        "2m0",
    ] {
        assert!(
            stdout.contains(expected),
            "missing {expected:?} in:\n{stdout}"
        );
    }
    let row = |id: &str| {
        stdout
            .lines()
            .find(|l| l.trim_start().starts_with(id))
            .unwrap_or_else(|| panic!("no row for {id}:\n{stdout}"))
            .split_whitespace()
            .map(String::from)
            .collect::<Vec<_>>()
    };
    assert_eq!(row("inst-a")[1..5], ["running", "requested", "4", "1"]);
    assert_eq!(row("inst-b").last().map(String::as_str), Some("idle_time"));
    assert_eq!(row("gitlab:ci")[1..3], ["1001", "running"]);

    // Issue 34: the same, for scripts.
    let out = status(&["--config", &config, "--json"]);
    assert_eq!(out.status.code(), Some(0));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let fleet = &json["fleets"][0];
    assert_eq!(fleet["fleet"], "docker/ci-fleet");
    assert_eq!(fleet["runner"], "77");
    assert_eq!(fleet["lease"]["held"], true);
    assert!(fleet["lease"]["expires_in_seconds"].as_u64().unwrap() > 500);
    assert!(fleet["lease"]["lapsed_seconds_ago"].is_null());
    assert_eq!(fleet["requested_in_flight"], 2);
    assert_eq!(fleet["instances"][0]["id"], "inst-a");
    assert_eq!(fleet["instances"][0]["slots_held"], 1);
    assert_eq!(fleet["instances"][1]["removing"], "idle_time");
    assert_eq!(
        fleet["last_decision"]["text"],
        "scale up by 1: demand 5 vs free 4"
    );
    let jobs = fleet["unreported_jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 2);
    assert_eq!(jobs[0]["job"], "1001");
    assert_eq!(
        jobs[0]["place"],
        serde_json::json!({"instance": "inst-a", "slot": 2})
    );
    assert_eq!(fleet["instances"][0]["origin"], "requested");
    assert!(jobs[0]["started_seconds_ago"].as_u64().unwrap() >= 125);
    assert_eq!(jobs[1]["outcome"], "failed: script_failure (exit code 3)");
}
