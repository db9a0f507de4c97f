//! Job records: every job running at a crash is reported exactly once.

use flotilla_store::{Identity, JobOutcome, JobStart, JobState, Store, StoreError, StoreOptions};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

fn identity() -> Identity {
    Identity::new("https://gitlab.example.com", "17", "docker:test")
}

fn start(job_id: &str, slot: usize, at: SystemTime) -> JobStart {
    JobStart {
        source: "gitlab".into(),
        job_id: job_id.into(),
        key: format!("key-{job_id}"),
        instance: "i-1".into(),
        slot,
        started_at: at,
    }
}

fn system_failure() -> JobOutcome {
    JobOutcome::Failed {
        failure_reason: "runner_system_failure".into(),
        exit_code: None,
    }
}

#[test]
fn jobs_running_at_a_crash_are_reported_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let t0 = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    {
        // Before the crash: four jobs in four stages of their lives.
        let store = Store::open(&path, StoreOptions::default()).unwrap();
        let scope = store.scope(&identity()).unwrap();
        for (n, id) in ["101", "102", "103", "104"].iter().enumerate() {
            store
                .job_started(scope, &start(id, n, t0 + Duration::from_secs(n as u64)))
                .unwrap();
        }
        assert!(
            store
                .job_finished(
                    scope,
                    "gitlab",
                    "102",
                    &JobOutcome::Success,
                    t0 + Duration::from_secs(60)
                )
                .unwrap()
        );
        assert!(
            store
                .job_finished(
                    scope,
                    "gitlab",
                    "103",
                    &JobOutcome::Failed {
                        failure_reason: "script_failure".into(),
                        exit_code: Some(2)
                    },
                    t0 + Duration::from_secs(61)
                )
                .unwrap()
        );
        assert!(
            store
                .job_reported(scope, "gitlab", "103", t0 + Duration::from_secs(62))
                .unwrap()
        );
        // Process killed here: 101 and 104 running, 102 finished but not reported.
    }

    let store = Store::open(&path, StoreOptions::default()).unwrap();
    let scope = store.scope(&identity()).unwrap();
    let unfinished = store.unfinished_jobs(scope).unwrap();
    let ids: Vec<(&str, JobState)> = unfinished
        .iter()
        .map(|j| (j.job_id.as_str(), j.state))
        .collect();
    assert_eq!(
        ids,
        vec![
            ("101", JobState::Running),
            ("102", JobState::Finished),
            ("104", JobState::Running)
        ]
    );
    assert_eq!(unfinished[0].slot, 0);
    assert_eq!(unfinished[0].key, "key-101");
    assert_eq!(unfinished[0].started_at, t0);
    assert_eq!(unfinished[1].outcome, Some(JobOutcome::Success));
    assert_eq!(unfinished[1].ended_at, Some(t0 + Duration::from_secs(60)));

    // The job source ends each one: running ones failed with a system failure.
    let t1 = t0 + Duration::from_secs(3600);
    let mut reports = 0;
    for job in &unfinished {
        if job.state == JobState::Running {
            assert!(
                store
                    .job_finished(scope, &job.source, &job.job_id, &system_failure(), t1)
                    .unwrap()
            );
        }
        if store
            .job_reported(scope, &job.source, &job.job_id, t1)
            .unwrap()
        {
            reports += 1;
        }
        // A retry of the same report is a no-op.
        assert!(
            !store
                .job_reported(scope, &job.source, &job.job_id, t1)
                .unwrap()
        );
    }
    assert_eq!(reports, 3);
    assert!(store.unfinished_jobs(scope).unwrap().is_empty());
    drop(store);

    // After another restart nothing is reported again, and the outcomes are as recorded.
    let store = Store::open(&path, StoreOptions::default()).unwrap();
    let scope = store.scope(&identity()).unwrap();
    assert!(store.unfinished_jobs(scope).unwrap().is_empty());
    let j101 = store.job(scope, "gitlab", "101").unwrap().unwrap();
    assert_eq!(j101.state, JobState::Reported);
    assert_eq!(j101.outcome, Some(system_failure()));
    let j103 = store.job(scope, "gitlab", "103").unwrap().unwrap();
    assert_eq!(
        j103.outcome,
        Some(JobOutcome::Failed {
            failure_reason: "script_failure".into(),
            exit_code: Some(2)
        })
    );
    // The first outcome stands.
    assert!(
        !store
            .job_finished(scope, "gitlab", "102", &system_failure(), t1)
            .unwrap()
    );
    assert_eq!(
        store.job(scope, "gitlab", "102").unwrap().unwrap().outcome,
        Some(JobOutcome::Success)
    );
}

#[test]
fn job_state_rules() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("state.db"), StoreOptions::default()).unwrap();
    let scope = store.scope(&identity()).unwrap();
    let t = UNIX_EPOCH + Duration::from_secs(1_800_000_000);

    let err = store
        .job_finished(scope, "gitlab", "9", &JobOutcome::Success, t)
        .unwrap_err();
    assert!(matches!(err, StoreError::UnknownJob { .. }), "{err}");
    let err = store.job_reported(scope, "gitlab", "9", t).unwrap_err();
    assert!(matches!(err, StoreError::UnknownJob { .. }), "{err}");

    store.job_started(scope, &start("1", 0, t)).unwrap();
    // Reporting a job still running is a mistake.
    let err = store.job_reported(scope, "gitlab", "1", t).unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::JobConflict {
                state: "running",
                ..
            }
        ),
        "{err}"
    );
    // Resuming a running job moves it to its new slot.
    store
        .job_started(
            scope,
            &JobStart {
                instance: "i-2".into(),
                ..start("1", 3, t)
            },
        )
        .unwrap();
    let job = store.job(scope, "gitlab", "1").unwrap().unwrap();
    assert_eq!((job.instance.as_str(), job.slot), ("i-2", 3));

    store
        .job_finished(scope, "gitlab", "1", &JobOutcome::Success, t)
        .unwrap();
    let err = store.job_started(scope, &start("1", 0, t)).unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::JobConflict {
                state: "finished",
                ..
            }
        ),
        "{err}"
    );
    store.job_reported(scope, "gitlab", "1", t).unwrap();
    let err = store.job_started(scope, &start("1", 0, t)).unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::JobConflict {
                state: "reported",
                ..
            }
        ),
        "{err}"
    );

    // The same job id from another source is another job.
    store
        .job_started(
            scope,
            &JobStart {
                source: "exec".into(),
                ..start("1", 0, t)
            },
        )
        .unwrap();
    assert_eq!(store.unfinished_jobs(scope).unwrap().len(), 1);

    // Pruning removes reported records older than the cut-off only.
    assert_eq!(
        store
            .prune_reported_jobs(scope, t - Duration::from_secs(1))
            .unwrap(),
        0
    );
    assert_eq!(
        store
            .prune_reported_jobs(scope, t + Duration::from_secs(1))
            .unwrap(),
        1
    );
    assert!(store.job(scope, "gitlab", "1").unwrap().is_none());
    assert!(store.job(scope, "exec", "1").unwrap().is_some());
}
