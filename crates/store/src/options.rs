//! How to open a store.

use std::time::Duration;

/// What to do when the file is not a usable flotilla store (corrupt, foreign, or from a newer
/// flotilla).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OpenMode {
    /// Refuse to open it; report the path and the reason and leave the file untouched.
    #[default]
    Refuse,
    /// Move the file (and its `-wal`/`-shm` companions) aside to `<name>.bad-<unix seconds>`,
    /// never deleting anything, and start with an empty store. The scaler then rebuilds its
    /// state from the provider's listing.
    Rebuild,
}

/// SQLite's `synchronous` setting, the trade between commit cost and durability.
///
/// The database always runs in WAL mode. With [`Synchronous::Normal`] a committed transaction
/// survives a crash of the process (`kill -9`, a panic, an abort) because it is in the WAL
/// file in the kernel's page cache; a power loss or kernel crash may lose the last
/// transactions committed since the last checkpoint (never corrupting the file). With
/// [`Synchronous::Full`] every commit is also synced to the disk, which survives power loss
/// at the price of one `fsync` per transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Synchronous {
    /// Durable against process crashes; no `fsync` per commit.
    #[default]
    Normal,
    /// Durable against power loss; one `fsync` per commit.
    Full,
}

impl Synchronous {
    /// The value of `PRAGMA synchronous`.
    pub fn as_pragma(self) -> &'static str {
        match self {
            Synchronous::Normal => "NORMAL",
            Synchronous::Full => "FULL",
        }
    }
}

/// Options for [`crate::Store::open`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreOptions {
    /// What to do with a bad file.
    pub mode: OpenMode,
    /// Commit durability.
    pub synchronous: Synchronous,
    /// How long a write waits for another connection (another manager process on the same
    /// file) to finish its transaction before failing.
    pub busy_timeout: Duration,
    /// A cap on the database size in pages (`PRAGMA max_page_count`); a write that would grow
    /// the file beyond it fails like a full disk. `None` leaves SQLite's default.
    pub max_page_count: Option<u32>,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            mode: OpenMode::Refuse,
            synchronous: Synchronous::Normal,
            busy_timeout: Duration::from_secs(5),
            max_page_count: None,
        }
    }
}
