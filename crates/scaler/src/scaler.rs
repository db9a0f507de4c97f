//! The scaler handle: the API job sources use (reserve, acquire, release) and the shared
//! state the driver works on.

use crate::clock::Clock;
use crate::config::ScalerConfig;
use crate::desired::Explanation;
use crate::driver::{self, DriverState};
use crate::error::ScalerError;
use crate::hooks::{Hooks, NoHooks};
use crate::journal::{Journal, JournalEvent, NoJournal, Persisted};
use crate::ledger::{Key, KeyState, Ledger, LostCause, SlotCounts, SlotRef, TryAcquire};
use crate::policy::Schedule;
use flotilla_fleet::{ConnectInfo, FleetError, InstanceGroup, ProviderInfo, Settings};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, SystemTime};
use tokio::sync::{Notify, oneshot};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// What the scaler tells an acquisition when its instance dies.
#[derive(Debug, Default)]
struct LostSignal {
    token: CancellationToken,
    cause: OnceLock<LostCause>,
}

/// State shared by the API and the driver. Never locked across an `.await`.
pub(crate) struct Inner {
    pub(crate) ledger: Ledger,
    pub(crate) schedule: Schedule,
    pub(crate) waiters: HashMap<Key, oneshot::Sender<SlotRef>>,
    signals: HashMap<Key, Arc<LostSignal>>,
    pub(crate) last: Option<Explanation>,
    pub(crate) driver: DriverState,
}

pub(crate) struct Shared {
    pub(crate) inner: Mutex<Inner>,
    pub(crate) group: Arc<dyn InstanceGroup>,
    pub(crate) journal: Arc<dyn Journal>,
    pub(crate) config: ScalerConfig,
    pub(crate) clock: Clock,
    pub(crate) hooks: Arc<dyn Hooks>,
    pub(crate) info: ProviderInfo,
    /// Wakes the driver for an early decision.
    pub(crate) wake: Notify,
    /// Wakes shutdown's drain when a job releases.
    pub(crate) released: Notify,
    pub(crate) stop: CancellationToken,
}

impl Shared {
    pub(crate) fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Hands slots to waiters after capacity changed. Call with the lock held.
    pub(crate) fn fulfil(&self, inner: &mut Inner) {
        let now = self.clock.now();
        for (key, slot) in inner.ledger.fulfil_pending(now) {
            match inner.waiters.remove(&key) {
                Some(tx) => {
                    if let Err(slot) = tx.send(slot) {
                        // The waiter went away between its timeout and now.
                        let _ = slot;
                        inner.ledger.release(&key, now);
                    }
                }
                None => {
                    // No one waits for this key any more.
                    inner.ledger.release(&key, now);
                }
            }
        }
    }

    /// Tells acquisitions that their instance died.
    pub(crate) fn signal_lost(&self, inner: &mut Inner, lost: Vec<(Key, LostCause)>) {
        for (key, cause) in lost {
            if let Some(sig) = inner.signals.get(&key) {
                let _ = sig.cause.set(cause);
                sig.token.cancel();
            }
            tracing::warn!(key = %key, cause = %cause, "acquisition lost its instance");
        }
    }
}

/// Builds a [`Scaler`].
pub struct ScalerBuilder {
    group: Arc<dyn InstanceGroup>,
    config: ScalerConfig,
    schedule: Schedule,
    settings: Settings,
    hooks: Arc<dyn Hooks>,
    clock: Clock,
    restore: Persisted,
    journal: Arc<dyn Journal>,
    initialized: Option<ProviderInfo>,
}

impl ScalerBuilder {
    /// A builder for a scaler of `group`.
    pub fn new(group: Arc<dyn InstanceGroup>, config: ScalerConfig) -> Self {
        ScalerBuilder {
            group,
            config,
            schedule: Schedule::default(),
            settings: Settings::default(),
            hooks: Arc::new(NoHooks),
            clock: Clock::system(),
            restore: Persisted::default(),
            journal: Arc::new(NoJournal),
            initialized: None,
        }
    }

    /// The policies.
    pub fn schedule(mut self, schedule: Schedule) -> Self {
        self.schedule = schedule;
        self
    }

