//! This crate's integration tests as one test binary, each file of this directory a module:
//! one link of the dependency graph instead of one per file, which kept the CI machine's disk
//! from filling under the linker. Run one file's tests with a filter on its module, e.g.
//! `cargo nextest run -p flotilla-isolate -E 'test(/^cgroup_slots::/)'`.

mod vm_support;

mod cgroup_slots;
mod docker_cleanup;
mod docker_gpus;
mod microvm_slots;
mod microvm_snapshot_store;
mod microvm_snapshots;
mod shell_slots;
mod vm_slots;
