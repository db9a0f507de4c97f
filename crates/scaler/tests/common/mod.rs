//! Shared helpers for the scaler's integration tests (virtual time, fake provider).
#![allow(dead_code)]

use chrono::{TimeZone, Utc};
use flotilla_scaler::{Clock, Policy, Scaler, ScalerBuilder, ScalerConfig, Schedule};
use flotilla_testkit::{FakeConfig, FakeInstanceGroup};
use std::sync::Arc;
use std::time::Duration;

/// A fake group with default latencies (create 5 s, delete 1 s).
pub(crate) fn fake(config: FakeConfig) -> Arc<FakeInstanceGroup> {
    Arc::new(FakeInstanceGroup::new(config, 1))
}

/// Monday 2026-11-23 12:00 UTC.
pub(crate) fn monday_noon() -> chrono::DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 23, 12, 0, 0).unwrap()
}

/// Starts a scaler on `group` with one always-active policy.
pub(crate) async fn start(
    group: Arc<FakeInstanceGroup>,
    config: ScalerConfig,
    policy: Policy,
) -> Scaler {
    ScalerBuilder::new(group, config)
        .schedule(Schedule::single(policy))
        .clock(Clock::anchored(monday_noon()))
        .start()
        .await
        .unwrap()
}

/// Policy shorthand.
pub(crate) fn policy(idle_count: usize, idle_time_secs: u64) -> Policy {
    Policy {
        idle_count,
        idle_time: Duration::from_secs(idle_time_secs),
        ..Policy::default()
    }
}

/// Config shorthand.
pub(crate) fn config(capacity: usize, max_instances: usize) -> ScalerConfig {
    ScalerConfig {
        capacity_per_instance: capacity,
        max_instances,
        ..ScalerConfig::default()
    }
}

/// Waits (virtual time, 1 s steps) until `cond` holds, failing after `max_secs`.
pub(crate) async fn wait_until(what: &str, max_secs: u64, mut cond: impl FnMut() -> bool) {
    for _ in 0..max_secs {
        if cond() {
            return;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    assert!(cond(), "timed out after {max_secs}s waiting for: {what}");
}

/// Sleeps `secs` of virtual time.
pub(crate) async fn pass(secs: u64) {
    tokio::time::sleep(Duration::from_secs(secs)).await;
}

/// The fake group with listing glitches and an `increase` that fails after creating, as
/// real providers show them (fleeting plugins list whatever the cloud API returned; the AWS
/// plugin's `Increase` can set the desired capacity and then fail).
pub(crate) struct Glitchy {
    /// The group behind.
    pub fake: Arc<FakeInstanceGroup>,
    /// Listings still to come back empty.
    pub empty_listings: std::sync::atomic::AtomicUsize,
    /// Ids left out of the next listings, and how many listings still leave them out.
    pub hidden: std::sync::Mutex<(Vec<String>, usize)>,
    /// `increase` creates what it was asked for and then reports an error.
    pub increase_fails_after_creating: std::sync::atomic::AtomicBool,
    /// `update` fails (a listing outage: throttling, a missing list permission).
    pub listing_fails: std::sync::atomic::AtomicBool,
    /// How many listings failed so.
    pub failed_listings: std::sync::atomic::AtomicUsize,
}

impl Glitchy {
    /// A glitch-free wrapper around `fake`.
    pub(crate) fn new(fake: Arc<FakeInstanceGroup>) -> Arc<Self> {
        Arc::new(Glitchy {
            fake,
            empty_listings: Default::default(),
            hidden: std::sync::Mutex::new((Vec::new(), 0)),
            increase_fails_after_creating: Default::default(),
            listing_fails: Default::default(),
            failed_listings: Default::default(),
        })
    }

    /// Leaves `ids` out of the next `listings` listings.
    pub(crate) fn hide(&self, ids: &[&str], listings: usize) {
        *self.hidden.lock().unwrap() = (ids.iter().map(|s| s.to_string()).collect(), listings);
    }
}

#[async_trait::async_trait]
impl flotilla_fleet::InstanceGroup for Glitchy {
    async fn init(
        &self,
        s: &flotilla_fleet::Settings,
    ) -> Result<flotilla_fleet::ProviderInfo, flotilla_fleet::FleetError> {
        self.fake.init(s).await
    }
    async fn update(
        &self,
    ) -> Result<Vec<flotilla_fleet::InstanceStatus>, flotilla_fleet::FleetError> {
        use std::sync::atomic::Ordering;
        if self.listing_fails.load(Ordering::SeqCst) {
            self.failed_listings.fetch_add(1, Ordering::SeqCst);
            return Err(flotilla_fleet::FleetError::provider(
                "update",
                "throttled: rate exceeded",
            ));
        }
        let mut listing = self.fake.update().await?;
        if self
            .empty_listings
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            return Ok(Vec::new());
        }
        let mut hidden = self.hidden.lock().unwrap();
        if hidden.1 > 0 {
            hidden.1 -= 1;
            listing.retain(|s| !hidden.0.contains(&s.id));
        }
        Ok(listing)
    }
    async fn increase(&self, n: usize) -> Result<usize, flotilla_fleet::FleetError> {
        let got = self.fake.increase(n).await?;
        if self
            .increase_fails_after_creating
            .load(std::sync::atomic::Ordering::SeqCst)
        {
            return Err(flotilla_fleet::FleetError::provider(
                "increase",
                "timed out after the request was sent",
            ));
        }
        Ok(got)
    }
    async fn decrease(
        &self,
        ids: &[flotilla_fleet::InstanceId],
    ) -> Result<Vec<flotilla_fleet::InstanceId>, flotilla_fleet::FleetError> {
        self.fake.decrease(ids).await
    }
    async fn connect_info(
        &self,
        id: &str,
    ) -> Result<flotilla_fleet::ConnectInfo, flotilla_fleet::FleetError> {
        self.fake.connect_info(id).await
    }
    async fn heartbeat(&self, id: &str) -> Result<(), flotilla_fleet::FleetError> {
        self.fake.heartbeat(id).await
    }
    async fn shutdown(&self) -> Result<(), flotilla_fleet::FleetError> {
        self.fake.shutdown().await
    }
}

/// Starts a scaler on any group with one always-active policy.
pub(crate) async fn start_on(
    group: Arc<dyn flotilla_fleet::InstanceGroup>,
    config: ScalerConfig,
    policy: Policy,
) -> Scaler {
    ScalerBuilder::new(group, config)
        .schedule(Schedule::single(policy))
        .clock(Clock::anchored(monday_noon()))
        .start()
        .await
        .unwrap()
}