    /// The settings handed to the provider's `init`.
    pub fn settings(mut self, settings: Settings) -> Self {
        self.settings = settings;
        self
    }

    /// Ready-up and heartbeat hooks.
    pub fn hooks(mut self, hooks: Arc<dyn Hooks>) -> Self {
        self.hooks = hooks;
        self
    }

    /// The clock (tests and the simulation anchor it to virtual time).
    pub fn clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// What the durable store knew before a restart: instances are adopted (they run their
    /// ready-up again), instances requested but never seen count as requested, and the slots
    /// jobs held are free (those jobs ended with the old process).
    pub fn restore(mut self, persisted: Persisted) -> Self {
        self.restore = persisted;
        self
    }

    /// Where ledger changes are recorded before they take effect.
    pub fn journal(mut self, journal: Arc<dyn Journal>) -> Self {
        self.journal = journal;
        self
    }

    /// The provider was initialised by the caller (who needed its [`ProviderInfo`] before
    /// building the scaler): [`ScalerBuilder::start`] does not call `init` again, and the
    /// settings are not used.
    pub fn initialized(mut self, info: ProviderInfo) -> Self {
        self.initialized = Some(info);
        self
    }

    /// Initialises the provider (unless [`ScalerBuilder::initialized`] said it is) and starts
    /// the driver.
    pub async fn start(self) -> Result<Scaler, ScalerError> {
        let info = match self.initialized {
            Some(info) => info,
            None => self
                .group
                .init(&self.settings)
                .await
                .map_err(|e| ScalerError::Init(e.to_string()))?,
        };
        let now = self.clock.now();
        let mut ledger = Ledger::new(
            self.config.capacity_per_instance,
            self.config.max_use_count,
            self.config.failure_threshold,
        )
        .with_preexisting(self.config.preexisting);
        for i in self.restore.instances {
            ledger.restore(i.id, i.state, i.cause, i.use_count, i.removal, now);
        }
        ledger.add_requested(self.restore.requested_in_flight, now);
        for (key, instance, slot) in &self.restore.acquisitions {
            tracing::warn!(key = %key, instance = %instance, slot, "a job held this slot when the previous process stopped; the slot is free again");
            // The old process is gone: its jobs no longer hold their slots.
            self.journal
                .record(&JournalEvent::Released { key: key.clone() })
                .map_err(|e| ScalerError::Journal(e.to_string()))?;
        }
        let driver = DriverState::new(&self.config, now);
        let shared = Arc::new(Shared {
            inner: Mutex::new(Inner {
                ledger,
                schedule: self.schedule,
                waiters: HashMap::new(),
                signals: HashMap::new(),
                last: None,
                driver,
            }),
            group: self.group,
            journal: self.journal,
            config: self.config,
            clock: self.clock,
            hooks: self.hooks,
            info,
            wake: Notify::new(),
            released: Notify::new(),
            stop: CancellationToken::new(),
        });
        let task = tokio::spawn(driver::run(shared.clone()));
        Ok(Scaler {
            shared,
            driver: Arc::new(Mutex::new(Some(task))),
        })
    }
}

/// The scaler: hands job slots to job sources and keeps the fleet at the size they need.
/// Cheap to clone; all clones share one scaler.
#[derive(Clone)]
pub struct Scaler {
    shared: Arc<Shared>,
    driver: Arc<Mutex<Option<JoinHandle<()>>>>,
}

impl std::fmt::Debug for Scaler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scaler")
            .field("provider", &self.shared.info.id)
            .finish()
    }
}

/// A point-in-time view of the scaler for `flotilla status` and tests.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// The ledgers.
    pub ledger: Ledger,
    /// Slot counts.
    pub counts: SlotCounts,
    /// The last decision's explanation.
    pub last_decision: Option<Explanation>,
}

impl Scaler {
    /// The provider's description of itself.
    pub fn provider_info(&self) -> &ProviderInfo {
        &self.shared.info
    }

    /// The configuration.
    pub fn config(&self) -> &ScalerConfig {
        &self.shared.config
    }

