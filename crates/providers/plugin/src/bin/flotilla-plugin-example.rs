//! An example plugin written with `flotilla-plugin-sdk`, used by the plugin provider's
//! tests, benchmarks and end-to-end runs.
//!
//! Its `config` (sent by flotilla in `Init`) picks the group it serves:
//! - `{"provider": "local"}`: this host, as the `local` provider does (jobs run here, by the
//!   local connector; only the provider is out of process);
//! - `{"provider": "memory", "instances": N, "state_file": "..."}`: N running instances
//!   that exist only in this process's memory (and in `state_file`, so that a restarted
//!   plugin lists the same ones); `increase` adds running ones, `decrease` removes them.
//!
//! `"say": "..."` makes it print that text on stdout and stderr when initialised (the
//! stdio tests); `"network": "tcp"` on the command line (`--tcp`) makes it listen on TCP.

use async_trait::async_trait;
use flotilla_fleet::{
    Capabilities, ConnectInfo, FleetError, InstanceGroup, InstanceId, InstanceStatus,
    ProviderConfig, ProviderInfo, Settings, State,
};
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

fn build(config: &ProviderConfig<'_>) -> Result<Arc<dyn InstanceGroup>, FleetError> {
    let c = config.plugin_config;
    if let Some(say) = c.get("say").and_then(|s| s.as_str()) {
        println!("stdout: {say}");
        eprintln!("stderr: {say}");
    }
    match c
        .get("provider")
        .and_then(|p| p.as_str())
        .unwrap_or("memory")
    {
        "local" => Ok(Arc::new(flotilla_provider_local::LocalGroup::new())),
        "memory" => Ok(Arc::new(MemoryGroup::new(config)?)),
        other => Err(FleetError::Config(format!(
            "provider {other:?}: this example serves \"local\" or \"memory\""
        ))),
    }
}

/// Instances that exist only in memory (and in a state file).
#[derive(Debug)]
struct MemoryGroup {
    name: String,
    state_file: Option<PathBuf>,
    instances: Mutex<(u64, BTreeSet<String>)>,
}

impl MemoryGroup {
    fn new(config: &ProviderConfig<'_>) -> Result<MemoryGroup, FleetError> {
        let c = config.plugin_config;
        let state_file = c
            .get("state_file")
            .and_then(|s| s.as_str())
            .map(PathBuf::from);
        let saved = state_file
            .as_ref()
            .and_then(|f| std::fs::read_to_string(f).ok())
            .and_then(|s| serde_json::from_str::<(u64, BTreeSet<String>)>(&s).ok());
        let instances = match saved {
            Some(saved) => saved,
            None => {
                let n = c.get("instances").and_then(|n| n.as_u64()).unwrap_or(0);
                (n, (0..n).map(|i| format!("m-{i}")).collect())
            }
        };
        let group = MemoryGroup {
            name: config.runner_name.to_string(),
            state_file,
            instances: Mutex::new(instances),
        };
        group.save()?;
        Ok(group)
    }

    fn save(&self) -> Result<(), FleetError> {
        let Some(f) = &self.state_file else {
            return Ok(());
        };
        let text =
            serde_json::to_string(&*self.instances.lock().unwrap_or_else(|e| e.into_inner()))
                .map_err(|e| FleetError::provider("save", e))?;
        let tmp = f.with_extension("tmp");
        std::fs::write(&tmp, text)
            .and_then(|()| std::fs::rename(&tmp, f))
            .map_err(|e| FleetError::provider("save", e))
    }
}

#[async_trait]
impl InstanceGroup for MemoryGroup {
    async fn init(&self, _settings: &Settings) -> Result<ProviderInfo, FleetError> {
        Ok(ProviderInfo {
            id: format!("memory/{}", self.name),
            max_size: usize::MAX,
            version: env!("CARGO_PKG_VERSION").into(),
            build_info: "flotilla-plugin-example".into(),
            capabilities: Capabilities::remote(),
        })
    }

    async fn update(&self) -> Result<Vec<InstanceStatus>, FleetError> {
        let g = self.instances.lock().unwrap_or_else(|e| e.into_inner());
        Ok(g.1
            .iter()
            .map(|id| InstanceStatus::new(id.clone(), State::Running))
            .collect())
    }

    async fn increase(&self, n: usize) -> Result<usize, FleetError> {
        {
            let mut g = self.instances.lock().unwrap_or_else(|e| e.into_inner());
            for _ in 0..n {
                let id = format!("m-{}", g.0);
                g.0 += 1;
                g.1.insert(id);
            }
        }
        self.save()?;
        Ok(n)
    }

    async fn decrease(&self, ids: &[InstanceId]) -> Result<Vec<InstanceId>, FleetError> {
        let done: Vec<InstanceId> = {
            let mut g = self.instances.lock().unwrap_or_else(|e| e.into_inner());
            ids.iter().filter(|id| g.1.remove(*id)).cloned().collect()
        };
        self.save()?;
        Ok(done)
    }

    async fn connect_info(&self, id: &str) -> Result<ConnectInfo, FleetError> {
        if !self
            .instances
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .1
            .contains(id)
        {
            return Err(FleetError::InstanceNotFound(id.into()));
        }
        Ok(ConnectInfo {
            config: Default::default(),
            id: id.into(),
            external_addr: String::new(),
            internal_addr: "192.0.2.1:22".into(),
            expires: None,
        })
    }

    async fn heartbeat(&self, id: &str) -> Result<(), FleetError> {
        if self
            .instances
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .1
            .contains(id)
        {
            Ok(())
        } else {
            Err(FleetError::InstanceNotFound(id.into()))
        }
    }

    async fn shutdown(&self) -> Result<(), FleetError> {
        Ok(())
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> std::process::ExitCode {
    let network = if std::env::args().any(|a| a == "--tcp") {
        flotilla_plugin_sdk::Network::Tcp
    } else {
        flotilla_plugin_sdk::Network::Unix
    };
    let options = flotilla_plugin_sdk::ServeOptions { network };
    match flotilla_plugin_sdk::serve_with(build, options).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            std::process::ExitCode::FAILURE
        }
    }
}
