//! Where artifacts and caches are kept on the manager side: traits, and local-directory
//! implementations. Archives are zip files handed over as local paths, so a remote store
//! (GitLab's artifacts API, S3) uploads from and downloads into a file.

mod artifact;
mod atomic;
mod cache;

pub use artifact::{ArtifactDownload, ArtifactStore, ArtifactUpload, LocalArtifactStore};
pub use cache::{CacheKey, CacheStore, LocalCacheStore};

/// A store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Local file-system I/O failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The remote side refused or failed (for remote stores).
    #[error("{0}")]
    Remote(String),
    /// The request cannot be served (bad key, bad name).
    #[error("{0}")]
    Invalid(String),
}

impl StoreError {
    pub(crate) fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> StoreError {
        let context = context.into();
        move |source| StoreError::Io { context, source }
    }
}

/// Makes a string safe as one file-name component: bytes outside `[A-Za-z0-9._-]` become
/// `%XX`, and `.`/`..` are escaped too.
pub(crate) fn file_component(s: &str) -> String {
    if s == "." || s == ".." || s.is_empty() {
        return s.bytes().map(|b| format!("%{b:02X}")).collect::<String>() + "%";
    }
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::file_component;

    #[test]
    fn components_cannot_escape() {
        assert_eq!(file_component("main-key_1.2"), "main-key_1.2");
        assert_eq!(file_component("a/b"), "a%2Fb");
        assert_eq!(file_component(".."), "%2E%2E%");
        assert_eq!(file_component("."), "%2E%");
        assert_eq!(file_component(""), "%");
        assert_ne!(file_component("%2F"), file_component("/"));
    }
}
