//! HTTPS for the fake GitLab: a certificate authority of its own, made per server, and a
//! certificate for `127.0.0.1` and `localhost` it signs, so a client trusts the server only
//! when given the authority's certificate (`tls-ca-file`).

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use std::sync::Arc;
use tokio_rustls::TlsAcceptor;

/// The server side of the fake's TLS.
pub(crate) struct Tls {
    /// The authority's certificate, PEM: what a client must trust.
    pub(crate) ca_pem: String,
    /// Accepts connections with the server's certificate.
    pub(crate) acceptor: TlsAcceptor,
}

impl Tls {
    /// A new authority and server certificate.
    pub(crate) fn generate() -> std::io::Result<Tls> {
        let io = |e: rcgen::Error| std::io::Error::other(e.to_string());
        let ca_key = KeyPair::generate().map_err(io)?;
        let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(io)?;
        ca.distinguished_name
            .push(DnType::CommonName, "flotilla fake GitLab CA");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca_cert = ca.self_signed(&ca_key).map_err(io)?;
        let issuer = Issuer::new(ca, ca_key);
        let key = KeyPair::generate().map_err(io)?;
        let mut leaf =
            CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])
                .map_err(io)?;
        leaf.distinguished_name
            .push(DnType::CommonName, "fake GitLab");
        let cert = leaf.signed_by(&key, &issuer).map_err(io)?;
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::aws_lc_rs::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(std::io::Error::other)?
        .with_no_client_auth()
        .with_single_cert(
            vec![
                CertificateDer::from(cert.der().to_vec()),
                CertificateDer::from(ca_cert.der().to_vec()),
            ],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
        )
        .map_err(std::io::Error::other)?;
        Ok(Tls {
            ca_pem: ca_cert.pem(),
            acceptor: TlsAcceptor::from(Arc::new(config)),
        })
    }
}
