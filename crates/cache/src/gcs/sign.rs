//! V2 signed URLs of Cloud Storage, as Go's `storage.SignedURL` makes them with its default
//! scheme (what GitLab Runner's GCS adapter calls): the string to sign is the method, the
//! content MD5 (empty), the content type, the expiry in Unix seconds, the extension headers
//! (`name:value`, lower case) and `/<bucket>/<object>`, one per line; the signature is
//! RSASSA-PKCS1-v1_5 with SHA-256 in standard base64. Pure: the expiry is given.

use aws_lc_rs::signature::{RSA_PKCS1_SHA256, RsaKeyPair};
use base64::Engine;

/// What a signing failed on.
#[derive(Debug, thiserror::Error)]
pub enum SignError {
    /// The key is no RSA private key in PEM (PKCS #8 or PKCS #1).
    #[error("the private key is not an RSA key in PEM: {0}")]
    Key(String),
    /// The signer failed.
    #[error("signing failed")]
    Sign,
}

/// An RSA signing key read from PEM: `-----BEGIN PRIVATE KEY-----` (PKCS #8, what service
/// account files hold) or `-----BEGIN RSA PRIVATE KEY-----` (PKCS #1). A key pasted with
/// literal `\n` sequences for its line breaks is read too.
#[derive(Debug)]
pub struct SigningKey(RsaKeyPair);

impl SigningKey {
    /// Reads `pem`.
    pub fn from_pem(pem: &str) -> Result<SigningKey, SignError> {
        let pem = pem.replace("\\n", "\n");
        let (pkcs8, body) = if let Some(b) = between(&pem, "PRIVATE KEY") {
            (true, b)
        } else if let Some(b) = between(&pem, "RSA PRIVATE KEY") {
            (false, b)
        } else {
            return Err(SignError::Key("no BEGIN PRIVATE KEY block".into()));
        };
        let b64: String = body.chars().filter(|c| !c.is_whitespace()).collect();
        let der = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .map_err(|e| SignError::Key(e.to_string()))?;
        let pair = if pkcs8 {
            RsaKeyPair::from_pkcs8(&der)
        } else {
            RsaKeyPair::from_der(&der)
        }
        .map_err(|e| SignError::Key(e.to_string()))?;
        Ok(SigningKey(pair))
    }

    fn sign(&self, message: &[u8]) -> Result<String, SignError> {
        let mut signature = vec![0; self.0.public_modulus_len()];
        self.0
            .sign(
                &RSA_PKCS1_SHA256,
                &aws_lc_rs::rand::SystemRandom::new(),
                message,
                &mut signature,
            )
            .map_err(|_| SignError::Sign)?;
        Ok(base64::engine::general_purpose::STANDARD.encode(signature))
    }
}

/// The body of the PEM block labelled `label`.
fn between<'a>(pem: &'a str, label: &str) -> Option<&'a str> {
    let begin = format!("-----BEGIN {label}-----");
    let end = format!("-----END {label}-----");
    let start = pem.find(&begin)? + begin.len();
    let stop = pem[start..].find(&end)? + start;
    Some(&pem[start..stop])
}

/// One request to sign.
#[derive(Debug, Clone)]
pub struct Request<'a> {
    /// `GET` or `PUT`.
    pub method: &'a str,
    /// The `Content-Type` the request will carry (empty for a `GET`).
    pub content_type: &'a str,
    /// When the URL stops working, Unix seconds.
    pub expires: u64,
    /// Extension headers (`x-goog-*`), as they will be sent.
    pub headers: &'a [(&'a str, String)],
    /// The bucket.
    pub bucket: &'a str,
    /// The object's name.
    pub object: &'a str,
}

/// The string V2 signs for `r`.
pub fn string_to_sign(r: &Request<'_>) -> String {
    let mut s = format!("{}\n\n{}\n{}\n", r.method, r.content_type, r.expires);
    for (name, value) in r.headers {
        s.push_str(&format!("{}:{}\n", name.to_ascii_lowercase(), value.trim()));
    }
    s.push_str(&format!("/{}/{}", r.bucket, r.object));
    s
}

/// The signed URL of `r` at `endpoint` (`https://storage.googleapis.com`), path style, for
/// the service account `access_id` whose key is `key`.
pub fn signed_url(
    endpoint: &str,
    r: &Request<'_>,
    access_id: &str,
    key: &SigningKey,
) -> Result<String, SignError> {
    let signature = key.sign(string_to_sign(r).as_bytes())?;
    Ok(format!(
        "{}/{}/{}?Expires={}&GoogleAccessId={}&Signature={}",
        endpoint.trim_end_matches('/'),
        escape(r.bucket),
        escape(r.object),
        r.expires,
        query_escape(access_id),
        query_escape(&signature)
    ))
}

/// A path escaped as Go's `url.URL.EscapedPath` does (unreserved characters, `/` and the
/// sub-delimiters Go keeps in paths stay).
pub(crate) fn escape(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for b in path.bytes() {
        if b.is_ascii_alphanumeric()
            || matches!(
                b,
                b'-' | b'_'
                    | b'.'
                    | b'~'
                    | b'/'
                    | b'$'
                    | b'&'
                    | b'+'
                    | b','
                    | b':'
                    | b';'
                    | b'='
                    | b'@'
            )
        {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A query value escaped as Go's `url.QueryEscape` does (a space as `+`).
pub(crate) fn query_escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        match b {
            b' ' => out.push('+'),
            b if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') => {
                out.push(b as char);
            }
            b => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_string_to_sign_as_go_writes_it() {
        let headers = [("X-Goog-Content-Length-Range", "0,1024".to_string())];
        let r = Request {
            method: "PUT",
            content_type: "application/octet-stream",
            expires: 1_795_000_000,
            headers: &headers,
            bucket: "cache",
            object: "runner/abc/project/7/deps",
        };
        assert_eq!(
            string_to_sign(&r),
            "PUT\n\napplication/octet-stream\n1795000000\nx-goog-content-length-range:0,1024\n/cache/runner/abc/project/7/deps"
        );
        let get = Request {
            method: "GET",
            content_type: "",
            headers: &[],
            ..r
        };
        assert_eq!(
            string_to_sign(&get),
            "GET\n\n\n1795000000\n/cache/runner/abc/project/7/deps"
        );
    }

    #[test]
    fn keys_that_are_not_rsa_pem_are_refused() {
        assert!(SigningKey::from_pem("not a key").is_err());
        assert!(
            SigningKey::from_pem("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----")
                .is_err()
        );
    }
}
