//! The example plugin's `memory` group: running instances that exist only in memory (and
//! in a state file). Shared with the benchmark, which runs the same group in process as the
//! reference for the plugin's overhead.

use async_trait::async_trait;
use flotilla_fleet::{
    Capabilities, ConnectInfo, FleetError, InstanceGroup, InstanceId, InstanceStatus,
    ProviderConfig, ProviderInfo, Settings, State,
};
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Mutex;

/// Instances that exist only in memory (and in a state file).
#[derive(Debug)]
pub(crate) struct MemoryGroup {
    name: String,
    state_file: Option<PathBuf>,
    instances: Mutex<(u64, BTreeSet<String>)>,
}

impl MemoryGroup {
    pub(crate) fn new(config: &ProviderConfig<'_>) -> Result<MemoryGroup, FleetError> {
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
