//! GitLab Runner's distributed cache: the `[runners.cache]` table, where GitLab puts each
//! cache archive in a bucket, and the stores that keep archives there: S3 (and S3-compatible
//! stores), Google Cloud Storage, Azure Blob Storage.
//!
//! GitLab Runner reads the table in `cache/cacheconfig` and names objects in `cache/cache.go`
//! (`generateObjectName`); its adapters presign a `GET` and a `PUT` for each job (S3: AWS
//! signature version 4, `cache/s3v2`; GCS: V2 signed URLs, `cache/gcs`; Azure: service SAS
//! tokens, `cache/azure`). flotilla makes the same URLs, and the manager moves the archive
//! (see [`S3CacheStore`]). Each backend's settings, validation and errors live together in its
//! module; the binary only parses the table and calls [`build`].

pub mod azure;
mod error;
pub mod gcs;
mod object_name;
pub mod s3;
pub mod settings;
mod transfer;

pub use azure::AzureCacheStore;
pub use error::CacheConfigError;
pub use gcs::GcsCacheStore;
pub use object_name::object_name;
pub use s3::S3CacheStore;
pub use settings::{CacheConfig, CacheKind};

use std::sync::Arc;

/// The store a runner's `[runners.cache]` asks for, or `None` when it names no distributed
/// backend flotilla has (the runner then keeps its cache on the manager, as without the
/// table). `short_token` is the runner's short token (GitLab's `ShortDescription`), the
/// namespace of a cache that is not `Shared`.
pub async fn build(
    config: &CacheConfig,
    short_token: &str,
) -> Result<Option<Arc<dyn flotilla_job::CacheStore>>, CacheConfigError> {
    match config.kind() {
        CacheKind::S3 => match &config.s3 {
            Some(s3) => {
                let store = S3CacheStore::new(config, s3, short_token).await?;
                Ok(Some(Arc::new(store)))
            }
            None => Ok(None),
        },
        CacheKind::Gcs => match &config.gcs {
            Some(gcs) => {
                // Google's client libraries send everything to an emulator named so.
                // Only one on this machine is followed: the variable is a test hook here
                // (GitLab Runner's signed URLs ignore it), not a way to send caches elsewhere.
                let emulator = std::env::var("STORAGE_EMULATOR_HOST")
                    .ok()
                    .filter(|h| !h.trim().is_empty())
                    .map(|h| {
                        if h.contains("://") {
                            h
                        } else {
                            format!("http://{h}")
                        }
                    })
                    .filter(|e| on_loopback(e));
                let store = GcsCacheStore::new(config, gcs, short_token, emulator)?;
                Ok(Some(Arc::new(store)))
            }
            None => Ok(None),
        },
        CacheKind::Azure => match &config.azure {
            Some(azure) => {
                let store =
                    AzureCacheStore::new(config, azure, short_token, emulator_blob_endpoint())?;
                Ok(Some(Arc::new(store)))
            }
            None => Ok(None),
        },
        CacheKind::None | CacheKind::Unsupported(_) => Ok(None),
    }
}

/// The `BlobEndpoint` of `AZURE_STORAGE_CONNECTION_STRING`, the variable Azure's tools and
/// libraries read, when it names an emulator on this machine (Azurite's
/// `http://127.0.0.1:10000/<account>`); any other endpoint is not followed.
fn emulator_blob_endpoint() -> Option<String> {
    let connection = std::env::var("AZURE_STORAGE_CONNECTION_STRING").ok()?;
    connection
        .split(';')
        .filter_map(|part| part.split_once('='))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("BlobEndpoint"))
        .map(|(_, v)| v.trim().to_string())
        .filter(|v| on_loopback(v))
}

/// Whether `endpoint` is an address on this machine (an emulator's).
fn on_loopback(endpoint: &str) -> bool {
    let Ok(url) = reqwest::Url::parse(endpoint) else {
        return false;
    };
    let host = url.host_str().unwrap_or_default();
    host.eq_ignore_ascii_case("localhost")
        || host
            .trim_matches(['[', ']'])
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_emulators_on_this_machine_are_followed() {
        for yes in [
            "http://127.0.0.1:10000/devstoreaccount1",
            "http://localhost:4443",
            "http://[::1]:9000",
        ] {
            assert!(super::on_loopback(yes), "{yes}");
        }
        for no in [
            "https://acct.blob.core.windows.net",
            "http://10.0.0.5:10000/a",
            "127.0.0.1:10000",
        ] {
            assert!(!super::on_loopback(no), "{no}");
        }
    }
}
