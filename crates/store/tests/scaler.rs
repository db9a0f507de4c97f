//! The real scaler journaling into the store, and a restarted scaler adopting what the store
//! kept.

use flotilla_fleet::State;
use flotilla_scaler::{Cause, Policy, ScalerBuilder, ScalerConfig, Schedule};
use flotilla_store::{Identity, Store, StoreOptions};
use flotilla_testkit::{FakeConfig, FakeInstanceGroup};
use std::sync::Arc;
use std::time::Duration;

fn identity() -> Identity {
    Identity::new("https://gitlab.example.com", "17", "fake/group")
}

fn builder(group: Arc<FakeInstanceGroup>) -> ScalerBuilder {
    ScalerBuilder::new(
        group,
        ScalerConfig {
            capacity_per_instance: 2,
            max_instances: 5,
            // The instance ran a job at the "crash" below and is adopted, not removed for
            // safety (GitLab's default without this key).
            keep_instance_with_acquisitions: true,
            ..ScalerConfig::default()
        },
    )
    .schedule(Schedule::single(Policy {
        idle_count: 1,
        idle_time: Duration::from_secs(3600),
        ..Policy::default()
    }))
}

async fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    for _ in 0..300 {
        if cond() {
            return;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    panic!("timed out waiting for {what}");
}

#[tokio::test(start_paused = true)]
async fn a_restarted_scaler_adopts_the_fleet_the_store_kept() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let fake = Arc::new(FakeInstanceGroup::new(FakeConfig::default(), 1));

    let (instance, slot) = {
        let store = Store::open(&path, StoreOptions::default()).unwrap();
        let scope = store.scope(&identity()).unwrap();
        let s = builder(fake.clone())
            .journal(store.journal(scope))
            .start()
            .await
            .unwrap();
        wait_until("an idle slot", || s.snapshot().counts.idle >= 1).await;
        let a = s.acquire("job-1", None).await.unwrap();

        // What the store holds matches the scaler's ledger.
        let fleet = store.load_fleet(scope).unwrap();
        let snap = s.snapshot();
        let stored: Vec<&str> = fleet.instances.iter().map(|i| i.id.as_str()).collect();
        let mut live: Vec<&str> = snap.ledger.instances().map(|i| i.id.as_str()).collect();
        live.sort_unstable();
        assert_eq!(stored, live);
        let rec = fleet
            .instances
            .iter()
            .find(|i| i.id == a.instance_id())
            .unwrap();
        assert_eq!(rec.state, State::Running);
        assert_eq!(rec.cause, Cause::Requested);
        assert_eq!(rec.use_count, 1);
        assert_eq!(
            fleet.acquisitions,
            vec![("job-1".to_string(), a.instance_id().to_string(), a.slot())]
        );
        assert_eq!(fleet.requested_in_flight, 0);
        // The manager stops without the job releasing its slot, as at a crash.
        let report = s.shutdown(Duration::ZERO).await;
        assert_eq!(report.jobs_still_running, 1);
        (a.instance_id().to_string(), a.slot())
    };
    let created = fake.call_count("increase");

    // A new process: reopen the file, restore, and go on.
    let store = Store::open(&path, StoreOptions::default()).unwrap();
    let scope = store.scope(&identity()).unwrap();
    let persisted = store.load_fleet(scope).unwrap();
    assert_eq!(
        persisted.acquisitions,
        vec![("job-1".to_string(), instance.clone(), slot)]
    );
    let s = builder(fake.clone())
        .restore(persisted)
        .journal(store.journal(scope))
        .start()
        .await
        .unwrap();
    // The old job's slot was released, durably.
    assert!(store.load_fleet(scope).unwrap().acquisitions.is_empty());
    tokio::time::sleep(Duration::from_secs(30)).await;
    let snap = s.snapshot();
    let adopted = snap.ledger.instance(&instance).unwrap();
    assert_eq!(adopted.cause, Cause::Restored);
    assert_eq!(adopted.use_count, 1, "use count survives the restart");
    assert!(snap.ledger.usable(adopted));
    // Adopted, not replaced: nothing was deleted, nothing new was needed for idle_count 1.
    assert_eq!(fake.instance(&instance).unwrap().delete_requests, 0);
    assert_eq!(fake.call_count("increase"), created);

    let b = s.acquire("job-2", None).await.unwrap();
    assert_eq!(b.instance_id(), instance);
    let fleet = store.load_fleet(scope).unwrap();
    assert_eq!(fleet.instances[0].use_count, 2);
    // The store keeps how the instance first came to be: flotilla created it.
    assert_eq!(fleet.instances[0].cause, Cause::Requested);
    assert_eq!(fleet.acquisitions.len(), 1);
    s.release(b.key());
    assert!(store.load_fleet(scope).unwrap().acquisitions.is_empty());
}
