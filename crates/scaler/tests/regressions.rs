//! Regression tests for taskscaler's known bugs (reference: fleeting-taskscaler-nesting.md
//! §2.3–2.7 and §8), each named after the behaviour it pins. They run the real scaler and
//! driver against the fake provider in virtual time.

use crate::common;

use common::*;
use flotilla_fleet::{InstanceGroup, State};
use flotilla_scaler::{
    Clock, Hooks, LostCause, Policy, ScalerBuilder, ScalerError, Schedule, ScheduledPolicy,
};
use flotilla_testkit::FakeConfig;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

fn live(g: &flotilla_testkit::FakeInstanceGroup) -> usize {
    g.snapshot().iter().filter(|(_, s)| s.is_live()).count()
}

/// taskscaler !49: after instances vanish under running jobs, the jobs' acquisitions must not
/// be counted as demand, or the fleet runs away.
#[tokio::test(start_paused = true)]
async fn no_demand_runaway_after_instances_removed() {
    let g = fake(FakeConfig::default());
    let s = start(g.clone(), config(1, 20), policy(0, 600)).await;
    let mut acqs = Vec::new();
    for i in 0..5 {
        let s = s.clone();
        acqs.push(tokio::spawn(async move {
            s.acquire(&format!("job{i}"), None).await
        }));
    }
    let mut held = Vec::new();
    for a in acqs {
        held.push(a.await.unwrap().unwrap());
    }
    assert_eq!(live(&g), 5);
    let increases = g.call_count("increase");
    // Three instances are deleted from outside while their jobs still hold them.
    for a in held.iter().take(3) {
        g.remove_from_outside(a.instance_id());
    }
    pass(300).await;
    for a in held.iter().take(3) {
        assert_eq!(a.lost_cause(), Some(LostCause::InstanceRemoved));
        assert!(a.lost_token().is_cancelled());
    }
    assert_eq!(live(&g), 2, "no replacement for jobs that are dying");
    assert_eq!(g.call_count("increase"), increases);
    for a in &held {
        s.release(a.key());
    }
}

/// taskscaler !44/!52: an instance the cloud is deleting while jobs still hold it is neither
/// capacity nor a reason to scale up for those jobs.
#[tokio::test(start_paused = true)]
async fn deleting_instances_with_acquisitions_counted_right() {
    let g = fake(FakeConfig {
        delete_latency: (Duration::from_secs(600), Duration::from_secs(600)),
        ..Default::default()
    });
    let s = start(g.clone(), config(2, 10), policy(0, 600)).await;
    let a = s.acquire("a", None).await.unwrap();
    let b = s.acquire("b", None).await.unwrap();
    assert_eq!(a.instance_id(), b.instance_id(), "packed on one instance");
    let increases = g.call_count("increase");
    // The cloud starts deleting it on its own (e.g. ASG rebalancing).
    g.decrease(&[a.instance_id().to_string()]).await.unwrap();
    pass(120).await;
    assert_eq!(a.lost_cause(), Some(LostCause::InstanceDeleting));
    assert_eq!(b.lost_cause(), Some(LostCause::InstanceDeleting));
    assert_eq!(
        g.call_count("increase"),
        increases,
        "dying jobs are not demand"
    );
    let snap = s.snapshot();
    assert_eq!(snap.last_decision.unwrap().demand, 0);
    s.release("a");
    s.release("b");
}

