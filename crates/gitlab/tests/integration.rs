//! This crate's integration tests as one test binary, each file of this directory a module:
//! one link of the dependency graph instead of one per file, which kept the CI machine's disk
//! from filling under the linker. Run one file's tests with a filter on its module, e.g.
//! `cargo nextest run -p flotilla-gitlab -E 'test(/^fake_rails::/)'`.

mod runner_support;

mod fake_rails;
mod hostile_gitlab;
mod payload_fuzz;
mod runner_artifacts;
mod runner_cancel;
mod runner_capacity;
mod runner_chaos;
mod runner_dispatch;
mod runner_mock;
mod runner_protocol;
mod runner_route;
mod runner_secrets;
mod runner_source;
mod runner_trace;
