//! The simulated world: the fake provider with listing faults, the jobs, the crashes, and
//! the invariant checks run at every event.

use super::SimReport;
use super::params::SimParams;
use crate::fake_group::FakeInstanceGroup;
use async_trait::async_trait;
use flotilla_fleet::{
    ConnectInfo, FleetError, InstanceGroup, InstanceId, InstanceStatus, ProviderInfo, Settings,
    State,
};
use flotilla_scaler::{
    Cause, Clock, Hooks, Journal, JournalError, JournalEvent, Persisted, Preexisting,
    ReadyUpInstance, Scaler, ScalerBuilder, ScalerError, Schedule, ScheduledPolicy,
};
use flotilla_store::{Identity, ScopeId, Store, StoreOptions};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio::time::Instant;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// One life of an instance: its id and when it was made (or lent).
type Incarnation = (InstanceId, Instant);

/// A job holding a slot, as the simulation sees it.
struct RunningJob {
    job: u64,
    generation: u64,
}

/// What the listing faults remember.
struct Listings {
    last: Option<Vec<InstanceStatus>>,
    empty_done: bool,
}

/// Everything one simulation shares.
pub(super) struct World {
    p: SimParams,
    fake: Arc<FakeInstanceGroup>,
    start: Instant,
    store: Store,
    scope: ScopeId,
    scaler: Mutex<Option<Scaler>>,
    /// The process generation: bumped at every crash.
    generation: Arc<AtomicU64>,
    restarted_at: Mutex<Instant>,
    registry: Mutex<HashMap<(InstanceId, usize), RunningJob>>,
    /// Jobs waiting for a slot: id -> (since, generation).
    waiting: Mutex<BTreeMap<u64, (Instant, u64)>>,
    flagged: Mutex<HashSet<u64>>,
    leaked: Mutex<HashSet<InstanceId>>,
    /// The policy in force at the last check.
    policy: Mutex<Option<Option<usize>>>,
    /// When the policy in force last changed.
    policy_since: Mutex<Instant>,
    /// Since when the idle slots have been below the policy's target (while the fleet
    /// could grow), and whether that was reported.
    deficit_since: Mutex<Option<Instant>>,
    idle_flagged: Mutex<bool>,
    /// The fleet the demand of each recent tick needed, for the over-provisioning bound.
    needs: Mutex<std::collections::VecDeque<(Instant, usize)>>,
    last_tick: Mutex<Instant>,
    /// Glitched listings and how many instances each hid.
    hidden: Mutex<std::collections::VecDeque<(Instant, usize)>>,
    /// Acquires that will be dropped, and reservations never used, still in flight: demand
    /// the `waiting` map does not hold.
    side_demand: AtomicU64,
    last_saturated: Mutex<Instant>,
    /// Jobs each instance ran, by incarnation: a pool lends the same id again as a new
    /// machine.
    uses: Mutex<HashMap<Incarnation, u32>>,
    crashed_on: Mutex<HashSet<Incarnation>>,
    foreign: Mutex<HashSet<InstanceId>>,
    listings: Mutex<Listings>,
    tasks: Mutex<Vec<(u64, JoinHandle<()>)>>,
    rng: Mutex<ChaCha8Rng>,
    violations: Mutex<Vec<String>>,
    report: Mutex<SimReport>,
    history: Mutex<DefaultHasher>,
}

impl World {
    fn violation(&self, what: String) {
        let at = self.start.elapsed().as_secs_f64();
        let mut v = lock(&self.violations);
        if v.len() < 20 {
            v.push(format!("t={at:.1}s: {what}"));
        }
    }

    fn record(&self, event: impl Hash) {
        let at = self.start.elapsed().as_millis();
        let mut h = lock(&self.history);
        at.hash(&mut *h);
        event.hash(&mut *h);
    }

