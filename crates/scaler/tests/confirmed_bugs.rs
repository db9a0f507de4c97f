//! The eight bugs confirmed in issue 12, each pinned by the behaviour it broke. Every test
//! here failed on the scaler before its fix. They run the real scaler and driver against
//! the fake provider in virtual time.

use crate::common;

use common::*;
use flotilla_fleet::{InstanceGroup, Settings, State};
use flotilla_scaler::{
    Cause, Hooks, InstanceRecord, Persisted, Policy, Preexisting, ReadyUpInstance, RemovalReason,
    ScalerBuilder, Schedule,
};
use flotilla_testkit::{FakeConfig, FakeInstanceGroup};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

fn live(g: &FakeInstanceGroup) -> usize {
    g.snapshot().iter().filter(|(_, s)| s.is_live()).count()
}

/// Bug 1: an instance the provider reports as timed out is deleted, so the fleet does not
/// jam at `max_instances`; and creation backs off after timeouts, so a provider whose
/// instances all time out is not churned hundreds of times an hour.
#[tokio::test(start_paused = true)]
async fn timed_out_instances_are_deleted_and_creation_backs_off() {
    let g = fake(FakeConfig {
        creation_timeout_rate: 1.0,
        ..Default::default()
    });
    let s = start(g.clone(), config(1, 3), policy(0, 600)).await;
    let waiter = {
        let s = s.clone();
        tokio::spawn(async move { s.acquire("job", Some(Duration::from_secs(3600))).await })
    };
    pass(1800).await;
    // Every instance that timed out was asked to be deleted.
    let created = g.call_count("increase");
    assert!(
        created > 3,
        "the fleet keeps trying past three timeouts ({created} increases)"
    );
    assert!(
        created <= 20,
        "creation backs off after timeouts: {created} increases in 30 minutes"
    );
    for (id, state) in g.snapshot() {
        if state == State::Timeout {
            let inst = g.instance(&id).unwrap();
            let age = tokio::time::Instant::now() - inst.ready_at;
            assert!(
                inst.delete_requests > 0 || age < Duration::from_secs(120),
                "{id} timed out {age:?} ago and was never asked to be deleted"
            );
        }
    }
    assert!(!waiter.is_finished());
    waiter.abort();
}

/// Bug 2: `scale_factor` asks for idle capacity in proportion to *every* running job
/// ("current in-use capacity"), including jobs on instances that `max_use_count = 1` has
/// used up.
#[tokio::test(start_paused = true)]
async fn scale_factor_counts_jobs_on_used_up_instances() {
    let g = fake(FakeConfig::default());
    let mut cfg = config(1, 20);
    cfg.max_use_count = 1;
    let pol = Policy {
        idle_count: 0,
        scale_factor: 1.0,
        idle_time: Duration::from_secs(600),
        ..Policy::default()
    };
    let s = start(g.clone(), cfg, pol).await;
    let mut held = Vec::new();
    for i in 0..3 {
        held.push(s.acquire(&format!("j{i}"), None).await.unwrap());
    }
    pass(60).await;
    let d = s.last_decision().unwrap();
    assert_eq!(d.idle_target, 3, "{d}");
    assert_eq!(live(&g), 6, "three busy and three idle: {d}");
    for a in &held {
        s.release(a.key());
    }
}

/// Bug 3: an instance that is missing from one listing and comes back keeps its use count
/// and its running job; with `max_use_count = 1` it is never handed to a second job.
#[tokio::test(start_paused = true)]
async fn a_listing_glitch_keeps_use_count_and_the_slot_busy() {
    let g = Glitchy::new(fake(FakeConfig::default()));
    let mut cfg = config(1, 5);
    cfg.max_use_count = 1;
    let s = start_on(g.clone(), cfg, policy(0, 600)).await;
    let a = s.acquire("first", None).await.unwrap();
    let x = a.instance_id().to_string();
    // One empty listing, then the instance is back.
    g.empty_listings
        .store(1, std::sync::atomic::Ordering::SeqCst);
    pass(150).await;
    assert!(
        !a.lost_token().is_cancelled(),
        "one empty listing does not kill the job"
    );
    let snap = s.snapshot();
    let inst = snap.ledger.instance(&x).expect("still known");
    assert_eq!(inst.use_count, 1);
    assert_eq!(inst.cause, Cause::Requested);
    let b = s
        .acquire("second", Some(Duration::from_secs(120)))
        .await
        .unwrap();
    assert_ne!(
        b.instance_id(),
        x,
        "one job per instance with max_use_count = 1"
    );
    s.release(a.key());
    s.release(b.key());
}

