//! Unit tests of the ledgers.

use super::*;
use crate::error::ScalerError;
use flotilla_fleet::{InstanceStatus, State};
use std::time::Duration;
use tokio::time::Instant;

fn running(ids: &[&str]) -> Vec<InstanceStatus> {
    ids.iter()
        .map(|i| InstanceStatus::new(*i, State::Running))
        .collect()
}

fn ready_ledger(cap: usize, ids: &[&str], now: Instant) -> Ledger {
    let mut l = Ledger::new(cap, 0, 3);
    l.observe(&running(ids), now);
    for id in ids {
        l.ready_up_done(id, Ok(()), now);
    }
    l
}

const LEASE: Duration = Duration::from_secs(600);

#[tokio::test(start_paused = true)]
async fn acquire_release_and_slot_indices() {
    let now = Instant::now();
    let mut l = ready_ledger(2, &["a"], now);
    let a1 = l.try_acquire("j1", now).unwrap();
    let a2 = l.try_acquire("j2", now).unwrap();
    assert_eq!(
        a1,
        TryAcquire::Assigned(SlotRef {
            instance: "a".into(),
            slot: 0
        })
    );
    assert_eq!(
        a2,
        TryAcquire::Assigned(SlotRef {
            instance: "a".into(),
            slot: 1
        })
    );
    assert_eq!(l.try_acquire("j3", now).unwrap(), TryAcquire::Queued);
    assert_eq!(l.pending(), 1);
    l.check_invariants().unwrap();
    assert!(l.release("j1", now));
    let got = l.fulfil_pending(now);
    assert_eq!(
        got,
        vec![(
            "j3".to_string(),
            SlotRef {
                instance: "a".into(),
                slot: 0
            }
        )]
    );
    assert_eq!(l.instance("a").unwrap().use_count, 3);
    l.check_invariants().unwrap();
}

#[tokio::test(start_paused = true)]
async fn preemptive_reserve_needs_ready_slot() {
    let now = Instant::now();
    let mut l = Ledger::new(1, 0, 3);
    l.observe(&running(&["a"]), now);
    // Running but not through ready-up: not offered.
    let e = l.reserve("k", true, None, LEASE, now).unwrap_err();
    assert!(matches!(e, ScalerError::NoCapacity { .. }), "{e}");
    assert!(e.to_string().contains("unready:1"), "{e}");
    l.ready_up_done("a", Ok(()), now);
    l.reserve("k", true, None, LEASE, now).unwrap();
    assert!(matches!(
        l.reserve("k2", true, None, LEASE, now),
        Err(ScalerError::NoCapacity { .. })
    ));
    assert!(matches!(
        l.reserve("k", true, None, LEASE, now),
        Err(ScalerError::DuplicateKey(_))
    ));
    // The reservation turns into an acquisition on the same slot.
    assert!(matches!(
        l.try_acquire("k", now).unwrap(),
        TryAcquire::Assigned(SlotRef { ref instance, slot: 0 }) if instance == "a"
    ));
    l.check_invariants().unwrap();
}

#[tokio::test(start_paused = true)]
async fn non_preemptive_reserve_up_to_max_slots() {
    let now = Instant::now();
    let mut l = Ledger::new(2, 0, 3);
    l.reserve("a", false, Some(2), LEASE, now).unwrap();
    l.reserve("b", false, Some(2), LEASE, now).unwrap();
    assert!(matches!(
        l.reserve("c", false, Some(2), LEASE, now),
        Err(ScalerError::NoCapacity { .. })
    ));
    assert_eq!(l.unbound_reservations(), 2);
    assert!(l.unreserve("a"));
    l.reserve("c", false, Some(2), LEASE, now).unwrap();
}

#[tokio::test(start_paused = true)]
async fn reservations_expire() {
    let now = Instant::now();
    let mut l = ready_ledger(1, &["a"], now);
    l.reserve("k", true, None, Duration::from_secs(10), now)
        .unwrap();
    assert!(
        l.expire_reservations(now + Duration::from_secs(9))
            .is_empty()
    );
    assert_eq!(
        l.expire_reservations(now + Duration::from_secs(10)),
        vec!["k".to_string()]
    );
    assert_eq!(l.counts().idle, 1);
    l.check_invariants().unwrap();
}

