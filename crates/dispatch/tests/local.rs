//! The dispatcher on this host: shell isolation, the local provider and `LocalConnectors`
//! (what `flotilla exec` runs with no configuration), and the dispatcher's own failure paths
//! with a fake provider. Real bash, real files; no Docker needed.

use crate::common;

use common::*;
use flotilla_dispatch::{Dispatcher, DispatcherConfig, LocalConnectors};
use flotilla_fleet::InstanceGroup;
use flotilla_isolate::ShellIsolation;
use flotilla_job::model::{Artifact, Cache, CachePolicy, When};
use flotilla_job::{
    BufferSink, FailureReason, JobCancel, LocalArtifactStore, LocalCacheStore, Outcome, RunOptions,
    Variable,
};
use flotilla_provider_local::LocalGroup;
use flotilla_scaler::{Policy, Scaler, ScalerBuilder, ScalerConfig, Schedule};
use flotilla_testkit::{FakeConfig, FakeInstanceGroup};
use std::sync::Arc;
use std::time::Duration;

struct Local {
    dir: tempfile::TempDir,
    dispatcher: Dispatcher,
}

async fn scaler(group: Arc<dyn InstanceGroup>, capacity: usize, acquire: Duration) -> Scaler {
    let config = ScalerConfig {
        capacity_per_instance: capacity,
        max_instances: 1,
        instance_acquire_timeout: acquire,
        update_interval: Duration::from_millis(100),
        update_interval_when_expecting: Duration::from_millis(50),
        ..ScalerConfig::default()
    };
    let policy = Policy {
        idle_count: capacity,
        idle_time: Duration::from_secs(3600),
        ..Policy::default()
    };
    ScalerBuilder::new(group, config)
        .schedule(Schedule::single(policy))
        .start()
        .await
        .unwrap()
}

fn dispatcher(scaler: Scaler, dir: &tempfile::TempDir, builds_dir: String) -> Dispatcher {
    dispatcher_with(scaler, dir, builds_dir, |_| {})
}

fn dispatcher_with(
    scaler: Scaler,
    dir: &tempfile::TempDir,
    builds_dir: String,
    change: impl FnOnce(&mut DispatcherConfig),
) -> Dispatcher {
    let mut config = DispatcherConfig {
        isolation: Arc::new(ShellIsolation::new()).into(),
        connectors: Arc::new(LocalConnectors),
        artifacts: Arc::new(LocalArtifactStore::new(dir.path().join("artifacts"))),
        cache: Arc::new(LocalCacheStore::new(dir.path().join("cache"))),
        run_options: RunOptions {
            stop_grace: Duration::from_secs(5),
            scratch_dir: Some(dir.path().to_path_buf()),
            ..RunOptions::default()
        },
        builds_dir,
        custom_build_dir: None,
        log_addresses: flotilla_dispatch::LogAddresses::default(),
    };
    change(&mut config);
    Dispatcher::new(scaler, config)
}

async fn local(capacity: usize) -> Local {
    let dir = tempfile::tempdir().unwrap();
    let s = scaler(
        Arc::new(LocalGroup::new()),
        capacity,
        Duration::from_secs(30),
    )
    .await;
    let builds = dir.path().join("builds").to_string_lossy().into_owned();
    let dispatcher = dispatcher(s, &dir, builds);
    Local { dir, dispatcher }
}

