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
//! stdio tests); `--tcp` on the command line makes it listen on TCP rather than a unix socket.

mod memory;

use flotilla_fleet::{FleetError, InstanceGroup, ProviderConfig};
use memory::MemoryGroup;
use std::sync::Arc;

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
