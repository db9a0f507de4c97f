//! [`S3CacheStore`]: cache archives in an S3 bucket, under GitLab's object names, moved with
//! presigned URLs.
//!
//! GitLab Runner hands the presigned URLs to the build host, whose helper moves the archive.
//! flotilla's job runner hands archives to its store on the manager (see the job crate's
//! `CacheStore`), so the manager makes the same URLs and moves the archive itself: what lands
//! in the bucket, and where, is what GitLab Runner would have put there, so a fleet moved
//! from GitLab Runner finds its caches, and runners of both can share a bucket.

use super::credentials::CredentialSource;
use super::presign::presign;
use super::settings::S3Settings;
use crate::error::CacheConfigError;
use crate::object_name::object_name;
use crate::settings::CacheConfig;
use crate::transfer;
use async_trait::async_trait;
use flotilla_job::{CacheKey, CacheStore, StoreError};
use std::path::Path;
use std::time::{Duration, SystemTime};

/// How long a presigned URL stays valid. The manager uses it at once; an hour covers a slow
/// start of a large transfer (the signature is checked when the request starts).
const URL_EXPIRY: Duration = Duration::from_secs(3600);

/// Cache archives in an S3 bucket.
#[derive(Debug)]
pub struct S3CacheStore {
    settings: S3Settings,
    path: String,
    shared: bool,
    short_token: String,
    upload_limit: Option<u64>,
    credentials: CredentialSource,
    http: reqwest::Client,
}

impl S3CacheStore {
    /// The store of `cache` (whose `[runners.cache.s3]` is `s3`) for the runner whose short
    /// token is `short_token`.
    pub async fn new(
        cache: &CacheConfig,
        s3: &S3Settings,
        short_token: &str,
    ) -> Result<S3CacheStore, CacheConfigError> {
        s3.validate()?;
        let http = transfer::client()?;
        Ok(S3CacheStore {
            settings: s3.clone(),
            path: cache.path.clone(),
            shared: cache.shared,
            short_token: short_token.to_string(),
            upload_limit: cache.upload_limit(),
            credentials: CredentialSource::of(s3).await?,
            http,
        })
    }

    /// The URL of the archive of `key` (unsigned).
    pub fn url_of(&self, key: &CacheKey) -> String {
        let object = object_name(
            &self.path,
            self.shared,
            &self.short_token,
            key.project_id,
            &key.key,
        );
        self.settings.object_url(&object)
    }

    async fn presigned(
        &self,
        method: &str,
        key: &CacheKey,
        headers: &[(&'static str, String)],
    ) -> Result<super::presign::Presigned, StoreError> {
        let now = SystemTime::now();
        let credentials = self.credentials.get(now).await?;
        presign(
            method,
            &self.url_of(key),
            headers,
            &credentials,
            self.settings.region(),
            now,
            URL_EXPIRY,
        )
        .map_err(|e| StoreError::Remote(e.to_string()))
    }
}

#[async_trait]
impl CacheStore for S3CacheStore {
    async fn fetch(&self, key: &CacheKey, dest: &Path) -> Result<bool, StoreError> {
        let p = self.presigned("GET", key, &[]).await?;
        transfer::download(&self.http, &p.url, dest).await
    }

    async fn store(&self, key: &CacheKey, archive: &Path) -> Result<(), StoreError> {
        let size = transfer::size_within(archive, self.upload_limit).await?;
        let headers = self.settings.encryption().headers();
        let p = self.presigned("PUT", key, &headers).await?;
        let mut sent: Vec<(&str, String)> = vec![("content-type", "application/zip".into())];
        sent.extend(p.headers.iter().map(|(k, v)| (*k, v.clone())));
        transfer::upload(&self.http, &p.url, &sent, archive, size).await
    }
}
