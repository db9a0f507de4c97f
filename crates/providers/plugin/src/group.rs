//! The plugin provider: an [`InstanceGroup`] whose every call goes to a plugin process,
//! restarted when it dies.
//!
//! A plugin's death changes nothing in the fleet: calls fail (with a deadline, never a
//! hang) until a restarted plugin answers, and the scaler treats a failed call as a
//! listing it did not get, not as instances gone. The restarted plugin is initialised
//! again with the same `Init`, must say it serves the same group (same provider id), and
//! its listing is the truth again from the next `update`.

use crate::backoff::Backoff;
use crate::logs::{PluginLog, default_log};
use crate::process::{PluginCommand, PluginProcess};
use crate::settings::PluginSettings;
use async_trait::async_trait;
use flotilla_fleet::{
    ConnectInfo, FleetError, InstanceGroup, InstanceId, InstanceStatus, ProviderConfig,
    ProviderInfo, Settings,
};
use flotilla_plugin_protocol::convert;
use flotilla_plugin_protocol::handshake::{
    INSTANCE_GROUP_PROTOCOL_VERSION, MAGIC_COOKIE_KEY, MAGIC_COOKIE_VALUE,
};
use flotilla_plugin_protocol::pb::instance_group as pb;
use flotilla_plugin_protocol::pb::instance_group::instance_group_client::InstanceGroupClient;
use flotilla_plugin_protocol::status::from_status;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tonic::transport::Channel;

/// How long a stopping plugin gets for each step (its own Shutdown, the controller's, the
/// exit) before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// An instance group served by a plugin process.
#[derive(Debug)]
pub struct PluginGroup {
    settings: PluginSettings,
    command: PluginCommand,
    runner_name: String,
    state_dir: Option<String>,
    log: Arc<dyn PluginLog>,
    supervisor: tokio::sync::Mutex<Supervisor>,
    stopped: AtomicBool,
}

struct Supervisor {
    current: Option<Arc<Running>>,
    /// The `Init` of the first start, sent again to every restarted plugin.
    init: Option<pb::InitRequest>,
    /// What the first plugin said it is; a restarted one must say the same id.
    info: Option<ProviderInfo>,
    backoff: Backoff,
    restarts: u64,
}

// Not derived: `init` holds the connector's password and key.
impl std::fmt::Debug for Supervisor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Supervisor")
            .field("current", &self.current)
            .field("initialised", &self.init.is_some())
            .field("info", &self.info)
            .field("backoff", &self.backoff)
            .field("restarts", &self.restarts)
            .finish()
    }
}

#[derive(Debug)]
struct Running {
    process: PluginProcess,
    client: InstanceGroupClient<Channel>,
}

impl PluginGroup {
    /// A group from its settings, for the runner `runner_name`; nothing starts before
    /// [`InstanceGroup::init`].
    pub fn new(
        settings: PluginSettings,
        runner_name: &str,
        state_dir: Option<&std::path::Path>,
    ) -> PluginGroup {
        let command = PluginCommand {
            name: runner_name.to_string(),
            program: settings.command.clone(),
            args: settings.args.clone(),
            env: settings
                .env
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            cookie: (MAGIC_COOKIE_KEY.into(), MAGIC_COOKIE_VALUE.into()),
            versions: vec![INSTANCE_GROUP_PROTOCOL_VERSION],
            auto_mtls: settings.auto_mtls,
            start_timeout: settings.start_timeout(),
        };
        let backoff = Backoff::new(
            Duration::from_secs_f64(settings.restart_backoff),
            Duration::from_secs_f64(settings.restart_backoff_max),
        );
        PluginGroup {
            command,
            runner_name: runner_name.to_string(),
            state_dir: state_dir.map(|d| d.to_string_lossy().into_owned()),
            log: default_log(),
            supervisor: tokio::sync::Mutex::new(Supervisor {
                current: None,
                init: None,
                info: None,
                backoff,
                restarts: 0,
            }),
            stopped: AtomicBool::new(false),
            settings,
        }
    }

    /// The group for a runner's configuration.
    pub fn from_config(config: &ProviderConfig<'_>) -> Result<PluginGroup, FleetError> {
        let settings = PluginSettings::from_config(config.plugin_config)?;
        Ok(PluginGroup::new(
            settings,
            config.runner_name,
            config.state_dir,
        ))
    }

    /// Sends the plugin's output to `log` instead of `tracing`.
    pub fn with_log(mut self, log: Arc<dyn PluginLog>) -> PluginGroup {
        self.log = log;
        self
    }

