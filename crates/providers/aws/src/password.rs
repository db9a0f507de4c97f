//! A Windows instance's Administrator password, as `GetPasswordData` gives it: base64 of the
//! password encrypted with the instance's key pair, RSA with PKCS#1 v1.5 padding (Amazon EC2
//! API Reference, GetPasswordData: "The password is encrypted using the key pair that you
//! specified when you launched the instance"; the padding is the one the EC2 console and
//! `aws ec2 get-password-data --priv-launch-key` decrypt with).
//!
//! Pure: the caller fetches the data and gives the key pair's private key, PEM as EC2 hands
//! it out (`-----BEGIN RSA PRIVATE KEY-----`, PKCS#1) or PKCS#8 (`-----BEGIN PRIVATE KEY-----`).

use aws_lc_rs::rsa::{Pkcs1PrivateDecryptingKey, PrivateDecryptingKey};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

/// Why the password could not be recovered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PasswordError {
    /// EC2 has no password yet: Windows makes it a few minutes after the instance starts.
    #[error(
        "the instance's password is not available yet (Windows sets it a few minutes after launch)"
    )]
    NotYet,
    /// The key is not an RSA private key in PEM.
    #[error("the key pair's private key is not an RSA private key in PEM ({0})")]
    BadKey(&'static str),
    /// The password data is not base64.
    #[error("GetPasswordData answered with data that is not base64")]
    NotBase64,
    /// Decryption failed: the instance was launched with another key pair, or the data is not
    /// an encrypted password.
    #[error(
        "the password data does not decrypt with this key (was the instance launched with another key pair?)"
    )]
    WrongKey,
    /// The password decrypted but is not UTF-8.
    #[error("the decrypted password is not UTF-8")]
    NotUtf8,
}

/// Decrypts `password_data` (GetPasswordData's `PasswordData`) with `private_key_pem`.
pub fn decrypt(password_data: &str, private_key_pem: &[u8]) -> Result<String, PasswordError> {
    // EC2 wraps the base64 over lines, with surrounding whitespace.
    let data: String = password_data
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect();
    if data.is_empty() {
        return Err(PasswordError::NotYet);
    }
    let ciphertext = STANDARD
        .decode(data.as_bytes())
        .map_err(|_| PasswordError::NotBase64)?;
    let pkcs8 = pkcs8_of(private_key_pem)?;
    let key = PrivateDecryptingKey::from_pkcs8(&pkcs8)
        .map_err(|_| PasswordError::BadKey("the key is not accepted as RSA"))?;
    let key = Pkcs1PrivateDecryptingKey::new(key)
        .map_err(|_| PasswordError::BadKey("the key cannot decrypt"))?;
    if ciphertext.len() != key.key_size_bytes() {
        return Err(PasswordError::WrongKey);
    }
    let mut out = vec![0u8; key.min_output_size()];
    let plain = key
        .decrypt(&ciphertext, &mut out)
        .map_err(|_| PasswordError::WrongKey)?;
    String::from_utf8(plain.to_vec()).map_err(|_| PasswordError::NotUtf8)
}

/// The PKCS#8 DER of a PEM private key: PKCS#8 as it is, PKCS#1 wrapped in a PrivateKeyInfo.
fn pkcs8_of(pem: &[u8]) -> Result<Vec<u8>, PasswordError> {
    let text = std::str::from_utf8(pem).map_err(|_| PasswordError::BadKey("not text"))?;
    if let Some(der) = pem_block(text, "RSA PRIVATE KEY")? {
        return Ok(wrap_pkcs1(&der));
    }
    if let Some(der) = pem_block(text, "PRIVATE KEY")? {
        return Ok(der);
    }
    Err(PasswordError::BadKey(
        "no BEGIN RSA PRIVATE KEY or BEGIN PRIVATE KEY block",
    ))
}

/// The DER inside the PEM block labelled `label`, if there is one.
fn pem_block(text: &str, label: &str) -> Result<Option<Vec<u8>>, PasswordError> {
    let begin = format!("-----BEGIN {label}-----");
    let end = format!("-----END {label}-----");
    let Some(start) = text.find(&begin) else {
        return Ok(None);
    };
    let body = &text[start + begin.len()..];
    let Some(stop) = body.find(&end) else {
        return Err(PasswordError::BadKey("the PEM block has no END line"));
    };
    let b64: String = body[..stop]
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect();
    STANDARD
        .decode(b64.as_bytes())
        .map(Some)
        .map_err(|_| PasswordError::BadKey("the PEM block is not base64"))
}

/// RFC 5208 PrivateKeyInfo around a PKCS#1 RSAPrivateKey:
/// `SEQUENCE { INTEGER 0, SEQUENCE { OID rsaEncryption, NULL }, OCTET STRING key }`.
fn wrap_pkcs1(rsa_private_key: &[u8]) -> Vec<u8> {
    // version 0, then AlgorithmIdentifier { 1.2.840.113549.1.1.1, NULL } (RFC 8017 A.1).
    const HEAD: [u8; 18] = [
        0x02, 0x01, 0x00, 0x30, 0x0d, 0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01,
        0x01, 0x05, 0x00,
    ];
    let mut octets = vec![0x04];
    der_len(rsa_private_key.len(), &mut octets);
    octets.extend_from_slice(rsa_private_key);
    let mut out = vec![0x30];
    der_len(HEAD.len() + octets.len(), &mut out);
    out.extend_from_slice(&HEAD);
    out.extend_from_slice(&octets);
    out
}

