//! flotilla's integration tests as one test binary: each file of this directory is a module.
//! One binary links once, where one per file linked the whole dependency graph 25 times over
//! (about a gigabyte of test executables, enough to fill a small CI disk under the linker).
//! Run one file's tests with a filter on its module: `cargo nextest run -p flotilla -E
//! 'test(/^run_gitlab::/)'`.

mod exec_support;
mod run_support;

mod cli;
mod config_corpus;
mod config_docs;
mod config_errors;
mod config_fixtures;
mod exec_conformance;
mod exec_corpus;
mod exec_docker;
mod exec_dotenv;
mod exec_examples;
mod exec_features;
mod exec_git;
mod exec_microvm;
mod migrate;
mod packaging;
mod provider_aws;
mod provider_plugin;
mod provider_qemu;
mod provider_static;
mod register;
mod run_cache;
mod run_conformance;
mod run_crash;
mod run_docker;
mod run_gitlab;
mod run_kubernetes;
mod run_microvm;
mod run_monitor;
mod run_rails;
mod service;
mod simulate;
mod status;