    /// The running plugin's process id, if one is running (for operators and tests).
    pub async fn plugin_pid(&self) -> Option<u32> {
        let s = self.supervisor.lock().await;
        s.current
            .as_ref()
            .filter(|r| r.process.exited().is_none())
            .map(|r| r.process.pid())
    }

    /// How many times the plugin was restarted after dying.
    pub async fn restarts(&self) -> u64 {
        self.supervisor.lock().await.restarts
    }

    /// The running plugin, started (again) if it is not running and its backoff allows.
    async fn running(&self) -> Result<Arc<Running>, FleetError> {
        let mut s = self.supervisor.lock().await;
        if let Some(current) = &s.current {
            match current.process.exited() {
                None => return Ok(current.clone()),
                Some(how) => {
                    let uptime = current.process.uptime();
                    tracing::warn!(
                        plugin = %self.runner_name,
                        pid = current.process.pid(),
                        "the plugin died ({how}) after {uptime:?}; restarting it"
                    );
                    s.backoff.failed(Instant::now(), Some(uptime));
                    s.current = None;
                    s.restarts += 1;
                }
            }
        }
        if self.stopped.load(Ordering::SeqCst) {
            return Err(FleetError::provider(
                "plugin",
                "the plugin has been shut down",
            ));
        }
        let Some(init) = s.init.clone() else {
            return Err(FleetError::NotInitialized);
        };
        let wait = s.backoff.wait(Instant::now());
        if !wait.is_zero() {
            return Err(FleetError::provider(
                "plugin",
                format!("the plugin is down; next start in {wait:?}"),
            ));
        }
        match self.start(init).await {
            Ok((running, info)) => {
                let first_id = s.info.as_ref().map(|i| i.id.clone());
                if let Some(first_id) = first_id
                    && first_id != info.id
                {
                    running.process.shutdown(STOP_GRACE).await;
                    s.backoff.failed(Instant::now(), None);
                    return Err(FleetError::provider(
                        "init",
                        format!(
                            "the restarted plugin serves group {:?}, not {first_id:?}: \
                             refusing it",
                            info.id
                        ),
                    ));
                }
                let running = Arc::new(running);
                s.current = Some(running.clone());
                Ok(running)
            }
            Err(e) => {
                s.backoff.failed(Instant::now(), None);
                Err(e)
            }
        }
    }

    /// Starts a plugin and initialises it.
    async fn start(&self, init: pb::InitRequest) -> Result<(Running, ProviderInfo), FleetError> {
        let process = self
            .command
            .start(self.log.clone())
            .await
            .map_err(|e| FleetError::provider("plugin", e))?;
        let mut client = InstanceGroupClient::new(process.channel());
        let timeout = self.settings.call_timeout();
        let mut request = tonic::Request::new(init);
        request.set_timeout(timeout);
        let answer = match tokio::time::timeout(timeout, client.init(request)).await {
            Ok(Ok(r)) => r.into_inner(),
            Ok(Err(status)) => return Err(from_status("init", None, &status)),
            Err(_) => {
                return Err(FleetError::provider(
                    "init",
                    format!("no answer within {timeout:?}"),
                ));
            }
        };
        let info = answer
            .info
            .ok_or_else(|| FleetError::provider("init", "the plugin sent no provider info"))
            .and_then(|i| convert::info_from_pb(i).map_err(|e| FleetError::provider("init", e)))?;
        tracing::info!(
            plugin = %self.runner_name,
            pid = process.pid(),
            id = %info.id,
            "plugin started"
        );
        Ok((Running { process, client }, info))
    }

    /// One call with the deadline `call_timeout` (restart included), sent to the plugin as
    /// its gRPC deadline too.
    async fn call<T, F, Fut>(
        &self,
        op: &'static str,
        id: Option<&str>,
        f: F,
    ) -> Result<T, FleetError>
    where
        F: FnOnce(InstanceGroupClient<Channel>, Duration) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let timeout = self.settings.call_timeout();
        let deadline = tokio::time::Instant::now() + timeout;
        let late =
            || FleetError::provider(op, format!("the plugin did not answer within {timeout:?}"));
        let running = tokio::time::timeout_at(deadline, self.running())
            .await
            .map_err(|_| late())??;
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        match tokio::time::timeout_at(deadline, f(running.client.clone(), left)).await {
            Err(_) => Err(late()),
            Ok(Ok(r)) => Ok(r.into_inner()),
            // tonic's channel enforces the grpc-timeout it sends: its own expiry comes back
            // as a status, which says the same as our timer.
            Ok(Err(status))
                if matches!(
                    status.code(),
                    tonic::Code::Cancelled | tonic::Code::DeadlineExceeded
                ) && tokio::time::Instant::now() + Duration::from_millis(20) >= deadline =>
            {
                Err(late())
            }
            Ok(Err(status)) => Err(from_status(op, id, &status)),
        }
    }
}

