//! Cache storage.

use super::StoreError;
use super::atomic::{copy_if_exists, place_atomically};
use super::file_component;
use async_trait::async_trait;
use std::fmt;
use std::path::{Path, PathBuf};

/// A cache's identity: caches are per project, then per (expanded) key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CacheKey {
    /// The project (its full path, or `project-<id>`): where the local store keeps it.
    pub project: String,
    /// The project's id: where GitLab's distributed cache keeps it
    /// (`[<Path>/][runner/<short token>/]project/<id>/<key>`).
    pub project_id: i64,
    /// The expanded key.
    pub key: String,
}

impl fmt::Display for CacheKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.project, self.key)
    }
}

/// Keeps cache archives on the manager side. Failures are warnings for the job, never errors.
#[async_trait]
pub trait CacheStore: Send + Sync {
    /// Writes the archive stored under `key` to `dest`; false when there is none.
    async fn fetch(&self, key: &CacheKey, dest: &Path) -> Result<bool, StoreError>;

    /// Stores the archive at `archive` (a local zip file) under `key`, replacing any older
    /// one atomically.
    async fn store(&self, key: &CacheKey, archive: &Path) -> Result<(), StoreError>;
}

/// Caches in a local directory: `<root>/<project>/<key>/cache.zip`, written atomically
/// (temporary file, sync, rename) so a concurrent reader never sees half an archive.
#[derive(Debug, Clone)]
pub struct LocalCacheStore {
    root: PathBuf,
}

impl LocalCacheStore {
    /// A store rooted at `root` (created on first store).
    pub fn new(root: impl Into<PathBuf>) -> LocalCacheStore {
        LocalCacheStore { root: root.into() }
    }

    /// Where the archive of `key` is kept.
    pub fn archive_path(&self, key: &CacheKey) -> PathBuf {
        self.root
            .join(file_component(&key.project))
            .join(file_component(&key.key))
            .join("cache.zip")
    }
}

#[async_trait]
impl CacheStore for LocalCacheStore {
    async fn fetch(&self, key: &CacheKey, dest: &Path) -> Result<bool, StoreError> {
        copy_if_exists(&self.archive_path(key), dest).await
    }

    async fn store(&self, key: &CacheKey, archive: &Path) -> Result<(), StoreError> {
        place_atomically(archive, &self.archive_path(key)).await
    }
}