#[tokio::test(start_paused = true)]
async fn vanished_instance_loses_its_jobs_and_moves_reservations() {
    let now = Instant::now();
    let mut l = ready_ledger(1, &["a", "b", "c"], now);
    l.try_acquire("job", now).unwrap();
    let job_on = match l.key("job") {
        Some(KeyState::Acquired { slot }) => slot.instance.clone(),
        other => panic!("{other:?}"),
    };
    l.reserve("r", true, None, LEASE, now).unwrap();
    let r_on = match l.key("r") {
        Some(KeyState::Reserved { slot: Some(s), .. }) => s.instance.clone(),
        other => panic!("{other:?}"),
    };
    // Both instances vanish; the third remains.
    let rest: Vec<&str> = ["a", "b", "c"]
        .into_iter()
        .filter(|i| *i != job_on && *i != r_on)
        .collect();
    // Missing from one or two listings is not gone yet (a listing glitch); the third
    // settles it.
    for _ in 1..MISSING_LISTINGS {
        assert!(l.observe(&running(&rest), now).lost.is_empty());
    }
    assert!(
        l.observe(&running(&rest), now).lost.is_empty(),
        "not for long enough"
    );
    let obs = l.observe(&running(&rest), now + MISSING_FOR);
    assert_eq!(
        obs.lost,
        vec![("job".to_string(), LostCause::InstanceRemoved)]
    );
    assert_eq!(obs.gone.len(), 2);
    match l.key("r") {
        Some(KeyState::Reserved { slot: Some(s), .. }) => assert_eq!(s.instance, rest[0]),
        other => panic!("reservation should move: {other:?}"),
    }
    assert!(matches!(l.key("job"), Some(KeyState::Lost { .. })));
    l.check_invariants().unwrap();
    assert!(l.release("job", now));
    assert!(l.key("job").is_none());
}

#[tokio::test(start_paused = true)]
async fn max_use_count_retires_instance() {
    let now = Instant::now();
    let mut l = Ledger::new(2, 2, 3);
    l.observe(&running(&["a"]), now);
    l.ready_up_done("a", Ok(()), now);
    l.try_acquire("j1", now).unwrap();
    l.release("j1", now);
    l.try_acquire("j2", now).unwrap();
    let a = l.instance("a").unwrap();
    assert!(l.used_up(a));
    assert_eq!(l.try_acquire("j3", now).unwrap(), TryAcquire::Queued);
    let c = l.counts();
    assert_eq!((c.acquired, c.unavailable, c.pending), (1, 1, 1));
}

#[tokio::test(start_paused = true)]
async fn health_threshold_excludes_but_keeps_running_jobs() {
    let now = Instant::now();
    let mut l = ready_ledger(1, &["a"], now);
    l.try_acquire("j", now).unwrap();
    assert!(!l.health_failure("a"));
    l.health_ok("a");
    assert!(!l.health_failure("a"));
    assert!(!l.health_failure("a"));
    // Crossing the threshold excludes the instance but no longer ends its job (taskscaler
    // !109; issue 12): the job keeps its slot.
    assert!(l.health_failure("a"));
    assert!(matches!(l.key("j"), Some(KeyState::Acquired { .. })));
    assert!(!l.usable(l.instance("a").unwrap()));
    assert_eq!((l.counts().acquired, l.counts().unhealthy), (1, 0));
    l.release("j", now);
    assert_eq!(l.counts().unhealthy, 1);
}

#[tokio::test(start_paused = true)]
async fn requested_instances_are_matched_and_expire() {
    let now = Instant::now();
    let mut l = Ledger::new(1, 0, 3);
    l.add_requested(2, now);
    let obs = l.observe(&[InstanceStatus::new("x", State::Creating)], now);
    assert_eq!(obs.appeared, vec![("x".to_string(), Cause::Requested)]);
    assert_eq!(l.requested_in_flight(), 1);
    let later = now + Duration::from_secs(61);
    assert_eq!(
        l.expire_requested(Duration::from_secs(60), later),
        0,
        "no listing since: nothing says the instance did not come"
    );
    l.observe(&[InstanceStatus::new("x", State::Creating)], later);
    assert_eq!(l.expire_requested(Duration::from_secs(60), later), 1);
    let obs = l.observe(
        &[
            InstanceStatus::new("x", State::Running),
            InstanceStatus::new("y", State::Running),
        ],
        now,
    );
    // An instance that shows up after its request was given up on is still recognised as
    // ours (issue 12: late instances used to turn foreign); it no longer counts as capacity.
    assert_eq!(obs.appeared, vec![("y".to_string(), Cause::Requested)]);
    assert_eq!(obs.became_running, vec!["x".to_string(), "y".to_string()]);
    assert_eq!(l.requested_in_flight(), 0);
    // With nothing requested or given up on, a new instance is someone else's.
    let obs = l.observe(
        &[
            InstanceStatus::new("x", State::Running),
            InstanceStatus::new("y", State::Running),
            InstanceStatus::new("z", State::Running),
        ],
        now,
    );
    assert_eq!(obs.appeared, vec![("z".to_string(), Cause::Preexisted)]);
}

