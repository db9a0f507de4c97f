//! The `static` provider: a fixed pool of machines reached over SSH (bare metal, BSD or macOS
//! hosts, long-lived VMs), lent to the fleet and given back, never created or destroyed.
//!
//! - The hosts are listed in `plugin_config` ([`StaticSettings`]): address, port, user, key
//!   or password, OS and architecture, and an optional cap on the slots each runs.
//! - `increase(n)` lends up to `n` hosts that are not lent yet, trying first those that last
//!   answered, and only hosts whose sshd answers now. When none answers it fails, so that the
//!   fleet backs off before asking again.
//! - `decrease(ids)` gives hosts back to the pool. Nothing on them is touched: the isolation
//!   level cleans its own slots.
//! - `update` probes every lent host (its SSH banner) and lists it `running`, or `timeout`
//!   once it failed `unreachable_after` probes in a row: the fleet then gives it back and
//!   takes another host. A host that answers again is lent again when needed.
//! - `heartbeat` probes one host; `InstanceUnhealthy` when it does not answer.
//! - Which hosts are lent is kept in `state_file`, so a restarted flotilla finds them lent.
//!
//! Its [`ProviderInfo`] says `fixed_pool` (so `max_use_count` is refused: a host cannot be
//! thrown away and replaced) and, when hosts have `max_slots`, the smallest of them as the
//! most slots per instance.

mod host;
mod lent_file;
mod pool;
mod settings;

pub use host::Host;
pub use pool::{Change, Pool};
pub use settings::{HostSettings, StaticSettings, dial_addr};

use async_trait::async_trait;
use flotilla_fleet::{
    Capabilities, ConnectInfo, ConnectorKind, FleetError, InstanceGroup, InstanceId,
    InstanceStatus, ProviderConfig, ProviderInfo, Settings,
};
use flotilla_ssh_machine::{ProbeError, ssh_banner};
use futures::future::join_all;
use std::sync::{Arc, Mutex};

/// The provider's name in configuration (`plugin = "static"`).
pub const PLUGIN: &str = "static";

/// A static pool. Create it with [`StaticGroup::new`], then call [`InstanceGroup::init`].
#[derive(Debug)]
pub struct StaticGroup {
    settings: StaticSettings,
    inner: Mutex<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// The hosts with their credentials, from `init`.
    hosts: Option<Arc<Vec<Host>>>,
    pool: Pool,
}

/// The static pool of a runner, from its `plugin_config` (see [`StaticSettings`]): named
/// after the runner unless `plugin_config` sets `name`, and, for a fleet with a state
/// directory, keeping its lent hosts in `<state_dir>/static/<runner>.json` unless
/// `state_file` is set.
pub fn build(config: &ProviderConfig<'_>) -> Result<Arc<dyn InstanceGroup>, FleetError> {
    Ok(Arc::new(StaticGroup::new(
        StaticSettings::from_plugin_config(&plugin_settings(config))?,
    )))
}

/// `plugin_config` with the defaults [`build`] takes from the runner filled in.
fn plugin_settings(config: &ProviderConfig<'_>) -> serde_json::Value {
    let mut settings = match config.plugin_config {
        serde_json::Value::Null => serde_json::Value::Object(serde_json::Map::new()),
        other => other.clone(),
    };
    if let serde_json::Value::Object(map) = &mut settings {
        if !map.contains_key("name") {
            map.insert("name".into(), config.runner_name.into());
        }
        if !map.contains_key("state_file")
            && let Some(file) = config.state_file("static", "json")
        {
            map.insert(
                "state_file".into(),
                file.to_string_lossy().into_owned().into(),
            );
        }
    }
    settings
}

impl StaticGroup {
    /// A pool for `settings` (checked again here). Nothing is contacted until
    /// [`InstanceGroup::init`].
    pub fn new(settings: StaticSettings) -> Self {
        let pool = Pool::new(settings.hosts.iter().map(|h| h.id(22)));
        StaticGroup {
            settings,
            inner: Mutex::new(Inner { hosts: None, pool }),
        }
    }

