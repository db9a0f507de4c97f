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
use async_trait::async_trait;
use flotilla_job::{CacheKey, CacheStore, StoreError};
use std::path::Path;
use std::time::{Duration, SystemTime};
use tokio::io::AsyncWriteExt;

/// How long a presigned URL stays valid. The manager uses it at once; an hour covers a slow
/// start of a large transfer (the signature is checked when the request starts).
const URL_EXPIRY: Duration = Duration::from_secs(3600);
/// How long connecting to the store may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// The most of an error answer that is read (S3's XML error document is small).
const ERROR_BODY_LIMIT: usize = 4096;

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
        let http = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .build()
            .map_err(|e| CacheConfigError::Client(e.to_string()))?;
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

/// What S3 said, for a warning: the status, and the `Code` and `Message` of its XML error
/// document when there is one. The URL is named without its query (the signature).
async fn refusal(what: &str, url: &str, response: reqwest::Response) -> StoreError {
    let status = response.status();
    let mut body = Vec::new();
    let mut response = response;
    while body.len() < ERROR_BODY_LIMIT {
        match response.chunk().await {
            Ok(Some(chunk)) => body.extend_from_slice(&chunk),
            _ => break,
        }
    }
    body.truncate(ERROR_BODY_LIMIT);
    let text = String::from_utf8_lossy(&body);
    let element = |name: &str| {
        let open = format!("<{name}>");
        let start = text.find(&open)? + open.len();
        let end = text[start..].find(&format!("</{name}>"))? + start;
        Some(text[start..end].to_string())
    };
    let detail = match (element("Code"), element("Message")) {
        (Some(code), Some(message)) => format!(": {code}: {message}"),
        (Some(code), None) => format!(": {code}"),
        _ => String::new(),
    };
    StoreError::Remote(format!(
        "{what} {}: HTTP {status}{detail}",
        flotilla_fleet::redact_url(url)
    ))
}

fn transport(what: &str, url: &str) -> impl FnOnce(reqwest::Error) -> StoreError {
    let place = format!("{what} {}", flotilla_fleet::redact_url(url));
    // reqwest's error names the URL with its query; only its cause is kept.
    move |e| {
        let cause =
            std::error::Error::source(&e).map_or_else(|| e.to_string(), ToString::to_string);
        StoreError::Remote(format!("{place}: {cause}"))
    }
}

#[async_trait]
impl CacheStore for S3CacheStore {
    async fn fetch(&self, key: &CacheKey, dest: &Path) -> Result<bool, StoreError> {
        let p = self.presigned("GET", key, &[]).await?;
        let mut response = self
            .http
            .get(&p.url)
            .send()
            .await
            .map_err(transport("GET", &p.url))?;
        if response.status() == reqwest::StatusCode::NOT_FOUND {
            return Ok(false);
        }
        if !response.status().is_success() {
            return Err(refusal("GET", &p.url, response).await);
        }
        // Into a file beside `dest`, renamed when whole: a broken transfer leaves no half
        // archive where the job looks.
        let partial = dest.with_extension("partial");
        let mut file = tokio::fs::File::create(&partial)
            .await
            .map_err(|e| StoreError::Remote(format!("{}: {e}", partial.display())))?;
        let written: Result<(), StoreError> = async {
            while let Some(chunk) = response.chunk().await.map_err(transport("GET", &p.url))? {
                file.write_all(&chunk)
                    .await
                    .map_err(|e| StoreError::Remote(format!("{}: {e}", partial.display())))?;
            }
            file.flush()
                .await
                .map_err(|e| StoreError::Remote(format!("{}: {e}", partial.display())))
        }
        .await;
        drop(file);
        if let Err(e) = written {
            let _ = tokio::fs::remove_file(&partial).await;
            return Err(e);
        }
        tokio::fs::rename(&partial, dest)
            .await
            .map_err(|e| StoreError::Remote(format!("{}: {e}", dest.display())))?;
        Ok(true)
    }

    async fn store(&self, key: &CacheKey, archive: &Path) -> Result<(), StoreError> {
        let size = tokio::fs::metadata(archive)
            .await
            .map_err(|e| StoreError::Remote(format!("{}: {e}", archive.display())))?
            .len();
        if let Some(limit) = self.upload_limit
            && size > limit
        {
            return Err(StoreError::Remote(format!(
                "the archive is {size} bytes, more than MaxUploadedArchiveSize ({limit} bytes); \
                 not uploaded"
            )));
        }
        let headers = self.settings.encryption().headers();
        let p = self.presigned("PUT", key, &headers).await?;
        let file = tokio::fs::File::open(archive)
            .await
            .map_err(|e| StoreError::Remote(format!("{}: {e}", archive.display())))?;
        let body = reqwest::Body::wrap_stream(tokio_util::io::ReaderStream::new(file));
        let mut request = self
            .http
            .put(&p.url)
            .header(reqwest::header::CONTENT_LENGTH, size)
            .header(reqwest::header::CONTENT_TYPE, "application/zip")
            .body(body);
        for (name, value) in &p.headers {
            request = request.header(*name, value);
        }
        let response = request.send().await.map_err(transport("PUT", &p.url))?;
        if !response.status().is_success() {
            return Err(refusal("PUT", &p.url, response).await);
        }
        Ok(())
    }
}
