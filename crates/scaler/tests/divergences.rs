//! The divergences from taskscaler listed in issue 12, each settled by a test that failed
//! before the fix. Sources: fleeting-taskscaler-nesting.md §2.3 (taskscaler !60), §2.5
//! (taskscaler !109), §1.3 (deletion_retry_interval).

use crate::common;

use common::*;
use flotilla_scaler::{
    Journal, JournalError, JournalEvent, Policy, Preexisting, ScaleThrottle, ScalerBuilder,
    ScalerError, Schedule, TokenBucket,
};
use flotilla_testkit::FakeConfig;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Reservations are not demand, but a reservation keeps its slot: idle removal does not
/// take the instance a reservation is bound to, so the job that comes for it starts at
/// once instead of waiting for a cold instance.
#[tokio::test(start_paused = true)]
async fn idle_removal_keeps_a_reserved_slot() {
    let g = fake(FakeConfig::default());
    let pol = Policy {
        preemptive_mode: Some(false),
        ..policy(0, 60)
    };
    let s = start(g.clone(), config(1, 5), pol).await;
    let a = s.acquire("warm", None).await.unwrap();
    let x = a.instance_id().to_string();
    s.release(a.key());
    s.reserve("polling").unwrap();
    pass(300).await;
    assert_eq!(
        g.instance(&x).unwrap().delete_requests,
        0,
        "the reserved instance stays"
    );
    let got = s
        .acquire("polling", Some(Duration::from_secs(1)))
        .await
        .expect("the job gets its reserved slot at once");
    assert_eq!(got.instance_id(), x);
    s.release(got.key());
}

/// Crossing `failure_threshold` stops new acquisitions on the instance (taskscaler !109)
/// but does not kill the jobs running there; the instance is removed once they end.
#[tokio::test(start_paused = true)]
async fn crossing_failure_threshold_keeps_running_jobs() {
    let g = fake(FakeConfig::default());
    let s = start(g.clone(), config(2, 5), policy(0, 600)).await;
    let a = s.acquire("running", None).await.unwrap();
    let x = a.instance_id().to_string();
    for _ in 0..3 {
        s.report_failure(&x);
    }
    pass(30).await;
    assert!(!a.lost_token().is_cancelled(), "the running job goes on");
    assert_eq!(g.instance(&x).unwrap().delete_requests, 0);
    let b = s.acquire("next", None).await.unwrap();
    assert_ne!(b.instance_id(), x, "no new job on an unhealthy instance");
    s.release(a.key());
    pass(30).await;
    assert!(
        g.instance(&x).is_none_or(|i| i.delete_requests > 0),
        "removed after its last job"
    );
    s.release(b.key());
}

/// An instance that appears after an `increase` that reported an error but had an effect
/// is recognised as the scaler's own, not taken for someone else's.
#[tokio::test(start_paused = true)]
async fn instances_from_a_failed_increase_are_ours() {
    let g = Glitchy::new(fake(FakeConfig::default()));
    g.increase_fails_after_creating
        .store(true, Ordering::SeqCst);
    let mut cfg = config(1, 5);
    cfg.preexisting = Preexisting::Ignore;
    let s = start_on(g.clone(), cfg, policy(1, 600)).await;
    pass(30).await;
    let snap = s.snapshot();
    let ours: Vec<_> = snap
        .ledger
        .instances()
        .filter(|i| !snap.ledger.foreign(i))
        .collect();
    assert!(!ours.is_empty(), "{:?}", g.fake.snapshot());
    assert_eq!(
        snap.ledger.instances().count(),
        ours.len(),
        "nothing created by us is foreign"
    );
}

/// A deletion the provider rejects is retried with a backoff, not on every tick.
#[tokio::test(start_paused = true)]
async fn rejected_deletions_back_off() {
    let g = fake(FakeConfig {
        decrease_failure_rate: 1.0,
        ..Default::default()
    });
    let s = start(g.clone(), config(1, 5), policy(0, 60)).await;
    let a = s.acquire("job", None).await.unwrap();
    s.release(a.key());
    pass(600).await;
    let calls = g.call_count("decrease");
    assert!(calls >= 3, "retried: {calls}");
    assert!(calls <= 15, "{calls} deletion requests in 10 minutes");
}