/// A DER length: short form below 128, else the long form.
fn der_len(len: usize, out: &mut Vec<u8>) {
    if len < 0x80 {
        out.push(len as u8);
        return;
    }
    let bytes: Vec<u8> = len
        .to_be_bytes()
        .into_iter()
        .skip_while(|b| *b == 0)
        .collect();
    out.push(0x80 | bytes.len() as u8);
    out.extend_from_slice(&bytes);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    /// OpenSSL, an implementation we did not write, makes the key pair and encrypts with
    /// PKCS#1 v1.5 as EC2 does; ours must get the password back.
    fn openssl(dir: &std::path::Path, args: &[&str]) {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("openssl runs (Debian package openssl)");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn encrypted_by_openssl(password: &str) -> (tempfile::TempDir, String) {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        // -traditional: PKCS#1, "BEGIN RSA PRIVATE KEY", as EC2 key pairs are downloaded.
        openssl(d, &["genrsa", "-traditional", "-out", "key.pem", "2048"]);
        openssl(d, &["rsa", "-in", "key.pem", "-pubout", "-out", "pub.pem"]);
        std::fs::write(d.join("password"), password).unwrap();
        openssl(
            d,
            &[
                "pkeyutl",
                "-encrypt",
                "-pubin",
                "-inkey",
                "pub.pem",
                "-pkeyopt",
                "rsa_padding_mode:pkcs1",
                "-in",
                "password",
                "-out",
                "cipher",
            ],
        );
        let b64 = STANDARD.encode(std::fs::read(d.join("cipher")).unwrap());
        (dir, b64)
    }

    #[test]
    fn decrypts_what_openssl_encrypted_with_pkcs1_and_pkcs8_keys() {
        let (dir, data) = encrypted_by_openssl("Adm1n!p@ss-(x)");
        let pkcs1 = std::fs::read(dir.path().join("key.pem")).unwrap();
        assert!(String::from_utf8_lossy(&pkcs1).contains("BEGIN RSA PRIVATE KEY"));
        // EC2 sends the data wrapped over lines.
        let wrapped = format!("\n{}\n{}\n", &data[..40], &data[40..]);
        assert_eq!(decrypt(&wrapped, &pkcs1).unwrap(), "Adm1n!p@ss-(x)");

        openssl(
            dir.path(),
            &[
                "pkcs8", "-topk8", "-nocrypt", "-in", "key.pem", "-out", "key8.pem",
            ],
        );
        let pkcs8 = std::fs::read(dir.path().join("key8.pem")).unwrap();
        assert!(String::from_utf8_lossy(&pkcs8).contains("BEGIN PRIVATE KEY"));
        assert_eq!(decrypt(&data, &pkcs8).unwrap(), "Adm1n!p@ss-(x)");
    }

    #[test]
    fn our_pkcs8_wrapping_is_openssls() {
        let (dir, _) = encrypted_by_openssl("x");
        let d = dir.path();
        openssl(
            d,
            &[
                "pkcs8", "-topk8", "-nocrypt", "-in", "key.pem", "-outform", "DER", "-out",
                "key8.der",
            ],
        );
        let ours = pkcs8_of(&std::fs::read(d.join("key.pem")).unwrap()).unwrap();
        assert_eq!(ours, std::fs::read(d.join("key8.der")).unwrap());
    }

    #[test]
    fn each_failure_says_what_failed() {
        let (dir, data) = encrypted_by_openssl("pw");
        let key = std::fs::read(dir.path().join("key.pem")).unwrap();
        assert_eq!(decrypt("  \n", &key), Err(PasswordError::NotYet));
        assert_eq!(decrypt("not base64!", &key), Err(PasswordError::NotBase64));
        // moto answers with 128 random characters: base64, but no ciphertext of this key.
        let random = "A".repeat(128);
        assert_eq!(decrypt(&random, &key), Err(PasswordError::WrongKey));
        let (other, _) = encrypted_by_openssl("pw");
        let other_key = std::fs::read(other.path().join("key.pem")).unwrap();
        assert_eq!(decrypt(&data, &other_key), Err(PasswordError::WrongKey));
        assert!(matches!(
            decrypt(&data, b"ssh-ed25519 AAAA"),
            Err(PasswordError::BadKey(_))
        ));
    }

    #[test]
    fn der_lengths() {
        let mut v = Vec::new();
        der_len(5, &mut v);
        der_len(200, &mut v);
        der_len(1217, &mut v);
        assert_eq!(v, [5, 0x81, 200, 0x82, 0x04, 0xc1]);
    }
}