    /// The provider id: `static/<name>`.
    pub fn provider_id(&self) -> String {
        format!("static/{}", self.settings.name)
    }

    /// The settings.
    pub fn settings(&self) -> &StaticSettings {
        &self.settings
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn hosts(&self) -> Result<Arc<Vec<Host>>, FleetError> {
        self.lock().hosts.clone().ok_or(FleetError::NotInitialized)
    }

    /// Probes `host`, records the answer and logs a change of health.
    async fn probe(&self, host: &Host) -> Result<(), ProbeError> {
        let result = ssh_banner(&host.address, host.port, self.settings.probe_timeout()).await;
        let change = self.lock().pool.probed(&host.id, result.is_ok());
        match (&result, change) {
            (Err(e), Change::WentAway) => {
                tracing::warn!(pool = %self.settings.name, host = %host.id, error = %e, "host stopped answering");
            }
            (Ok(()), Change::CameBack) => {
                tracing::info!(pool = %self.settings.name, host = %host.id, "host answers again");
            }
            _ => {}
        }
        result
    }

    /// Writes the lent hosts to the state file, if there is one. A failure is logged: the
    /// pool goes on in memory, and a restart would only lend again.
    fn save(&self, lent: &[String]) {
        if let Some(path) = &self.settings.state_file
            && let Err(e) = lent_file::save(path, lent)
        {
            tracing::warn!(pool = %self.settings.name, error = %e, "cannot keep the lent hosts");
        }
    }
}

#[async_trait]
impl InstanceGroup for StaticGroup {
    async fn init(&self, settings: &Settings) -> Result<ProviderInfo, FleetError> {
        let hosts = host::resolve(&self.settings, &settings.connector)?;
        let restored = match &self.settings.state_file {
            Some(path) => lent_file::load(path).unwrap_or_else(|e| {
                tracing::warn!(pool = %self.settings.name, error = %e, "cannot read the lent hosts; lending anew");
                Vec::new()
            }),
            None => Vec::new(),
        };
        let max_slots_per_instance = hosts.iter().filter_map(|h| h.max_slots).min();
        let max_size = hosts.len();
        {
            let mut inner = self.lock();
            // Ids may depend on the fleet's default port: rebuild the pool with the final ids.
            inner.pool = Pool::new(hosts.iter().map(|h| h.id.clone()));
            let dropped = inner.pool.restore(restored.iter().map(String::as_str));
            for id in dropped {
                tracing::warn!(pool = %self.settings.name, host = %id, "a host lent before is no longer configured; forgetting it");
            }
            inner.hosts = Some(Arc::new(hosts));
        }
        Ok(ProviderInfo {
            id: self.provider_id(),
            max_size,
            version: env!("CARGO_PKG_VERSION").into(),
            build_info: format!("{max_size} host(s)"),
            capabilities: Capabilities {
                single_host: false,
                // Lent hosts found after a restart are the pool's by configuration.
                adopts_preexisting: true,
                connector: ConnectorKind::Protocol,
                fixed_pool: true,
                max_slots_per_instance,
            },
        })
    }

    async fn update(&self) -> Result<Vec<InstanceStatus>, FleetError> {
        let hosts = self.hosts()?;
        let lent = self.lock().pool.lent();
        join_all(
            hosts
                .iter()
                .filter(|h| lent.contains(&h.id))
                .map(|h| self.probe(h)),
        )
        .await;
        Ok(self.lock().pool.listing(self.settings.unreachable_after))
    }

