//! What an operator sees of flotilla: Prometheus metrics with GitLab Runner's names and
//! labels (so existing dashboards work unchanged) plus flotilla's own, and a read-only
//! status page, both served on GitLab's `listen_address`.
//!
//! - [`Monitor`]: one registry for every runner; [`RunnerHandle`] is how the daemon tells it
//!   about a runner (its scaler once the fleet is up, its jobs, its API requests). The
//!   scalers' histories are followed every second ([`Monitor::follow`]) and at each scrape.
//! - [`metrics`]: the series and where each name comes from.
//! - [`server`]: `/metrics`, `/debug/health`, the page and `/api/status`, with the rule for
//!   who may see the page ([`server::Access`]).
//! - [`status`]: the page's model (JSON); the page itself (`src/page/`) is plain HTML,
//!   CSS and JavaScript with no build step and nothing loaded from elsewhere.

#![warn(missing_docs)]

pub mod buckets;
mod build;
pub mod chart;
mod error;
pub mod jobs;
pub mod labels;
pub mod metrics;
mod monitor;
pub mod process;
mod runner;
pub mod server;
pub mod status;

pub use buckets::InstanceBuckets;
pub use build::BuildInfo;
pub use error::MonitorError;
pub use labels::{RunnerLabels, short_token};
pub use monitor::{FOLLOW_INTERVAL, Health, Monitor, RunnerHealth};
pub use runner::{RunnerHandle, RunnerSpec};
