//! Shared helpers for the scaler's integration tests (virtual time, fake provider).
#![allow(dead_code)]

use chrono::{TimeZone, Utc};
use flotilla_scaler::{Clock, Policy, Scaler, ScalerBuilder, ScalerConfig, Schedule};
use flotilla_testkit::{FakeConfig, FakeInstanceGroup};
use std::sync::Arc;
use std::time::Duration;

/// A fake group with default latencies (create 5 s, delete 1 s).
pub fn fake(config: FakeConfig) -> Arc<FakeInstanceGroup> {
    Arc::new(FakeInstanceGroup::new(config, 1))
}

/// Monday 2026-11-23 12:00 UTC.
pub fn monday_noon() -> chrono::DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 23, 12, 0, 0).unwrap()
}

/// Starts a scaler on `group` with one always-active policy.
pub async fn start(group: Arc<FakeInstanceGroup>, config: ScalerConfig, policy: Policy) -> Scaler {
    ScalerBuilder::new(group, config)
        .schedule(Schedule::single(policy))
        .clock(Clock::anchored(monday_noon()))
        .start()
        .await
        .unwrap()
}

/// Policy shorthand.
pub fn policy(idle_count: usize, idle_time_secs: u64) -> Policy {
    Policy {
        idle_count,
        idle_time: Duration::from_secs(idle_time_secs),
        ..Policy::default()
    }
}

/// Config shorthand.
pub fn config(capacity: usize, max_instances: usize) -> ScalerConfig {
    ScalerConfig {
        capacity_per_instance: capacity,
        max_instances,
        ..ScalerConfig::default()
    }
}

/// Waits (virtual time, 1 s steps) until `cond` holds, failing after `max_secs`.
pub async fn wait_until(what: &str, max_secs: u64, mut cond: impl FnMut() -> bool) {
    for _ in 0..max_secs {
        if cond() {
            return;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    assert!(cond(), "timed out after {max_secs}s waiting for: {what}");
}

/// Sleeps `secs` of virtual time.
pub async fn pass(secs: u64) {
    tokio::time::sleep(Duration::from_secs(secs)).await;
}