    async fn increase(&self, n: usize) -> Result<usize, FleetError> {
        let hosts = self.hosts()?;
        let mut candidates = self.lock().pool.candidates().into_iter();
        let mut lent = 0;
        let mut refused = Vec::new();
        while lent < n {
            // Probe as many as are still wanted, at once.
            let batch: Vec<&Host> = candidates
                .by_ref()
                .take(n - lent)
                .filter_map(|id| hosts.iter().find(|h| h.id == id))
                .collect();
            if batch.is_empty() {
                break;
            }
            let answers = join_all(batch.iter().map(|h| self.probe(h))).await;
            let mut inner = self.lock();
            for (host, answer) in batch.iter().zip(answers) {
                match answer {
                    // Another increase may have lent it meanwhile.
                    Ok(()) => lent += usize::from(inner.pool.lend(&host.id)),
                    Err(e) => refused.push(format!("{} ({e})", host.id)),
                }
            }
        }
        if lent > 0 {
            let ids = self.lock().pool.lent();
            self.save(&ids);
            tracing::info!(pool = %self.settings.name, lent, "hosts lent to the fleet");
        }
        if lent == 0 && n > 0 && !refused.is_empty() {
            return Err(FleetError::provider(
                "increase",
                format!("no free host of the pool answers: {}", refused.join(", ")),
            ));
        }
        Ok(lent)
    }

    async fn decrease(&self, ids: &[InstanceId]) -> Result<Vec<InstanceId>, FleetError> {
        let mut done = Vec::with_capacity(ids.len());
        let lent = {
            let mut inner = self.lock();
            for id in ids {
                match inner.pool.give_back(id) {
                    // Given back now, or already free: either way it is no longer lent.
                    Some(_) => done.push(id.clone()),
                    None => {
                        tracing::warn!(pool = %self.settings.name, host = %id, "not a host of this pool; nothing to give back");
                    }
                }
            }
            inner.pool.lent()
        };
        self.save(&lent);
        Ok(done)
    }

    async fn connect_info(&self, id: &str) -> Result<ConnectInfo, FleetError> {
        let hosts = self.hosts()?;
        let host = hosts
            .iter()
            .find(|h| h.id == id)
            .ok_or_else(|| FleetError::InstanceNotFound(id.into()))?;
        let addr = host.dial_addr();
        Ok(ConnectInfo {
            config: host.connector.clone(),
            id: host.id.clone(),
            external_addr: addr.clone(),
            internal_addr: addr,
            expires: None,
        })
    }

    async fn heartbeat(&self, id: &str) -> Result<(), FleetError> {
        let hosts = self.hosts()?;
        if self.lock().pool.is_lent(id) != Some(true) {
            return Err(FleetError::InstanceNotFound(id.into()));
        }
        let host = hosts
            .iter()
            .find(|h| h.id == id)
            .ok_or_else(|| FleetError::InstanceNotFound(id.into()))?;
        self.probe(host)
            .await
            .map_err(|e| FleetError::InstanceUnhealthy {
                id: id.into(),
                reason: format!("sshd does not answer: {e}"),
            })
    }

    async fn shutdown(&self) -> Result<(), FleetError> {
        // Hosts stay lent across a restart (the state file says which); nothing to release.
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_runner_names_the_pool_and_its_state_file_unless_plugin_config_does() {
        let given = serde_json::json!({"hosts": [{"address": "a"}]});
        let config = ProviderConfig {
            plugin_config: &given,
            runner_name: "on prem",
            state_dir: Some(std::path::Path::new("/state")),
        };
        let s = plugin_settings(&config);
        assert_eq!(s["name"], "on prem");
        assert_eq!(s["state_file"], "/state/static/on_prem.json");
        let given = serde_json::json!({"hosts": [], "name": "p", "state_file": "/x.json"});
        let s = plugin_settings(&ProviderConfig {
            plugin_config: &given,
            state_dir: None,
            ..config
        });
        assert_eq!(
            (s["name"].as_str(), s["state_file"].as_str()),
            (Some("p"), Some("/x.json"))
        );
    }

    #[tokio::test]
    async fn unusable_before_init() {
        let g = StaticGroup::new(
            StaticSettings::from_plugin_config(
                &serde_json::json!({"name": "p", "hosts": [{"address": "a"}]}),
            )
            .unwrap(),
        );
        assert!(matches!(
            g.increase(1).await,
            Err(FleetError::NotInitialized)
        ));
        assert!(matches!(g.update().await, Err(FleetError::NotInitialized)));
        assert!(matches!(
            g.connect_info("a:22").await,
            Err(FleetError::NotInitialized)
        ));
    }
}
