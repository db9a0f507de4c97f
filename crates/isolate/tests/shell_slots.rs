//! Shell isolation never lets a job share its slot with what an earlier job left running
//! there: cleaning up after a job stops what it left running, and preparing a job after one
//! that was never cleaned up (its manager was killed with `kill -9`) stops every process group
//! recorded in its slot, and only in its slot. With the local connector and real processes.

use flotilla_connect::Connector;
use flotilla_connect::local::LocalConnector;
use flotilla_isolate::{IsolatedEnvironment, Isolation, PrepareRequest, ShellIsolation};
use flotilla_job::model::JobInfo;
use flotilla_job::{ExecCommand, ExecSpec, JobPayload, Place};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

fn job(id: i64) -> JobPayload {
    JobPayload {
        id,
        job_info: JobInfo {
            project_full_path: "group/project".into(),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// Prepares job `id` on `slot` and returns its environment and the log of its preparation.
async fn prepared(
    iso: &ShellIsolation,
    builds: &Path,
    id: i64,
    slot: usize,
) -> (Box<dyn IsolatedEnvironment>, String) {
    let j = job(id);
    let connector: Arc<dyn Connector> = Arc::new(LocalConnector::new());
    let env = iso
        .prepare(PrepareRequest {
            job: &j,
            instance_id: "this-host",
            slot,
            connector,
            builds_dir: builds.to_str().unwrap().to_string(),
            custom_build_dir: None,
        })
        .await
        .unwrap();
    let mut log = Vec::new();
    env.prepare(&mut log, CancellationToken::new())
        .await
        .unwrap();
    (env, String::from_utf8(log).unwrap())
}

/// Runs a stage script in `env`.
async fn stage(env: &dyn IsolatedEnvironment, script: &str) {
    let mut out = Vec::new();
    let status = env
        .exec(ExecSpec {
            place: Place::Build,
            command: ExecCommand::Script(script.to_string()),
            stdin: None,
            stdout: Box::new(&mut out),
            stderr: Box::new(tokio::io::sink()),
            cancel: CancellationToken::new(),
        })
        .await
        .unwrap();
    assert!(status.success(), "{}", String::from_utf8_lossy(&out));
}

/// Whether `pid` runs (a zombie does not count).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z') && !rest.starts_with('X'))
    })
}

