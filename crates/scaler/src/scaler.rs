//! The scaler handle: the API job sources use (reserve, acquire, release), its builder, and
//! shutdown.

use crate::acquisition::{Acquisition, PendingGuard};
use crate::clock::Clock;
use crate::config::ScalerConfig;
use crate::creation::Creation;
use crate::desired::Explanation;
use crate::driver;
use crate::error::ScalerError;
use crate::history::{Counters, DecisionRecord, HistoryPage, TaskOperation};
use crate::hooks::{Hooks, NoHooks};
use crate::journal::{Journal, JournalEvent, NoJournal, Persisted};
use crate::ledger::{KeyState, Ledger, ReserveOptions, SlotCounts, SlotRef, TryAcquire};
use crate::policy::Schedule;
use crate::shared::{Inner, LostSignal, Shared};
use crate::sweep;
use flotilla_fleet::{InstanceGroup, ProviderInfo, Settings};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{Notify, oneshot};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

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

impl std::fmt::Debug for ScalerBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScalerBuilder")
            .field("config", &self.config)
            .field("initialized", &self.initialized)
            .finish_non_exhaustive()
    }
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
    /// ready-up again), instances requested but never seen count as requested. The jobs
    /// that held slots ended with the old process: their slots start free, and an instance
    /// that ran one is removed for safety unless `keep_instance_with_acquisitions`.
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
        .with_preexisting(self.config.preexisting)
        .with_permanent_instances(
            !info.capabilities.can_delete_instances()
                && !self.config.legacy.removes_permanent_instances,
        )
        .with_pool_lending(info.capabilities.fixed_pool)
        .with_listing_interval(crate::ledger::requests_listing_interval(
            self.config.update_interval_when_expecting,
        ))
        .with_legacy(self.config.legacy);
        for i in self.restore.instances {
            // A permanent instance is never being removed: a mark an older flotilla recorded
            // for it would keep it out of service for ever.
            let removal = i.removal.filter(|_| !ledger.permanent_instances());
            ledger.restore(i.id, i.state, i.cause, i.use_count, removal, now);
        }
        // Recorded before the provider was asked, so the provider may never have heard of
        // them: they count as capacity for a short grace only.
        ledger.add_requested(self.restore.requested_in_flight, now);
        ledger.doubt_requested(
            self.restore.requested_in_flight,
            crate::ledger::requests_doubt_grace(self.config.update_interval_when_expecting),
        );
        let mut released = Vec::with_capacity(self.restore.acquisitions.len());
        for (key, instance, slot) in &self.restore.acquisitions {
            tracing::warn!(key = %key, instance = %instance, slot, "a job held this slot when the previous process stopped; the slot is free again");
            ledger.note_restored_acquisition(instance, key);
            // The old process is gone: its jobs no longer hold their slots. The record stays
            // while it is the only proof that the instance ran a job at a crash (it is removed
            // for safety, and a second crash before that must not forget it); it goes with
            // the instance.
            let kept = self.config.keep_instance_with_acquisitions;
            if kept || ledger.instance(instance).is_none() {
                released.push(JournalEvent::Released { key: key.clone() });
            }
        }
        self.journal
            .record_all(&released)
            .map_err(|e| ScalerError::Journal(e.to_string()))?;
        let creation = Creation::new(&self.config, now);
        let shared = Arc::new(Shared {
            inner: Mutex::new(Inner {
                ledger,
                schedule: self.schedule,
                waiters: HashMap::new(),
                signals: HashMap::new(),
                last: None,
                creation,
                history: crate::history::History::new(),
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
            tasks: TaskTracker::new(),
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
    /// The provider's `increase` failing in a row, if it is.
    pub creation_trouble: Option<crate::creation::CreationTrouble>,
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
        let preemptive = policy.preemptive();
        let idle_target = policy.idle_target(inner.ledger.acquired_total());
        let options = ReserveOptions {
            preemptive,
            max_slots: self.shared.config.max_slots(),
            lease: self.shared.config.reservation_lease,
            // taskscaler !60: reservations may hold the idle capacity, not more, so long
            // polls cannot keep surplus instances alive.
            max_bound: (preemptive && idle_target > 0).then_some(idle_target),
            // A non-preemptive reservation is a promise; binding it to an instance due for
            // idle removal would only keep that instance alive.
            stale_before: (!preemptive)
                .then(|| now.checked_sub(policy.idle_time))
                .flatten(),
        };
        let r = inner.ledger.reserve_with(key, options, now);
        // Counted for the operator only. A reservation refused when every slot the fleet
        // may have is promised has no capacity even potentially; any other refusal has none
        // free now, while the fleet may still grow.
        let op = match &r {
            Ok(()) => Some(TaskOperation::Reserve),
            Err(ScalerError::NoCapacity { why, .. }) if why.starts_with("every slot") => {
                Some(TaskOperation::ReserveIopCapacityFailure)
            }
            Err(ScalerError::NoCapacity { .. }) => {
                Some(TaskOperation::ReserveAvailableCapacityFailure)
            }
            Err(_) => None,
        };
        if let Some(op) = op {
            inner.history.task_operation(op);
        }
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
                // A heartbeat that hangs counts as failed after its own timeout, and never
                // holds the job (and the slot) past the acquire's deadline: the job is
                // offered another instance meanwhile.
                let limit = self.shared.config.acquire_heartbeat_timeout;
                let bound = if self.shared.config.legacy.unbounded_acquire_heartbeat {
                    deadline + crate::throttle::NEVER
                } else {
                    deadline.min(self.shared.clock.now() + limit)
                };
                let check = match tokio::time::timeout_at(bound, check).await {
                    Ok(result) => result,
                    Err(_) => Err(flotilla_fleet::FleetError::provider(
                        "heartbeat",
                        format!("no answer within {:?}", limit.min(timeout)),
                    )),
                };
                if let Err(e) = check {
                    tracing::warn!(instance = %slot.instance, error = %e, "heartbeat before acquisition failed");
                    // Counts towards the instance's failure threshold; the jobs already
                    // running there go on (taskscaler !109).
                    self.shared.lock().ledger.health_failure(&slot.instance);
                    self.shared.wake.notify_one();
                    requeue = true;
                    continue;
                }
                self.shared.lock().ledger.health_ok(&slot.instance);
            }
            let use_count = self
                .shared
                .lock()
                .ledger
                .instance(&slot.instance)
                .map(|i| i.use_count)
                .unwrap_or(0);
            // Recorded before the job may use the slot, outside the lock (the assignment is
            // already in the ledger, so no one else can take the slot meanwhile); if it
            // cannot be recorded, the job does not get it.
            let recorded = self.shared.journal.record(&JournalEvent::Acquired {
                key: key.to_string(),
                instance: slot.instance.clone(),
                slot: slot.slot,
                use_count,
            });
            let signal = Arc::new(LostSignal::default());
            let mut inner = self.shared.lock();
            guard.armed = false;
            if let Err(e) = recorded {
                tracing::error!(key = %key, error = %e, "cannot record the acquisition; giving the slot back");
                match inner.ledger.key(key) {
                    Some(KeyState::Acquired { .. }) => {
                        inner.ledger.undo_assignment(key);
                    }
                    _ => {
                        inner.ledger.release(key, self.shared.clock.now());
                    }
                }
                self.shared.fulfil(&mut inner);
                return Err(ScalerError::Journal(e.to_string()));
            }
            // The instance may have died while we checked or recorded it.
            match inner.ledger.key(key) {
                Some(KeyState::Acquired { slot: s }) if *s == slot => {}
                Some(KeyState::Lost { cause, .. }) => signal.fire(*cause),
                _ => {}
            }
            inner.signals.insert(key.to_string(), signal.clone());
            inner.history.task_operation(TaskOperation::Acquire);
            drop(inner);
            if self.shared.policy_needs_idle() {
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
        self.shared.release(key);
    }

    /// Reports that a job could not reach its instance (counts towards `failure_threshold`;
    /// past it the instance takes no new jobs, and the running ones go on).
    pub fn report_failure(&self, instance: &str) {
        self.shared.lock().ledger.health_failure(instance);
        self.shared.wake.notify_one();
    }

    /// Reports that a job reached its instance and ran there without a connection failure:
    /// the instance's streak of failures ends (`failure_threshold` counts consecutive ones,
    /// as GitLab documents it). An instance already past the threshold stays excluded.
    pub fn report_success(&self, instance: &str) {
        self.shared.lock().ledger.health_ok(instance);
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

    /// Instances the scaler holds (any state, removing ones included, instances left alone
    /// excluded) plus those it has requested: what counts against `max_instances`.
    pub fn fleet_size(&self) -> usize {
        let inner = self.shared.lock();
        inner
            .ledger
            .instances()
            .filter(|i| !inner.ledger.left_alone(i))
            .count()
            + inner.ledger.requested_in_flight()
    }

    /// The last decision's explanation (cheap: no copy of the ledgers).
    pub fn last_decision(&self) -> Option<Explanation> {
        self.shared.lock().last.clone()
    }

    /// The fleet's events from sequence number `from` on (1: all still kept), for readers
    /// that follow them (metrics); says how many they missed.
    pub fn history_since(&self, from: u64) -> HistoryPage {
        self.shared.lock().history.since(from)
    }

    /// The last decisions that differed from the one before, oldest first, each with its
    /// explanation.
    pub fn recent_decisions(&self) -> Vec<DecisionRecord> {
        self.shared.lock().history.decisions()
    }

    /// Counters since the scaler started: decisions by kind, scale operations, instances
    /// requested, removals by reason.
    pub fn counters(&self) -> Counters {
        self.shared.lock().history.counters()
    }

    /// The policy in force now, with its index among the configured ones (`None`: the
    /// default policy).
    pub fn policy_in_force(&self) -> (Option<usize>, crate::policy::Policy) {
        let utc = self.shared.clock.utc();
        self.shared.lock().schedule.active(utc)
    }

    /// Calendar time of the scaler's clock (anchored in simulations).
    pub fn now_utc(&self) -> chrono::DateTime<chrono::Utc> {
        self.shared.clock.utc()
    }

    /// Slot counts (cheap: no copy of the ledgers).
    pub fn counts(&self) -> SlotCounts {
        self.shared.lock().ledger.counts()
    }

    /// The provider's `increase` failing in a row, if it is (cheaper than a snapshot).
    pub fn creation_trouble(&self) -> Option<crate::creation::CreationTrouble> {
        self.shared.lock().creation.trouble()
    }

    /// A snapshot of the ledgers and the last decision.
    pub fn snapshot(&self) -> Snapshot {
        let inner = self.shared.lock();
        Snapshot {
            counts: inner.ledger.counts(),
            ledger: inner.ledger.clone(),
            last_decision: inner.last.clone(),
            creation_trouble: inner.creation.trouble(),
        }
    }

    /// Runs `f` on the ledger under the lock (for tests and the simulation's invariant
    /// checks, without copying the ledger).
    #[doc(hidden)]
    pub fn inspect<T>(&self, f: impl FnOnce(&Ledger) -> T) -> T {
        f(&self.shared.lock().ledger)
    }

    /// Runs one listing and one decision now, as the driver does each tick (for the
    /// benchmark of a whole tick; the driver keeps its own schedule).
    #[doc(hidden)]
    pub async fn drive_once(&self) {
        let _listed = driver::update(&self.shared).await;
        driver::tick(&self.shared).await;
    }

    /// Stops the driver and its tasks at once, as a crash would: no drain, no deletion, no
    /// provider shutdown. For the simulation's restarts.
    #[doc(hidden)]
    pub fn abandon(&self) {
        self.shared.stop.cancel();
        self.shared.tasks.close();
        let task = self.driver.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(task) = task {
            task.abort();
        }
    }

    /// Shuts down: hands out nothing more, waits up to `drain` for running jobs, stops the
    /// driver and waits for its ready-up tasks, deletes every instance of its own when
    /// `delete_instances_on_shutdown` is set, then shuts the provider down.
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
        // Ready-ups see the stop and end; none may touch the provider after its shutdown.
        self.shared.tasks.close();
        self.shared.tasks.wait().await;
        let remaining = if self.shared.config.delete_instances_on_shutdown {
            sweep::delete_all(&self.shared).await
        } else {
            let inner = self.shared.lock();
            inner
                .ledger
                .instances()
                .filter(|i| !inner.ledger.left_alone(i))
                .count()
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

/// What shutdown left behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShutdownReport {
    /// Jobs that had not released when the drain timed out.
    pub jobs_still_running: usize,
    /// Instances of this scaler left in the group (0 after a confirmed deletion).
    pub instances_remaining: usize,
}
