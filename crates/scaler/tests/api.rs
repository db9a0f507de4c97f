//! The job-source API beyond acquire and release by key.

use crate::common;

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

/// A `Reservation` ends its key whatever state it reached: dropped while reserved, the
/// reservation is given back; dropped after its slot was acquired, the slot is free; dropped
/// after an early `release`, nothing happens twice.
#[tokio::test(start_paused = true)]
async fn a_dropped_reservation_ends_its_key_in_any_state() {
    let g = fake(FakeConfig::default());
    let s = start(g.clone(), config(2, 1), policy(0, 600)).await;
    let r = s.reserve_owned("r").unwrap();
    assert_eq!(r.key(), "r");
    assert!(s.snapshot().ledger.key("r").is_some());
    drop(r);
    assert!(s.snapshot().ledger.key("r").is_none(), "reservation kept");

    let r = s.reserve_owned("held").unwrap();
    let a = r.acquire(None).await.unwrap();
    assert_eq!(s.counts().acquired, 1);
    drop(a);
    assert_eq!(
        s.counts().acquired,
        1,
        "the reservation, not the acquisition, holds it"
    );
    drop(r);
    assert_eq!(s.counts().acquired, 0);
    assert!(s.snapshot().ledger.key("held").is_none());

    let r = s.reserve_owned("early").unwrap();
    let _a = r.acquire(None).await.unwrap();
    r.release();
    assert_eq!(s.counts().acquired, 0);
    let other = s.acquire("other", None).await.unwrap().into_guard();
    drop(r);
    assert_eq!(s.counts().acquired, 1, "a second end touched nothing else");
    drop(other);
    s.check_invariants().unwrap();
}
