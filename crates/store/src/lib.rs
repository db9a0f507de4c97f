//! Crash-safe SQLite persistence of the scaler ledgers and job records.
//!
//! One SQLite file in WAL mode (mode 0600: it holds credentials) keeps, per [`ScopeId`]
//! (a runner URL + runner id + provider id, see [`Identity`]):
//!
//! - the fleet ledger the scaler journals before each change takes effect outside
//!   ([`Store::journal`]) and reads back at start ([`Store::load_fleet`]);
//! - a lease so that a second manager on the same instance group refuses to start
//!   ([`Store::acquire_lease`]);
//! - job records, so that every job running at a crash is reported exactly once
//!   ([`Store::unfinished_jobs`]);
//! - credentials flotilla minted ([`Store::put_credential`]).
//!
//! Every operation is one transaction. With the default [`Synchronous::Normal`] a committed
//! transaction survives `kill -9`; [`Synchronous::Full`] also survives power loss.
//! A file that is not a flotilla store, is corrupt, or comes from a newer flotilla is refused
//! and left untouched, unless [`OpenMode::Rebuild`] asks to move it aside and start empty.

pub mod codec;
mod credentials;
mod decisions;
mod error;
mod file;
mod fleet;
mod holder;
mod identity;
mod jobs;
mod lease;
mod options;
mod schema;
mod store;
mod time;

pub use error::StoreError;
pub use holder::LeaseHolder;
pub use identity::{Identity, ScopeId};
pub use jobs::{JobOutcome, JobRecord, JobStart, JobState};
pub use lease::Lease;
pub use options::{OpenMode, StoreOptions, Synchronous};
pub use schema::{APPLICATION_ID, SCHEMA_VERSION};
pub use store::Store;
