//! The state directory's disk: while it is nearly full the manager takes no new job, since
//! it could not record one (a job's record is written before anything is sent about it), and
//! says so once; when space is back it says that too and takes jobs again.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

/// Below this much free space, no new job is taken: SQLite needs room for its write-ahead
/// log, and a job's record, token and outcome are written as it runs.
pub(super) const MIN_FREE_BYTES: u64 = 64 << 20;

/// Watches the free space under the state directory.
#[derive(Debug)]
pub(super) struct DiskGate {
    dir: PathBuf,
    min_free: u64,
    full: AtomicBool,
}

impl DiskGate {
    /// A gate for `dir`.
    pub(super) fn new(dir: PathBuf) -> DiskGate {
        DiskGate {
            dir,
            min_free: MIN_FREE_BYTES,
            full: AtomicBool::new(false),
        }
    }

    /// Why no job may be taken now, or `None`. Logs when the disk fills and when space is
    /// back, once each.
    pub(super) fn refusal(&self) -> Option<String> {
        let free = match nix::sys::statvfs::statvfs(&self.dir) {
            Ok(s) => s.blocks_available().saturating_mul(s.fragment_size()),
            // A directory that cannot be looked at is the store's problem to report.
            Err(_) => return None,
        };
        let full = free < self.min_free;
        let was = self.full.swap(full, Ordering::Relaxed);
        match (was, full) {
            (false, true) => tracing::error!(
                dir = %self.dir.display(),
                free_mib = free >> 20,
                "the state directory's disk is full: taking no new job until space is freed \
                 (running jobs go on)"
            ),
            (true, false) => tracing::info!(
                dir = %self.dir.display(),
                free_mib = free >> 20,
                "the state directory's disk has space again: taking jobs"
            ),
            _ => {}
        }
        full.then(|| {
            format!(
                "the disk of {} has {} MiB free, less than {} MiB",
                self.dir.display(),
                free >> 20,
                self.min_free >> 20
            )
        })
    }
}