    fn report(&self) -> MutexGuard<'_, SimReport> {
        lock(&self.report)
    }

    fn current(&self) -> Option<Scaler> {
        lock(&self.scaler).clone()
    }

    fn chance(&self, p: f64) -> bool {
        p > 0.0 && lock(&self.rng).random_bool(p.min(1.0))
    }

    fn draw(&self, (lo, hi): (Duration, Duration)) -> Duration {
        if hi <= lo {
            return lo;
        }
        let ms = lock(&self.rng).random_range(0..=hi.checked_sub(lo).unwrap().as_millis() as u64);
        lo + Duration::from_millis(ms)
    }

    /// Fleeting's `increase` returns no ids, so an instance someone else creates while our
    /// requests are outstanding is matched to them and taken for ours (documented in the
    /// scaler's `requests.rs`). From then on it is the scaler's, for the checks too.
    fn reconcile_foreign(&self) {
        let Some(scaler) = self.current() else {
            return;
        };
        let foreign: Vec<InstanceId> = lock(&self.foreign).iter().cloned().collect();
        let (taken, left_alone_ours): (Vec<InstanceId>, Vec<InstanceId>) = scaler.inspect(|l| {
            let taken = foreign
                .iter()
                .filter(|id| l.instance(id).is_some_and(|i| i.cause != Cause::Preexisted))
                .cloned()
                .collect();
            let ours = l
                .instances()
                .filter(|i| l.left_alone(i) && !foreign.contains(&i.id))
                .filter(|i| self.fake.instance(&i.id).is_some_and(|f| !f.preexisting))
                .map(|i| i.id.clone())
                .collect();
            (taken, ours)
        });
        let mut f = lock(&self.foreign);
        let mut r = self.report();
        for id in taken {
            f.remove(&id);
            r.foreign_taken_for_ours += 1;
        }
        // For every foreign instance taken for ours, one of the scaler's own, arriving in the
        // same listing or a later one, was matched to no request and taken for someone
        // else's: a swap, not a leak.
        let mut swaps_left = r.foreign_taken_for_ours.saturating_sub(r.swapped);
        for id in left_alone_ours {
            if swaps_left == 0 {
                break;
            }
            f.insert(id);
            r.swapped += 1;
            swaps_left -= 1;
        }
    }

    /// Checks every invariant that can be checked now. Called at every event; never with
    /// the scaler's lock held.
    fn check(&self, what: &'static str) {
        let now = Instant::now();
        self.report().checks += 1;
        self.reconcile_foreign();
        let max = self.p.scaler.max_instances;
        // The instances the scaler created and has not been told to leave alone (those it
        // took for someone else's after a swap are excluded, and so are the pre-existing
        // ones it adopted: it counts those too, but their arrival is not its doing).
        let ours = {
            let foreign = lock(&self.foreign);
            self.fake
                .ids()
                .iter()
                .filter(|id| !foreign.contains(*id))
                .filter(|id| self.fake.instance(id).is_some_and(|i| !i.preexisting))
                .count()
        };
        {
            let mut r = self.report();
            r.peak_instances = r.peak_instances.max(ours);
        }
        if max > 0 && ours > max {
            self.violation(format!(
                "after {what}: {ours} of the scaler's instances exceed max_instances {max}"
            ));
        }
        // No leak: an instance of ours that timed out is asked to be deleted within the
        // grace (it counts against the limit and serves nobody).
        for (id, state) in self.fake.snapshot() {
            if state != State::Timeout || lock(&self.foreign).contains(&id) {
                continue;
            }
            if let Some(i) = self.fake.instance(&id)
                && i.delete_requests == 0
                && now.saturating_duration_since(i.ready_at.max(self.outage_excuse(now)))
                    > self.p.liveness_grace
                && lock(&self.leaked).insert(id.clone())
            {
                self.violation(format!(
                    "{id} timed out {:.0}s ago and was never asked to be deleted",
                    now.saturating_duration_since(i.ready_at).as_secs_f64()
                ));
            }
        }
        let Some(scaler) = self.current() else {
            return;
        };
        if let Some(d) = scaler.last_decision() {
            let mut last = lock(&self.policy);
            if *last != Some(d.policy_index) {
                if last.is_some() {
                    self.report().policy_switches += 1;
                }
                *last = Some(d.policy_index);
                *lock(&self.policy_since) = now;
            }
        }
        if let Err(e) = scaler.check_invariants() {
            self.violation(format!("after {what}: ledger: {e}"));
        }
        // Live and busy: running, ours, holding a job and offering no free slot (the rest
        // are busy too, or the instance takes no more work: used up or unhealthy).
        let busy = scaler.inspect(|l| {
            l.instances()
                .filter(|i| {
                    !l.left_alone(i)
                        && i.state == State::Running
                        && i.acquired() > 0
                        && !(l.allocatable(i) && i.has_free())
                })
                .count()
        });
        // Instances the provider refuses to delete still count against `max_instances`
        // (deleting ones included): the limit is held by them, not by the scaler.
        let refused = self
            .fake
            .snapshot()
            .into_iter()
            .filter_map(|(id, _)| self.fake.instance(&id))
            .filter(|i| i.delete_requests > 0 && i.refuses_deletion_until.is_some_and(|u| now < u))
            .count();
        if max > 0 && busy + refused >= max {
            *lock(&self.last_saturated) = now;
        }
        let excused_from = (*lock(&self.last_saturated))
            .max(*lock(&self.restarted_at))
            .max(self.outage_excuse(now));
        let late: Vec<(u64, Instant)> = lock(&self.waiting)
            .iter()
            .filter(|(_, (since, _))| {
                now.saturating_duration_since((*since).max(excused_from)) > self.p.liveness_grace
            })
            .map(|(id, (since, _))| (*id, *since))
            .collect();
        for (job, since) in late {
            if lock(&self.flagged).insert(job) {
                let snap = scaler.snapshot();
                self.violation(format!(
                    "liveness: job-{job} has waited {:.0}s (grace {:?}) while only {busy} of \
                     max {max} instances were live and busy; provider: {:?}; last decision: {}",
                    now.saturating_duration_since(since).as_secs_f64(),
                    self.p.liveness_grace,
                    self.fake.snapshot(),
                    snap.last_decision
                        .map(|d| d.to_string())
                        .unwrap_or_default()
                ));
            }
        }
    }

    /// Notes that a glitched listing hid `n` instances: the scaler may replace them, and
    /// the replacements are surplus once listings are whole again.
    fn hid(&self, n: usize) {
        if n > 0 {
            lock(&self.hidden).push_back((Instant::now(), n));
        }
    }

    /// The instance now under `id` (`None` once gone): a pool's id lent again is another.
    fn incarnation(&self, id: &str) -> Option<Incarnation> {
        self.fake
            .instance(id)
            .map(|i| (id.to_string(), i.created_at))
    }

    /// The latest moment a listing outage excuses: `now` during one, the end of the last one
    /// after it (no scaler sees instances the provider cannot list), the start otherwise.
    fn outage_excuse(&self, now: Instant) -> Instant {
        let mut excuse = self.start;
        for (from, to) in &self.p.listing_outages {
            let (from, to) = (self.start + *from, self.start + *to);
            if from <= now {
                excuse = excuse.max(to.min(now));
            }
        }
        excuse
    }

    /// Whether every listing fails now.
    fn in_outage(&self, now: Instant) -> bool {
        self.p
            .listing_outages
            .iter()
            .any(|(a, b)| self.start + *a <= now && now < self.start + *b)
    }

    /// Whether `[from, to]` overlaps a listing outage or the grace after one.
    fn overlaps_outage(&self, from: Instant, to: Instant) -> bool {
        self.p.listing_outages.iter().any(|(a, b)| {
            let (a, b) = (self.start + *a, self.start + *b + self.p.liveness_grace);
            from < b && a < to
        })
    }

    /// The policy in force (the scaler's last decision says which).
    fn policy_in_force(&self, scaler: &Scaler) -> Option<&flotilla_scaler::Policy> {
        let index = scaler.last_decision()?.policy_index?;
        self.p.policies.get(index).map(|sp| &sp.policy)
    }

    /// The fleet-level checks, every tick: the idle target is kept (9), and the fleet holds
    /// no more instances than the recent demand explains (10).
    fn fleet_checks(&self) {
        let now = Instant::now();
        let dt = now
            .saturating_duration_since(std::mem::replace(&mut *lock(&self.last_tick), now))
            .as_secs_f64();
        let Some(scaler) = self.current() else {
            return;
        };
        let Some(policy) = self.policy_in_force(&scaler).cloned() else {
            return;
        };
        let running = lock(&self.registry).len();
        let target = policy.idle_target(running);
        let cap = self.p.scaler.capacity_per_instance.max(1);
        let max_use = self.p.scaler.max_use_count;
        let foreign = lock(&self.foreign).clone();
        // Instances of ours in the group (adopted ones and those being deleted included:
        // `max_instances` counts them), and those that can still serve.
        let mut held = 0usize;
        let mut serving = 0usize;
        for (id, state) in self.fake.snapshot() {
            if foreign.contains(&id) {
                continue;
            }
            held += 1;
            // The over-provisioning bound counts the instances the scaler made and has not
            // asked to delete: not those it found in the group (adopted, or this host).
            let made_and_kept = self
                .fake
                .instance(&id)
                .is_some_and(|i| i.delete_requests == 0 && !i.preexisting);
            if matches!(state, State::Creating | State::Running) && made_and_kept {
                serving += 1;
            }
        }

        // 9. The idle target: the slots a job can still have (counted with the world's own
        // tally of jobs and uses per instance, not the scaler's), on usable instances and
        // those requested, cover `idle_count` (raised by `scale_factor`) whenever the fleet
        // may grow, within the grace creation failures explain.
        let (usable, requested) = scaler.inspect(|l| {
            let usable: Vec<InstanceId> = l
                .instances()
                .filter(|i| l.usable(i))
                .map(|i| i.id.clone())
                .collect();
            (usable, l.requested_in_flight())
        });
        let idle = {
            let registry = lock(&self.registry);
            let uses = lock(&self.uses);
            usable
                .iter()
                .map(|id| {
                    let jobs = registry.keys().filter(|(i, _)| i == id).count();
                    let free = cap.saturating_sub(jobs);
                    match max_use {
                        0 => free,
                        m => {
                            let used = self
                                .incarnation(id)
                                .and_then(|i| uses.get(&i).copied())
                                .unwrap_or(0);
                            free.min(m.saturating_sub(used) as usize)
                        }
                    }
                })
                .sum::<usize>()
        } + requested * cap;
        let limit = match (self.p.scaler.max_instances, self.p.provider.pool) {
            (0, None) => usize::MAX,
            (0, Some(pool)) => pool,
            (max, pool) => max.min(pool.unwrap_or(usize::MAX)),
        };
        let can_grow = !self.p.provider.capabilities.single_host && held + requested < limit;
        if can_grow && idle < target {
            let since = *lock(&self.deficit_since).get_or_insert(now);
            let from = since
                .max(*lock(&self.restarted_at))
                .max(*lock(&self.policy_since))
                .max(self.outage_excuse(now));
            if now.saturating_duration_since(from) > self.p.idle_grace
                && !std::mem::replace(&mut *lock(&self.idle_flagged), true)
            {
                self.violation(format!(
                    "idle target: {idle} slots a job can still have, below the target of \
                     {target}, for {:.0}s (grace {:?}) while the fleet could grow ({held} \
                     held, {requested} requested, limit {limit})",
                    now.saturating_duration_since(since).as_secs_f64(),
                    self.p.idle_grace
                ));
            }
        } else {
            *lock(&self.deficit_since) = None;
        }

        // 10. Billed instance-time: the instances that can serve never exceed, for long, what
        // the demand of the recent past needs (jobs running and waiting, reservations, and
        // the idle target, in instances of the slots one may still run). The window covers
        // an instance's creation, ready-up and `idle_time`, and a slow tick to decide.
        let side = self.side_demand.load(Ordering::SeqCst) as usize;
        let waiting = lock(&self.waiting).len() + side;
        let per_instance = if max_use > 0 { 1 } else { cap };
        let mut need = (running + waiting + target).div_ceil(per_instance);
        if self.p.scaler.max_instances > 0 {
            need = need.min(self.p.scaler.max_instances);
        }
        // Instances made for demand during a listing outage cannot be seen, so neither used
        // nor removed, until listings resume: all the demand since the outage began explains
        // them until a window after its end. (Not more: requests made again and again
        // while listings fail are what this bound is for.)
        let window = self.p.overprovision_window();
        let since = self
            .p
            .listing_outages
            .iter()
            .filter(|(a, b)| self.start + *a <= now && now <= self.start + *b + window)
            .map(|(a, _)| self.start + *a)
            .min()
            .unwrap_or(now)
            .min(now.checked_sub(window).unwrap_or(self.start));
        let allowed = {
            let mut needs = lock(&self.needs);
            needs.push_back((now, need));
            // Later ticks look back no further than this one does.
            while needs.front().is_some_and(|(t, _)| *t < since) {
                needs.pop_front();
            }
            needs.iter().map(|(_, n)| *n).max().unwrap_or(need)
        };
        // A glitched listing hides instances, and a correct scaler replaces those the jobs
        // and the idle target need: they explain as many more for a window.
        let hidden = {
            let mut hidden = lock(&self.hidden);
            while hidden
                .front()
                .is_some_and(|(t, _)| now.saturating_duration_since(*t) > window)
            {
                hidden.pop_front();
            }
            hidden.iter().map(|(_, n)| *n).max().unwrap_or(0)
        };
        let allowed = allowed + hidden;
        let mut r = self.report();
        r.best_instance_secs += need as f64 * dt;
        r.excess_instance_secs += serving.saturating_sub(allowed) as f64 * dt;
    }

    /// Builds and starts a scaler of `generation` from what the store holds.
    async fn start_scaler(
        self: &Arc<Self>,
        generation: u64,
        restore: Persisted,
    ) -> Result<Scaler, ScalerError> {
        let mut policies = Vec::new();
        for sp in &self.p.policies {
            let p = ScheduledPolicy::new(sp.policy.clone(), &sp.periods, Some(&sp.timezone))
                .map_err(|e| ScalerError::Init(e.to_string()))?;
            policies.push(p);
        }
        let elapsed = chrono::Duration::from_std(self.start.elapsed()).unwrap_or_default();
        let journal = Arc::new(GatedJournal {
            inner: self.store.journal(self.scope),
            generation,
            current: self.generation.clone(),
        });
        ScalerBuilder::new(Arc::new(Watched(self.clone())), self.p.scaler.clone())
            .schedule(Schedule::new(policies))
            .clock(Clock::anchored(self.p.start_utc + elapsed))
            .hooks(Arc::new(SimHooks(self.clone())))
            .journal(journal)
            .restore(restore)
            .start()
            .await
    }

    /// Crashes the scaler process and starts a new one from the store.
    async fn crash_and_restart(self: &Arc<Self>) {
        let old = lock(&self.scaler).take();
        let old_gen = self.generation.fetch_add(1, Ordering::SeqCst);
        if let Some(s) = old {
            s.abandon();
        }
        for (g, h) in lock(&self.tasks).iter() {
            if *g == old_gen {
                h.abort();
            }
        }
        {
            let mut reg = lock(&self.registry);
            let mut crashed = lock(&self.crashed_on);
            let before = reg.len();
            reg.retain(|(inst, _), j| {
                let keep = j.generation != old_gen;
                if !keep && let Some(incarnation) = self.incarnation(inst) {
                    crashed.insert(incarnation);
                }
                keep
            });
            self.report().running_at_crash += (before - reg.len()) as u64;
        }
        {
            let mut w = lock(&self.waiting);
            let before = w.len();
            w.retain(|_, (_, g)| *g != old_gen);
            self.report().interrupted += (before - w.len()) as u64;
        }
        self.record(("crash", old_gen));
        self.check("crash");
        tokio::time::sleep(self.p.restart_gap).await;
        let persisted = match self.store.load_fleet(self.scope) {
            Ok(p) => p,
            Err(e) => {
                self.violation(format!("cannot load the fleet after a crash: {e}"));
                return;
            }
        };
        match self.start_scaler(old_gen + 1, persisted).await {
            Ok(s) => *lock(&self.scaler) = Some(s),
            Err(e) => {
                self.violation(format!("the scaler did not restart: {e}"));
                return;
            }
        }
        *lock(&self.restarted_at) = Instant::now();
        self.report().restarts += 1;
        self.check("restart");
    }

    /// Runs one simulation.
    pub(super) async fn simulate(p: SimParams) -> SimReport {
        // Memory-backed where there is one: the simulation exercises the store's logic;
        // its durability on disk is tested in the store's own crash tests.
        let dir = match tempfile::tempdir_in("/dev/shm").or_else(|_| tempfile::tempdir()) {
            Ok(d) => d,
            Err(e) => return failed(format!("no temporary directory: {e}")),
        };
        let store = match Store::open(dir.path().join("state.db"), StoreOptions::default()) {
            Ok(s) => s,
            Err(e) => return failed(format!("cannot open the store: {e}")),
        };
        let scope = match store.scope(&Identity::new("https://gitlab.example.com", "1", "sim")) {
            Ok(s) => s,
            Err(e) => return failed(format!("cannot make a scope: {e}")),
        };
        let fake = Arc::new(FakeInstanceGroup::new(p.provider.clone(), p.seed));
        let now = Instant::now();
        let world = Arc::new(World {
            fake: fake.clone(),
            start: now,
            store,
            scope,
            scaler: Mutex::new(None),
            generation: Arc::new(AtomicU64::new(0)),
            restarted_at: Mutex::new(now),
            registry: Mutex::new(HashMap::new()),
            waiting: Mutex::new(BTreeMap::new()),
            flagged: Mutex::new(HashSet::new()),
            leaked: Mutex::new(HashSet::new()),
            policy: Mutex::new(None),
            policy_since: Mutex::new(now),
            deficit_since: Mutex::new(None),
            idle_flagged: Mutex::new(false),
            needs: Mutex::new(std::collections::VecDeque::new()),
            last_tick: Mutex::new(now),
            hidden: Mutex::new(std::collections::VecDeque::new()),
            side_demand: AtomicU64::new(0),
            last_saturated: Mutex::new(now),
            uses: Mutex::new(HashMap::new()),
            crashed_on: Mutex::new(HashSet::new()),
            foreign: Mutex::new(HashSet::new()),
            listings: Mutex::new(Listings {
                last: None,
                empty_done: false,
            }),
            tasks: Mutex::new(Vec::new()),
            rng: Mutex::new(ChaCha8Rng::seed_from_u64(p.seed ^ 0x4e7)),
            violations: Mutex::new(Vec::new()),
            report: Mutex::new(SimReport::default()),
            history: Mutex::new(DefaultHasher::new()),
            p,
        });
        let ignore = world.p.scaler.preexisting == Preexisting::Ignore;
        for _ in 0..world.p.foreign_at_start {
            let id = fake.add_running();
            if ignore {
                lock(&world.foreign).insert(id);
            }
        }
        let report = world.clone().run_world().await;
        // The scaler's provider and hooks hold the world: break the cycle, or every seed
        // would keep its store (and its open files) alive.
        lock(&world.scaler).take();
        lock(&world.tasks).clear();
        report
    }

    async fn run_world(self: Arc<Self>) -> SimReport {
        let world = self;
        let fake = world.fake.clone();
        match world.start_scaler(0, Persisted::default()).await {
            Ok(s) => *lock(&world.scaler) = Some(s),
            Err(e) => {
                world.violation(format!("the scaler did not start: {e}"));
                return world.finish();
            }
        }
        let chaos = world.clone().spawn_chaos();
        world.clone().workload().await;
        loop {
            let handles: Vec<JoinHandle<()>> =
                lock(&world.tasks).drain(..).map(|(_, h)| h).collect();
            if handles.is_empty() {
                break;
            }
            for h in handles {
                let _ = h.await;
            }
        }
        for c in chaos {
            c.abort();
        }
        world.check("last job");
        let Some(scaler) = world.current() else {
            world.violation("no scaler at the end".into());
            return world.finish();
        };
        let report = scaler.shutdown(Duration::from_secs(60)).await;
        if report.jobs_still_running > 0 {
            world.violation(format!(
                "{} jobs still held after every job ended",
                report.jobs_still_running
            ));
        }
        let foreign = lock(&world.foreign).clone();
        // This host (a single-host group) is never deleted: it is the machine itself.
        let permanent = world.p.provider.capabilities.single_host;
        let left: Vec<(InstanceId, State)> = fake
            .snapshot()
            .into_iter()
            .filter(|(id, _)| !foreign.contains(id))
            .filter(|(id, _)| !(permanent && fake.instance(id).is_some_and(|i| i.preexisting)))
            .collect();
        if report.instances_remaining > 0 || !left.is_empty() {
            world.violation(format!(
                "after shutdown with deletion the scaler's instances remain: {left:?}"
            ));
        }
        for id in &foreign {
            // Instances the scaler created and took for someone else's after a swap may have
            // timed out on their own; the ones someone else created must be as they were.
            let theirs = fake.instance(id).is_some_and(|i| i.preexisting);
            if theirs && fake.state_of(id) != Some(State::Running) {
                world.violation(format!("foreign instance {id} was touched"));
            }
        }
        let r = world.report().clone();
        // Not vacuous: the faults this seed was to inject happened.
        let glitchy = world.p.lag_rate + world.p.flap_rate > 0.0;
        if r.restarts < world.p.restarts.len() as u64 || (glitchy && r.listing_glitches == 0) {
            world.violation(format!(
                "the seed injected too few faults: {} restarts of {}, {} listing glitches",
                r.restarts,
                world.p.restarts.len(),
                r.listing_glitches
            ));
        }
        if !world.p.listing_outages.is_empty() && r.outage_listings == 0 {
            world.violation("the seed's listing outages never happened".into());
        }
        if r.served_ratio() < world.p.min_served {
            world.violation(format!(
                "only {} of {} jobs got a slot within instance_acquire_timeout ({:.1}%; {} \
                 timed out across a listing outage are not counted)",
                r.served,
                r.served + r.timed_out - r.timed_out_in_outage,
                100.0 * r.served_ratio(),
                r.timed_out_in_outage
            ));
        }
        // 10, at the end: the instance-time the fleet held beyond what the recent demand
        // needed stays small against what the workload needed at best.
        let allowance = world.p.overprovision_allowance(r.best_instance_secs);
        if r.excess_instance_secs > allowance {
            world.violation(format!(
                "over-provisioned: {:.0} instance-seconds held beyond what the demand of the \
                 last {:?} needed (allowance {allowance:.0}; the workload needed {:.0} at best, \
                 {:.0} were billed)",
                r.excess_instance_secs,
                world.p.overprovision_window(),
                r.best_instance_secs,
                fake.billed_time().as_secs_f64()
            ));
        }
        world.finish()
    }

    fn finish(&self) -> SimReport {
        let mut r = self.report().clone();
        r.billed_instance_secs = self.fake.billed_time().as_secs_f64();
        r.violations = lock(&self.violations).clone();
        r.digest = lock(&self.history).clone().finish();
        r
    }

    /// Faults from outside, restarts, and a periodic check.
    fn spawn_chaos(self: Arc<Self>) -> Vec<JoinHandle<()>> {
        let mut out = Vec::new();
        let w = self.clone();
        out.push(tokio::spawn(async move {
            let mut rng = ChaCha8Rng::seed_from_u64(w.p.seed ^ 0xc4a0_5000);
            loop {
                tokio::time::sleep(Duration::from_secs(30)).await;
                let ids: Vec<InstanceId> = {
                    let foreign = lock(&w.foreign);
                    w.fake
                        .ids()
                        .into_iter()
                        .filter(|i| !foreign.contains(i))
                        .collect()
                };
                if ids.is_empty() {
                    continue;
                }
                let every = w.p.external_removal_every.as_secs_f64();
                if rng.random_bool((30.0 / every).min(1.0)) {
                    let id = &ids[rng.random_range(0..ids.len())];
                    w.fake.remove_from_outside(id);
                    w.record(("removed", id.clone()));
                    w.check("removal from outside");
                }
                if let Some(every) = w.p.unhealthy_every
                    && rng.random_bool((30.0 / every.as_secs_f64()).min(1.0))
                {
                    let id = &ids[rng.random_range(0..ids.len())];
                    w.fake.set_unhealthy(id, true);
                    w.record(("unhealthy", id.clone()));
                    w.check("instance turned unhealthy");
                }
            }
        }));
        let w = self.clone();
        out.push(tokio::spawn(async move {
            let Some(at) = w.p.foreign_mid_run_at else {
                return;
            };
            tokio::time::sleep(at).await;
            let id = w.fake.add_running();
            if w.p.scaler.preexisting == Preexisting::Ignore {
                lock(&w.foreign).insert(id.clone());
            }
            w.record(("foreign", id));
            w.check("foreign instance appeared");
        }));
        let w = self.clone();
        out.push(tokio::spawn(async move {
            let mut last = Duration::ZERO;
            for at in w.p.restarts.clone() {
                tokio::time::sleep(at.saturating_sub(last)).await;
                last = at;
                w.crash_and_restart().await;
            }
        }));
        let w = self;
        out.push(tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(10)).await;
                w.check("tick");
                w.fleet_checks();
            }
        }));
        out
    }

    /// The arrival process.
    async fn workload(self: Arc<Self>) {
        let mut rng = ChaCha8Rng::seed_from_u64(self.p.seed ^ 0x0b5e_55ed);
        let end = self.start + self.p.duration;
        let mut id = 0u64;
        while Instant::now() < end {
            let u: f64 = rng.random_range(f64::EPSILON..1.0);
            let mean = 1.0 / self.p.arrival_rate.max(1e-9);
            tokio::time::sleep(Duration::from_secs_f64(-mean * u.ln())).await;
            let n = if rng.random_bool(self.p.burst_probability.clamp(0.0, 1.0)) {
                rng.random_range(1..=self.p.burst_max.max(1))
            } else {
                1
            };
            for _ in 0..n {
                id += 1;
                let r: f64 = rng.random_range(0.0..1.0);
                let duration = {
                    let (lo, hi) = self.p.job;
                    lo + Duration::from_millis(
                        rng.random_range(0..=hi.checked_sub(lo).unwrap().as_millis() as u64),
                    )
                };
                let kind = if r < self.p.drop_fraction {
                    Kind::Dropped(Duration::from_secs(rng.random_range(1..=120)))
                } else if r < self.p.drop_fraction + self.p.unused_reservation_fraction {
                    Kind::UnusedReservation(
                        Duration::from_secs(rng.random_range(1..=400)),
                        rng.random_bool(0.5),
                    )
                } else {
                    Kind::Normal
                };
                let cancel_after = rng
                    .random_bool(self.p.cancel_fraction.clamp(0.0, 1.0))
                    .then(|| duration.mul_f64(rng.random_range(0.0..1.0)));
                let spec = JobSpec {
                    id,
                    kind,
                    run_for: cancel_after.unwrap_or(duration),
                };
                let generation = self.generation.load(Ordering::SeqCst);
                let h = tokio::spawn(self.clone().job(spec, generation));
                let mut tasks = lock(&self.tasks);
                tasks.push((generation, h));
                if tasks.len() > 512 {
                    tasks.retain(|(_, h)| !h.is_finished());
                }
            }
        }
    }

    /// The scaler of `generation`, once it is up.
    async fn scaler_of(&self, generation: u64) -> Scaler {
        loop {
            if self.generation.load(Ordering::SeqCst) == generation
                && let Some(s) = self.current()
            {
                return s;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    async fn job(self: Arc<Self>, spec: JobSpec, generation: u64) {
        let key = format!("job-{}", spec.id);
        let scaler = self.scaler_of(generation).await;
        match spec.kind {
            Kind::UnusedReservation(hold, unreserve) => {
                if scaler.reserve(&key).is_ok() {
                    self.report().unused_reservations += 1;
                    self.check("reservation");
                    self.side_demand.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(hold).await;
                    self.side_demand.fetch_sub(1, Ordering::SeqCst);
                    if unreserve {
                        scaler.unreserve(&key);
                    }
                    self.check("reservation ended");
                }
                return;
            }
            Kind::Dropped(after) => {
                self.side_demand.fetch_add(1, Ordering::SeqCst);
                let got = tokio::time::timeout(after, scaler.acquire(&key, None)).await;
                self.side_demand.fetch_sub(1, Ordering::SeqCst);
                match got {
                    Ok(Ok(acq)) => {
                        self.report().jobs += 1;
                        self.report().served += 1;
                        self.run(&scaler, acq, spec.id, spec.run_for, generation)
                            .await;
                    }
                    Ok(Err(_)) => {}
                    Err(_) => {
                        self.report().dropped += 1;
                        self.check("acquire dropped");
                    }
                }
                return;
            }
            Kind::Normal => {}
        }
        let arrived = Instant::now();
        self.report().jobs += 1;
        lock(&self.waiting).insert(spec.id, (arrived, generation));
        self.check("job arrived");
        if self.p.reserve_first {
            loop {
                match scaler.reserve(&key) {
                    Ok(()) => break,
                    Err(ScalerError::NoCapacity { .. }) => {
                        tokio::time::sleep(Duration::from_secs(3)).await;
                    }
                    Err(e) => {
                        self.violation(format!("reserve {key}: unexpected error {e}"));
                        lock(&self.waiting).remove(&spec.id);
                        return;
                    }
                }
            }
        }
        let asked = Instant::now();
        let acquired = scaler.acquire(&key, None).await;
        lock(&self.waiting).remove(&spec.id);
        let waited = arrived.elapsed().as_secs_f64();
        // 11. A hard bound per job: no acquire outlives `instance_acquire_timeout`, whatever
        // the provider does (a heartbeat that hangs, a listing that never comes).
        let acquire_took = asked.elapsed();
        let bound = self.p.scaler.instance_acquire_timeout + Duration::from_secs(1);
        if acquire_took > bound {
            self.violation(format!(
                "job-{} waited {:.0}s in acquire, past instance_acquire_timeout {:?}",
                spec.id,
                acquire_took.as_secs_f64(),
                self.p.scaler.instance_acquire_timeout
            ));
        }
        {
            let mut r = self.report();
            r.longest_wait_secs = r.longest_wait_secs.max(waited);
        }
        match acquired {
            Ok(acq) => {
                self.report().served += 1;
                self.run(&scaler, acq, spec.id, spec.run_for, generation)
                    .await;
            }
            Err(ScalerError::AcquireTimeout(_)) => {
                self.report().timed_out += 1;
                if self.overlaps_outage(arrived, Instant::now()) {
                    self.report().timed_out_in_outage += 1;
                }
                self.record(("timeout", spec.id));
                scaler.release(&key);
                self.check("acquire timed out");
            }
            Err(e) => self.violation(format!("acquire {key}: unexpected error {e}")),
        }
    }

    async fn run(
        &self,
        scaler: &Scaler,
        acq: flotilla_scaler::Acquisition,
        job: u64,
        run_for: Duration,
        generation: u64,
    ) {
        let inst = acq.instance_id().to_string();
        let slot = acq.slot();
        let key = acq.key().to_string();
        self.reconcile_foreign();
        match self.fake.state_of(&inst) {
            Some(State::Running) => {}
            // Deleted from outside after the last listing: the scaler could not know.
            None if self.fake.was_removed_from_outside(&inst) => {}
            other => self.violation(format!(
                "{key} got slot {slot} on {inst} which is {other:?}, not running"
            )),
        }
        if lock(&self.foreign).contains(&inst) {
            self.violation(format!("{key} got a slot on foreign instance {inst}"));
        }
        let incarnation = self.incarnation(&inst);
        if !self.p.scaler.keep_instance_with_acquisitions
            && incarnation
                .as_ref()
                .is_some_and(|i| lock(&self.crashed_on).contains(i))
        {
            self.violation(format!(
                "{key} got a slot on {inst}, which ran a job when the scaler crashed"
            ));
        }
        let max_use = self.p.scaler.max_use_count;
        let used = {
            let mut uses = lock(&self.uses);
            let n = uses
                .entry(incarnation.unwrap_or_else(|| (inst.clone(), self.start)))
                .or_default();
            *n += 1;
            *n
        };
        if max_use > 0 && used > max_use {
            self.violation(format!(
                "{key} is job {used} on {inst}, past max_use_count {max_use}"
            ));
        }
        if let Some(other) =
            lock(&self.registry).insert((inst.clone(), slot), RunningJob { job, generation })
        {
            self.violation(format!(
                "slot {slot} of {inst} held by job-{} and {key}",
                other.job
            ));
        }
        self.record(("run", job, inst.clone(), slot));
        self.check("job started");
        let lost = acq.lost_token();
        tokio::select! {
            biased;
            () = lost.cancelled() => {
                self.report().lost += 1;
                // The job notices and tears down; its slot is still in use meanwhile.
                tokio::time::sleep(self.draw(self.p.teardown)).await;
            }
            () = tokio::time::sleep(run_for) => {
                self.report().completed += 1;
            }
        }
        lock(&self.registry).remove(&(inst, slot));
        scaler.release(&key);
        self.check("job ended");
    }
}

fn failed(why: String) -> SimReport {
    SimReport {
        violations: vec![why],
        ..Default::default()
    }
}

enum Kind {
    Normal,
    /// The acquire is dropped after this long if it has not got a slot.
    Dropped(Duration),
    /// Reserve, hold it this long, then unreserve (true) or let it expire.
    UnusedReservation(Duration, bool),
}

struct JobSpec {
    id: u64,
    kind: Kind,
    run_for: Duration,
}

/// A journal that stops writing when its process "crashed".
struct GatedJournal {
    inner: Arc<dyn Journal>,
    generation: u64,
    current: Arc<AtomicU64>,
}

impl GatedJournal {
    fn alive(&self) -> Result<(), JournalError> {
        if self.current.load(Ordering::SeqCst) == self.generation {
            Ok(())
        } else {
            Err(JournalError("the process is gone".into()))
        }
    }
}

impl Journal for GatedJournal {
    fn record(&self, event: &JournalEvent) -> Result<(), JournalError> {
        self.alive()?;
        self.inner.record(event)
    }

    fn record_all(&self, events: &[JournalEvent]) -> Result<(), JournalError> {
        self.alive()?;
        self.inner.record_all(events)
    }
}

/// Ready-ups that take a while and sometimes fail.
struct SimHooks(Arc<World>);

#[async_trait]
impl Hooks for SimHooks {
    async fn ready_up_instance(
        &self,
        _group: &dyn InstanceGroup,
        instance: &ReadyUpInstance,
    ) -> Result<(), String> {
        let w = &self.0;
        tokio::time::sleep(w.draw(w.p.ready_up_latency)).await;
        let failed = w.chance(w.p.ready_up_failure_rate);
        w.record(("ready-up", instance.id.clone(), failed));
        if failed {
            w.report().ready_up_failures += 1;
        }
        if failed {
            Err("instance_ready_command exited with 1".into())
        } else {
            Ok(())
        }
    }
}

/// The fake group with listing faults, watched: every call is an event.
struct Watched(Arc<World>);

#[async_trait]
impl InstanceGroup for Watched {
    async fn init(&self, s: &Settings) -> Result<ProviderInfo, FleetError> {
        self.0.fake.init(s).await
    }

    async fn update(&self) -> Result<Vec<InstanceStatus>, FleetError> {
        let w = &self.0;
        w.check("listing");
        let now = Instant::now();
        if w.in_outage(now) {
            w.report().outage_listings += 1;
            return Err(FleetError::provider("update", "listing outage"));
        }
        let listing = match w.fake.update().await {
            Ok(l) => l,
            Err(e) => {
                w.report().provider_errors += 1;
                return Err(e);
            }
        };
        let mut l = lock(&w.listings);
        if !l.empty_done && w.start.elapsed() >= w.p.empty_listing_at {
            l.empty_done = true;
            w.record("empty listing");
            w.report().listing_glitches += 1;
            w.hid(listing.len());
            return Ok(Vec::new());
        }
        if w.chance(w.p.lag_rate)
            && let Some(prev) = &l.last
        {
            w.record("lagging listing");
            w.report().listing_glitches += 1;
            w.hid(listing.len().saturating_sub(prev.len()));
            return Ok(prev.clone());
        }
        l.last = Some(listing.clone());
        if w.chance(w.p.flap_rate) {
            let mut rng = lock(&w.rng);
            let whole = listing.len();
            let partial: Vec<InstanceStatus> = listing
                .into_iter()
                .filter(|_| rng.random_bool(0.7))
                .collect();
            w.record(("partial listing", partial.len()));
            w.report().listing_glitches += 1;
            drop(rng);
            w.hid(whole - partial.len());
            return Ok(partial);
        }
        Ok(listing)
    }

    async fn increase(&self, n: usize) -> Result<usize, FleetError> {
        let w = &self.0;
        w.report().increases += 1;
        let r = w.fake.increase(n).await;
        w.record(("increase", n, r.as_ref().ok().copied()));
        if r.is_err() {
            w.report().provider_errors += 1;
        }
        w.check("increase");
        r
    }

    async fn decrease(&self, ids: &[InstanceId]) -> Result<Vec<InstanceId>, FleetError> {
        let w = &self.0;
        w.report().decreases += 1;
        w.reconcile_foreign();
        {
            let reg = lock(&w.registry);
            for ((inst, slot), j) in reg.iter() {
                if ids.contains(inst) {
                    w.violation(format!(
                        "instance {inst} asked to be deleted while job-{} runs in slot {slot}",
                        j.job
                    ));
                }
            }
            let foreign = lock(&w.foreign);
            for id in ids {
                if foreign.contains(id) {
                    w.violation(format!("foreign instance {id} asked to be deleted"));
                }
            }
        }
        let r = w.fake.decrease(ids).await;
        w.record(("decrease", ids.to_vec()));
        w.check("decrease");
        r
    }

    async fn connect_info(&self, id: &str) -> Result<ConnectInfo, FleetError> {
        self.0.fake.connect_info(id).await
    }

    async fn heartbeat(&self, id: &str) -> Result<(), FleetError> {
        self.0.fake.heartbeat(id).await
    }

    async fn shutdown(&self) -> Result<(), FleetError> {
        self.0.fake.shutdown().await
    }
}
