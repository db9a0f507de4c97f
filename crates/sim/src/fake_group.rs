//! [`FakeInstanceGroup`]: an in-memory instance group for tests and the scaler's simulation.
//!
//! Time is tokio's clock, so under a paused runtime (`start_paused = true`) latencies pass in
//! virtual time; randomness comes from a seeded ChaCha RNG. Given the same seed, the same
//! configuration and the same sequence of calls, the fake behaves identically.

use async_trait::async_trait;
use flotilla_fleet::{
    Capabilities, ConnectInfo, FleetError, InstanceGroup, InstanceId, InstanceStatus, ProviderInfo,
    Settings, State,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

/// How a [`FakeInstanceGroup`] behaves. Every rate is a probability in `0.0..=1.0`.
#[derive(Debug, Clone)]
pub struct FakeConfig {
    /// The provider id reported by `init`.
    pub id: String,
    /// The most instances the group holds (deleting ones included); `increase` requests fewer
    /// when it would exceed it.
    pub max_size: usize,
    /// Time from `increase` to `Running`, drawn uniformly from this range per instance.
    pub create_latency: (Duration, Duration),
    /// Time from `decrease` to gone, drawn uniformly from this range per instance.
    pub delete_latency: (Duration, Duration),
    /// Latency of every API call.
    pub call_latency: Duration,
    /// Probability that an `update` call fails.
    pub update_failure_rate: f64,
    /// Probability that an `increase` call fails outright.
    pub increase_failure_rate: f64,
    /// Probability that an `increase` call requests fewer instances than asked.
    pub partial_increase_rate: f64,
    /// Probability that a deletion request for one instance fails.
    pub decrease_failure_rate: f64,
    /// Probability that a new instance ends in `Timeout` instead of `Running`.
    pub creation_timeout_rate: f64,
    /// Probability that a heartbeat of a healthy instance fails anyway.
    pub heartbeat_failure_rate: f64,
    /// Probability that an `increase` creates some of the instances and then reports an
    /// error anyway (the AWS plugin sets the desired capacity and can then fail; fleeting's
    /// `Increase` returns no ids either way).
    pub increase_error_after_create_rate: f64,
    /// What the group says of itself at `init`. With `single_host` the group is one
    /// instance that is always there (add it with [`FakeInstanceGroup::add_running`]):
    /// `increase` makes nothing and `decrease` deletes nothing, as the `local` provider.
    pub capabilities: Capabilities,
    /// Lend instances from a fixed pool of this many ids (`host-1` ...) instead of making new
    /// ones: `increase` lends the lowest free id, and an id given back and gone is lent again,
    /// as a static pool lends the same host again (and Proxmox reuses VM ids, a StatefulSet
    /// its pod names). The pool's size caps the group. `None`: every instance is new.
    pub pool: Option<usize>,
    /// Probability that a new instance refuses to be deleted for a while (deletion
    /// protection, a provider error that persists): `decrease` leaves it out of the ids it
    /// accepts until then.
    pub deletion_refusal_rate: f64,
    /// How long a refusing instance refuses, drawn uniformly per instance.
    pub deletion_refusal: (Duration, Duration),
    /// Probability that a heartbeat hangs: it answers only after [`Self::heartbeat_hang`],
    /// and then with a failure.
    pub heartbeat_hang_rate: f64,
    /// How long a hanging heartbeat hangs.
    pub heartbeat_hang: Duration,
}

impl Default for FakeConfig {
    fn default() -> Self {
        FakeConfig {
            id: "fake/group".into(),
            max_size: 1000,
            create_latency: (Duration::from_secs(5), Duration::from_secs(5)),
            delete_latency: (Duration::from_secs(1), Duration::from_secs(1)),
            call_latency: Duration::ZERO,
            update_failure_rate: 0.0,
            increase_failure_rate: 0.0,
            partial_increase_rate: 0.0,
            decrease_failure_rate: 0.0,
            creation_timeout_rate: 0.0,
            heartbeat_failure_rate: 0.0,
            increase_error_after_create_rate: 0.0,
            capabilities: Capabilities::remote(),
            pool: None,
            deletion_refusal_rate: 0.0,
            deletion_refusal: (Duration::ZERO, Duration::ZERO),
            heartbeat_hang_rate: 0.0,
            heartbeat_hang: Duration::ZERO,
        }
    }
}

/// What the fake knows about one instance.
#[derive(Debug, Clone)]
pub struct FakeInstance {
    /// When `increase` created it.
    pub created_at: Instant,
    /// When it leaves `Creating`.
    pub ready_at: Instant,
    /// It ends in `Timeout` rather than `Running`.
    pub times_out: bool,
    /// When deletion was requested, and when it will be gone.
    pub deleting: Option<(Instant, Instant)>,
    /// Marked unhealthy by a test: heartbeats fail.
    pub unhealthy: bool,
    /// How many times `decrease` was asked to delete it.
    pub delete_requests: u32,
    /// Added with [`FakeInstanceGroup::add_running`], not created by `increase`.
    pub preexisting: bool,
    /// Until when `decrease` refuses to delete it.
    pub refuses_deletion_until: Option<Instant>,
}

impl FakeInstance {
    fn state(&self, now: Instant) -> State {
        match self.deleting {
            Some((_, gone)) if now >= gone => State::Deleted,
            Some(_) => State::Deleting,
            None if now < self.ready_at => State::Creating,
            None if self.times_out => State::Timeout,
            None => State::Running,
        }
    }
}

#[derive(Debug)]
struct Inner {
    rng: ChaCha8Rng,
    instances: BTreeMap<InstanceId, FakeInstance>,
    next_id: u64,
    calls: HashMap<&'static str, u64>,
    removed_from_outside: std::collections::HashSet<InstanceId>,
    initialised: bool,
    shut_down: bool,
    /// Life of the instances that are gone, from creation to gone (what a cloud bills).
    billed_gone: Duration,
}

/// An in-memory [`InstanceGroup`] whose latencies and faults tests control.
#[derive(Debug)]
pub struct FakeInstanceGroup {
    config: FakeConfig,
    inner: Mutex<Inner>,
}

impl FakeInstanceGroup {
    /// A fake with `config`, its randomness seeded with `seed`.
    pub fn new(config: FakeConfig, seed: u64) -> Self {
        FakeInstanceGroup {
            config,
            inner: Mutex::new(Inner {
                rng: ChaCha8Rng::seed_from_u64(seed),
                instances: BTreeMap::new(),
                next_id: 1,
                calls: HashMap::new(),
                removed_from_outside: Default::default(),
                initialised: false,
                shut_down: false,
                billed_gone: Duration::ZERO,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    async fn call(&self, op: &'static str) {
        *self.lock().calls.entry(op).or_default() += 1;
        if !self.config.call_latency.is_zero() {
            tokio::time::sleep(self.config.call_latency).await;
        }
    }

    /// Adds a running instance directly (as if it pre-existed); returns its id.
    pub fn add_running(&self) -> InstanceId {
        let now = Instant::now();
        let mut inner = self.lock();
        let id = if self.config.capabilities.single_host {
            "local".to_string()
        } else {
            format!("fake-{}", inner.next_id)
        };
        inner.next_id += 1;
        inner.instances.insert(
            id.clone(),
            FakeInstance {
                created_at: now,
                ready_at: now,
                times_out: false,
                deleting: None,
                unhealthy: false,
                delete_requests: 0,
                preexisting: true,
                refuses_deletion_until: None,
            },
        );
        id
    }

    /// Instances `increase` created that are not gone yet (deleting ones included).
    pub fn created_alive(&self) -> usize {
        let now = Instant::now();
        self.lock()
            .instances
            .values()
            .filter(|i| !i.preexisting && i.state(now) != State::Deleted)
            .count()
    }

    /// Removes an instance as if someone deleted it outside flotilla: it vanishes from the
    /// listing at once. Returns whether it existed.
    pub fn remove_from_outside(&self, id: &str) -> bool {
        let now = Instant::now();
        let mut inner = self.lock();
        inner.removed_from_outside.insert(id.to_string());
        match inner.instances.remove(id) {
            Some(i) => {
                inner.billed_gone += now.saturating_duration_since(i.created_at);
                true
            }
            None => false,
        }
    }

    /// The summed life of every instance this fake created, from `increase` (or
    /// [`Self::add_running`]) until it was gone, running ones counted up to now: what a cloud
    /// would bill.
    pub fn billed_time(&self) -> Duration {
        let now = Instant::now();
        let inner = self.lock();
        let live: Duration = inner
            .instances
            .values()
            .map(|i| {
                let end = match i.deleting {
                    Some((_, gone)) if gone < now => gone,
                    _ => now,
                };
                end.saturating_duration_since(i.created_at)
            })
            .sum();
        inner.billed_gone + live
    }

    /// Deletes an instance as if someone deleted it outside flotilla through the provider's
    /// API: the next listing reports it `deleted` (once, as the docker provider and cloud APIs
    /// do), then it is gone. Returns whether it existed.
    pub fn delete_from_outside(&self, id: &str) -> bool {
        let now = Instant::now();
        let mut inner = self.lock();
        inner.removed_from_outside.insert(id.to_string());
        match inner.instances.get_mut(id) {
            Some(i) => {
                i.deleting = Some((now, now));
                true
            }
            None => false,
        }
    }

    /// Whether a test removed `id` with [`Self::remove_from_outside`] or
    /// [`Self::delete_from_outside`].
    pub fn was_removed_from_outside(&self, id: &str) -> bool {
        self.lock().removed_from_outside.contains(id)
    }

    /// Marks an instance (un)healthy: heartbeats of an unhealthy instance fail.
    pub fn set_unhealthy(&self, id: &str, unhealthy: bool) {
        if let Some(i) = self.lock().instances.get_mut(id) {
            i.unhealthy = unhealthy;
        }
    }

    /// A snapshot of every instance the fake holds (gone ones excluded) with its state now.
    pub fn snapshot(&self) -> Vec<(InstanceId, State)> {
        let now = Instant::now();
        self.lock()
            .instances
            .iter()
            .map(|(id, i)| (id.clone(), i.state(now)))
            .filter(|(_, s)| *s != State::Deleted)
            .collect()
    }

    /// The state of one instance now (`None` once gone).
    pub fn state_of(&self, id: &str) -> Option<State> {
        let now = Instant::now();
        self.lock()
            .instances
            .get(id)
            .map(|i| i.state(now))
            .filter(|s| *s != State::Deleted)
    }

    /// Ids of the instances not yet gone, in id order.
    pub fn ids(&self) -> Vec<InstanceId> {
        self.snapshot().into_iter().map(|(id, _)| id).collect()
    }

    /// The fake's record of one instance.
    pub fn instance(&self, id: &str) -> Option<FakeInstance> {
        self.lock().instances.get(id).cloned()
    }

    /// How many instances are not yet gone.
    pub fn len(&self) -> usize {
        self.snapshot().len()
    }

    /// Whether the group holds no instances.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many times `op` (`update`, `increase`, ...) was called.
    pub fn call_count(&self, op: &str) -> u64 {
        self.lock().calls.get(op).copied().unwrap_or(0)
    }

    /// Whether `shutdown` was called.
    pub fn was_shut_down(&self) -> bool {
        self.lock().shut_down
    }

    fn draw(rng: &mut ChaCha8Rng, (lo, hi): (Duration, Duration)) -> Duration {
        if hi <= lo {
            lo
        } else {
            let span = hi.checked_sub(lo).unwrap().as_nanos() as u64;
            lo + Duration::from_nanos(rng.random_range(0..=span))
        }
    }

    fn chance(rng: &mut ChaCha8Rng, p: f64) -> bool {
        p > 0.0 && rng.random_bool(p.min(1.0))
    }
}

#[async_trait]
impl InstanceGroup for FakeInstanceGroup {
    async fn init(&self, _settings: &Settings) -> Result<ProviderInfo, FleetError> {
        self.call("init").await;
        self.lock().initialised = true;
        Ok(ProviderInfo {
            id: self.config.id.clone(),
            max_size: self
                .config
                .pool
                .unwrap_or(usize::MAX)
                .min(self.config.max_size),
            version: "fake".into(),
            build_info: String::new(),
            capabilities: self.config.capabilities.clone(),
        })
    }

    async fn update(&self) -> Result<Vec<InstanceStatus>, FleetError> {
        self.call("update").await;
        let now = Instant::now();
        let mut inner = self.lock();
        if !inner.initialised {
            return Err(FleetError::NotInitialized);
        }
        if Self::chance(&mut inner.rng, self.config.update_failure_rate) {
            return Err(FleetError::provider("update", "injected failure"));
        }
        let mut out = Vec::with_capacity(inner.instances.len());
        let mut gone = Vec::new();
        for (id, i) in &inner.instances {
            let state = i.state(now);
            if state == State::Deleted {
                // Reported once, then it leaves the listing; a pool's host given back just
                // leaves it (the static provider lists only the hosts it lends).
                gone.push(id.clone());
                if self.config.pool.is_some() {
                    continue;
                }
            }
            out.push(InstanceStatus::new(id.clone(), state));
        }
        for id in gone {
            if let Some(i) = inner.instances.remove(&id) {
                let end = i.deleting.map_or(now, |(_, gone)| gone);
                inner.billed_gone += end.saturating_duration_since(i.created_at);
            }
        }
        Ok(out)
    }

    async fn increase(&self, n: usize) -> Result<usize, FleetError> {
        self.call("increase").await;
        let now = Instant::now();
        let mut inner = self.lock();
        if !inner.initialised {
            return Err(FleetError::NotInitialized);
        }
        if self.config.capabilities.single_host {
            // The group is this host, always there: nothing more can be had.
            return Ok(0);
        }
        if Self::chance(&mut inner.rng, self.config.increase_failure_rate) {
            return Err(FleetError::provider("increase", "injected failure"));
        }
        if self.config.pool.is_some() {
            // A host given back is free to be lent again at once.
            let returned: Vec<InstanceId> = inner
                .instances
                .iter()
                .filter(|(_, i)| i.state(now) == State::Deleted)
                .map(|(id, _)| id.clone())
                .collect();
            for id in returned {
                if let Some(i) = inner.instances.remove(&id) {
                    let end = i.deleting.map_or(now, |(_, gone)| gone);
                    inner.billed_gone += end.saturating_duration_since(i.created_at);
                }
            }
        }
        let held = inner
            .instances
            .values()
            .filter(|i| i.state(now) != State::Deleted)
            .count();
        let cap = self
            .config
            .pool
            .unwrap_or(usize::MAX)
            .min(self.config.max_size);
        let mut allowed = n.min(cap.saturating_sub(held));
        if allowed > 0 && Self::chance(&mut inner.rng, self.config.partial_increase_rate) {
            allowed = inner.rng.random_range(0..allowed);
        }
        let error_after = allowed > 0
            && Self::chance(&mut inner.rng, self.config.increase_error_after_create_rate);
        if error_after {
            allowed = inner.rng.random_range(1..=allowed);
        }
        let mut made = 0;
        for _ in 0..allowed {
            let id = match self.config.pool {
                Some(size) => match (1..=size)
                    .map(|k| format!("host-{k}"))
                    .find(|id| !inner.instances.contains_key(id))
                {
                    Some(id) => id,
                    None => break,
                },
                None => format!("fake-{}", inner.next_id),
            };
            inner.next_id += 1;
            let latency = Self::draw(&mut inner.rng, self.config.create_latency);
            let times_out = Self::chance(&mut inner.rng, self.config.creation_timeout_rate);
            let refuses_deletion_until =
                Self::chance(&mut inner.rng, self.config.deletion_refusal_rate)
                    .then(|| now + Self::draw(&mut inner.rng, self.config.deletion_refusal));
            inner.instances.insert(
                id,
                FakeInstance {
                    created_at: now,
                    ready_at: now + latency,
                    times_out,
                    deleting: None,
                    unhealthy: false,
                    delete_requests: 0,
                    preexisting: false,
                    refuses_deletion_until,
                },
            );
            made += 1;
        }
        if error_after {
            return Err(FleetError::provider(
                "increase",
                "injected failure after creating some instances",
            ));
        }
        Ok(made)
    }

    async fn decrease(&self, ids: &[InstanceId]) -> Result<Vec<InstanceId>, FleetError> {
        self.call("decrease").await;
        let now = Instant::now();
        let mut inner = self.lock();
        if !inner.initialised {
            return Err(FleetError::NotInitialized);
        }
        let mut ok = Vec::new();
        if self.config.capabilities.single_host {
            // This host is never deleted.
            return Ok(ok);
        }
        for id in ids {
            if Self::chance(&mut inner.rng, self.config.decrease_failure_rate) {
                continue;
            }
            if let Some(i) = inner.instances.get_mut(id)
                && i.refuses_deletion_until.is_some_and(|until| now < until)
            {
                i.delete_requests += 1;
                continue;
            }
            let latency = Self::draw(&mut inner.rng, self.config.delete_latency);
            if let Some(i) = inner.instances.get_mut(id) {
                i.delete_requests += 1;
                if i.deleting.is_none() {
                    i.deleting = Some((now, now + latency));
                }
                ok.push(id.clone());
            } else if self
                .config
                .pool
                .is_some_and(|size| (1..=size).any(|k| *id == format!("host-{k}")))
            {
                // A pool's host that is not lent is given back already (the static
                // provider's `decrease` says so).
                ok.push(id.clone());
            }
        }
        Ok(ok)
    }

    async fn connect_info(&self, id: &str) -> Result<ConnectInfo, FleetError> {
        self.call("connect_info").await;
        let inner = self.lock();
        if !inner.instances.contains_key(id) {
            return Err(FleetError::InstanceNotFound(id.into()));
        }
        Ok(ConnectInfo {
            config: Default::default(),
            id: id.into(),
            external_addr: format!("{id}.fake.invalid:22"),
            internal_addr: format!("{id}.fake.invalid:22"),
            expires: None,
        })
    }

    async fn heartbeat(&self, id: &str) -> Result<(), FleetError> {
        self.call("heartbeat").await;
        let hangs = {
            let mut inner = self.lock();
            Self::chance(&mut inner.rng, self.config.heartbeat_hang_rate)
        };
        if hangs {
            tokio::time::sleep(self.config.heartbeat_hang).await;
            return Err(FleetError::InstanceUnhealthy {
                id: id.into(),
                reason: "fake heartbeat hung".into(),
            });
        }
        let now = Instant::now();
        let mut inner = self.lock();
        let rate = self.config.heartbeat_failure_rate;
        let Some(i) = inner.instances.get(id) else {
            return Err(FleetError::InstanceNotFound(id.into()));
        };
        let unhealthy = i.unhealthy || i.state(now) != State::Running;
        if unhealthy || Self::chance(&mut inner.rng, rate) {
            return Err(FleetError::InstanceUnhealthy {
                id: id.into(),
                reason: "fake instance marked unhealthy".into(),
            });
        }
        Ok(())
    }

    async fn shutdown(&self) -> Result<(), FleetError> {
        self.call("shutdown").await;
        self.lock().shut_down = true;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> Settings {
        Settings::default()
    }

    #[tokio::test(start_paused = true)]
    async fn lifecycle_in_virtual_time() {
        let g = FakeInstanceGroup::new(FakeConfig::default(), 1);
        assert!(matches!(g.update().await, Err(FleetError::NotInitialized)));
        g.init(&settings()).await.unwrap();
        assert_eq!(g.increase(3).await.unwrap(), 3);
        let l = g.update().await.unwrap();
        assert_eq!(l.len(), 3);
        assert!(l.iter().all(|s| s.state == State::Creating));
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(
            g.update()
                .await
                .unwrap()
                .iter()
                .all(|s| s.state == State::Running)
        );
        let id = l[0].id.clone();
        assert_eq!(
            g.decrease(std::slice::from_ref(&id)).await.unwrap(),
            vec![id.clone()]
        );
        let l = g.update().await.unwrap();
        assert_eq!(
            l.iter().find(|s| s.id == id).unwrap().state,
            State::Deleting
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
        let l = g.update().await.unwrap();
        assert_eq!(l.iter().find(|s| s.id == id).unwrap().state, State::Deleted);
        let l = g.update().await.unwrap();
        assert!(l.iter().all(|s| s.id != id), "deleted is reported once");
        assert_eq!(l.len(), 2);
        g.shutdown().await.unwrap();
        assert_eq!(g.len(), 2, "shutdown deletes nothing");
    }

    #[tokio::test(start_paused = true)]
    async fn max_size_and_partial_increase() {
        let g = FakeInstanceGroup::new(
            FakeConfig {
                max_size: 4,
                ..Default::default()
            },
            7,
        );
        g.init(&settings()).await.unwrap();
        assert_eq!(g.increase(3).await.unwrap(), 3);
        assert_eq!(g.increase(3).await.unwrap(), 1, "capped by max_size");
        assert_eq!(g.increase(1).await.unwrap(), 0);

        let g = FakeInstanceGroup::new(
            FakeConfig {
                partial_increase_rate: 1.0,
                ..Default::default()
            },
            7,
        );
        g.init(&settings()).await.unwrap();
        let got = g.increase(10).await.unwrap();
        assert!(got < 10, "requested fewer than asked: {got}");
    }

    #[tokio::test(start_paused = true)]
    async fn removed_from_outside_and_unhealthy() {
        let g = FakeInstanceGroup::new(FakeConfig::default(), 3);
        g.init(&settings()).await.unwrap();
        let a = g.add_running();
        let b = g.add_running();
        g.heartbeat(&a).await.unwrap();
        g.set_unhealthy(&a, true);
        assert!(g.heartbeat(&a).await.unwrap_err().is_unhealthy());
        assert!(g.remove_from_outside(&b));
        let l = g.update().await.unwrap();
        assert_eq!(l, vec![InstanceStatus::new(a, State::Running)]);
        assert!(matches!(
            g.connect_info(&b).await,
            Err(FleetError::InstanceNotFound(_))
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn deterministic_given_seed() {
        async fn run(seed: u64) -> Vec<(String, State)> {
            let g = FakeInstanceGroup::new(
                FakeConfig {
                    create_latency: (Duration::from_secs(1), Duration::from_secs(20)),
                    creation_timeout_rate: 0.3,
                    partial_increase_rate: 0.5,
                    increase_failure_rate: 0.2,
                    ..Default::default()
                },
                seed,
            );
            g.init(&Settings::default()).await.unwrap();
            for _ in 0..10 {
                let _ = g.increase(3).await;
                tokio::time::sleep(Duration::from_secs(3)).await;
            }
            g.snapshot()
        }
        let a = run(42).await;
        let b = run(42).await;
        let c = run(43).await;
        assert_eq!(a, b);
        assert_ne!(a, c, "a different seed should behave differently");
        assert!(a.iter().any(|(_, s)| *s == State::Timeout));
    }

    #[tokio::test(start_paused = true)]
    async fn a_pool_lends_the_same_ids_again_and_lists_only_what_it_lends() {
        let g = FakeInstanceGroup::new(
            FakeConfig {
                pool: Some(2),
                delete_latency: (Duration::ZERO, Duration::ZERO),
                create_latency: (Duration::ZERO, Duration::ZERO),
                ..Default::default()
            },
            1,
        );
        let info = g.init(&settings()).await.unwrap();
        assert_eq!(info.max_size, 2, "the pool's size caps the group");
        assert_eq!(g.increase(5).await.unwrap(), 2, "no more than the pool");
        assert_eq!(g.ids(), vec!["host-1".to_string(), "host-2".to_string()]);
        let lent_at = g.instance("host-1").unwrap().created_at;
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(
            g.decrease(&["host-1".into()]).await.unwrap(),
            vec!["host-1"]
        );
        // Given back: gone from the listing at once, never reported "deleted".
        let l = g.update().await.unwrap();
        assert_eq!(l, vec![InstanceStatus::new("host-2", State::Running)]);
        // A host not lent is given back already.
        assert_eq!(
            g.decrease(&["host-1".into()]).await.unwrap(),
            vec!["host-1"]
        );
        assert_eq!(g.increase(1).await.unwrap(), 1);
        let again = g.instance("host-1").expect("lent again under its id");
        assert!(again.created_at > lent_at, "a new lend");
    }

    #[tokio::test(start_paused = true)]
    async fn a_single_host_is_neither_made_nor_deleted() {
        let g = FakeInstanceGroup::new(
            FakeConfig {
                capabilities: Capabilities::this_host(),
                ..Default::default()
            },
            1,
        );
        assert!(g.init(&settings()).await.unwrap().capabilities.single_host);
        let id = g.add_running();
        assert_eq!(id, "local");
        assert_eq!(g.increase(3).await.unwrap(), 0);
        assert!(
            g.decrease(std::slice::from_ref(&id))
                .await
                .unwrap()
                .is_empty()
        );
        assert_eq!(g.state_of(&id), Some(State::Running));
    }

    #[tokio::test(start_paused = true)]
    async fn refused_deletions_and_hanging_heartbeats() {
        let g = FakeInstanceGroup::new(
            FakeConfig {
                deletion_refusal_rate: 1.0,
                deletion_refusal: (Duration::from_secs(300), Duration::from_secs(300)),
                heartbeat_hang_rate: 1.0,
                heartbeat_hang: Duration::from_secs(1800),
                create_latency: (Duration::ZERO, Duration::ZERO),
                ..Default::default()
            },
            1,
        );
        g.init(&settings()).await.unwrap();
        g.increase(1).await.unwrap();
        let id = g.ids().remove(0);
        assert!(
            g.decrease(std::slice::from_ref(&id))
                .await
                .unwrap()
                .is_empty()
        );
        assert_eq!(
            g.instance(&id).unwrap().delete_requests,
            1,
            "asked, refused"
        );
        let started = Instant::now();
        assert!(g.heartbeat(&id).await.is_err());
        assert_eq!(started.elapsed(), Duration::from_secs(1800), "it hung");
        // The refusal is over by now.
        assert_eq!(
            g.decrease(std::slice::from_ref(&id)).await.unwrap(),
            vec![id]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn injected_failures() {
        let g = FakeInstanceGroup::new(
            FakeConfig {
                increase_failure_rate: 1.0,
                decrease_failure_rate: 1.0,
                update_failure_rate: 1.0,
                ..Default::default()
            },
            1,
        );
        g.init(&settings()).await.unwrap();
        let id = g.add_running();
        assert!(g.increase(1).await.is_err());
        assert!(g.decrease(&[id]).await.unwrap().is_empty());
        assert!(g.update().await.is_err());
        assert_eq!(g.call_count("update"), 1);
    }
}
