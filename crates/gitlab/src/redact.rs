//! Redacting URLs before they reach a log or an error.

/// The URL without credentials, query or fragment: `https://user:pw@host/p?sig=..` becomes
/// `https://host/p?[REDACTED]`. Anything that does not parse as a URL is shown only up to
/// its first `?`.
pub fn redact_url(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut u) => {
            let had_query = u.query().is_some();
            let _ = u.set_username("");
            let _ = u.set_password(None);
            u.set_query(None);
            u.set_fragment(None);
            let mut s = u.to_string();
            if had_query {
                s.push_str("?[REDACTED]");
            }
            s
        }
        Err(_) => match url.split_once('?') {
            Some((head, _)) => format!("{head}?[REDACTED]"),
            None => url.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::redact_url;

    #[test]
    fn credentials_and_queries_are_removed() {
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
    }
}
