//! What the VM levels' tests (`microvm_*.rs`, `vm_slots.rs`) share: preparing a job's
//! environment on this host, running a stage in it, and finding a VM's process.

#![allow(dead_code)] // each test file uses part of it

use flotilla_connect::Connector;
use flotilla_connect::local::LocalConnector;
use flotilla_isolate::{IsolatedEnvironment, Isolation, PrepareRequest};
use flotilla_job::{ExecCommand, ExecSpec, ExitStatus, JobPayload, Place};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// Prepares `job` in `slot` of this host at `level`: the environment, how its preparation
/// ended, and what it wrote to the job's log.
pub(crate) async fn prepare(
    level: &dyn Isolation,
    builds_dir: &str,
    job: &JobPayload,
    slot: usize,
) -> (Box<dyn IsolatedEnvironment>, Result<(), String>, String) {
    let connector: Arc<dyn Connector> = Arc::new(LocalConnector::new());
    let env = level
        .prepare(PrepareRequest {
            job,
            instance_id: "this-host",
            slot,
            connector,
            builds_dir: builds_dir.to_string(),
            custom_build_dir: None,
        })
        .await
        .unwrap();
    let mut log = Vec::new();
    let r = env
        .prepare(&mut log, CancellationToken::new())
        .await
        .map_err(|e| e.to_string());
    (env, r, String::from_utf8(log).unwrap())
}

/// [`prepare`], panicking (after cleaning up) when the preparation fails.
pub(crate) async fn prepared(
    level: &dyn Isolation,
    builds_dir: &str,
    job: &JobPayload,
    slot: usize,
) -> (Box<dyn IsolatedEnvironment>, String) {
    let (env, r, log) = prepare(level, builds_dir, job, slot).await;
    if let Err(e) = r {
        let _ = env.cleanup().await;
        panic!("prepare: {e}\n{log}");
    }
    (env, log)
}

/// Runs `script` at `place` in `env`: its status and stdout (stderr goes to the test's).
pub(crate) async fn stage(
    env: &dyn IsolatedEnvironment,
    place: Place,
    script: &str,
) -> (ExitStatus, String) {
    let mut out = Vec::new();
    let status = env
        .exec(ExecSpec {
            place,
            command: ExecCommand::Script(script.to_string()),
            stdin: None,
            stdout: Box::new(&mut out),
            stderr: Box::new(tokio::io::stderr()),
            cancel: CancellationToken::new(),
        })
        .await
        .unwrap();
    (status, String::from_utf8_lossy(&out).into_owned())
}

/// Whether process `pid` runs (not a zombie).
pub(crate) fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z') && !rest.starts_with('X'))
    })
}

/// The VMM's pid from the pid file in VM directory `dir`.
pub(crate) fn vmm_pid(dir: &str) -> Option<u32> {
    std::fs::read_to_string(format!("{dir}/vmm.pid"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// A job of `project` named `name` in the busybox image, with `vars`.
pub(crate) fn busybox_job(id: i64, name: &str, project: &str, vars: &[(&str, &str)]) -> JobPayload {
    JobPayload {
        id,
        job_info: flotilla_job::model::JobInfo {
            name: name.into(),
            project_full_path: project.into(),
            ..Default::default()
        },
        image: Some(flotilla_job::model::Image {
            name: flotilla_testkit::images::busybox_image(),
            ..Default::default()
        }),
        variables: vars
            .iter()
            .map(|(k, v)| flotilla_job::Variable::new(*k, *v))
            .collect(),
        ..Default::default()
    }
}
