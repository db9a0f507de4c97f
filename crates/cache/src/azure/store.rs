//! [`AzureCacheStore`]: cache archives in an Azure Blob Storage container, under GitLab's object
//! names, moved with SAS tokens made as GitLab Runner makes them (the manager moves the
//! archive; see the S3 store for why).

use super::settings::AzureSettings;
use super::sign::{Sas, token};
use crate::error::CacheConfigError;
use crate::object_name::object_name;
use crate::settings::CacheConfig;
use crate::transfer;
use async_trait::async_trait;
use flotilla_fleet::Secret;
use flotilla_job::{CacheKey, CacheStore, StoreError};
use std::path::Path;
use std::time::{Duration, SystemTime};

/// How long a token stays valid (it is used at once); it starts an hour back, as GitLab's do,
/// for clocks that run behind.
const TOKEN_EXPIRY: Duration = Duration::from_secs(3600);
const CLOCK_SKEW: Duration = Duration::from_secs(3600);

/// Cache archives in an Azure Blob Storage container.
#[derive(Debug)]
pub struct AzureCacheStore {
    account: String,
    key: Secret<String>,
    container: String,
    /// `https://<account>.<domain>`, or an emulator's blob endpoint (path style).
    endpoint: String,
    path: String,
    shared: bool,
    short_token: String,
    upload_limit: Option<u64>,
    http: reqwest::Client,
}

impl AzureCacheStore {
    /// The store of `cache` (whose `[runners.cache.azure]` is `azure`) for the runner whose
    /// short token is `short_token`. `blob_endpoint` replaces `https://<account>.<domain>`
    /// (an emulator's `BlobEndpoint`, as `AZURE_STORAGE_CONNECTION_STRING` names it).
    pub fn new(
        cache: &CacheConfig,
        azure: &AzureSettings,
        short_token: &str,
        blob_endpoint: Option<String>,
    ) -> Result<AzureCacheStore, CacheConfigError> {
        azure.validate()?;
        let key = azure
            .account_key
            .clone()
            .ok_or_else(|| CacheConfigError::Azure("AccountKey is required".into()))?;
        Ok(AzureCacheStore {
            account: azure.account_name.trim().to_string(),
            key,
            container: azure.container_name.trim().to_string(),
            endpoint: blob_endpoint
                .map(|e| e.trim_end_matches('/').to_string())
                .unwrap_or_else(|| azure.endpoint()),
            path: cache.path.clone(),
            shared: cache.shared,
            short_token: short_token.to_string(),
            upload_limit: cache.upload_limit(),
            http: transfer::client()?,
        })
    }

    fn signed_url(&self, permissions: &str, key: &CacheKey) -> Result<String, StoreError> {
        let object = object_name(
            &self.path,
            self.shared,
            &self.short_token,
            key.project_id,
            &key.key,
        );
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default();
        // GitLab signs for HTTPS only; an emulator reached over HTTP needs HTTP too.
        let protocol = if self.endpoint.starts_with("http://") {
            "https,http"
        } else {
            "https"
        };
        let sas = Sas {
            permissions,
            start: now.saturating_sub(CLOCK_SKEW).as_secs(),
            expiry: now.saturating_add(TOKEN_EXPIRY).as_secs(),
            account: &self.account,
            container: &self.container,
            blob: &object,
            protocol,
        };
        let query =
            token(&sas, self.key.expose()).map_err(|e| StoreError::Remote(e.to_string()))?;
        Ok(format!(
            "{}/{}/{}?{query}",
            self.endpoint,
            self.container,
            crate::gcs::sign::escape(&object)
        ))
    }
}

#[async_trait]
impl CacheStore for AzureCacheStore {
    async fn fetch(&self, key: &CacheKey, dest: &Path) -> Result<bool, StoreError> {
        let url = self.signed_url("r", key)?;
        transfer::download(&self.http, &url, dest).await
    }

    async fn store(&self, key: &CacheKey, archive: &Path) -> Result<(), StoreError> {
        let size = transfer::size_within(archive, self.upload_limit).await?;
        let url = self.signed_url("w", key)?;
        // GitLab Runner's `GetUploadHeaders`.
        let headers = [
            ("content-type", "application/octet-stream".to_string()),
            ("x-ms-blob-type", "BlockBlob".to_string()),
        ];
        transfer::upload(&self.http, &url, &headers, archive, size).await
    }
}
