//! [`GcsCacheStore`]: cache archives in a Cloud Storage bucket, under GitLab's object names,
//! moved with V2 signed URLs made as GitLab Runner makes them (the manager moves the archive;
//! see the S3 store for why).

use super::settings::GcsSettings;
use super::sign::{Request, SigningKey, signed_url};
use crate::error::CacheConfigError;
use crate::object_name::object_name;
use crate::settings::CacheConfig;
use crate::transfer;
use async_trait::async_trait;
use flotilla_job::{CacheKey, CacheStore, StoreError};
use std::path::Path;
use std::time::{Duration, SystemTime};

/// How long a signed URL stays valid (it is used at once).
const URL_EXPIRY: Duration = Duration::from_secs(3600);
/// The content type GitLab Runner's GCS adapter signs for uploads.
const UPLOAD_CONTENT_TYPE: &str = "application/octet-stream";

/// Cache archives in a Cloud Storage bucket.
#[derive(Debug)]
pub struct GcsCacheStore {
    bucket: String,
    endpoint: String,
    access_id: String,
    key: SigningKey,
    path: String,
    shared: bool,
    short_token: String,
    upload_limit: Option<u64>,
    http: reqwest::Client,
}

impl GcsCacheStore {
    /// The store of `cache` (whose `[runners.cache.gcs]` is `gcs`) for the runner whose short
    /// token is `short_token`. `endpoint` replaces `https://storage.googleapis.com` (an
    /// emulator's address: `STORAGE_EMULATOR_HOST`, as Google's client libraries read it).
    pub fn new(
        cache: &CacheConfig,
        gcs: &GcsSettings,
        short_token: &str,
        endpoint: Option<String>,
    ) -> Result<GcsCacheStore, CacheConfigError> {
        gcs.validate()?;
        let account = gcs.service_account()?;
        let key = SigningKey::from_pem(account.private_key.expose())
            .map_err(|e| CacheConfigError::GcsKey(e.to_string()))?;
        Ok(GcsCacheStore {
            bucket: gcs.bucket_name.trim().to_string(),
            endpoint: endpoint.unwrap_or_else(|| gcs.endpoint()),
            access_id: account.email,
            key,
            path: cache.path.clone(),
            shared: cache.shared,
            short_token: short_token.to_string(),
            upload_limit: cache.upload_limit(),
            http: transfer::client()?,
        })
    }

    fn object(&self, key: &CacheKey) -> String {
        object_name(
            &self.path,
            self.shared,
            &self.short_token,
            key.project_id,
            &key.key,
        )
    }

    fn signed(
        &self,
        method: &str,
        content_type: &str,
        headers: &[(&str, String)],
        key: &CacheKey,
    ) -> Result<String, StoreError> {
        let expires = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .saturating_add(URL_EXPIRY)
            .as_secs();
        let object = self.object(key);
        let request = Request {
            method,
            content_type,
            expires,
            headers,
            bucket: &self.bucket,
            object: &object,
        };
        signed_url(&self.endpoint, &request, &self.access_id, &self.key)
            .map_err(|e| StoreError::Remote(e.to_string()))
    }
}

#[async_trait]
impl CacheStore for GcsCacheStore {
    async fn fetch(&self, key: &CacheKey, dest: &Path) -> Result<bool, StoreError> {
        let url = self.signed("GET", "", &[], key)?;
        transfer::download(&self.http, &url, dest).await
    }

    async fn store(&self, key: &CacheKey, archive: &Path) -> Result<(), StoreError> {
        let size = transfer::size_within(archive, self.upload_limit).await?;
        // GitLab Runner's `GetUploadHeaders`: the store itself refuses a larger body.
        let range: Vec<(&str, String)> = self
            .upload_limit
            .map(|max| ("x-goog-content-length-range", format!("0,{max}")))
            .into_iter()
            .collect();
        let url = self.signed("PUT", UPLOAD_CONTENT_TYPE, &range, key)?;
        let mut headers = vec![("content-type", UPLOAD_CONTENT_TYPE.to_string())];
        headers.extend(range);
        transfer::upload(&self.http, &url, &headers, archive, size).await
    }
}
