//! This crate's integration tests as one test binary, each file of this directory a module:
//! one link of the dependency graph instead of one per file, which kept the CI machine's disk
//! from filling under the linker. Run one file's tests with a filter on its module, e.g.
//! `cargo nextest run -p flotilla-job -E 'test(/^busybox::/)'`.

mod common;

mod busybox;
mod conformance;
mod extract_fuzz;
mod runner;
mod sources;
mod transfer;