#[tokio::test(start_paused = true)]
async fn pending_cancel_and_unassign() {
    let now = Instant::now();
    let mut l = ready_ledger(1, &["a"], now);
    l.try_acquire("j1", now).unwrap();
    assert_eq!(l.try_acquire("j2", now).unwrap(), TryAcquire::Queued);
    assert_eq!(l.cancel_pending("j2"), None);
    assert_eq!(l.pending(), 0);
    l.unassign("j1", now);
    assert_eq!(l.pending(), 1);
    assert_eq!(l.instance("a").unwrap().use_count, 0);
    assert_eq!(l.fulfil_pending(now).len(), 1);
    l.check_invariants().unwrap();
}

/// A request whose instance never shows up (it vanished before any listing) must age out
/// at the request timeout, not be renewed by every later arrival: arrivals are matched to
/// the newest request.
#[tokio::test(start_paused = true)]
async fn a_request_never_served_ages_out() {
    let now = Instant::now();
    let timeout = Duration::from_secs(600);
    let mut l = Ledger::new(1, 0, 3).with_listing_interval(Duration::from_secs(100));
    l.add_requested(1, now);
    let mut listed = Vec::new();
    for k in 1..=5u64 {
        let t = now + Duration::from_secs(100 * k);
        l.add_requested(1, t);
        listed.push(InstanceStatus::new(format!("i{k}"), State::Running));
        l.observe(&listed, t);
        assert_eq!(l.expire_requested(timeout, t), 0);
        assert_eq!(l.requested_in_flight(), 1, "the phantom");
    }
    l.observe(&listed, now + timeout);
    assert_eq!(l.expire_requested(timeout, now + timeout), 1);
    assert_eq!(l.requested_in_flight(), 0);
}

/// Issue 27 (3): requests age only with listings. Two hours without a listing (an outage)
/// age a request by one listing interval, not by two hours: it still counts against
/// `max_instances` when listings resume, and is given up only after listings have had
/// `request_timeout` to show it. With the bug put back it is given up at the first listing.
#[tokio::test(start_paused = true)]
async fn requests_age_only_with_listings() {
    let now = Instant::now();
    let timeout = Duration::from_secs(20 * 60);
    for clock in [false, true] {
        let mut l = Ledger::new(1, 0, 3).with_legacy(crate::config::Legacy {
            requests_age_without_listings: clock,
            ..Default::default()
        });
        l.observe(&[], now);
        l.add_requested(2, now);
        let after_outage = now + Duration::from_secs(2 * 3600);
        l.observe(&[], after_outage);
        let expired = l.expire_requested(timeout, after_outage);
        if clock {
            assert_eq!(expired, 2, "the bug put back gives them up");
            continue;
        }
        assert_eq!(expired, 0, "an outage does not age requests");
        assert_eq!(l.requested_in_flight(), 2);
        // Listings every minute: given up once they have had the timeout to show them.
        let mut t = after_outage;
        let mut listings = 0;
        while l.requested_in_flight() > 0 {
            t += Duration::from_secs(60);
            l.observe(&[], t);
            l.expire_requested(timeout, t);
            listings += 1;
            assert!(listings < 100, "never given up");
        }
        assert_eq!(
            listings, 19,
            "20 minutes of listings, the gap counted as one interval"
        );
    }
}

/// Issue 27 (2): a static pool lends the same host again under the same id. Given back
/// (removed for idleness, the deletion accepted) and lent again for a new request, it is a new
/// instance: no removal mark, counted as the request's. Before, it came back still marked as
/// being removed, its request was never matched and a job waited for the acquire timeout.
#[tokio::test(start_paused = true)]
async fn a_removed_instance_lent_again_under_its_id_is_new() {
    let now = Instant::now();
    let mut l = ready_ledger(1, &["host-1"], now);
    assert!(l.mark_removal("host-1", crate::cause::RemovalReason::IdleTime, now));
    l.removal_attempted("host-1", true, now);
    for _ in 0..MISSING_LISTINGS {
        l.observe(&running(&[]), now);
    }
    let gone = l.observe(&running(&[]), now + MISSING_FOR);
    assert_eq!(gone.gone.len(), 1, "given back to the pool");
    // A job needs an instance: the pool lends host-1 again.
    let later = now + MISSING_FOR + Duration::from_secs(60);
    l.add_requested(1, later);
    l.observe(&running(&["host-1"]), later);
    let i = l.instance("host-1").expect("listed");
    assert!(i.removal.is_none(), "lent again, it is not being removed");
    assert_eq!(i.cause, crate::cause::Cause::Requested);
    assert_eq!(l.requested_in_flight(), 0, "the request is matched");
    l.ready_up_done("host-1", Ok(()), later);
    assert!(matches!(
        l.try_acquire("job", later),
        Ok(TryAcquire::Assigned(_))
    ));
    l.check_invariants().unwrap();
}