/// Bug 4: under `Preexisting::Ignore` an instance of ours that is missing from a listing
/// stays ours: it is used (or deleted) later, never left alone as someone else's.
#[tokio::test(start_paused = true)]
async fn a_listing_glitch_does_not_make_our_instance_foreign() {
    let g = Glitchy::new(fake(FakeConfig::default()));
    let mut cfg = config(1, 5);
    cfg.preexisting = Preexisting::Ignore;
    let s = start_on(g.clone(), cfg, policy(0, 120)).await;
    let a = s.acquire("job", None).await.unwrap();
    let x = a.instance_id().to_string();
    s.release(a.key());
    g.hide(&[&x], 1);
    pass(20).await;
    let snap = s.snapshot();
    let inst = snap.ledger.instance(&x).expect("still known");
    assert!(!snap.ledger.foreign(inst), "still ours");
    // Idle past idle_time: ours, so deleted.
    pass(400).await;
    assert!(
        g.fake.instance(&x).is_none_or(|i| i.delete_requests > 0),
        "our idle instance was removed"
    );
}

/// Bug 5: `delete_instances_on_shutdown` deletes only the scaler's own instances, never the
/// ones it was told to leave alone.
#[tokio::test(start_paused = true)]
async fn shutdown_deletion_leaves_foreign_instances_alone() {
    let g = fake(FakeConfig::default());
    g.init(&Settings::default()).await.unwrap();
    let foreign = g.add_running();
    let mut cfg = config(1, 5);
    cfg.preexisting = Preexisting::Ignore;
    cfg.delete_instances_on_shutdown = true;
    let s = start(g.clone(), cfg, policy(0, 600)).await;
    let a = s.acquire("job", None).await.unwrap();
    assert_ne!(a.instance_id(), foreign);
    s.release(a.key());
    let report = s.shutdown(Duration::from_secs(10)).await;
    assert_eq!(g.instance(&foreign).unwrap().delete_requests, 0);
    assert_eq!(g.state_of(&foreign), Some(State::Running));
    assert_eq!(report.instances_remaining, 0, "ours are gone");
    assert_eq!(g.ids(), vec![foreign]);
}

/// Ready-up that fails for a fixed set of instances and records what it was told.
#[derive(Default)]
struct FailFor {
    ids: HashSet<String>,
    seen: Mutex<Vec<(String, Cause, Vec<String>)>>,
}

#[async_trait::async_trait]
impl Hooks for FailFor {
    async fn ready_up_instance(
        &self,
        _group: &dyn InstanceGroup,
        instance: &ReadyUpInstance,
    ) -> Result<(), String> {
        self.seen.lock().unwrap().push((
            instance.id.clone(),
            instance.cause,
            instance.acquisitions.clone(),
        ));
        if self.ids.contains(&instance.id) {
            Err("instance_ready_command exited with 1".into())
        } else {
            Ok(())
        }
    }
}

fn restored(id: &str) -> InstanceRecord {
    InstanceRecord {
        id: id.to_string(),
        state: State::Running,
        cause: Cause::Requested,
        use_count: 0,
        removal: None,
    }
}

/// Bug 7: ready-up failures of instances the scaler did not just create (nine restored
/// instances failing at once) do not hold creation back: a job still gets a new instance
/// within its creation latency.
#[tokio::test(start_paused = true)]
async fn ready_up_failures_of_restored_instances_do_not_starve_creation() {
    let g = fake(FakeConfig::default());
    g.init(&Settings::default()).await.unwrap();
    let ids: Vec<String> = (0..9).map(|_| g.add_running()).collect();
    let hooks = Arc::new(FailFor {
        ids: ids.iter().cloned().collect(),
        ..Default::default()
    });
    let s = ScalerBuilder::new(g.clone(), config(1, 20))
        .schedule(Schedule::single(policy(0, 600)))
        .hooks(hooks.clone())
        .restore(Persisted {
            instances: ids.iter().map(|i| restored(i)).collect(),
            ..Default::default()
        })
        .clock(flotilla_scaler::Clock::anchored(monday_noon()))
        .start()
        .await
        .unwrap();
    pass(5).await;
    let a = s
        .acquire("job", Some(Duration::from_secs(60)))
        .await
        .expect("a new instance within a minute");
    assert!(!ids.contains(&a.instance_id().to_string()));
    s.release(a.key());
}

