//! Artifact storage.

use super::StoreError;
use super::atomic::{copy_if_exists, place_atomically};
use super::file_component;
use crate::model::Dependency;
use async_trait::async_trait;
use flotilla_fleet::Secret;
use std::path::{Path, PathBuf};

/// One artifact archive to upload, with GitLab's upload parameters.
#[derive(Debug, Clone, Copy)]
pub struct ArtifactUpload<'a> {
    /// The job that produced it.
    pub job_id: i64,
    /// That job's token (GitLab authenticates the upload with it).
    pub token: &'a Secret<String>,
    /// The archive's name (`artifacts:name`, `artifacts` when unset).
    pub name: &'a str,
    /// `archive`, `junit`, `dotenv`, ...
    pub artifact_type: &'a str,
    /// `zip`, `gzip`, `raw`, ...
    pub artifact_format: &'a str,
    /// `expire_in`, empty for the default.
    pub expire_in: &'a str,
}

/// A dependency's artifacts to download for a running job.
#[derive(Debug, Clone, Copy)]
pub struct ArtifactDownload<'a> {
    /// The job whose artifacts to fetch.
    pub dependency: &'a Dependency,
    /// The token of the job that is running and needs them. Current GitLab authorises the
    /// download with the running job's token only (`authenticate_job_via_dependent_job!` in
    /// `lib/api/ci/runner.rb`); older ones accepted it too.
    pub token: &'a Secret<String>,
}

/// Keeps the artifacts jobs upload and hands them to the jobs that depend on them.
#[async_trait]
pub trait ArtifactStore: Send + Sync {
    /// Stores the archive at `archive` (a local zip file) for `upload.job_id`.
    async fn upload(&self, upload: &ArtifactUpload<'_>, archive: &Path) -> Result<(), StoreError>;

    /// Writes the `archive` artifact of `download.dependency` to `dest`; false when there is
    /// none (the job then fails: a dependency announced with artifacts must have them).
    async fn download(
        &self,
        download: &ArtifactDownload<'_>,
        dest: &Path,
    ) -> Result<bool, StoreError>;
}

/// Artifacts in a local directory: `<root>/<job id>/<artifact type>.zip`.
#[derive(Debug, Clone)]
pub struct LocalArtifactStore {
    root: PathBuf,
}

impl LocalArtifactStore {
    /// A store rooted at `root` (created on first upload).
    pub fn new(root: impl Into<PathBuf>) -> LocalArtifactStore {
        LocalArtifactStore { root: root.into() }
    }

    /// Where the artifact of this type of this job is kept.
    pub fn archive_path(&self, job_id: i64, artifact_type: &str) -> PathBuf {
        self.root
            .join(job_id.to_string())
            .join(format!("{}.zip", file_component(artifact_type)))
    }
}

#[async_trait]
impl ArtifactStore for LocalArtifactStore {
    async fn upload(&self, upload: &ArtifactUpload<'_>, archive: &Path) -> Result<(), StoreError> {
        let dest = self.archive_path(upload.job_id, upload.artifact_type);
        place_atomically(archive, &dest).await
    }

    async fn download(
        &self,
        download: &ArtifactDownload<'_>,
        dest: &Path,
    ) -> Result<bool, StoreError> {
        copy_if_exists(&self.archive_path(download.dependency.id, "archive"), dest).await
    }
}
