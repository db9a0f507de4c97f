//! Service SAS tokens for one blob, as GitLab Runner's Azure adapter has the Azure SDK make
//! them (`BlobSASSignatureValues` signed with the account's shared key): read (`r`) or write
//! (`w`) permission, valid from an hour ago to the expiry, HTTPS only. The string to sign is the
//! one of service SAS version 2020-12-06 and later (Azure's "Create a service SAS"); the
//! signature is HMAC-SHA256 with the decoded account key, in base64. Pure: the times are given.

use aws_lc_rs::hmac;
use base64::Engine;

/// The service version the tokens are signed for.
pub const SAS_VERSION: &str = "2020-12-06";

/// What a signing failed on: the key is not base64. Which character is wrong is not said (the
/// message would carry a piece of the key).
#[derive(Debug, thiserror::Error)]
#[error(
    "the Azure account key is not base64 (copy it as the portal or `az storage account keys list` shows it)"
)]
pub struct SignError;

/// The shared key's bytes from its base64 form.
pub fn decode_key(account_key: &str) -> Result<Vec<u8>, SignError> {
    base64::engine::general_purpose::STANDARD
        .decode(account_key.trim())
        .map_err(|_| SignError)
}

/// One token to make.
#[derive(Debug, Clone)]
pub struct Sas<'a> {
    /// `r` or `w`.
    pub permissions: &'a str,
    /// Unix seconds from which it is valid.
    pub start: u64,
    /// Unix seconds until which it is valid.
    pub expiry: u64,
    /// The storage account.
    pub account: &'a str,
    /// The container.
    pub container: &'a str,
    /// The blob's name.
    pub blob: &'a str,
    /// `https` (GitLab Runner's choice), or `https,http` for an emulator reached over HTTP.
    pub protocol: &'a str,
}

/// `YYYY-MM-DDTHH:MM:SSZ`, as SAS tokens write times.
fn iso(secs: u64) -> String {
    let secs = i64::try_from(secs).unwrap_or(i64::MAX);
    chrono::DateTime::<chrono::Utc>::from_timestamp(secs, 0)
        .unwrap_or_default()
        .format("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// The string service SAS version 2020-12-06 signs.
pub fn string_to_sign(s: &Sas<'_>) -> String {
    [
        s.permissions,
        &iso(s.start),
        &iso(s.expiry),
        &format!("/blob/{}/{}/{}", s.account, s.container, s.blob),
        "", // signed identifier
        "", // signed IP
        s.protocol,
        SAS_VERSION,
        "b", // signed resource: a blob
        "",  // snapshot time
        "",  // encryption scope
        "",  // rscc
        "",  // rscd
        "",  // rsce
        "",  // rscl
        "",  // rsct
    ]
    .join("\n")
}

/// The token's query string (without `?`), signed with the base64 `account_key`.
pub fn token(s: &Sas<'_>, account_key: &str) -> Result<String, SignError> {
    let key = decode_key(account_key)?;
    let tag = hmac::sign(
        &hmac::Key::new(hmac::HMAC_SHA256, &key),
        string_to_sign(s).as_bytes(),
    );
    let signature = base64::engine::general_purpose::STANDARD.encode(tag.as_ref());
    let q = crate::gcs::sign::query_escape;
    Ok(format!(
        "sv={}&spr={}&st={}&se={}&sr=b&sp={}&sig={}",
        SAS_VERSION,
        q(s.protocol),
        q(&iso(s.start)),
        q(&iso(s.expiry)),
        s.permissions,
        q(&signature)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_string_to_sign_of_a_blob_token() {
        let sas = Sas {
            permissions: "w",
            start: 1_795_000_000,
            expiry: 1_795_007_200,
            account: "acct",
            container: "cache",
            blob: "runner/abc/project/7/deps",
            protocol: "https",
        };
        assert_eq!(
            string_to_sign(&sas),
            "w\n2026-11-18T11:06:40Z\n2026-11-18T13:06:40Z\n/blob/acct/cache/runner/abc/project/7/deps\n\n\nhttps\n2020-12-06\nb\n\n\n\n\n\n\n"
        );
        let t = token(&sas, "a2V5").unwrap();
        assert!(
            t.starts_with("sv=2020-12-06&spr=https&st=2026-11-18T11%3A06%3A40Z&"),
            "{t}"
        );
        assert!(token(&sas, "not base64!").is_err());
    }
}