/// Bug 7, second half: simultaneous ready-up failures of the scaler's own new instances
/// back creation off once, not once per instance.
#[tokio::test(start_paused = true)]
async fn simultaneous_ready_up_failures_back_off_once() {
    struct FailFirst(Mutex<usize>);
    #[async_trait::async_trait]
    impl Hooks for FailFirst {
        async fn ready_up_instance(
            &self,
            _g: &dyn InstanceGroup,
            _i: &ReadyUpInstance,
        ) -> Result<(), String> {
            let mut n = self.0.lock().unwrap();
            *n += 1;
            if *n <= 8 {
                Err("broken image".into())
            } else {
                Ok(())
            }
        }
    }
    let g = fake(FakeConfig::default());
    let s = ScalerBuilder::new(g.clone(), config(1, 20))
        .schedule(Schedule::single(policy(8, 600)))
        .hooks(Arc::new(FailFirst(Mutex::new(0))))
        .clock(flotilla_scaler::Clock::anchored(monday_noon()))
        .start()
        .await
        .unwrap();
    // Eight instances fail ready-up together (after 5 s); one backoff step (1 s) later the
    // replacements are requested, and ready 5 s after that.
    wait_until("eight idle slots", 40, || s.snapshot().counts.idle == 8).await;
}

/// Bug 8: an instance restored from the store that had a job at the crash is removed for
/// safety (GitLab's default), and its ready-up hook is not asked to ready it.
#[tokio::test(start_paused = true)]
async fn a_restored_instance_that_had_a_job_at_the_crash_is_removed() {
    let g = fake(FakeConfig::default());
    g.init(&Settings::default()).await.unwrap();
    let x = g.add_running();
    let hooks = Arc::new(FailFor::default());
    let s = ScalerBuilder::new(g.clone(), config(1, 5))
        .schedule(Schedule::single(policy(0, 3600)))
        .hooks(hooks.clone())
        .restore(Persisted {
            instances: vec![restored(&x)],
            acquisitions: vec![("old-job".into(), x.clone(), 0)],
            ..Default::default()
        })
        .clock(flotilla_scaler::Clock::anchored(monday_noon()))
        .start()
        .await
        .unwrap();
    pass(10).await;
    let a = s.acquire("new-job", None).await.unwrap();
    assert_ne!(a.instance_id(), x, "not reused");
    assert!(g.instance(&x).is_none_or(|i| i.delete_requests > 0));
    let snap = s.snapshot();
    if let Some(i) = snap.ledger.instance(&x) {
        assert_eq!(
            i.removal.as_ref().map(|r| r.reason),
            Some(RemovalReason::AcquisitionsAtRestart)
        );
    }
    s.release(a.key());
}

/// Bug 8, with `keep_instance_with_acquisitions`: the instance is kept and its ready-up hook
/// hears of the acquisitions it had (as taskscaler's `UpFuncInstance.Acquisitions`).
#[tokio::test(start_paused = true)]
async fn keep_instance_with_acquisitions_keeps_it_and_tells_the_hook() {
    let g = fake(FakeConfig::default());
    g.init(&Settings::default()).await.unwrap();
    let x = g.add_running();
    let hooks = Arc::new(FailFor::default());
    let mut cfg = config(1, 5);
    cfg.keep_instance_with_acquisitions = true;
    let s = ScalerBuilder::new(g.clone(), cfg)
        .schedule(Schedule::single(policy(0, 3600)))
        .hooks(hooks.clone())
        .restore(Persisted {
            instances: vec![restored(&x)],
            acquisitions: vec![("old-job".into(), x.clone(), 0)],
            ..Default::default()
        })
        .clock(flotilla_scaler::Clock::anchored(monday_noon()))
        .start()
        .await
        .unwrap();
    pass(10).await;
    let a = s.acquire("new-job", None).await.unwrap();
    assert_eq!(a.instance_id(), x);
    assert_eq!(g.instance(&x).unwrap().delete_requests, 0);
    let seen = hooks.seen.lock().unwrap().clone();
    assert_eq!(
        seen,
        vec![(x.clone(), Cause::Restored, vec!["old-job".to_string()])]
    );
    s.release(a.key());
}

