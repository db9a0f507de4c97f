//! Moving an archive with a presigned URL: the `GET` into a file (whole or not at all) and
//! the `PUT` from one, with what the store answered made into a warning a person can read
//! and no signature in it. Shared by every store of this crate.

use flotilla_job::StoreError;
use std::path::Path;
use std::time::Duration;
use tokio::io::AsyncWriteExt;

/// How long connecting to a store may take.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// The most of an error answer that is read (the stores' XML error documents are small).
const ERROR_BODY_LIMIT: usize = 4096;

/// The HTTP client of a store.
pub(crate) fn client() -> Result<reqwest::Client, crate::CacheConfigError> {
    reqwest::Client::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .build()
        .map_err(|e| crate::CacheConfigError::Client(e.to_string()))
}

/// What the store said, for a warning: the status, and the `Code` and `Message` of its XML
/// error document when there is one (S3, GCS and Azure all answer so). The URL is named
/// without its query (the signature).
async fn refusal(what: &str, url: &str, mut response: reqwest::Response) -> StoreError {
    let status = response.status();
    let mut body = Vec::new();
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
    // reqwest's error names the URL with its query (the signature): it is dropped, and the
    // whole chain of causes kept (a refused connection says so only deep in it).
    move |e| {
        let e = e.without_url();
        let mut msg = format!("{place}: {e}");
        let causes = std::iter::successors(std::error::Error::source(&e), |c| c.source());
        for cause in causes {
            msg.push_str(&format!(": {cause}"));
        }
        StoreError::Remote(msg)
    }
}

fn local(path: &Path) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |e| StoreError::Remote(format!("{}: {e}", path.display()))
}

/// `GET url` into `dest`: `Ok(false)` when the store has no such object (404), the file
/// renamed into place only when whole.
pub(crate) async fn download(
    http: &reqwest::Client,
    url: &str,
    dest: &Path,
) -> Result<bool, StoreError> {
    let mut response = http.get(url).send().await.map_err(transport("GET", url))?;
    if response.status() == reqwest::StatusCode::NOT_FOUND {
        return Ok(false);
    }
    if !response.status().is_success() {
        return Err(refusal("GET", url, response).await);
    }
    let partial = dest.with_extension("partial");
    let mut file = tokio::fs::File::create(&partial)
        .await
        .map_err(local(&partial))?;
    let written: Result<(), StoreError> = async {
        while let Some(chunk) = response.chunk().await.map_err(transport("GET", url))? {
            file.write_all(&chunk).await.map_err(local(&partial))?;
        }
        file.flush().await.map_err(local(&partial))
    }
    .await;
    drop(file);
    if let Err(e) = written {
        let _ = tokio::fs::remove_file(&partial).await;
        return Err(e);
    }
    tokio::fs::rename(&partial, dest)
        .await
        .map_err(local(dest))?;
    Ok(true)
}

/// `PUT url` with the file `archive` of `size` bytes as the body and `headers` (those that
/// were signed must be sent as signed).
pub(crate) async fn upload(
    http: &reqwest::Client,
    url: &str,
    headers: &[(&str, String)],
    archive: &Path,
    size: u64,
) -> Result<(), StoreError> {
    let file = tokio::fs::File::open(archive)
        .await
        .map_err(local(archive))?;
    let body = reqwest::Body::wrap_stream(tokio_util::io::ReaderStream::new(file));
    let mut request = http
        .put(url)
        .header(reqwest::header::CONTENT_LENGTH, size)
        .body(body);
    for (name, value) in headers {
        request = request.header(*name, value);
    }
    let response = request.send().await.map_err(transport("PUT", url))?;
    if !response.status().is_success() {
        return Err(refusal("PUT", url, response).await);
    }
    Ok(())
}

/// The size of `archive`, refused when over `limit` (`MaxUploadedArchiveSize`).
pub(crate) async fn size_within(archive: &Path, limit: Option<u64>) -> Result<u64, StoreError> {
    let size = tokio::fs::metadata(archive)
        .await
        .map_err(local(archive))?
        .len();
    if let Some(limit) = limit
        && size > limit
    {
        return Err(StoreError::Remote(format!(
            "the archive is {size} bytes, more than MaxUploadedArchiveSize ({limit} bytes); \
             not uploaded"
        )));
    }
    Ok(size)
}
