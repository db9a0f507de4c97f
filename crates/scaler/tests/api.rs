//! The job-source API beyond acquire and release by key.

mod common;

use common::*;
use flotilla_testkit::FakeConfig;

/// An `AcquisitionGuard` gives its slot back when dropped, like tokio's
/// `OwnedSemaphorePermit`; releasing by key keeps working beside it.
#[tokio::test(start_paused = true)]
async fn a_dropped_acquisition_guard_releases_its_slot() {
    let g = fake(FakeConfig::default());
    let s = start(g.clone(), config(2, 1), policy(0, 600)).await;
    let a = s.acquire("a", None).await.unwrap().into_guard();
    let b = s.acquire("b", None).await.unwrap();
    assert_eq!(s.counts().acquired, 2);
    assert_eq!(a.instance_id(), b.instance_id());
    drop(a);
    assert_eq!(s.counts().acquired, 1);
    assert!(s.snapshot().ledger.key("a").is_none());
    // The freed slot goes to the next job at once.
    let c = s
        .acquire("c", Some(std::time::Duration::from_secs(1)))
        .await
        .unwrap();
    assert_eq!(c.instance_id(), b.instance_id());
    s.release(b.key());
    s.release(c.key());
    assert_eq!(s.counts().acquired, 0);
}
