//! With 10 % of requests failing (500, 502, 429 with Retry-After, connections dropped before
//! or after the request was processed, except job requests dropped after Rails handed a job
//! out, which no runner can recover): no job is lost, none runs twice, and no trace byte is
//! lost or duplicated; with two-phase acceptance off (GitLab as installed) and on.

use crate::runner_support;

use flotilla_testkit::fake_gitlab::{FakeJobState, FaultConfig, JobBuilder};
use runner_support::*;
use std::time::Duration;

/// GitLab as installed (two-phase acceptance off).
#[tokio::test]
async fn ten_percent_failures_lose_and_duplicate_nothing() {
    chaos(false).await;
}

/// With two-phase acceptance on (and the source told so): keep-alives and accepts meet
/// faults too.
#[tokio::test]
async fn ten_percent_failures_lose_and_duplicate_nothing_with_two_phase_acceptance() {
    chaos(true).await;
}

async fn chaos(two_phase: bool) {
    let fake = fake()
        .two_phase(two_phase)
        .faults(FaultConfig::chaos(0.10, 20261122))
        .start()
        .await
        .unwrap();
    let exec = LocalExecutor::new(local_scaler(3, true).await, None);
    let mut config = if two_phase {
        two_phase_source_config()
    } else {
        source_config()
    };
    config.request_concurrency = 2;
    let (source, run) = spawn_source(client(&fake), exec.clone(), config);
    let jobs: Vec<(i64, i32)> = (0..30)
        .map(|i| {
            let code = if i % 4 == 3 { 2 } else { 0 };
            let id = fake.enqueue(
                RUNNER_TOKEN,
                JobBuilder::new(format!("chaos-{i}"))
                    .masked_variable("API_KEY", format!("key-{i:04}-abcdefgh"))
                    .script([
                        format!(
                            "for n in 1 2 3 4 5; do echo job {i} line $n $API_KEY; sleep 0.1; done"
                        ),
                        format!("exit {code}"),
                    ]),
            );
            (id, code)
        })
        .collect();
    let ids: Vec<i64> = jobs.iter().map(|(id, _)| *id).collect();
    assert!(
        fake.wait_finished(&ids, Duration::from_secs(300)).await,
        "unfinished: {:?}",
        fake.jobs()
            .iter()
            .filter(|j| !j.state.is_finished())
            .map(|j| (j.id, j.history.clone()))
            .collect::<Vec<_>>()
    );
    let reqs = fake.requests();
    let faults: Vec<_> = reqs.iter().filter_map(|r| r.fault).collect();
    assert!(
        faults.len() * 20 >= reqs.len() && faults.len() >= 10,
        "only {} faults in {} requests",
        faults.len(),
        reqs.len()
    );
    for (id, code) in &jobs {
        let j = fake.job(*id).unwrap();
        assert_eq!(j.times_finished(), 1, "job {id}: {:?}", j.history);
        assert_eq!(exec.runs(*id), 1, "job {id} ran {} times", exec.runs(*id));
        assert_eq!(j.accepts, 1, "job {id}");
        let expected = if *code == 0 {
            FakeJobState::Success
        } else {
            FakeJobState::Failed
        };
        assert_eq!(j.state, expected, "job {id}");
        assert_eq!(
            j.trace,
            exec.log(*id),
            "job {id}: GitLab's trace differs from the emitted log"
        );
        assert!(!j.trace_text().contains("abcdefgh"));
        let f = j.final_update.unwrap();
        assert_eq!(
            f.checksum.unwrap(),
            format!("crc32:{:08x}", crc32fast::hash(&j.trace))
        );
        if *code != 0 {
            assert_eq!(f.exit_code, Some(2));
        }
    }
    fake.set_faults(None);
    source.stop_handle().graceful();
    let report = run.await.unwrap();
    assert_eq!(report.jobs_run, 30);
    assert_eq!(report.final_updates_given_up, 0);
}
