//! What can go wrong with the store, each error naming the file and what failed.

use crate::holder::LeaseHolder;
use std::path::PathBuf;
use std::time::Duration;

/// An error from the store. Every variant names the database file.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A file-system operation on the database file or a companion failed.
    #[error("cannot {what} {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What was attempted ("create", "read the header of", ...).
        what: &'static str,
        /// The cause.
        source: std::io::Error,
    },
    /// SQLite could not open or configure the database.
    #[error("cannot open the store {path} ({what}): {source}")]
    Open {
        /// The file.
        path: PathBuf,
        /// The step that failed.
        what: &'static str,
        /// The cause.
        source: rusqlite::Error,
    },
    /// SQLite would not put the database in WAL mode (for example on a file system without
    /// shared-memory support).
    #[error(
        "cannot put the store {path} in WAL mode (the journal mode stays {mode}); keep it on a \
         local file system"
    )]
    NoWal {
        /// The file.
        path: PathBuf,
        /// The journal mode SQLite reported.
        mode: String,
    },
    /// The file is not a flotilla store (not SQLite, or SQLite written by something else).
    /// It was left untouched.
    #[error(
        "{path} is not a flotilla store ({reason}); refusing to start. The file was left \
         untouched: point the store elsewhere, move the file away, or open with rebuild to \
         move it aside and rebuild state from the provider's listing"
    )]
    NotOurs {
        /// The file.
        path: PathBuf,
        /// Why it is not ours.
        reason: String,
    },
    /// The file is a flotilla store but is damaged or holds values this version cannot read.
    /// It was left untouched.
    #[error(
        "the store {path} is corrupt ({reason}); refusing to start. The file was left \
         untouched: restore it from a backup, or open with rebuild to move it aside and \
         rebuild state from the provider's listing"
    )]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The file was written by a newer flotilla with a schema this version does not know.
    #[error(
        "the store {path} has schema version {found}, newer than version {supported} that this \
         flotilla understands; refusing to start. Upgrade flotilla, or open with rebuild to \
         move the file aside and start empty"
    )]
    TooNew {
        /// The file.
        path: PathBuf,
        /// The schema version found in the file.
        found: i64,
        /// The newest schema version this build knows.
        supported: u32,
    },
    /// Applying a schema migration failed; the file keeps its previous version.
    #[error("cannot migrate the store {path} to schema version {version}: {source}")]
    Migrate {
        /// The file.
        path: PathBuf,
        /// The version being applied.
        version: u32,
        /// The cause.
        source: rusqlite::Error,
    },
    /// A write failed and was rolled back (for example "database or disk is full"); the file
    /// still holds the last committed state.
    #[error("writing to the store {path} failed ({what}): {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// The operation.
        what: &'static str,
        /// The cause.
        source: rusqlite::Error,
    },
    /// A read failed.
    #[error("reading the store {path} failed ({what}): {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The operation.
        what: &'static str,
        /// The cause.
        source: rusqlite::Error,
    },
    /// Another live manager holds the lease on this scope (the same instance group).
    #[error(
        "another manager already runs this instance group (store {path}): {holder} holds the \
         lease for {expires_in:?} more; stop it, or wait for its lease to expire if it is dead"
    )]
    LeaseHeld {
        /// The file.
        path: PathBuf,
        /// Who holds the lease.
        holder: LeaseHolder,
        /// How long until the lease expires unless renewed.
        expires_in: Duration,
    },
    /// The lease this process held was taken over (it had expired) or released.
    #[error(
        "the lease on this instance group (store {path}) is no longer ours{}",
        match holder { Some(h) => format!(": {h} holds it now"), None => String::new() }
    )]
    LeaseLost {
        /// The file.
        path: PathBuf,
        /// Who holds it now, if anybody.
        holder: Option<LeaseHolder>,
    },
    /// The scope id is not in this store.
    #[error("the store {path} has no scope {scope}")]
    UnknownScope {
        /// The file.
        path: PathBuf,
        /// The missing scope id.
        scope: i64,
    },
    /// A job record was expected and is not there.
    #[error("the store {path} has no record of job {job_id} from {job_source}")]
    UnknownJob {
        /// The file.
        path: PathBuf,
        /// The job source.
        job_source: String,
        /// The job id.
        job_id: String,
    },
    /// A job record is in a state that does not allow the operation (starting a job that has
    /// ended, reporting a job that is still running).
    #[error("cannot {action} job {job_id} from {job_source}: it is {state} in the store {path}")]
    JobConflict {
        /// The file.
        path: PathBuf,
        /// The job source.
        job_source: String,
        /// The job id.
        job_id: String,
        /// Its recorded state.
        state: &'static str,
        /// What was attempted.
        action: &'static str,
    },
}

impl StoreError {
    /// The same error naming `path` as the file (an error met while building a new store
    /// under its temporary name names the store's real path).
    pub(crate) fn at(mut self, path: &std::path::Path) -> StoreError {
        match &mut self {
            StoreError::Io { path: p, .. }
            | StoreError::Open { path: p, .. }
            | StoreError::NoWal { path: p, .. }
            | StoreError::NotOurs { path: p, .. }
            | StoreError::Corrupt { path: p, .. }
            | StoreError::TooNew { path: p, .. }
            | StoreError::Migrate { path: p, .. }
            | StoreError::Write { path: p, .. }
            | StoreError::Read { path: p, .. }
            | StoreError::LeaseHeld { path: p, .. }
            | StoreError::LeaseLost { path: p, .. }
            | StoreError::UnknownScope { path: p, .. }
            | StoreError::UnknownJob { path: p, .. }
            | StoreError::JobConflict { path: p, .. } => *p = path.to_path_buf(),
        }
        self
    }

    /// Whether this is SQLite's "database or disk is full" (the write was rolled back).
    pub fn is_disk_full(&self) -> bool {
        match self {
            StoreError::Write { source, .. } | StoreError::Migrate { source, .. } => {
                source.sqlite_error_code() == Some(rusqlite::ErrorCode::DiskFull)
            }
            StoreError::Io { source, .. } => source.kind() == std::io::ErrorKind::StorageFull,
            _ => false,
        }
    }
}