/// runner#37237 / taskscaler !52, !60: reservations held by long polls (request_concurrency
/// > 1) must not keep idle instances alive.
#[tokio::test(start_paused = true)]
async fn reservations_do_not_block_scale_down() {
    let g = fake(FakeConfig::default());
    let s = start(g.clone(), config(1, 10), policy(1, 60)).await;
    // Three jobs at once grow the fleet to 3 (+1 idle).
    let mut held = Vec::new();
    for i in 0..3 {
        held.push(s.acquire(&format!("j{i}"), None).await.unwrap());
    }
    wait_until("4 instances", 60, || live(&g) == 4).await;
    for a in &held {
        s.release(a.key());
    }
    // Two long polls, renewed every 50 s, for ten minutes.
    let stop = Arc::new(AtomicBool::new(false));
    let mut pollers = Vec::new();
    for p in 0..2 {
        let s = s.clone();
        let stop = stop.clone();
        pollers.push(tokio::spawn(async move {
            let mut n = 0;
            while !stop.load(Ordering::SeqCst) {
                let key = format!("poll{p}-{n}");
                if s.reserve(&key).is_ok() {
                    tokio::time::sleep(Duration::from_secs(50)).await;
                    s.unreserve(&key);
                } else {
                    tokio::time::sleep(Duration::from_secs(3)).await;
                }
                n += 1;
            }
        }));
    }
    pass(600).await;
    assert_eq!(
        live(&g),
        1,
        "scaled down to the idle target despite reservations"
    );
    stop.store(true, Ordering::SeqCst);
    for p in pollers {
        p.await.unwrap();
    }
}

/// runner#37526, taskscaler#29 (!49): after idle removal a replacement must not be launched.
#[tokio::test(start_paused = true)]
async fn scales_to_zero_after_idle_removal() {
    let g = fake(FakeConfig::default());
    let s = start(g.clone(), config(1, 10), policy(0, 120)).await;
    let a = s.acquire("job", None).await.unwrap();
    pass(30).await;
    s.release(a.key());
    wait_until("scaled to zero", 400, || g.is_empty()).await;
    let increases = g.call_count("increase");
    pass(3600).await;
    assert!(g.is_empty(), "stays at zero");
    assert_eq!(
        g.call_count("increase"),
        increases,
        "no replacement launched"
    );
}

/// runner#37673: with idle_count = 1 the fleet must settle at one idle instance, not two.
#[tokio::test(start_paused = true)]
async fn idle_count_one_keeps_exactly_one_idle() {
    let g = fake(FakeConfig::default());
    let s = start(g.clone(), config(1, 10), policy(1, 120)).await;
    let mut held = Vec::new();
    for i in 0..3 {
        held.push(s.acquire(&format!("j{i}"), None).await.unwrap());
    }
    pass(60).await;
    for a in &held {
        s.release(a.key());
    }
    pass(900).await;
    assert_eq!(live(&g), 1);
    let snap = s.snapshot();
    assert_eq!(snap.counts.idle, 1, "{:?}", snap.counts);
    pass(3600).await;
    assert_eq!(live(&g), 1, "stable");
}

/// With capacity_per_instance > 1 and idle_count = 0 the fleet must still scale in.
#[tokio::test(start_paused = true)]
async fn idle_count_zero_scales_in_with_capacity_above_one() {
    let g = fake(FakeConfig::default());
    let s = start(g.clone(), config(4, 10), policy(0, 120)).await;
    let mut held = Vec::new();
    for i in 0..6 {
        let s2 = s.clone();
        held.push(tokio::spawn(async move {
            s2.acquire(&format!("j{i}"), None).await
        }));
    }
    let mut acqs = Vec::new();
    for h in held {
        acqs.push(h.await.unwrap().unwrap());
    }
    assert_eq!(live(&g), 2);
    for a in &acqs {
        s.release(a.key());
    }
    wait_until("scaled to zero", 400, || g.is_empty()).await;
}

/// taskscaler#20: under steady demand no healthy instance is deleted and recreated.
#[tokio::test(start_paused = true)]
async fn healthy_instances_not_deleted_and_recreated() {
    let g = fake(FakeConfig::default());
    let s = start(g.clone(), config(1, 20), policy(2, 300)).await;
    // A job every 30 s lasting 60 s: two or three busy, two idle.
    let driver = {
        let s = s.clone();
        tokio::spawn(async move {
            for i in 0..240 {
                let s = s.clone();
                tokio::spawn(async move {
                    let key = format!("j{i}");
                    let a = s.acquire(&key, None).await.unwrap();
                    tokio::time::sleep(Duration::from_secs(60)).await;
                    s.release(a.key());
                });
                tokio::time::sleep(Duration::from_secs(30)).await;
            }
        })
    };
    pass(1200).await;
    let (inc, dec) = (g.call_count("increase"), g.call_count("decrease"));
    driver.await.unwrap();
    assert_eq!(
        g.call_count("decrease"),
        dec,
        "no instance deleted under steady load"
    );
    assert_eq!(
        g.call_count("increase"),
        inc,
        "no instance recreated under steady load"
    );
}

