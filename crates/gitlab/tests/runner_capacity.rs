//! A request loop that found no free slot asks again as soon as one of its jobs gives its
//! slot back, not only after `check_interval`: with one slot, a queue of jobs and a
//! `check_interval` of ten minutes, the jobs still run one after another.

use crate::runner_support;

use flotilla_testkit::fake_gitlab::{FakeJobState, JobBuilder};
use runner_support::*;
use std::time::Duration;

#[tokio::test]
async fn a_freed_slot_is_used_without_waiting_for_check_interval() {
    let fake = fake().start().await.unwrap();
    let exec = LocalExecutor::new(local_scaler(1, true).await, None);
    let mut config = source_config();
    config.check_interval = Duration::from_secs(600);
    let (source, run) = spawn_source(client(&fake), exec.clone(), config);
    let ids: Vec<i64> = (0..3)
        .map(|i| {
            fake.enqueue(
                RUNNER_TOKEN,
                JobBuilder::new(format!("queued-{i}")).script(["echo ran"]),
            )
        })
        .collect();
    assert!(
        fake.wait_finished(&ids, Duration::from_secs(60)).await,
        "only {:?} ran",
        ids.iter()
            .map(|id| (id, fake.job(*id).unwrap().state))
            .collect::<Vec<_>>()
    );
    for id in &ids {
        assert_eq!(fake.job(*id).unwrap().state, FakeJobState::Success);
        assert_eq!(exec.runs(*id), 1);
    }
    let report = source.report();
    assert!(
        report.no_capacity >= 1,
        "the loop did find the slot taken: {report:?}"
    );
    source.stop_handle().graceful();
    run.await.unwrap();
}
