//! flotilla: runs CI jobs on an autoscaled fleet, at the isolation level each job needs.
//!
//! This crate is the binary's library half: configuration, the CLI's commands and the daemon
//! wiring. The parts it wires together live in their own crates (see ARCHITECTURE.md).

pub mod cli;
pub mod completion;
pub mod config;
pub mod debug;
pub mod exec;
pub mod fleet;
pub mod migrate;
mod printable;
mod progress;
pub mod register;
pub mod registry;
pub mod run;
pub mod service;
pub mod simulate;
pub mod status;
mod table;
