//! Artifacts and caches on the wire: files leave and enter the environment as `tar` streams
//! through stdin/stdout of a command in the helper context (so an instance needs nothing but
//! `sh`, `find` and `tar`), and are kept on the manager as zip archives.
//!
//! Every path is checked on both sides: patterns and entries that are absolute or climb out
//! with `..` are refused with a message saying which and why; an archive with such an entry,
//! or one that would write through a symbolic link, is refused as a whole before anything is
//! extracted (zip-slip). Symbolic links themselves are archived and extracted as links,
//! wherever they point, as GitLab Runner does.

mod collect;
mod extract;
mod here;
mod on_disk;
mod paths;
mod report;
mod stream;
mod ziptime;

pub use collect::{ArchiveSpec, CollectReport, collect_zip};
pub use extract::{ExtractReport, extract_zip, inspect_zip};
pub use paths::{PathFilter, PathRejection, normalize_pattern, normalize_relative};
pub use report::{ReportFormat, zip_to_gzip, zip_to_raw};
pub use stream::{StreamRules, filter_tar};
pub use ziptime::{unix_time, zip_time};

use crate::env::{EnvError, Environment, ExecCommand, ExecSpec, ExitStatus, Place};
use crate::trace::TraceWriter;
use tokio_util::sync::CancellationToken;

/// Moving files in or out of the environment failed.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    /// The environment could not run the command.
    #[error("{context}: {source}")]
    Env {
        /// What was being done.
        context: String,
        /// The error.
        #[source]
        source: EnvError,
    },
    /// A command in the environment failed.
    #[error("{what} failed in the environment with {status}")]
    Command {
        /// Which command.
        what: String,
        /// How it ended.
        status: ExitStatus,
    },
    /// An archive holds an entry that would land outside the target directory.
    #[error("archive entry {name:?} {reason}; the archive is refused")]
    UnsafeEntry {
        /// The entry's name as stored.
        name: String,
        /// Why it is refused.
        reason: PathRejection,
    },
    /// A directory an entry would be written through is a symbolic link on disk leading out
    /// of the destination, or the destination itself is reached through one.
    #[error(
        "{name:?} is a symbolic link on disk leading out of the destination; nothing is extracted through it, the archive is refused"
    )]
    LinkOnDisk {
        /// The link: relative to the destination, or absolute when it is one of the
        /// destination's own directories.
        name: String,
    },
    /// A tar stream from where the job controls what is written holds an entry that would
    /// land outside the job's directories.
    #[error("the job's files hold {name:?}, which {reason}; the copy is refused")]
    UnsafeStreamEntry {
        /// The entry's name.
        name: String,
        /// Why it is refused.
        reason: String,
    },
    /// A tar or zip stream could not be read or written.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// A zip archive could not be read or written.
    #[error("{context}: {source}")]
    Zip {
        /// What was being done.
        context: String,
        /// The error.
        #[source]
        source: zip::result::ZipError,
    },
    /// The transfer was canceled.
    #[error("canceled")]
    Canceled,
}

impl ArchiveError {
    fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> ArchiveError {
        let context = context.into();
        move |source| ArchiveError::Io { context, source }
    }

    fn zip(context: impl Into<String>) -> impl FnOnce(zip::result::ZipError) -> ArchiveError {
        let context = context.into();
        move |source| ArchiveError::Zip { context, source }
    }

    fn env(context: impl Into<String>, source: EnvError) -> ArchiveError {
        match source {
            EnvError::Canceled => ArchiveError::Canceled,
            source => ArchiveError::Env {
                context: context.into(),
                source,
            },
        }
    }
}

/// Runs a helper command and returns its stdout (stderr goes to the job log).
async fn capture(
    env: &dyn Environment,
    what: &str,
    command: String,
    log: &TraceWriter,
    cancel: &CancellationToken,
) -> Result<Vec<u8>, ArchiveError> {
    let mut out: Vec<u8> = Vec::new();
    let status = env
        .exec(ExecSpec {
            place: Place::Helper,
            command: ExecCommand::Command(command),
            stdin: None,
            stdout: Box::new(&mut out),
            stderr: Box::new(log.clone()),
            cancel: cancel.clone(),
        })
        .await
        .map_err(|e| ArchiveError::env(what, e))?;
    if !status.success() {
        return Err(ArchiveError::Command {
            what: what.to_owned(),
            status,
        });
    }
    Ok(out)
}