/// Issue 27 (2), found by the simulation's fixed-pool profile: a pool's host given back is
/// given back, even when no listing saw it gone (they failed meanwhile, or the process
/// restarted). Listed live again while a request waits, it is the host lent anew; missing
/// from a listing while being removed, it is gone at once; and the accepted give-back is never
/// asked again (that would give back the new lend). With the bug put back it is taken for the
/// old one and asked to go again.
#[tokio::test(start_paused = true)]
async fn a_pool_host_given_back_is_final() {
    for bug in [false, true] {
        let now = Instant::now();
        let mut l = ready_ledger(1, &["host-1", "host-2"], now).with_pool_lending(true);
        l.legacy.reused_id_is_the_old_instance = bug;
        assert!(l.mark_removal("host-1", crate::cause::RemovalReason::IdleTime, now));
        l.removal_attempted("host-1", true, now);
        assert_eq!(l.accepted_removal_is_final(), !bug);
        // No listing in between; a job needs an instance and the pool lends host-1 again.
        let later = now + Duration::from_secs(30);
        l.add_requested(1, later);
        let seen = l.observe(&running(&["host-1", "host-2"]), later);
        let i = l.instance("host-1").expect("listed");
        if bug {
            assert!(i.removal.is_some(), "the bug: still being removed");
            continue;
        }
        assert!(i.removal.is_none(), "lent again, it is not being removed");
        assert_eq!(i.cause, crate::cause::Cause::Requested);
        assert_eq!(seen.gone.len(), 1, "the old lend is gone");
        assert_eq!(seen.appeared.len(), 1, "the new one arrived");
        assert_eq!(l.requested_in_flight(), 0);
        // Missing while being removed: gone at the first listing without it.
        assert!(l.mark_removal("host-2", crate::cause::RemovalReason::IdleTime, later));
        let seen = l.observe(&running(&["host-1"]), later);
        assert_eq!(seen.gone.len(), 1, "given back");
        assert!(l.instance("host-2").is_none());
        l.check_invariants().unwrap();
    }
}

/// The memory of departed instances still serves its purpose: one that dropped out of the
/// listings while removed, with no request waiting, keeps its mark when it shows up again.
#[tokio::test(start_paused = true)]
async fn a_removed_instance_seen_again_unasked_keeps_its_mark() {
    let now = Instant::now();
    let mut l = ready_ledger(1, &["vm-1"], now);
    assert!(l.mark_removal("vm-1", crate::cause::RemovalReason::IdleTime, now));
    l.removal_attempted("vm-1", true, now);
    for _ in 0..MISSING_LISTINGS {
        l.observe(&running(&[]), now);
    }
    l.observe(&running(&[]), now + MISSING_FOR);
    l.observe(&running(&["vm-1"]), now + MISSING_FOR);
    assert!(l.instance("vm-1").expect("listed").removal.is_some());
}

/// Issue 27 (settled): an instance that leaves `running` for `creating` and comes back runs
/// its ready-up again, and offers no slot meanwhile. Before, it kept `Ready` and its slots
/// were handed out as soon as it was back, before `instance_ready_command` had run on it.
#[tokio::test(start_paused = true)]
async fn an_instance_back_to_creating_is_readied_again() {
    let now = Instant::now();
    let mut l = ready_ledger(1, &["vm"], now);
    l.observe(&[InstanceStatus::new("vm", State::Creating)], now);
    assert_eq!(l.try_acquire("job", now).unwrap(), TryAcquire::Queued);
    let back = l.observe(&running(&["vm"]), now);
    assert_eq!(back.became_running, vec!["vm".to_string()]);
    l.ready_up_done("vm", Ok(()), now);
    assert_eq!(l.fulfil_pending(now).len(), 1);
    l.check_invariants().unwrap();
}
