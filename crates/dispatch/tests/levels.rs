//! End to end through the dispatcher: the docker provider, SSH, and both isolation levels.
//! Every scenario runs once per level.

use crate::common;

use common::*;
use flotilla_job::model::{Artifact, Cache, CachePolicy, When};
use flotilla_job::{BufferSink, FailureReason, JobCancel, Outcome, Variable};
use flotilla_testkit::infra::{Infra, require};
use std::time::Duration;

macro_rules! at_both_levels {
    ($scenario:ident, $shell:ident, $docker:ident) => {
        #[tokio::test]
        async fn $shell() {
            if !require(Infra::Docker) {
                return;
            }
            $scenario(Level::Shell).await;
        }

        #[tokio::test]
        async fn $docker() {
            if !require(Infra::Docker) {
                return;
            }
            $scenario(Level::Docker).await;
        }
    };
}

/// No job container is left on the instance (docker isolation).
async fn assert_no_job_containers(f: &flotilla_testkit::docker_fleet::DockerFleet, level: Level) {
    if level != Level::Docker {
        return;
    }
    for instance in f.instances() {
        let left = f.job_containers(&instance).await;
        assert!(left.is_empty(), "containers left behind: {left:?}");
    }
}

async fn success(level: Level) {
    let f = fleet(level, "ok").await;
    let j = job_at(
        level,
        &[
            "echo \"slot=$CI_CONCURRENT_ID dir=$CI_PROJECT_DIR builds=$CI_BUILDS_DIR\"",
            "test -d \"$CI_PROJECT_DIR\" && test \"$(pwd)\" = \"$CI_PROJECT_DIR\"",
            "if test -e /usr/bin/git; then echo on-the-instance; else echo in-the-job-image; fi",
            "echo \"file:$(cat \"$SETTINGS_FILE\")\"",
        ],
    );
    let mut j = j;
    j.variables
        .push(Variable::new("SETTINGS_FILE", "it's a file ✓").file());
    let (r, t) = dispatch(&f.dispatcher, &j).await;
    assert_eq!(r.outcome, Outcome::Success, "{t}");
    assert!(
        t.contains("slot=0 dir=/builds/0/group/project builds=/builds\n"),
        "{t}"
    );
    let (executor, place) = match level {
        Level::Shell => ("shell", "on-the-instance\n"),
        Level::Docker => ("docker", "in-the-job-image\n"),
    };
    assert!(t.contains(&format!("({executor})")), "{t}");
    assert!(t.contains(place), "{t}");
    assert!(t.contains("file:it's a file ✓\n"), "{t}");
    assert!(t.contains("Job succeeded"), "{t}");
    assert!(r.stages.iter().any(|s| s.name == "step_script" && s.ok));
    assert_eq!(
        f.scaler.snapshot().counts.acquired,
        0,
        "the slot is released"
    );
    assert_no_job_containers(&f, level).await;
}
at_both_levels!(success, infra_shell_success, infra_docker_success);

async fn failing_script(level: Level) {
    let f = fleet(level, "fail").await;
    let j = with_after_script(
        job_at(level, &["echo before", "exit 3", "echo never"]),
        &["echo \"after:$CI_JOB_STATUS\""],
    );
    let (r, t) = dispatch(&f.dispatcher, &j).await;
    assert_eq!(
        r.outcome,
        Outcome::Failed {
            reason: FailureReason::ScriptFailure,
            exit_code: Some(3)
        },
        "{t}"
    );
    assert!(t.contains("before\n") && !t.contains("never\n"), "{t}");
    assert!(
        t.contains("after:failed\n"),
        "after_script runs on failure: {t}"
    );
    assert_no_job_containers(&f, level).await;
}
at_both_levels!(
    failing_script,
    infra_shell_failing_script_exit_code_and_after_script,
    infra_docker_failing_script_exit_code_and_after_script
);

