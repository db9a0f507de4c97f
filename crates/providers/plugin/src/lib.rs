//! The `plugin` provider: an instance group served by a separate program.
//!
//! flotilla starts the program named in `plugin_config.command` and speaks hashicorp
//! go-plugin's process protocol with it ([`process`]: the magic cookie and `PLUGIN_*`
//! environment, the handshake line, the health service `plugin`, `GRPCStdio` read into
//! flotilla's logs, `GRPCController.Shutdown` at stop, optional AutoMTLS), around
//! flotilla's own `InstanceGroup` gRPC service (`flotilla-plugin-protocol`; not fleeting's,
//! whose proto could not be obtained). Plugins are written in any language; Rust ones with
//! `flotilla-plugin-sdk`.
//!
//! What fleeting's plugins lack, [`PluginGroup`] adds: a plugin that dies is restarted with
//! backoff while the fleet goes on (calls fail until then, and no capacity changes);
//! every call has a deadline; the plugin cannot outlive flotilla (the kernel kills it when
//! flotilla dies, and the SDK exits when its lifeline closes); and it stays up, in its own
//! process group, until flotilla has finished with it at shutdown.

mod backoff;
mod group;
pub mod logs;
pub mod process;
mod settings;
mod spawn;

pub use group::{PluginGroup, build};
pub use settings::PluginSettings;

/// The provider's name in configuration (`plugin = "plugin"`).
pub const PLUGIN: &str = "plugin";