/// A journal that refuses acquisitions while `fail` is set.
struct FailingAcquisitions(AtomicBool);

impl Journal for FailingAcquisitions {
    fn record(&self, event: &JournalEvent) -> Result<(), JournalError> {
        if matches!(event, JournalEvent::Acquired { .. }) && self.0.load(Ordering::SeqCst) {
            return Err(JournalError("disk full".into()));
        }
        Ok(())
    }
}

/// `use_count` counts only jobs that got their slot: an assignment undone because the
/// journal could not record it does not use the instance up.
#[tokio::test(start_paused = true)]
async fn use_count_counts_only_jobs_that_got_their_slot() {
    let g = fake(FakeConfig::default());
    let journal = Arc::new(FailingAcquisitions(AtomicBool::new(true)));
    let mut cfg = config(1, 5);
    cfg.max_use_count = 1;
    let s = ScalerBuilder::new(g.clone(), cfg)
        .schedule(Schedule::single(policy(1, 600)))
        .journal(journal.clone())
        .clock(flotilla_scaler::Clock::anchored(monday_noon()))
        .start()
        .await
        .unwrap();
    wait_until("one idle slot", 60, || s.snapshot().counts.idle == 1).await;
    let x = s.snapshot().ledger.instances().next().unwrap().id.clone();
    let e = s.acquire("job", None).await.unwrap_err();
    assert!(matches!(e, ScalerError::Journal(_)), "{e}");
    assert_eq!(s.snapshot().ledger.instance(&x).unwrap().use_count, 0);
    journal.0.store(false, Ordering::SeqCst);
    let a = s.acquire("job", None).await.unwrap();
    assert_eq!(a.instance_id(), x, "the instance is not used up");
    s.release(a.key());
}

/// A `scale_throttle` limit of 0 never refills: the driver does not wake every millisecond
/// for a token that will not come.
#[tokio::test(start_paused = true)]
async fn a_throttle_limit_of_zero_does_not_spin() {
    let now = tokio::time::Instant::now();
    let mut b = TokenBucket::new(0.0, 1, now);
    assert_eq!(b.available(5, now), 1);
    b.take(1, now);
    assert!(
        b.next_token_at(now) > now + Duration::from_secs(3600),
        "no token is coming"
    );
    // And through the driver: one instance, then nothing more.
    let g = fake(FakeConfig::default());
    let mut cfg = config(1, 5);
    cfg.scale_throttle = ScaleThrottle {
        limit: 0.0,
        burst: 1,
    };
    let s = start(g.clone(), cfg, policy(3, 600)).await;
    pass(3600).await;
    assert_eq!(g.call_count("increase"), 1);
    drop(s);
}

/// Heartbeats that fail on other jobs' acquire attempts count towards the instance's
/// failure threshold, but crossing it does not end the job already running there.
#[tokio::test(start_paused = true)]
async fn failed_acquire_heartbeats_do_not_end_running_jobs() {
    let g = fake(FakeConfig::default());
    let mut cfg = config(4, 5);
    cfg.acquire_heartbeat = true;
    let s = start(g.clone(), cfg, policy(0, 600)).await;
    let a = s.acquire("running", None).await.unwrap();
    let x = a.instance_id().to_string();
    g.set_unhealthy(&x, true);
    // Other jobs try the instance (it has free slots and is preferred), fail its heartbeat,
    // and go elsewhere.
    let mut others = Vec::new();
    for i in 0..3 {
        let b = s.acquire(&format!("other{i}"), None).await.unwrap();
        assert_ne!(b.instance_id(), x);
        others.push(b);
    }
    let snap = s.snapshot();
    assert!(snap.ledger.unhealthy(snap.ledger.instance(&x).unwrap()));
    pass(30).await;
    assert!(!a.lost_token().is_cancelled(), "the running job goes on");
    assert_eq!(g.instance(&x).unwrap().delete_requests, 0);
    for b in &others {
        s.release(b.key());
    }
    s.release(a.key());
}