#[tokio::test]
async fn local_shell_jobs_run_end_to_end() {
    let l = local(2).await;
    let mut a = with_after_script(
        job(&[
            "echo \"slot=$CI_CONCURRENT_ID dir=$CI_PROJECT_DIR\"",
            "mkdir -p out vendor",
            "echo built > out/result.txt",
            "echo cached > vendor/lib.txt",
            "printf 'masked:%s\\n' \"$PASSWORD\"",
        ]),
        &["echo \"after:$CI_JOB_STATUS\""],
    );
    a.variables
        .push(Variable::new("PASSWORD", "local-pass-123").masked());
    a.variables
        .push(Variable::new("FF_ENABLE_JOB_CLEANUP", "true"));
    a.artifacts = vec![Artifact {
        paths: vec!["out/".into()],
        when: When::OnSuccess,
        ..Default::default()
    }];
    let cache = Cache {
        key: "k".into(),
        policy: CachePolicy::PullPush,
        paths: vec!["vendor/".into()],
        when: When::OnSuccess,
        ..Default::default()
    };
    a.cache = vec![cache.clone()];
    let (r, t) = dispatch(&l.dispatcher, &a).await;
    assert_eq!(r.outcome, Outcome::Success, "{t}");
    let builds = l.dir.path().join("builds");
    assert!(
        t.contains(&format!(
            "slot=0 dir={}/0/group/project\n",
            builds.display()
        )),
        "{t}"
    );
    assert!(t.contains("(shell)"), "{t}");
    assert!(
        t.contains("masked:[MASKED]\n") && !t.contains("local-pass-123"),
        "{t}"
    );
    assert!(t.contains("after:success\n"), "{t}");
    assert!(
        !builds.join("0/group/project").exists(),
        "FF_ENABLE_JOB_CLEANUP removed the project directory"
    );
    assert!(!builds.join("0/group/project.tmp").exists());

    let mut b = job(&["cat out/result.txt vendor/lib.txt"]);
    b.dependencies = vec![dependency_on(&a)];
    b.cache = vec![cache];
    let (r, t) = dispatch(&l.dispatcher, &b).await;
    assert_eq!(r.outcome, Outcome::Success, "{t}");
    assert!(t.contains("built\ncached\n"), "{t}");
    assert!(
        builds.join("0/group/project/out/result.txt").exists(),
        "the checkout is kept without FF_ENABLE_JOB_CLEANUP"
    );
    assert_eq!(l.dispatcher.scaler().snapshot().counts.acquired, 0);
}

#[tokio::test]
async fn local_concurrent_jobs_get_their_own_directories() {
    let l = local(2).await;
    let script = [
        "echo \"dir=$CI_PROJECT_DIR\"",
        "echo mine > \"$CI_PROJECT_DIR/owner-$CI_JOB_ID\"",
        "sleep 1",
        "ls \"$CI_PROJECT_DIR\"",
    ];
    let (a, b) = (job(&script), job(&script));
    let ((ra, ta), (rb, tb)) =
        tokio::join!(dispatch(&l.dispatcher, &a), dispatch(&l.dispatcher, &b));
    assert!(
        ra.outcome.is_success() && rb.outcome.is_success(),
        "{ta}\n{tb}"
    );
    let dir = |t: &str| {
        t.lines()
            .find_map(|l| l.strip_prefix("dir="))
            .unwrap()
            .to_string()
    };
    assert_ne!(dir(&ta), dir(&tb), "two slots, two directories");
    // Each saw only its own file: the directories were never shared.
    assert!(ta.contains(&format!("owner-{}\n", a.id)) && !ta.contains(&format!("owner-{}", b.id)));
    assert!(tb.contains(&format!("owner-{}\n", b.id)) && !tb.contains(&format!("owner-{}", a.id)));
}

#[tokio::test]
async fn a_relative_builds_dir_fails_the_job_before_it_runs() {
    let dir = tempfile::tempdir().unwrap();
    let s = scaler(Arc::new(LocalGroup::new()), 1, Duration::from_secs(30)).await;
    let d = dispatcher(s, &dir, "builds".into());
    let (r, t) = dispatch(&d, &job(&["echo never"])).await;
    assert_eq!(
        r.outcome,
        Outcome::Failed {
            reason: FailureReason::RunnerSystemFailure,
            exit_code: None
        }
    );
    assert!(
        t.contains("preparing the shell environment on instance local"),
        "{t}"
    );
    assert!(t.contains("is not an absolute path"), "{t}");
    assert!(!t.contains("never"), "{t}");
    assert_eq!(r.stages.len(), 1);
    assert_eq!(
        d.scaler().snapshot().counts.acquired,
        0,
        "the slot is released"
    );
}