    /// Reserves capacity for `key` before a job is requested. Fails fast with
    /// [`ScalerError::NoCapacity`] when none can be promised.
    pub fn reserve(&self, key: &str) -> Result<(), ScalerError> {
        let now = self.shared.clock.now();
        let utc = self.shared.clock.utc();
        let mut inner = self.shared.lock();
        let (_, policy) = inner.schedule.active(utc);
        let r = inner.ledger.reserve(
            key,
            policy.preemptive(),
            self.shared.config.max_slots(),
            self.shared.config.reservation_lease,
            now,
        );
        drop(inner);
        if r.is_ok() {
            self.shared.wake.notify_one();
        }
        r
    }

    /// Drops a reservation when no job came.
    pub fn unreserve(&self, key: &str) {
        let mut inner = self.shared.lock();
        if inner.ledger.unreserve(key) {
            self.shared.fulfil(&mut inner);
        }
    }

    /// Waits for a slot for `key` (its reservation's, or any that becomes ready), up to
    /// `timeout` (default `instance_acquire_timeout`).
    pub async fn acquire(
        &self,
        key: &str,
        timeout: Option<Duration>,
    ) -> Result<Acquisition, ScalerError> {
        let timeout = timeout.unwrap_or(self.shared.config.instance_acquire_timeout);
        let deadline = self.shared.clock.now() + timeout;
        let mut guard = PendingGuard {
            shared: &self.shared,
            key,
            armed: false,
        };
        let mut requeue = false;
        loop {
            let slot = self
                .wait_for_slot(key, deadline, timeout, &mut guard, requeue)
                .await?;
            if self.shared.config.acquire_heartbeat {
                let check = self
                    .shared
                    .hooks
                    .heartbeat(&*self.shared.group, &slot.instance);
                if let Err(e) = check.await {
                    tracing::warn!(instance = %slot.instance, error = %e, "heartbeat before acquisition failed");
                    let mut inner = self.shared.lock();
                    let lost = inner.ledger.health_failure(&slot.instance);
                    self.shared.signal_lost(&mut inner, lost);
                    drop(inner);
                    self.shared.wake.notify_one();
                    requeue = true;
                    continue;
                }
                self.shared.lock().ledger.health_ok(&slot.instance);
            }
            let signal = Arc::new(LostSignal::default());
            let mut inner = self.shared.lock();
            // Recorded before the job may use the slot; if it cannot be, the job does not get it.
            let use_count = inner
                .ledger
                .instance(&slot.instance)
                .map(|i| i.use_count)
                .unwrap_or(0);
            if let Err(e) = self.shared.journal.record(&JournalEvent::Acquired {
                key: key.to_string(),
                instance: slot.instance.clone(),
                slot: slot.slot,
                use_count,
            }) {
                tracing::error!(key = %key, error = %e, "cannot record the acquisition; giving the slot back");
                drop(inner);
                return Err(ScalerError::Journal(e.to_string()));
            }
            guard.armed = false;
            // The instance may have died while we checked it.
            match inner.ledger.key(key) {
                Some(KeyState::Acquired { slot: s }) if *s == slot => {}
                Some(KeyState::Lost { cause, .. }) => {
                    let _ = signal.cause.set(*cause);
                    signal.token.cancel();
                }
                _ => {}
            }
            inner.signals.insert(key.to_string(), signal.clone());
            drop(inner);
            if self.shared.lock_policy_needs_idle() {
                self.shared.wake.notify_one();
            }
            return Ok(Acquisition {
                key: key.to_string(),
                slot,
                signal,
                shared: self.shared.clone(),
                info: tokio::sync::Mutex::new(None),
            });
        }
    }