/// runner#30953, gitlab#552226: an instance running a job is never removed for idleness,
/// however long the job.
#[tokio::test(start_paused = true)]
async fn never_removes_instances_mid_job() {
    let g = fake(FakeConfig::default());
    let s = start(g.clone(), config(1, 10), policy(0, 60)).await;
    let long = s.acquire("long", None).await.unwrap();
    let short = s.acquire("short", None).await.unwrap();
    s.release(short.key());
    pass(3 * 3600).await;
    assert_eq!(live(&g), 1);
    assert_eq!(g.snapshot()[0].0, long.instance_id());
    assert!(!long.lost_token().is_cancelled());
    let inst = g.instance(long.instance_id()).unwrap();
    assert_eq!(inst.delete_requests, 0, "never asked to delete it");
    s.release(long.key());
    wait_until("removed after the job", 200, || g.is_empty()).await;
}

/// Ready-up that takes a while.
struct SlowReadyUp;

#[async_trait::async_trait]
impl Hooks for SlowReadyUp {
    async fn ready_up(
        &self,
        _g: &dyn InstanceGroup,
        _id: &str,
        _c: flotilla_scaler::Cause,
    ) -> Result<(), String> {
        tokio::time::sleep(Duration::from_secs(30)).await;
        Ok(())
    }
}

/// taskscaler#6, runner#38931: preemptive mode never reserves a slot on an instance that is
/// not through ready-up.
#[tokio::test(start_paused = true)]
async fn preemptive_mode_never_hands_out_unready_slots() {
    let g = fake(FakeConfig::default());
    let s = ScalerBuilder::new(g.clone(), config(1, 10))
        .schedule(Schedule::single(policy(2, 600)))
        .hooks(Arc::new(SlowReadyUp))
        .clock(Clock::anchored(monday_noon()))
        .start()
        .await
        .unwrap();
    // Instances are running after 5 s, ready after 35 s.
    wait_until("running", 20, || {
        g.snapshot()
            .iter()
            .filter(|(_, st)| *st == State::Running)
            .count()
            == 2
    })
    .await;
    for i in 0..30 {
        let e = s.reserve(&format!("early{i}")).unwrap_err();
        assert!(matches!(e, ScalerError::NoCapacity { .. }), "{e}");
    }
    pass(40).await;
    s.reserve("ready").unwrap();
    let a = s.acquire("ready", None).await.unwrap();
    let snap = s.snapshot();
    let inst = snap.ledger.instance(a.instance_id()).unwrap();
    assert_eq!(inst.readiness, flotilla_scaler::ledger::Readiness::Ready);
}

/// runner#38931 variant: preemptive with idle 0 and a scale factor takes no job with zero
/// ready instances.
#[tokio::test(start_paused = true)]
async fn preemptive_with_no_ready_instances_takes_no_job() {
    let g = fake(FakeConfig::default());
    let pol = Policy {
        idle_count: 0,
        scale_factor: 1.0,
        preemptive_mode: Some(true),
        ..Policy::default()
    };
    let s = start(g.clone(), config(1, 10), pol).await;
    for i in 0..30 {
        assert!(s.reserve(&format!("k{i}")).is_err());
    }
    assert_eq!(s.snapshot().counts.reserved, 0);
}

/// runner#38291: switching from a weekend policy (idle 0) to a weekday one (idle 6) must
/// scale up and hand out slots, not wedge at "no capacity".
#[tokio::test(start_paused = true)]
async fn policy_switch_weekend_to_weekday_does_not_wedge() {
    use chrono::TimeZone;
    let g = fake(FakeConfig::default());
    // Explicit zones: an unset one is the host's local time, which tests must not read.
    let weekend =
        ScheduledPolicy::new(policy(0, 300), &["* * * * sat,sun".into()], Some("UTC")).unwrap();
    let weekday =
        ScheduledPolicy::new(policy(6, 300), &["* * * * mon-fri".into()], Some("UTC")).unwrap();
    // Sunday 23:55 UTC.
    let start_at = chrono::Utc
        .with_ymd_and_hms(2026, 11, 22, 23, 55, 0)
        .unwrap();
    let s = ScalerBuilder::new(g.clone(), config(2, 10))
        .schedule(Schedule::new(vec![weekend, weekday]))
        .clock(Clock::anchored(start_at))
        .start()
        .await
        .unwrap();
    pass(120).await;
    assert!(g.is_empty(), "weekend: nothing idle");
    // Monday 00:00 arrives at +300 s; the driver notices at its next tick (≤ 60 s).
    pass(180 + 60 + 30).await;
    assert_eq!(live(&g), 3, "6 idle slots = 3 instances");
    s.reserve("monday").unwrap();
    assert_eq!(s.snapshot().counts.idle, 5);
}