/// Found by the crash test after the fix of bug 3: an instance whose removal was decided
/// before a crash, and which the provider already deleted (it is in no listing), must not
/// outlive a shutdown with deletion in the ledger (with the jobs it had at the crash), just
/// because a missing instance is kept for a minute in case the listing glitched. A provider
/// that accepts the deletion of an instance it does not list has confirmed it gone.
#[tokio::test(start_paused = true)]
async fn shutdown_forgets_restored_instances_the_provider_already_deleted() {
    let g = fake(FakeConfig::default());
    g.init(&Settings::default()).await.unwrap();
    let kept = g.add_running();
    let mut cfg = config(2, 5);
    cfg.delete_instances_on_shutdown = true;
    let gone = "i-deleted-before-the-crash".to_string();
    let s = ScalerBuilder::new(g.clone(), cfg)
        .schedule(Schedule::single(policy(0, 3600)))
        .restore(Persisted {
            instances: vec![
                InstanceRecord {
                    removal: Some(RemovalReason::AcquisitionsAtRestart),
                    use_count: 2,
                    ..restored(&gone)
                },
                restored(&kept),
            ],
            acquisitions: vec![
                ("old-0".into(), gone.clone(), 0),
                ("old-1".into(), gone.clone(), 1),
            ],
            ..Default::default()
        })
        .clock(flotilla_scaler::Clock::anchored(monday_noon()))
        .start()
        .await
        .unwrap();
    pass(5).await;
    let report = s.shutdown(Duration::from_secs(10)).await;
    assert_eq!(report.instances_remaining, 0);
    let snap = s.snapshot();
    assert!(
        snap.ledger.instance(&gone).is_none(),
        "the ledger still holds {gone}"
    );
    assert!(snap.ledger.instance(&kept).is_none());
    assert!(g.ids().is_empty());
}

/// Issue 27: a ready-up that never ends (a hung `instance_ready_command`) is given up after
/// `ready_up_timeout`; the instance is removed and the waiting job gets another one.
#[tokio::test(start_paused = true)]
async fn a_hung_ready_up_is_given_up_and_the_instance_replaced() {
    struct HangFirst(Mutex<Option<String>>);
    #[async_trait::async_trait]
    impl Hooks for HangFirst {
        async fn ready_up_instance(
            &self,
            _g: &dyn InstanceGroup,
            i: &ReadyUpInstance,
        ) -> Result<(), String> {
            let first = {
                let mut hung = self.0.lock().unwrap();
                if hung.is_none() {
                    *hung = Some(i.id.clone());
                    true
                } else {
                    false
                }
            };
            if first {
                std::future::pending::<()>().await;
            }
            Ok(())
        }
    }
    let g = fake(FakeConfig::default());
    let hooks = Arc::new(HangFirst(Mutex::new(None)));
    let s = ScalerBuilder::new(
        g.clone(),
        flotilla_scaler::ScalerConfig {
            ready_up_timeout: Duration::from_secs(120),
            ..config(1, 3)
        },
    )
    .schedule(Schedule::single(policy(0, 3600)))
    .hooks(hooks.clone())
    .clock(flotilla_scaler::Clock::anchored(monday_noon()))
    .start()
    .await
    .unwrap();
    let a = s
        .acquire("job", Some(Duration::from_secs(600)))
        .await
        .expect("a slot on another instance once the hung ready-up is given up");
    let hung = hooks.0.lock().unwrap().clone().expect("the first instance");
    assert_ne!(a.instance_id(), hung);
    let removed = s
        .snapshot()
        .ledger
        .instance(&hung)
        .and_then(|i| i.removal.as_ref().map(|r| r.reason));
    assert!(
        removed == Some(RemovalReason::ReadyUpFailed)
            || g.instance(&hung).is_none_or(|i| i.delete_requests > 0),
        "the hung instance is removed: {removed:?}"
    );
    s.release(a.key());
}