    /// Gets `key` a slot: at once if one is ready, else by queueing and waiting. With
    /// `requeue`, the key's current slot failed its heartbeat: give it back and queue again
    /// at the front.
    async fn wait_for_slot(
        &self,
        key: &str,
        deadline: tokio::time::Instant,
        timeout: Duration,
        guard: &mut PendingGuard<'_>,
        requeue: bool,
    ) -> Result<SlotRef, ScalerError> {
        let rx = {
            let now = self.shared.clock.now();
            let mut inner = self.shared.lock();
            if requeue {
                // The key may meanwhile have been lost (instance died): then queue it anew.
                match inner.ledger.key(key) {
                    Some(KeyState::Acquired { .. }) => inner.ledger.unassign(key, now),
                    _ => {
                        inner.ledger.release(key, now);
                        inner.ledger.try_acquire(key, now)?;
                    }
                }
                if let Some(KeyState::Acquired { slot }) = inner.ledger.key(key) {
                    return Ok(slot.clone());
                }
            } else {
                let outcome = inner.ledger.try_acquire(key, now)?;
                // From here on the key is ours: a dropped acquire must give it back.
                guard.armed = true;
                if let TryAcquire::Assigned(slot) = outcome {
                    return Ok(slot);
                }
            }
            let (tx, rx) = oneshot::channel();
            inner.waiters.insert(key.to_string(), tx);
            // The requeued key may be first in line for a slot that is free right now.
            self.shared.fulfil(&mut inner);
            rx
        };
        self.shared.wake.notify_one();
        match tokio::time::timeout_at(deadline, rx).await {
            Ok(Ok(slot)) => Ok(slot),
            Ok(Err(_)) => Err(ScalerError::ShuttingDown),
            Err(_) => {
                let mut inner = self.shared.lock();
                inner.waiters.remove(key);
                match inner.ledger.cancel_pending(key) {
                    // A slot arrived at the last moment: take it.
                    Some(slot) => Ok(slot),
                    None => Err(ScalerError::AcquireTimeout(timeout)),
                }
            }
        }
    }

    /// Ends `key`: its slot becomes free (or its reservation or wait is dropped).
    pub fn release(&self, key: &str) {
        let now = self.shared.clock.now();
        let mut inner = self.shared.lock();
        inner.signals.remove(key);
        inner.waiters.remove(key);
        let held = matches!(
            inner.ledger.key(key),
            Some(KeyState::Acquired { .. } | KeyState::Lost { .. })
        );
        if inner.ledger.release(key, now) {
            if held
                && let Err(e) = self.shared.journal.record(&JournalEvent::Released {
                    key: key.to_string(),
                })
            {
                // The slot is free in memory; after a restart the stale record is dropped.
                tracing::error!(key = %key, error = %e, "cannot record a release");
            }
            self.shared.fulfil(&mut inner);
        }
        drop(inner);
        self.shared.released.notify_waiters();
    }

    /// Reports that a job could not reach its instance (counts towards `failure_threshold`).
    pub fn report_failure(&self, instance: &str) {
        let mut inner = self.shared.lock();
        let lost = inner.ledger.health_failure(instance);
        self.shared.signal_lost(&mut inner, lost);
        drop(inner);
        self.shared.wake.notify_one();
    }

    /// Replaces the policies (hot reload).
    pub fn configure_schedule(&self, schedule: Schedule) {
        self.shared.lock().schedule = schedule;
        self.shared.wake.notify_one();
    }

    /// Asks the driver to decide now rather than at its next tick.
    pub fn nudge(&self) {
        self.shared.wake.notify_one();
    }

    /// Checks the ledgers' invariants (a slot held once, acquisitions only on ready
    /// instances, no job waiting while an idle slot exists). For tests and debugging.
    pub fn check_invariants(&self) -> Result<(), String> {
        let inner = self.shared.lock();
        inner.ledger.check_invariants()?;
        let c = inner.ledger.counts();
        if c.pending > 0 && c.idle > 0 {
            return Err(format!(
                "{} jobs wait while {} slots are idle ({c})",
                c.pending, c.idle
            ));
        }
        Ok(())
    }

    /// Instances the scaler holds (any state, removing ones included) plus those it has
    /// requested: what counts against `max_instances`.
    pub fn fleet_size(&self) -> usize {
        let inner = self.shared.lock();
        inner.ledger.instances().count() + inner.ledger.requested_in_flight()
    }

    /// The last decision's explanation (cheap: no copy of the ledgers).
    pub fn last_decision(&self) -> Option<Explanation> {
        self.shared.lock().last.clone()
    }

    /// A snapshot of the ledgers and the last decision.
    pub fn snapshot(&self) -> Snapshot {
        let inner = self.shared.lock();
        Snapshot {
            counts: inner.ledger.counts(),
            ledger: inner.ledger.clone(),
            last_decision: inner.last.clone(),
        }
    }

