//! Shared helpers of the dispatcher's end-to-end tests.
#![allow(dead_code)]

use flotilla_dispatch::Dispatcher;
use flotilla_fleet::Secret;
use flotilla_job::model::{
    GitInfo, Image, JobInfo, RunnerInfo, STEP_AFTER_SCRIPT, STEP_SCRIPT, Step, When,
};
use flotilla_job::{BufferSink, JobCancel, JobPayload, JobResult, Variable};
use std::sync::atomic::{AtomicI64, Ordering};

/// A unique job id per test process.
pub(crate) fn next_id() -> i64 {
    static ID: AtomicI64 = AtomicI64::new(1000);
    ID.fetch_add(1, Ordering::Relaxed)
}

/// A job with `script` and no git (`GIT_STRATEGY=none`).
pub(crate) fn job(script: &[&str]) -> JobPayload {
    let id = next_id();
    JobPayload {
        id,
        token: Secret::new(format!("glcbt-64_jobtoken{id}")),
        job_info: JobInfo {
            name: format!("job-{id}"),
            stage: "test".into(),
            project_id: 7,
            project_name: "project".into(),
            project_full_path: "group/project".into(),
            ..Default::default()
        },
        git_info: GitInfo {
            git_ref: "main".into(),
            ref_type: "branch".into(),
            sha: "0000000000000000000000000000000000000000".into(),
            ..Default::default()
        },
        runner_info: RunnerInfo {
            timeout: 600,
            ..Default::default()
        },
        variables: vec![Variable::new("GIT_STRATEGY", "none")],
        steps: vec![Step {
            name: STEP_SCRIPT.into(),
            script: script.iter().map(|s| s.to_string()).collect(),
            when: When::OnSuccess,
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// The same job with an image.
pub(crate) fn with_image(mut job: JobPayload, image: &str) -> JobPayload {
    job.image = Some(Image {
        name: image.into(),
        ..Default::default()
    });
    job
}

/// Adds an after_script step.
pub(crate) fn with_after_script(mut job: JobPayload, script: &[&str]) -> JobPayload {
    job.steps.push(Step {
        name: STEP_AFTER_SCRIPT.into(),
        script: script.iter().map(|s| s.to_string()).collect(),
        when: When::Always,
        allow_failure: true,
        ..Default::default()
    });
    job
}

/// Dispatches `job` under `key` and returns the result and the trace.
pub(crate) async fn dispatch(d: &Dispatcher, job: &JobPayload) -> (JobResult, String) {
    dispatch_with(d, job, &JobCancel::new()).await
}

pub(crate) async fn dispatch_with(
    d: &Dispatcher,
    job: &JobPayload,
    cancel: &JobCancel,
) -> (JobResult, String) {
    let mut sink = BufferSink::new();
    let key = format!("job-{}", job.id);
    let result = d.dispatch(&key, job, &mut sink, cancel).await;
    let text = sink.text();
    assert_eq!(
        result.trace.bytesize,
        text.len() as u64,
        "the summary counts what the sink got"
    );
    assert_eq!(result.trace.crc32, crc32fast::hash(text.as_bytes()));
    (result, text)
}

/// The level a test runs at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Level {
    Shell,
    Docker,
}

/// A one-instance, one-slot fleet at `level`.
pub(crate) async fn fleet(level: Level, tag: &str) -> flotilla_testkit::docker_fleet::DockerFleet {
    use flotilla_testkit::docker_fleet::{DockerFleet, FleetIsolation, FleetOptions};
    match level {
        Level::Shell => DockerFleet::start(FleetOptions::new(tag, FleetIsolation::Shell)).await,
        Level::Docker => DockerFleet::start(FleetOptions::docker(tag)).await,
    }
}

/// A job for `level`: with the busybox image for docker isolation.
pub(crate) fn job_at(level: Level, script: &[&str]) -> JobPayload {
    match level {
        Level::Shell => job(script),
        Level::Docker => with_image(job(script), &flotilla_testkit::images::busybox_image()),
    }
}

/// Runs a command on an instance over SSH and returns its stdout.
pub(crate) async fn on_instance(
    fleet: &flotilla_testkit::docker_fleet::DockerFleet,
    instance: &str,
    command: &str,
) -> String {
    use flotilla_connect::ConnectorExt;
    let out = fleet.ssh(instance).await.output(command).await.unwrap();
    out.stdout_str()
}

/// A dependency on the artifacts of `job`.
pub(crate) fn dependency_on(job: &JobPayload) -> flotilla_job::model::Dependency {
    flotilla_job::model::Dependency {
        id: job.id,
        name: job.job_info.name.clone(),
        token: Secret::new(format!("dep-token-{}", job.id)),
        artifacts_file: Some(flotilla_job::model::ArtifactsFile {
            filename: "artifacts.zip".into(),
            size: 1,
        }),
    }
}

/// The names in a zip archive, sorted.
pub(crate) fn zip_names(path: &std::path::Path) -> Vec<String> {
    let mut z = zip::ZipArchive::new(std::fs::File::open(path).unwrap()).unwrap();
    let mut names: Vec<String> = (0..z.len())
        .map(|i| z.by_index(i).unwrap().name().unwrap().to_string())
        .filter(|n| !n.ends_with('/'))
        .collect();
    names.sort();
    names
}
