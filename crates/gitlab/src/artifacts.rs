//! Artifacts kept by GitLab: an [`ArtifactStore`] over the runner API's artifacts endpoints,
//! so jobs upload to GitLab (archives and reports, each with its type and format) and
//! download their dependencies' archives with the running job's token.

use super::client::Client;
use async_trait::async_trait;
use flotilla_job::{ArtifactDownload, ArtifactStore, ArtifactUpload, StoreError};
use std::path::Path;
use std::sync::Arc;

/// GitLab's artifacts API as an [`ArtifactStore`].
#[derive(Debug, Clone)]
pub struct GitLabArtifactStore {
    client: Arc<Client>,
}

impl GitLabArtifactStore {
    /// A store talking to GitLab through `client`.
    pub fn new(client: Arc<Client>) -> GitLabArtifactStore {
        GitLabArtifactStore { client }
    }
}

#[async_trait]
impl ArtifactStore for GitLabArtifactStore {
    async fn upload(&self, upload: &ArtifactUpload<'_>, archive: &Path) -> Result<(), StoreError> {
        self.client
            .upload_artifact(upload, archive)
            .await
            .map_err(|e| StoreError::Remote(format!("uploading artifacts to GitLab: {e}")))
    }

    async fn download(
        &self,
        download: &ArtifactDownload<'_>,
        dest: &Path,
    ) -> Result<bool, StoreError> {
        let dependency = download.dependency;
        let Some(file) = &dependency.artifacts_file else {
            return Ok(false);
        };
        // The running job's token, whatever `dependencies[].token` says: current GitLab
        // accepts only it, older GitLab accepted it as well.
        self.client
            .download_artifacts(
                dependency.id,
                download.token,
                dest,
                download_limit(file.size),
            )
            .await
            .map_err(|e| {
                StoreError::Remote(format!(
                    "downloading the artifacts of job {} ({}) from GitLab: {e}",
                    dependency.id, dependency.name
                ))
            })
    }
}

/// The most read of a dependency's archive: the size GitLab gave for it
/// (`artifacts_file.size`, the stored archive's), with room for a small difference; with no
/// size, 16 GiB, so that an endless answer still ends.
fn download_limit(announced: u64) -> u64 {
    const WITHOUT_A_SIZE: u64 = 16 << 30;
    if announced == 0 {
        WITHOUT_A_SIZE
    } else {
        announced
            .saturating_add(announced / 16)
            .saturating_add(1 << 20)
    }
}
