//! Presigned S3 URLs: AWS signature version 4 in the query string, as GitLab Runner's S3
//! adapter makes them (`PresignGetObject`, `PresignPutObject` of the AWS SDK for Go v2), with
//! the signer of the AWS SDK for Rust. Pure: the time is given.

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{
    PercentEncodingMode, SignableBody, SignableRequest, SignatureLocation, SigningSettings,
    UriPathNormalizationMode, sign,
};
use aws_sigv4::sign::v4;
use std::time::{Duration, SystemTime};

/// A presigned request: the URL, and the headers that were signed and must be sent with it
/// (GitLab's `PresignedURL.Headers`).
#[derive(Debug, Clone)]
pub struct Presigned {
    /// The URL with `X-Amz-*` parameters.
    pub url: String,
    /// Signed headers besides `host`.
    pub headers: Vec<(&'static str, String)>,
}

/// What a presigning failed on (a URL that does not parse, credentials the signer refuses).
#[derive(Debug, thiserror::Error)]
#[error("presigning the S3 request: {0}")]
pub struct PresignError(String);

/// Presigns `method` on `url` (already percent-encoded) for `expires`, at `now`, with
/// `headers` signed too. The payload is `UNSIGNED-PAYLOAD`, the path is neither normalized nor
/// encoded twice, and a session token is part of what is signed: S3's rules for query
/// signing.
pub fn presign(
    method: &str,
    url: &str,
    headers: &[(&'static str, String)],
    credentials: &Credentials,
    region: &str,
    now: SystemTime,
    expires: Duration,
) -> Result<Presigned, PresignError> {
    let mut settings = SigningSettings::default();
    settings.signature_location = SignatureLocation::QueryParams;
    settings.expires_in = Some(expires);
    settings.percent_encoding_mode = PercentEncodingMode::Single;
    settings.uri_path_normalization_mode = UriPathNormalizationMode::Disabled;
    let identity = credentials.clone().into();
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name("s3")
        .time(now)
        .settings(settings)
        .build()
        .map_err(|e| PresignError(e.to_string()))?
        .into();
    let request = SignableRequest::new(
        method,
        url,
        headers.iter().map(|(k, v)| (*k, v.as_str())),
        SignableBody::UnsignedPayload,
    )
    .map_err(|e| PresignError(e.to_string()))?;
    let (instructions, _signature) = sign(request, &params)
        .map_err(|e| PresignError(e.to_string()))?
        .into_parts();
    let mut signed = http::Request::builder()
        .method(method)
        .uri(url)
        .body(())
        .map_err(|e| PresignError(e.to_string()))?;
    instructions.apply_to_request_http1x(&mut signed);
    Ok(Presigned {
        url: signed.uri().to_string(),
        headers: headers.to_vec(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// AWS's worked example of a presigned URL ("Authenticating Requests: Using Query
    /// Parameters (AWS Signature Version 4)", Amazon S3 API Reference): `GET /test.txt` of
    /// `examplebucket`, 24 May 2013, expiring in 86,400 s.
    #[test]
    fn the_signature_of_aws_published_example() {
        let credentials = Credentials::new(
            "AKIAIOSFODNN7EXAMPLE",
            "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            None,
            None,
            "example",
        );
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_369_353_600);
        let p = presign(
            "GET",
            "https://examplebucket.s3.amazonaws.com/test.txt",
            &[],
            &credentials,
            "us-east-1",
            now,
            Duration::from_secs(86_400),
        )
        .expect("presigned");
        assert!(
            p.url.ends_with(
                "X-Amz-Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404"
            ),
            "{}",
            p.url
        );
        assert!(p.url.contains("X-Amz-Date=20130524T000000Z"), "{}", p.url);
        assert!(p.url.contains("X-Amz-Expires=86400"), "{}", p.url);
        assert!(
            p.url.contains(
                "X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130524%2Fus-east-1%2Fs3%2Faws4_request"
            ),
            "{}",
            p.url
        );
    }
}