async fn graceful_cancel(level: Level) {
    let f = fleet(level, "cancel").await;
    let j = with_after_script(
        job_at(level, &["echo started", "sleep 300", "echo never"]),
        &["echo \"after:$CI_JOB_STATUS\""],
    );
    let cancel = JobCancel::new();
    let sink = BufferSink::new();
    let watcher = {
        let sink = sink.clone();
        let cancel = cancel.clone();
        async move {
            while !sink.text().contains("started\n") {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            cancel.cancel();
        }
    };
    let started = tokio::time::Instant::now();
    let mut out = sink.clone();
    let key = format!("job-{}", j.id);
    let run = f.dispatcher.dispatch(&key, &j, &mut out, &cancel);
    let (r, ()) = tokio::time::timeout(Duration::from_secs(120), async {
        tokio::join!(run, watcher)
    })
    .await
    .expect("the canceled job ends");
    let t = sink.text();
    assert_eq!(
        r.outcome,
        Outcome::Failed {
            reason: FailureReason::JobCanceled,
            exit_code: None
        },
        "{t}"
    );
    assert!(started.elapsed() < Duration::from_secs(100), "{t}");
    assert!(
        t.contains("after:canceled\n"),
        "after_script runs on cancel: {t}"
    );
    assert!(!t.contains("never\n"), "{t}");
    // Nothing of the job is left running: no container, no process.
    assert_no_job_containers(&f, level).await;
    for instance in f.instances() {
        let ps = on_instance(&f, &instance, "ps -eo args").await;
        assert!(
            !ps.lines().any(|l| l.trim() == "sleep 300"),
            "the script's process survives:\n{ps}"
        );
    }
}
at_both_levels!(
    graceful_cancel,
    infra_shell_graceful_cancel_runs_after_script,
    infra_docker_graceful_cancel_runs_after_script_and_leaves_no_container
);

async fn job_timeout(level: Level) {
    let f = fleet(level, "timeout").await;
    let mut j = job_at(level, &["echo started", "sleep 120"]);
    j.runner_info.timeout = 3;
    let started = tokio::time::Instant::now();
    let (r, t) = dispatch(&f.dispatcher, &j).await;
    assert_eq!(
        r.outcome,
        Outcome::Failed {
            reason: FailureReason::JobExecutionTimeout,
            exit_code: None
        },
        "{t}"
    );
    assert!(t.contains("execution took longer than 3 seconds"), "{t}");
    assert!(started.elapsed() < Duration::from_secs(60));
    assert_no_job_containers(&f, level).await;
}
at_both_levels!(
    job_timeout,
    infra_shell_job_timeout,
    infra_docker_job_timeout
);

async fn masking(level: Level) {
    let f = fleet(level, "mask").await;
    let mut j = job_at(
        level,
        &[
            "echo \"whole:$MY_SECRET\"",
            // The secret leaves the job in two pieces, a second apart.
            "printf 'split:%s' \"${MY_SECRET%%-*}\"; sleep 1; printf -- '-%s\\n' \"${MY_SECRET#*-}\"",
            "echo \"token:$CI_JOB_TOKEN\"",
        ],
    );
    j.variables
        .push(Variable::new("MY_SECRET", "s3cr3t-value-4242").masked());
    let (r, t) = dispatch(&f.dispatcher, &j).await;
    assert_eq!(r.outcome, Outcome::Success, "{t}");
    assert!(t.contains("whole:[MASKED]\n"), "{t}");
    assert!(t.contains("split:[MASKED]\n"), "{t}");
    assert!(!t.contains("s3cr3t") && !t.contains("value-4242"), "{t}");
    assert!(!t.contains("jobtoken"), "{t}");
}
at_both_levels!(masking, infra_shell_masking, infra_docker_masking);

async fn artifacts(level: Level) {
    let f = fleet(level, "artifacts").await;
    let mut a = job_at(
        level,
        &[
            "mkdir -p out",
            "echo artifact-from-a > out/result.txt",
            "echo not-an-artifact > marker.txt",
        ],
    );
    // The project directory goes after the job, so only the artifact can carry the file.
    a.variables
        .push(Variable::new("FF_ENABLE_JOB_CLEANUP", "true"));
    a.artifacts = vec![Artifact {
        name: "out".into(),
        paths: vec!["out/".into()],
        when: When::OnSuccess,
        ..Default::default()
    }];
    let (r, t) = dispatch(&f.dispatcher, &a).await;
    assert_eq!(r.outcome, Outcome::Success, "{t}");
    assert_eq!(
        zip_names(&f.artifacts.archive_path(a.id, "archive")),
        ["out/result.txt"]
    );

    let mut b = job_at(level, &["test ! -e marker.txt", "cat out/result.txt"]);
    b.dependencies = vec![dependency_on(&a)];
    let (r, t) = dispatch(&f.dispatcher, &b).await;
    assert_eq!(r.outcome, Outcome::Success, "{t}");
    assert!(t.contains("artifact-from-a\n"), "{t}");
}
at_both_levels!(
    artifacts,
    infra_shell_artifacts_pass_between_jobs,
    infra_docker_artifacts_pass_between_jobs
);

async fn cache(level: Level) {
    let f = fleet(level, "cache").await;
    let cache = Cache {
        key: "deps-$CI_COMMIT_REF_SLUG".into(),
        policy: CachePolicy::PullPush,
        paths: vec!["vendor/".into()],
        when: When::OnSuccess,
        ..Default::default()
    };
    let mut a = job_at(
        level,
        &[
            "test ! -e vendor/lib.txt",
            "mkdir -p vendor && echo cached-by-a > vendor/lib.txt",
            "echo not-cached > other.txt",
        ],
    );
    a.variables
        .push(Variable::new("FF_ENABLE_JOB_CLEANUP", "true"));
    a.cache = vec![cache.clone()];
    let (r, t) = dispatch(&f.dispatcher, &a).await;
    assert_eq!(r.outcome, Outcome::Success, "{t}");
    assert!(t.contains("Created cache deps-main"), "{t}");

    let mut b = job_at(level, &["test ! -e other.txt", "cat vendor/lib.txt"]);
    b.cache = vec![Cache {
        policy: CachePolicy::Pull,
        ..cache
    }];
    let (r, t) = dispatch(&f.dispatcher, &b).await;
    assert_eq!(r.outcome, Outcome::Success, "{t}");
    assert!(t.contains("Successfully extracted cache deps-main"), "{t}");
    assert!(t.contains("cached-by-a\n"), "{t}");
}
at_both_levels!(
    cache,
    infra_shell_cache_shared_between_jobs,
    infra_docker_cache_shared_between_jobs
);

async fn path_traversal(level: Level) {
    let f = fleet(level, "traversal").await;
    let mut j = job_at(
        level,
        &[
            "echo fine > ok.txt",
            "echo outside > ../outside.txt",
            "ln -s ../outside.txt escape-link",
            "ln -s /etc/passwd absolute-link",
        ],
    );
    j.artifacts = vec![Artifact {
        paths: vec![
            "ok.txt".into(),
            "../outside.txt".into(),
            "escape-link".into(),
            "absolute-link".into(),
        ],
        when: When::OnSuccess,
        ..Default::default()
    }];
    let (r, t) = dispatch(&f.dispatcher, &j).await;
    assert_eq!(r.outcome, Outcome::Success, "{t}");
    assert!(
        t.contains("../outside.txt: escapes the project directory through `..`; ignored"),
        "{t}"
    );
    // Links are archived as links, as GitLab Runner does; `../outside.txt` itself is not.
    assert_eq!(
        zip_names(&f.artifacts.archive_path(j.id, "archive")),
        ["absolute-link", "escape-link", "ok.txt"]
    );

    // A dependency archive that would write outside the project is refused whole.
    let evil = job_at(level, &["true"]);
    let path = f.artifacts.archive_path(evil.id, "archive");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    {
        use std::io::Write;
        let mut z = zip::ZipWriter::new(std::fs::File::create(&path).unwrap());
        let opts = zip::write::SimpleFileOptions::default();
        z.start_file("good.txt", opts).unwrap();
        z.write_all(b"good").unwrap();
        z.start_file("../../evil.txt", opts).unwrap();
        z.write_all(b"evil").unwrap();
        z.finish().unwrap();
    }
    let mut victim = job_at(level, &["echo script ran"]);
    victim.dependencies = vec![dependency_on(&evil)];
    let (r, t) = dispatch(&f.dispatcher, &victim).await;
    assert!(!r.outcome.is_success(), "{t}");
    assert!(t.contains("the archive is refused"), "{t}");
    assert!(!t.contains("script ran\n"), "{t}");
    for instance in f.instances() {
        let found = on_instance(
            &f,
            &instance,
            "ls /builds/0/evil.txt /builds/0/group/project/good.txt 2>/dev/null; true",
        )
        .await;
        assert!(found.trim().is_empty(), "extracted: {found}");
    }
}
at_both_levels!(
    path_traversal,
    infra_shell_path_traversal_artifacts_rejected,
    infra_docker_path_traversal_artifacts_rejected
);

#[tokio::test]
async fn infra_shell_instance_lost_fails_the_job_as_a_system_failure() {
    if !require(Infra::Docker) {
        return;
    }
    let f = fleet(Level::Shell, "lost").await;
    let j = job_at(Level::Shell, &["echo started", "sleep 300"]);
    let sink = BufferSink::new();
    let instance = f.instances()[0].clone();
    let killer = {
        let sink = sink.clone();
        let instance = instance.clone();
        async move {
            while !sink.text().contains("started\n") {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            let out = tokio::process::Command::new("docker")
                .args(["rm", "-f", &instance])
                .output()
                .await
                .unwrap();
            assert!(out.status.success());
        }
    };
    let mut out = sink.clone();
    let key = format!("job-{}", j.id);
    let cancel = JobCancel::new();
    let run = f.dispatcher.dispatch(&key, &j, &mut out, &cancel);
    let (r, ()) = tokio::time::timeout(Duration::from_secs(120), async {
        tokio::join!(run, killer)
    })
    .await
    .expect("the job ends when its instance dies");
    let t = sink.text();
    assert_eq!(
        r.outcome,
        Outcome::Failed {
            reason: FailureReason::RunnerSystemFailure,
            exit_code: None
        },
        "{t}"
    );
    assert_eq!(r.trace.bytesize, t.len() as u64);
    assert_eq!(
        f.scaler.snapshot().counts.acquired,
        0,
        "the slot is released"
    );
}