/// taskscaler !127: instances whose deletion is slow must not be counted against the
/// scale-down budget on every tick.
#[tokio::test(start_paused = true)]
async fn slow_deletions_do_not_eat_scale_down_budget() {
    let g = fake(FakeConfig {
        delete_latency: (Duration::from_secs(1800), Duration::from_secs(1800)),
        ..Default::default()
    });
    let s = start(g.clone(), config(1, 10), policy(0, 60)).await;
    let mut held = Vec::new();
    for i in 0..5 {
        let s2 = s.clone();
        held.push(tokio::spawn(async move {
            s2.acquire(&format!("j{i}"), None).await
        }));
    }
    let mut acqs = Vec::new();
    for h in held {
        acqs.push(h.await.unwrap().unwrap());
    }
    for a in &acqs {
        s.release(a.key());
    }
    // idle_time 60 s + at most one slow tick: all five are being deleted.
    pass(60 + 65).await;
    let deleting = g
        .snapshot()
        .iter()
        .filter(|(_, st)| *st == State::Deleting)
        .count();
    assert_eq!(
        deleting,
        5,
        "all idle instances removed together: {:?}",
        g.snapshot()
    );
}

/// An instance used up by `max_use_count` goes as soon as its last job ends, not at the
/// driver's next quiet tick (`update_interval`, a minute): found by the kubernetes sizing
/// test, whose one-job pods lingered up to a minute after their job. Other releases still
/// wait for the tick (`healthy_instances_not_deleted_and_recreated`).
#[tokio::test(start_paused = true)]
async fn a_used_up_instance_is_removed_when_its_job_ends() {
    let g = fake(FakeConfig::default());
    let mut cfg = config(1, 5);
    cfg.max_use_count = 1;
    let s = start(g.clone(), cfg, policy(0, 600)).await;
    let a = s.acquire("only", None).await.unwrap();
    let id = a.instance_id().to_string();
    // Long enough for the driver to settle into its quiet interval.
    pass(150).await;
    assert_eq!(g.call_count("decrease"), 0);
    s.release(a.key());
    wait_until("the used-up instance is removed", 5, || {
        g.call_count("decrease") == 1
    })
    .await;
    let inst = g.instance(&id).unwrap();
    assert_eq!(inst.delete_requests, 1, "{id} asked to be deleted once");
}

/// Issue 27 (1): a shell runner (this host as the only instance) stopped taking jobs five idle
/// minutes after its first one: `idle_time` marked the instance for removal, the local
/// provider refused to delete it, and the mark stayed, so the next job waited for a slot that
/// never came. The real local provider says it cannot delete its instance, and the scaler
/// never marks it: a job an hour later gets its slot at once.
#[tokio::test(start_paused = true)]
async fn this_host_takes_jobs_after_any_idle_time() {
    let group = Arc::new(flotilla_provider_local::LocalGroup::new());
    let s = ScalerBuilder::new(group, config(2, 0))
        .schedule(Schedule::single(policy(0, 300)))
        .clock(Clock::anchored(monday_noon()))
        .start()
        .await
        .unwrap();
    let first = s.acquire("first", None).await.unwrap();
    s.release(first.key());
    pass(3600).await;
    let second = tokio::time::timeout(Duration::from_secs(30), s.acquire("second", None))
        .await
        .expect("a slot within 30 s after an idle hour")
        .unwrap();
    assert_eq!(second.instance_id(), "local");
    s.release(second.key());
    let explanation = s.last_decision().map(|e| e.to_string()).unwrap_or_default();
    assert!(!explanation.contains("scale down"), "{explanation}");
}

