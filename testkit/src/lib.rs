//! Shared test fixtures for flotilla's crates.
//!
//! - [`infra`]: probes for real infrastructure (Docker engine, sshd, QEMU) with the project's
//!   rule: a test that needs missing infrastructure skips loudly on a developer machine and
//!   fails when `CI` is set.
//! - [`images`]: the offline test images (`scripts/build-images.sh`), built once per process.
//! - [`fake_group`]: [`FakeInstanceGroup`], an in-memory instance group whose latencies and
//!   faults tests control, deterministic given a seed and tokio's (possibly paused) clock.
//!   It lives in `flotilla-sim` (so `flotilla simulate` can use it) and is re-exported here.
//! - [`fake_gitlab`]: [`fake_gitlab::FakeGitLab`], the runner side of GitLab's runner API
//!   over HTTP on 127.0.0.1, with fault injection and a record of every request.
//! - `fake_kube` (feature `fake-kube`): a fake Kubernetes API server whose pods are Docker
//!   containers, with exec and port-forward over the WebSocket channel protocols.
//! - [`containers`]: containers a test made, found and removed by label ([`containers::LabelGuard`]).
//! - `sim` (feature `sim`): the scaler's deterministic simulation, journaling into the real
//!   SQLite store.
//! - [`ssh_hosts`]: real sshd hosts (containers with a published port) for the `static` pool,
//!   which can be paused and resumed.
//! - [`vms`]: the qemu provider's test VM image, and a guard that kills a test's VMs.
//! - `docker_fleet` (feature `docker-fleet`): a docker instance group with a scaler and a
//!   dispatcher at shell or docker isolation, whose containers are removed even on panic.
//! - `moto` (feature `moto`): moto's AWS server on loopback with an Auto Scaling group, and a
//!   proxy that answers chosen calls with AWS's throttling errors.

pub mod containers;
#[cfg(feature = "docker-fleet")]
pub mod docker_fleet;
pub mod fake_gitlab;
#[cfg(feature = "fake-kube")]
pub mod fake_kube;
/// The fake instance group, re-exported from `flotilla-sim`.
pub mod fake_group {
    pub use flotilla_sim::fake_group::*;
}
pub mod images;
pub mod infra;
#[cfg(feature = "moto")]
pub mod moto;
#[cfg(feature = "sim")]
pub mod sim;
pub mod ssh_hosts;
pub mod vms;

pub use fake_group::{FakeConfig, FakeInstanceGroup};
