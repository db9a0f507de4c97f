//! Artifacts kept by GitLab: an [`ArtifactStore`] over the runner API's artifacts endpoints,
//! so jobs upload to GitLab and download their dependencies' archives with their tokens.

use super::client::Client;
use async_trait::async_trait;
use flotilla_job::model::Dependency;
use flotilla_job::{ArtifactStore, ArtifactUpload, StoreError};
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

    async fn download(&self, dependency: &Dependency, dest: &Path) -> Result<bool, StoreError> {
        if dependency.artifacts_file.is_none() {
            return Ok(false);
        }
        self.client
            .download_artifacts(dependency.id, &dependency.token, dest)
            .await
            .map_err(|e| {
                StoreError::Remote(format!(
                    "downloading the artifacts of job {} ({}) from GitLab: {e}",
                    dependency.id, dependency.name
                ))
            })
    }
}