/// Issue 27 (7): `failure_threshold` counts consecutive failures (GitLab's docs, and
/// `ScalerConfig::failure_threshold`): jobs that reach the instance in between end the streak.
/// Before, two failures a week apart with good jobs between them added up, and the third took
/// a healthy instance out of service.
#[tokio::test(start_paused = true)]
async fn failure_threshold_counts_consecutive_failures() {
    let g = fake(FakeConfig::default());
    let s = start(
        g.clone(),
        flotilla_scaler::ScalerConfig {
            failure_threshold: 3,
            ..config(1, 1)
        },
        policy(1, 3600),
    )
    .await;
    let first = s.acquire("first", None).await.unwrap();
    let id = first.instance_id().to_string();
    s.release(first.key());
    for round in 0..3 {
        s.report_failure(&id);
        s.report_failure(&id);
        s.report_success(&id);
        pass(5).await;
        let a = tokio::time::timeout(
            Duration::from_secs(30),
            s.acquire(&format!("job{round}"), None),
        )
        .await
        .expect("a slot")
        .unwrap();
        assert_eq!(
            a.instance_id(),
            id,
            "round {round}: the instance is still in service"
        );
        s.release(a.key());
    }
    // Three in a row do take it out.
    for _ in 0..3 {
        s.report_failure(&id);
    }
    pass(5).await;
    let a = s.acquire("after", None).await.unwrap();
    assert_ne!(
        a.instance_id(),
        id,
        "an instance past the threshold takes no new job"
    );
}

/// Issue 27 (6): `instance_acquire_timeout` bounds the heartbeat made before a job gets its
/// slot. A heartbeat that never answered held `acquire` (and the slot) for as long as it hung.
/// (With another instance to offer, the job gets it instead: see the next test.)
#[tokio::test(start_paused = true)]
async fn a_hanging_heartbeat_ends_with_the_acquire_timeout() {
    struct Hangs;
    #[async_trait::async_trait]
    impl Hooks for Hangs {
        async fn heartbeat(
            &self,
            _group: &dyn InstanceGroup,
            _instance: &str,
        ) -> Result<(), flotilla_fleet::FleetError> {
            std::future::pending().await
        }
    }
    let g = fake(FakeConfig::default());
    let mut cfg = config(1, 1);
    cfg.acquire_heartbeat = true;
    let s = ScalerBuilder::new(g, cfg)
        .schedule(Schedule::single(policy(1, 3600)))
        .clock(Clock::anchored(monday_noon()))
        .hooks(Arc::new(Hangs))
        .start()
        .await
        .unwrap();
    let result = tokio::time::timeout(
        Duration::from_secs(600),
        s.acquire("job", Some(Duration::from_secs(120))),
    )
    .await
    .expect("acquire ends with its 120 s timeout, not after a hung heartbeat");
    assert!(result.is_err(), "no slot without a heartbeat answer");
}

/// Issue 27 (6), found by the simulation's hanging heartbeats: a heartbeat that hangs costs
/// the job an `acquire_heartbeat_timeout` (a minute) per try, until the instance is past
/// `failure_threshold` (three) and the job is offered another: three minutes, not its whole
/// acquire timeout. Bounded by the acquire's deadline only, the job waited the fifteen
/// minutes out and failed while a healthy instance sat idle.
#[tokio::test(start_paused = true)]
async fn a_hanging_heartbeat_costs_the_job_a_minute_not_its_acquire() {
    struct HangsOn(String);
    #[async_trait::async_trait]
    impl Hooks for HangsOn {
        async fn heartbeat(
            &self,
            _group: &dyn InstanceGroup,
            instance: &str,
        ) -> Result<(), flotilla_fleet::FleetError> {
            if instance == self.0 {
                std::future::pending::<()>().await;
            }
            Ok(())
        }
    }
    let g = fake(FakeConfig::default());
    let first = g.add_running();
    g.add_running();
    let mut cfg = config(1, 2);
    cfg.acquire_heartbeat = true;
    let s = ScalerBuilder::new(g, cfg)
        .schedule(Schedule::single(policy(0, 3600)))
        .clock(Clock::anchored(monday_noon()))
        .hooks(Arc::new(HangsOn(first.clone())))
        .start()
        .await
        .unwrap();
    let started = tokio::time::Instant::now();
    let a = s
        .acquire("job", Some(Duration::from_secs(15 * 60)))
        .await
        .expect("the other instance");
    assert_ne!(a.instance_id(), first);
    assert!(
        started.elapsed() <= Duration::from_secs(3 * 60 + 10),
        "waited {:?}",
        started.elapsed()
    );
}