async fn dies(pid: u32) -> bool {
    for _ in 0..200 {
        if !alive(pid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    false
}

fn pid_in(path: &Path) -> u32 {
    std::fs::read_to_string(path)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// A stage that leaves `sleep 60` running in the background, its pid written to `pid_file`.
fn leave_running(pid_file: &Path) -> String {
    format!(
        "sleep 60 >/dev/null 2>&1 &\necho $! > {}\n",
        pid_file.display()
    )
}

#[tokio::test]
async fn what_a_job_leaves_running_is_stopped_when_it_is_cleaned_up() {
    let dir = tempfile::tempdir().unwrap();
    let builds = dir.path().join("builds");
    let iso = ShellIsolation::new();
    let left = dir.path().join("left");

    let (env, log) = prepared(&iso, &builds, 1, 0).await;
    assert!(!log.contains("WARNING"), "{log}");
    stage(&*env, &leave_running(&left)).await;
    let pid = pid_in(&left);
    assert!(alive(pid));
    env.cleanup().await.unwrap();
    assert!(dies(pid).await, "the job's leftover outlived its cleanup");

    // The slot is clean: its next job has nothing to stop.
    let (env, log) = prepared(&iso, &builds, 2, 0).await;
    assert!(!log.contains("stopped"), "{log}");
    env.cleanup().await.unwrap();
}

#[tokio::test]
async fn a_job_never_shares_its_slot_with_what_an_earlier_job_left_running() {
    let dir = tempfile::tempdir().unwrap();
    let builds = dir.path().join("builds");
    let iso = ShellIsolation::new();
    let left0 = dir.path().join("left0");
    let left1 = dir.path().join("left1");

    // Jobs on slots 0 and 1 each leave a process running (in the background of a stage) and
    // are never cleaned up: their manager died.
    let (env0, log) = prepared(&iso, &builds, 1, 0).await;
    assert!(!log.contains("WARNING"), "{log}");
    stage(&*env0, &leave_running(&left0)).await;
    drop(env0);
    let (env1, _) = prepared(&iso, &builds, 2, 1).await;
    stage(&*env1, &leave_running(&left1)).await;
    drop(env1);
    let (p0, p1) = (pid_in(&left0), pid_in(&left1));
    assert!(alive(p0) && alive(p1));

    // The next job of slot 0, under a new manager process, stops what slot 0's last job
    // left, and nothing of slot 1.
    let iso = ShellIsolation::new();
    let (env, log) = prepared(&iso, &builds, 3, 0).await;
    assert!(
        log.contains("stopped 1 process group(s) an earlier job left running in this slot"),
        "{log}"
    );
    assert!(dies(p0).await, "the leftover of slot 0 still runs");
    assert!(alive(p1), "slot 1's leftover belongs to slot 1");
    env.cleanup().await.unwrap();

    // Slot 1's next job finds its own, even under the manager that did not clean it up.
    let (env, log) = prepared(&iso, &builds, 4, 1).await;
    assert!(log.contains("stopped 1 process group(s)"), "{log}");
    assert!(dies(p1).await);
    env.cleanup().await.unwrap();

    // And a job after one that left nothing gets no warning.
    let (env, log) = prepared(&iso, &builds, 5, 1).await;
    assert!(!log.contains("stopped"), "{log}");
    env.cleanup().await.unwrap();
}

#[tokio::test]
async fn cleanup_instance_stops_what_another_manager_left_in_every_slot() {
    let dir = tempfile::tempdir().unwrap();
    let builds = dir.path().join("builds");
    let records = builds.join(".flotilla");
    std::fs::create_dir_all(&records).unwrap();
    let connector: Arc<dyn Connector> = Arc::new(LocalConnector::new());

    // A stage recorded by another (dead) manager, still running in slot 3's record...
    let theirs = dir.path().join("theirs");
    let line = flotilla_isolate::stage_record::recorded(
        &format!("echo $$ > {}; exec sleep 60", theirs.display()),
        records.join("3.stages").to_str().unwrap(),
        "4242-dead",
    );
    let mut child = {
        use std::os::unix::process::CommandExt;
        std::process::Command::new("sh")
            .arg("-c")
            .arg(&line)
            .process_group(0)
            .spawn()
            .unwrap()
    };
    // ...and one of this process, in slot 0, which must survive.
    let iso = ShellIsolation::new()
        .with_builds_dir(builds.to_str().unwrap())
        .unwrap();
    let ours = dir.path().join("ours");
    let (env, _) = prepared(&iso, &builds, 1, 0).await;
    stage(
        &*env,
        &format!("sleep 60 >/dev/null 2>&1 &\necho $! > {}\n", ours.display()),
    )
    .await;
    for _ in 0..200 {
        if theirs.exists() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (their_pid, our_pid) = (pid_in(&theirs), pid_in(&ours));

    let stopped = iso
        .cleanup_instance(connector.clone(), "this-host")
        .await
        .unwrap();
    assert_eq!(stopped, 1);
    assert!(!child.wait().unwrap().success());
    assert!(!alive(their_pid));
    assert!(
        alive(our_pid),
        "this manager's own job's process was stopped"
    );

    // Without a builds directory there is nothing to sweep.
    assert_eq!(
        ShellIsolation::new()
            .cleanup_instance(connector, "this-host")
            .await
            .unwrap(),
        0
    );
    assert!(ShellIsolation::new().with_builds_dir("relative").is_err());
    env.cleanup().await.unwrap();
    let (env, _) = prepared(&iso, &builds, 2, 0).await;
    assert!(dies(our_pid).await);
    env.cleanup().await.unwrap();
}