    /// Shuts down: hands out nothing more, waits up to `drain` for running jobs, stops the
    /// driver, deletes every instance when `delete_instances_on_shutdown` is set, then shuts
    /// the provider down.
    pub async fn shutdown(&self, drain: Duration) -> ShutdownReport {
        let dropped = {
            let mut inner = self.shared.lock();
            let dropped = inner.ledger.begin_shutdown();
            inner.waiters.clear();
            dropped
        };
        tracing::info!(dropped = dropped.len(), "scaler shutting down");
        let deadline = self.shared.clock.now() + drain;
        loop {
            let released = self.shared.released.notified();
            let held = self.shared.lock().ledger.held();
            if held == 0 {
                break;
            }
            if tokio::time::timeout_at(deadline, released).await.is_err() {
                break;
            }
        }
        let still_held = self.shared.lock().ledger.held();
        self.shared.stop.cancel();
        self.shared.wake.notify_one();
        let task = self.driver.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(task) = task {
            let _ = task.await;
        }
        let remaining = if self.shared.config.delete_instances_on_shutdown {
            driver::delete_all(&self.shared).await
        } else {
            self.shared.lock().ledger.instances().count()
        };
        if let Err(e) = self.shared.group.shutdown().await {
            tracing::warn!(error = %e, "provider shutdown failed");
        }
        ShutdownReport {
            jobs_still_running: still_held,
            instances_remaining: remaining,
        }
    }
}

impl Shared {
    fn lock_policy_needs_idle(&self) -> bool {
        let utc = self.clock.utc();
        let inner = self.lock();
        inner.schedule.active(utc).1.idle_target(0) > 0
    }
}

/// What shutdown left behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShutdownReport {
    /// Jobs that had not released when the drain timed out.
    pub jobs_still_running: usize,
    /// Instances left in the group (0 after a confirmed deletion).
    pub instances_remaining: usize,
}

/// Removes a queued key if `acquire` is dropped or fails before it completes.
struct PendingGuard<'a> {
    shared: &'a Shared,
    key: &'a str,
    armed: bool,
}

impl Drop for PendingGuard<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let now = self.shared.clock.now();
        let mut inner = self.shared.lock();
        inner.waiters.remove(self.key);
        match inner.ledger.key(self.key) {
            Some(KeyState::Pending { .. }) => {
                inner.ledger.cancel_pending(self.key);
            }
            Some(KeyState::Acquired { .. }) => {
                inner.ledger.release(self.key, now);
                self.shared.fulfil(&mut inner);
            }
            _ => {}
        }
    }
}

/// A slot handed to a job. Release it with [`Scaler::release`] when the job ends.
pub struct Acquisition {
    key: String,
    slot: SlotRef,
    signal: Arc<LostSignal>,
    shared: Arc<Shared>,
    info: tokio::sync::Mutex<Option<ConnectInfo>>,
}

impl std::fmt::Debug for Acquisition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Acquisition")
            .field("key", &self.key)
            .field("instance", &self.slot.instance)
            .field("slot", &self.slot.slot)
            .finish()
    }
}

impl Acquisition {
    /// The key it was acquired with.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The instance's id.
    pub fn instance_id(&self) -> &str {
        &self.slot.instance
    }

    /// The slot index within the instance (`0..capacity_per_instance`), stable and never
    /// held by two jobs at once.
    pub fn slot(&self) -> usize {
        self.slot.slot
    }

    /// How to connect to the instance; fetched from the provider once and again when the
    /// credentials expire.
    pub async fn connect_info(&self) -> Result<ConnectInfo, FleetError> {
        let mut cached = self.info.lock().await;
        if let Some(info) = cached.as_ref()
            && !info.expired(SystemTime::now(), Duration::from_secs(5))
        {
            return Ok(info.clone());
        }
        let info = self.shared.group.connect_info(&self.slot.instance).await?;
        *cached = Some(info.clone());
        Ok(info)
    }

    /// A token cancelled when the instance dies under the job.
    pub fn lost_token(&self) -> CancellationToken {
        self.signal.token.clone()
    }

    /// Why the instance was lost, once it was.
    pub fn lost_cause(&self) -> Option<LostCause> {
        self.signal.cause.get().copied()
    }
}
