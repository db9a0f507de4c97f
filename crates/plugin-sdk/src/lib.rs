//! Write a flotilla provider as a separate program, in Rust.
//!
//! A plugin is an executable that flotilla starts (`plugin = "plugin"` with
//! `plugin_config.command`) and talks to over gRPC, with hashicorp go-plugin's process
//! protocol around flotilla's own `InstanceGroup` service (`flotilla-plugin-protocol`).
//! [`serve`] does go-plugin's side of it: checks the magic cookie, listens on a unix socket
//! (or TCP), answers AutoMTLS, prints the handshake line, reports the health service
//! `plugin` as serving, streams the plugin's stdout and stderr to flotilla (`GRPCStdio`),
//! stops on `GRPCController.Shutdown`, and exits when flotilla is gone.
//!
//! The provider is any [`flotilla_fleet::InstanceGroup`], built by the same kind of function
//! an in-process provider crate exposes:
//!
//! ```no_run
//! use std::sync::Arc;
//! use flotilla_fleet::{FleetError, InstanceGroup, ProviderConfig};
//!
//! fn build(config: &ProviderConfig<'_>) -> Result<Arc<dyn InstanceGroup>, FleetError> {
//!     // read config.plugin_config (the plugin's own `config` table) here
//! #   unimplemented!()
//! }
//!
//! #[tokio::main]
//! async fn main() -> std::process::ExitCode {
//!     match flotilla_plugin_sdk::serve(build).await {
//!         Ok(()) => std::process::ExitCode::SUCCESS,
//!         Err(e) => {
//!             eprintln!("{e}");
//!             std::process::ExitCode::FAILURE
//!         }
//!     }
//! }
//! ```

mod controller;
mod lifeline;
mod listener;
mod serve;
mod service;
mod stdio;

pub use flotilla_plugin_protocol::Network;
pub use serve::{ServeError, ServeOptions, serve, serve_with};
pub use service::Build;
