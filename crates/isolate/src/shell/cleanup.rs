//! Stopping what jobs left running: the stomp of one slot before and after a job, the sweep of
//! every slot of an instance met for the first time.

use crate::IsolateError;
use crate::command::helper_command;
use crate::stage_record::{process_owner, sweep_command};
use flotilla_connect::{Connector, ConnectorExt, Output};

/// The number a stomp or sweep printed, or why it did not print one.
pub(crate) fn stopped_count(out: &Output) -> Result<usize, String> {
    if !out.status.success() {
        return Err(format!(
            "it failed with {}: {}",
            out.status,
            out.stderr_str().trim()
        ));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    text.trim()
        .lines()
        .last()
        .and_then(|l| l.trim().parse().ok())
        .ok_or_else(|| format!("it printed {:?} instead of a count", text.trim()))
}

/// Stops, in every slot recorded under `records_dir`, the stages that another manager process
/// recorded; returns how many process groups it stopped.
pub(super) async fn sweep(
    connector: &dyn Connector,
    instance_id: &str,
    records_dir: &str,
) -> Result<usize, IsolateError> {
    let line = sweep_command(records_dir, process_owner());
    let out = connector
        .output(&helper_command(&line))
        .await
        .map_err(|source| IsolateError::Connect {
            instance: instance_id.to_string(),
            source,
        })?;
    stopped_count(&out).map_err(|m| IsolateError::Cleanup {
        instance: instance_id.to_string(),
        message: format!("stopping the stages other managers left: {m}"),
    })
}
