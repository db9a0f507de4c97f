//! go-plugin's AutoMTLS: each side makes a throw-away certificate, the host passes its own to
//! the plugin in `PLUGIN_CLIENT_CERT` (PEM), the plugin answers with its own in the handshake
//! line (DER, base64), and each side then accepts exactly the other's certificate.
//!
//! go-plugin (`mtls.go` `generateCert`) makes a self-signed ECDSA certificate for
//! `localhost` that is its own CA (`IsCA`, key usages digital signature, key encipherment,
//! key agreement and cert signing; extended key usages client and server auth), and trusts
//! the peer's certificate as the only root (`client.go` `loadServerCert`, `server.go`
//! `Serve`). Ours are made the same way (P-256 rather than P-521: both are ECDSA curves Go
//! accepts). A self-signed CA certificate used as an end-entity certificate is refused by
//! WebPKI validation, so instead of a root store each side *pins* the peer's certificate:
//! the presented certificate must be byte for byte the one exchanged, and its handshake
//! signature is checked with it. That is at least as strict as go-plugin's one-root pool.
//! The provider is aws-lc-rs because go-plugin's certificates are P-521, which ring cannot
//! verify.

use rustls::DigitallySignedStruct;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DistinguishedName, SignatureScheme};
use std::sync::Arc;

/// What went wrong setting up AutoMTLS.
#[derive(Debug, thiserror::Error)]
pub enum MtlsError {
    /// The certificate could not be made.
    #[error("making a certificate: {0}")]
    Generate(#[from] rcgen::Error),
    /// The peer's certificate could not be read.
    #[error("the peer's certificate is not a PEM certificate: {0}")]
    PeerCertificate(String),
    /// rustls refused the configuration.
    #[error("TLS configuration: {0}")]
    Tls(#[from] rustls::Error),
}

/// A throw-away certificate and its key, as go-plugin makes them.
pub struct Certificate {
    /// The certificate, PEM (what goes into `PLUGIN_CLIENT_CERT`).
    pub cert_pem: String,
    /// The certificate, DER (what goes into the handshake line).
    pub cert_der: Vec<u8>,
    /// The private key, PKCS#8 DER.
    key_der: Vec<u8>,
}

impl std::fmt::Debug for Certificate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Certificate")
            .field("cert_der_len", &self.cert_der.len())
            .field("key", &"[REDACTED]")
            .finish()
    }
}

impl Certificate {
    /// A new self-signed certificate for `localhost`.
    pub fn generate() -> Result<Certificate, MtlsError> {
        use rcgen::{
            BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
            KeyUsagePurpose, PKCS_ECDSA_P256_SHA256,
        };
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256)?;
        let mut params = CertificateParams::new(vec!["localhost".to_string()])?;
        params
            .distinguished_name
            .push(DnType::CommonName, "localhost");
        params
            .distinguished_name
            .push(DnType::OrganizationName, "flotilla");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
            KeyUsagePurpose::KeyAgreement,
            KeyUsagePurpose::KeyCertSign,
        ];
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ClientAuth,
            ExtendedKeyUsagePurpose::ServerAuth,
        ];
        let cert = params.self_signed(&key)?;
        Ok(Certificate {
            cert_pem: cert.pem(),
            cert_der: cert.der().to_vec(),
            key_der: key.serialize_der(),
        })
    }

    fn chain_and_key(&self) -> (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>) {
        (
            vec![CertificateDer::from(self.cert_der.clone())],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.key_der.clone())),
        )
    }
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// The host's TLS configuration: presents `own`, accepts only `server_der` (from the
/// handshake line), speaks HTTP/2.
pub fn client_config(
    own: &Certificate,
    server_der: &[u8],
) -> Result<rustls::ClientConfig, MtlsError> {
    let provider = provider();
    let (chain, key) = own.chain_and_key();
    let mut config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(Pinned {
            der: server_der.to_vec(),
            provider,
        }))
        .with_client_auth_cert(chain, key)?;
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(config)
}

/// A plugin's TLS configuration: presents `own`, requires the host's certificate
/// `client_pem` (from `PLUGIN_CLIENT_CERT`), speaks HTTP/2.
pub fn server_config(
    own: &Certificate,
    client_pem: &str,
) -> Result<rustls::ServerConfig, MtlsError> {
    let client = CertificateDer::from_pem_slice(client_pem.as_bytes())
        .map_err(|e| MtlsError::PeerCertificate(e.to_string()))?;
    let provider = provider();
    let (chain, key) = own.chain_and_key();
    let mut config = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?
        .with_client_cert_verifier(Arc::new(Pinned {
            der: client.to_vec(),
            provider,
        }))
        .with_single_cert(chain, key)?;
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(config)
}

/// Accepts exactly one certificate, and handshake signatures made with its key.
#[derive(Debug)]
struct Pinned {
    der: Vec<u8>,
    provider: Arc<CryptoProvider>,
}

impl Pinned {
    fn check(&self, presented: &CertificateDer<'_>) -> Result<(), rustls::Error> {
        if presented.as_ref() == self.der.as_slice() {
            Ok(())
        } else {
            Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::ApplicationVerificationFailure,
            ))
        }
    }

    fn tls12(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn tls13(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

impl ServerCertVerifier for Pinned {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.check(end_entity)
            .map(|()| ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.tls12(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.tls13(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.schemes()
    }
}

impl ClientCertVerifier for Pinned {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        self.check(end_entity)
            .map(|()| ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.tls12(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.tls13(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn certificates_are_pem_for_the_environment_and_der_for_the_line() {
        let c = Certificate::generate().unwrap();
        assert!(c.cert_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        let from_pem = CertificateDer::from_pem_slice(c.cert_pem.as_bytes()).unwrap();
        assert_eq!(from_pem.as_ref(), c.cert_der.as_slice());
        assert!(!format!("{c:?}").contains("BEGIN"));
    }

    #[test]
    fn only_the_pinned_certificate_is_accepted() {
        let a = Certificate::generate().unwrap();
        let b = Certificate::generate().unwrap();
        let pinned = Pinned {
            der: a.cert_der.clone(),
            provider: provider(),
        };
        assert!(
            pinned
                .check(&CertificateDer::from(a.cert_der.clone()))
                .is_ok()
        );
        assert!(
            pinned
                .check(&CertificateDer::from(b.cert_der.clone()))
                .is_err()
        );
        assert!(client_config(&a, &b.cert_der).is_ok());
        assert!(server_config(&a, &b.cert_pem).is_ok());
        assert!(matches!(
            server_config(&a, "not a certificate"),
            Err(MtlsError::PeerCertificate(_))
        ));
    }
}
