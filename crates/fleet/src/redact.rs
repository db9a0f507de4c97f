//! Values made safe to show: one rule for every place a URL, an environment entry or a
//! settings value reaches a log, an error, `status` or a printed configuration.

use serde::ser::SerializeSeq;
use serde::{Serialize, Serializer};

/// What a secret is printed as.
pub const REDACTED: &str = "[REDACTED]";

/// Whether an environment variable's value may be printed: only GitLab feature flags
/// (`FF_*`), whose values are booleans. Everything else (`DOCKER_AUTH_CONFIG`, API tokens,
/// `POSTGRES_PASSWORD`) may hold a secret.
pub fn env_value_is_public(name: &str) -> bool {
    name.starts_with("FF_")
}

/// Serialises `K=V` environment entries with every value except feature flags redacted (for
/// `serialize_with`).
pub fn serialize_environment<S: Serializer>(entries: &[String], s: S) -> Result<S::Ok, S::Error> {
    let mut seq = s.serialize_seq(Some(entries.len()))?;
    for entry in entries {
        match entry.split_once('=') {
            Some((name, _)) if !env_value_is_public(name) => {
                seq.serialize_element(&format!("{name}={REDACTED}"))?;
            }
            _ => seq.serialize_element(entry)?,
        }
    }
    seq.end()
}

/// `Debug` for settings that hold secrets: prints their redacted serialised form, so `{:?}`
/// in a log line cannot leak one either.
pub fn debug_redacted<T: Serialize>(
    name: &str,
    value: &T,
    f: &mut std::fmt::Formatter<'_>,
) -> std::fmt::Result {
    match serde_json::to_value(value) {
        Ok(v) => write!(f, "{name} {v}"),
        Err(_) => write!(f, "{name} {{ .. }}"),
    }
}

/// The URL without its user information, query or fragment: `https://user:pw@host/p?sig=..`
/// becomes `https://host/p?[REDACTED]`. Everything else is kept as written, so a URL with
/// nothing secret in it comes back unchanged. Text without a `scheme://` is shown only up to
/// its first `?`.
pub fn redact_url(url: &str) -> String {
    let (head, had_query) = match url.split_once('?') {
        Some((head, _)) => (head, true),
        None => (url.split_once('#').map_or(url, |(h, _)| h), false),
    };
    let mut out = match head.split_once("://") {
        Some((scheme, rest)) => {
            let end = rest.find('/').unwrap_or(rest.len());
            let (authority, path) = rest.split_at(end);
            let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
            format!("{scheme}://{host}{path}")
        }
        None => head.to_owned(),
    };
    if had_query {
        out.push_str("?[REDACTED]");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::redact_url;

    #[test]
    fn credentials_and_queries_are_removed_and_nothing_else_changes() {
        assert_eq!(
            redact_url("https://gitlab-ci-token:glcbt-secret@gitlab.example.com/g/p.git"),
            "https://gitlab.example.com/g/p.git"
        );
        assert_eq!(
            redact_url("https://s3.example.com/bucket/a.zip?X-Amz-Signature=abc#x"),
            "https://s3.example.com/bucket/a.zip?[REDACTED]"
        );
        assert_eq!(redact_url("not a url?token=1"), "not a url?[REDACTED]");
        assert_eq!(
            redact_url("http://127.0.0.1:8080/api/v4/jobs/1"),
            "http://127.0.0.1:8080/api/v4/jobs/1"
        );
        assert_eq!(redact_url("https://gitlab.com"), "https://gitlab.com");
        assert_eq!(
            redact_url("https://u:p@w@gitlab.example.com:8443"),
            "https://gitlab.example.com:8443"
        );
        assert_eq!(redact_url("https://h/p#frag"), "https://h/p");
    }
}