fn request<T>(message: T, timeout: Duration) -> tonic::Request<T> {
    let mut r = tonic::Request::new(message);
    r.set_timeout(timeout);
    r
}

/// The plugin provider for a runner's configuration.
pub fn build(config: &ProviderConfig<'_>) -> Result<Arc<dyn InstanceGroup>, FleetError> {
    Ok(Arc::new(PluginGroup::from_config(config)?))
}

#[async_trait]
impl InstanceGroup for PluginGroup {
    async fn init(&self, settings: &Settings) -> Result<ProviderInfo, FleetError> {
        let init = pb::InitRequest {
            config_json: self.settings.config.to_string(),
            runner_name: self.runner_name.clone(),
            state_dir: self.state_dir.clone().unwrap_or_default(),
            connector: Some(convert::connector_to_pb(&settings.connector)),
        };
        let mut s = self.supervisor.lock().await;
        if s.info.is_some() {
            return Err(FleetError::provider(
                "init",
                "the plugin provider is already initialised",
            ));
        }
        let (running, info) = self.start(init.clone()).await?;
        s.init = Some(init);
        s.info = Some(info.clone());
        s.current = Some(Arc::new(running));
        Ok(info)
    }

    async fn update(&self) -> Result<Vec<InstanceStatus>, FleetError> {
        let answer = self
            .call("update", None, |mut c, t| async move {
                c.update(request(pb::UpdateRequest {}, t)).await
            })
            .await?;
        convert::listing_from_pb(answer).map_err(|e| FleetError::provider("update", e))
    }

    async fn increase(&self, n: usize) -> Result<usize, FleetError> {
        let answer = self
            .call("increase", None, |mut c, t| async move {
                c.increase(request(pb::IncreaseRequest { n: n as u64 }, t))
                    .await
            })
            .await?;
        let requested = usize::try_from(answer.requested).unwrap_or(usize::MAX);
        if requested > n {
            return Err(FleetError::provider(
                "increase",
                format!("the plugin says it requested {requested} instances when asked for {n}"),
            ));
        }
        Ok(requested)
    }

    async fn decrease(&self, ids: &[InstanceId]) -> Result<Vec<InstanceId>, FleetError> {
        let asked = ids.to_vec();
        let answer = self
            .call("decrease", None, |mut c, t| async move {
                c.decrease(request(pb::DecreaseRequest { ids: asked }, t))
                    .await
            })
            .await?;
        // Only ids that were asked for can have been deleted.
        Ok(answer
            .ids
            .into_iter()
            .filter(|id| ids.contains(id))
            .collect())
    }

    async fn connect_info(&self, id: &str) -> Result<ConnectInfo, FleetError> {
        let asked = id.to_string();
        let answer = self
            .call("connect_info", Some(id), |mut c, t| async move {
                c.connect_info(request(pb::ConnectInfoRequest { id: asked }, t))
                    .await
            })
            .await?;
        convert::connect_info_from_pb(answer).map_err(|e| FleetError::provider("connect_info", e))
    }

    async fn heartbeat(&self, id: &str) -> Result<(), FleetError> {
        let asked = id.to_string();
        self.call("heartbeat", Some(id), |mut c, t| async move {
            c.heartbeat(request(pb::HeartbeatRequest { id: asked }, t))
                .await
        })
        .await?;
        Ok(())
    }

    async fn shutdown(&self) -> Result<(), FleetError> {
        // From here on nothing restarts the plugin.
        self.stopped.store(true, Ordering::SeqCst);
        let current = self.supervisor.lock().await.current.take();
        let Some(running) = current else {
            return Ok(());
        };
        if running.process.exited().is_some() {
            return Ok(());
        }
        let mut client = running.client.clone();
        let released = tokio::time::timeout(
            STOP_GRACE,
            client.shutdown(request(pb::ShutdownRequest {}, STOP_GRACE)),
        )
        .await;
        let ended = running.process.shutdown(STOP_GRACE).await;
        tracing::info!(plugin = %self.runner_name, "plugin stopped ({ended})");
        match released {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(status)) => Err(from_status("shutdown", None, &status)),
            Err(_) => Err(FleetError::provider(
                "shutdown",
                format!("the plugin did not answer within {STOP_GRACE:?}"),
            )),
        }
    }
}