/// Issue 32: `GIT_CLONE_PATH` as GitLab Runner's shell executor takes it. Without
/// `[runners.custom_build_dir] enabled` (off for shell) the job fails before it runs with
/// GitLab's configuration error and message; with it, the job runs in the directory it named
/// (expanded with `CI_BUILDS_DIR`), and a directory outside the builds directory is refused in
/// GitLab's words. Before, the variable was ignored and such jobs passed.
#[tokio::test]
async fn git_clone_path_needs_custom_build_dir_and_is_used_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let builds = dir.path().join("builds").to_string_lossy().into_owned();
    let mut j = job(&["echo \"pwd=$(pwd) project_dir=$CI_PROJECT_DIR\""]);
    j.variables.push(Variable::new(
        "GIT_CLONE_PATH",
        "$CI_BUILDS_DIR/go/src/example.com/app",
    ));

    let s = scaler(Arc::new(LocalGroup::new()), 1, Duration::from_secs(30)).await;
    let off = dispatcher_with(s, &dir, builds.clone(), |_| {});
    let (r, t) = dispatch(&off, &j).await;
    assert_eq!(
        r.outcome,
        Outcome::Failed {
            reason: FailureReason::RunnerConfigurationError,
            exit_code: None
        },
        "{t}"
    );
    assert!(
        t.contains(
            "Job failed: setting GIT_CLONE_PATH is not allowed, enable `custom_build_dir` feature"
        ),
        "{t}"
    );
    assert!(!t.contains("pwd="), "the script ran: {t}");
    assert_eq!(
        off.scaler().snapshot().counts.acquired,
        0,
        "the slot is released"
    );

    let s = scaler(Arc::new(LocalGroup::new()), 1, Duration::from_secs(30)).await;
    let on = dispatcher_with(s, &dir, builds.clone(), |c| c.custom_build_dir = Some(true));
    let (r, t) = dispatch(&on, &j).await;
    assert_eq!(r.outcome, Outcome::Success, "{t}");
    let wanted = format!("{builds}/go/src/example.com/app");
    assert!(
        t.contains(&format!("pwd={wanted} project_dir={wanted}\n")),
        "{t}"
    );

    let mut outside = job(&["echo never"]);
    outside
        .variables
        .push(Variable::new("GIT_CLONE_PATH", "/tmp/elsewhere"));
    let (r, t) = dispatch(&on, &outside).await;
    assert!(
        matches!(
            r.outcome,
            Outcome::Failed {
                reason: FailureReason::RunnerConfigurationError,
                ..
            }
        ),
        "{t}"
    );
    assert!(
        t.contains(&format!(
            "Job failed: the GIT_CLONE_PATH=\"/tmp/elsewhere\" has to be within {builds:?}"
        )),
        "{t}"
    );
}

/// Issue 32: `log_internal_ip` names the instance's internal address in the job's log, on
/// GitLab Runner's line; without it the log names no address (it was warned and ignored).
#[tokio::test]
async fn log_internal_ip_names_the_instance_address_in_the_job_log() {
    let dir = tempfile::tempdir().unwrap();
    let builds = dir.path().join("builds").to_string_lossy().into_owned();
    let s = scaler(Arc::new(LocalGroup::new()), 1, Duration::from_secs(30)).await;
    let d = dispatcher_with(s, &dir, builds.clone(), |c| {
        c.log_addresses.internal = true;
        c.log_addresses.external = true;
    });
    let (r, t) = dispatch(&d, &job(&["true"])).await;
    assert_eq!(r.outcome, Outcome::Success, "{t}");
    // The local instance has an internal address and no external one.
    assert!(t.contains("Dialing instance local, localhost...\n"), "{t}");
    assert!(t.contains("Instance local connected\n"), "{t}");
    let plain = local(1).await;
    let (_, t) = dispatch(&plain.dispatcher, &job(&["true"])).await;
    assert!(!t.contains("Dialing instance"), "{t}");
}