/// Issue 27 (3): `max_instances` holds through a listing outage. Requests used to be given up
/// after `request_timeout` (20 minutes) whatever the listings said, and made again: after two
/// hours of failing listings a group with `max_instances = 2` held six instances. Requests now
/// age only with listings, so the outage costs nothing, and once listings come back the
/// instances are found and used.
#[tokio::test(start_paused = true)]
async fn max_instances_holds_through_a_listing_outage() {
    use std::sync::atomic::Ordering;
    let g = common::Glitchy::new(fake(FakeConfig::default()));
    let s = start_on(g.clone(), config(1, 2), policy(0, 3600)).await;
    // Listings work at first: one job runs on the first instance.
    let running = s.acquire("running", None).await.unwrap();
    g.listing_fails.store(true, Ordering::SeqCst);
    let mut waiting = Vec::new();
    for i in 0..4 {
        let s = s.clone();
        waiting.push(tokio::spawn(async move {
            s.acquire(&format!("job{i}"), Some(Duration::from_secs(3 * 3600)))
                .await
        }));
    }
    for _ in 0..(2 * 60) {
        pass(60).await;
        let alive = g.fake.created_alive();
        eprintln!(
            "alive {alive} increases {} requested {}",
            g.fake.call_count("increase"),
            s.inspect(|l| l.requested_in_flight())
        );
        assert!(alive <= 2, "{alive} instances alive, max_instances = 2");
    }
    // Settled with it: failed listings back off (fast interval doubling up to the slow one)
    // instead of being retried every two seconds, 3,600 times in these two hours.
    let tries = g.failed_listings.load(Ordering::SeqCst);
    assert!(
        tries < 200,
        "{tries} listings tried in two hours of failures"
    );
    g.listing_fails.store(false, Ordering::SeqCst);
    let first = waiting
        .remove(0)
        .await
        .unwrap()
        .expect("served once listings work");
    assert_ne!(first.instance_id(), running.instance_id());
    assert!(g.fake.created_alive() <= 2);
    s.release(running.key());
    s.release(first.key());
    for w in waiting {
        let a = w.await.unwrap().expect("served");
        s.release(a.key());
    }
}

/// Issue 27 (settled): with `idle_count = 0` and `scale_factor` set, a job that takes an idle
/// slot at once raises the idle target (`scale_factor × in use`), so it wakes the driver as an
/// acquisition under `idle_count` does. Before, the decision waited for the next slow tick
/// (`update_interval`, a minute by default).
#[tokio::test(start_paused = true)]
async fn an_acquisition_wakes_the_driver_under_scale_factor() {
    let g = fake(FakeConfig::default());
    let s = start(
        g.clone(),
        config(1, 10),
        Policy {
            idle_count: 0,
            scale_factor: 1.0,
            ..policy(0, 3600)
        },
    )
    .await;
    // The first job, while it runs, raises the idle target to 1: a second instance comes.
    let first = s.acquire("first", None).await.unwrap();
    pass(120).await;
    s.release(first.key());
    pass(300).await;
    assert_eq!(live(&g), 2, "the setup: two idle instances");
    let before = g.call_count("increase");
    // The first job's idle target (1) left one more instance: the two jobs take both idle
    // slots at once, and the target (2) then asks for two more.
    let second = s.acquire("second", None).await.unwrap();
    let third = s.acquire("third", None).await.unwrap();
    pass(5).await;
    assert!(
        g.call_count("increase") > before,
        "no instance asked for within 5 s of the acquisitions"
    );
    s.release(second.key());
    s.release(third.key());
}
