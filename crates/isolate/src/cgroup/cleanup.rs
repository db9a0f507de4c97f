//! Emptying every slot cgroup of an instance met for the first time.

use super::CgroupConfig;
use super::script::sweep_command;
use crate::IsolateError;
use crate::command::helper_command;
use crate::shell::stopped_count;
use flotilla_connect::{Connector, ConnectorExt};

/// Kills whatever is in the slot cgroups `config`'s template names (every slot number) and
/// removes them; returns how many processes it killed. The dispatcher runs it before any job
/// of this process starts on the instance, so nothing in a slot cgroup then is ours.
pub(super) async fn sweep(
    connector: &dyn Connector,
    instance_id: &str,
    config: &CgroupConfig,
) -> Result<usize, IsolateError> {
    let glob = config
        .template
        .replace("${slot}", "*")
        .replace("$slot", "*");
    let out = connector
        .output(&helper_command(&sweep_command(&config.root, &glob)))
        .await
        .map_err(|source| IsolateError::Connect {
            instance: instance_id.to_string(),
            source,
        })?;
    stopped_count(&out).map_err(|m| IsolateError::Cleanup {
        instance: instance_id.to_string(),
        message: format!("emptying the slot cgroups other managers left: {m}"),
    })
}