fn fake() -> Arc<FakeInstanceGroup> {
    Arc::new(FakeInstanceGroup::new(
        FakeConfig {
            max_size: 1,
            create_latency: (Duration::from_millis(10), Duration::from_millis(10)),
            ..FakeConfig::default()
        },
        7,
    ))
}

#[tokio::test]
async fn no_slot_in_time_fails_the_job_with_a_line_in_its_trace() {
    let dir = tempfile::tempdir().unwrap();
    let group = Arc::new(FakeInstanceGroup::new(
        FakeConfig {
            max_size: 0,
            ..FakeConfig::default()
        },
        1,
    ));
    let s = scaler(group, 1, Duration::from_millis(300)).await;
    let d = dispatcher(s, &dir, dir.path().to_string_lossy().into_owned());
    let (r, t) = dispatch(&d, &job(&["echo never"])).await;
    assert_eq!(
        r.outcome,
        Outcome::Failed {
            reason: FailureReason::RunnerSystemFailure,
            exit_code: None
        }
    );
    assert!(
        t.contains("no slot for the job: unable to acquire instance"),
        "{t}"
    );

    // Canceled while waiting: canceled, at once.
    let cancel = JobCancel::new();
    cancel.cancel();
    let (r, t) = dispatch_with(&d, &job(&["echo never"]), &cancel).await;
    assert_eq!(
        r.outcome,
        Outcome::Failed {
            reason: FailureReason::JobCanceled,
            exit_code: None
        }
    );
    assert!(t.contains("canceled while waiting for a slot"), "{t}");
}

#[tokio::test]
async fn a_lost_instance_aborts_the_job_as_a_system_failure() {
    let dir = tempfile::tempdir().unwrap();
    let group = fake();
    let id = group.add_running();
    let s = scaler(group.clone(), 1, Duration::from_secs(30)).await;
    let d = dispatcher(s, &dir, dir.path().join("b").to_string_lossy().into_owned());
    let j = with_after_script(
        job(&["echo started", "sleep 300", "echo never"]),
        &["echo after-script-ran"],
    );
    let sink = BufferSink::new();
    let remover = {
        let sink = sink.clone();
        let group = group.clone();
        async move {
            while !sink.text().contains("started\n") {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            // Deleted through the provider, which lists it as deleted: a vanishing one would
            // only count as lost after a minute (a listing may glitch).
            assert!(group.delete_from_outside(&id));
        }
    };
    let mut out = sink.clone();
    let key = format!("job-{}", j.id);
    let cancel = JobCancel::new();
    let started = tokio::time::Instant::now();
    let run = d.dispatch(&key, &j, &mut out, &cancel);
    let (r, ()) = tokio::time::timeout(Duration::from_secs(60), async {
        tokio::join!(run, remover)
    })
    .await
    .expect("the job ends when its instance is lost");
    let t = sink.text();
    assert_eq!(
        r.outcome,
        Outcome::Failed {
            reason: FailureReason::RunnerSystemFailure,
            exit_code: None
        },
        "{t}"
    );
    assert!(started.elapsed() < Duration::from_secs(30));
    assert!(
        t.contains("was lost while the job ran: instance is being deleted"),
        "{t}"
    );
    assert!(
        !t.contains("after-script-ran") && !t.contains("never\n"),
        "{t}"
    );
    assert!(
        !cancel.is_aborted(),
        "the job source's handle is left alone"
    );
    assert_eq!(r.trace.bytesize, t.len() as u64);
    assert_eq!(r.trace.crc32, crc32fast::hash(t.as_bytes()));
}
