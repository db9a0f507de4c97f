//! HTTPS for the fake GitLab: a certificate authority of its own, made per server, and a
//! certificate for `127.0.0.1` and `localhost` it signs, so a client trusts the server only
//! when given the authority's certificate (`tls-ca-file`).

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use std::sync::Arc;
use tokio_rustls::TlsAcceptor;

/// The server side of the fake's TLS.
pub(crate) struct Tls {
    /// The authority's certificate, PEM: what a client must trust.
    pub(crate) ca_pem: String,
    /// With client authentication: a client certificate and key (PEM) the authority signed,
    /// the only kind of client the server accepts.
    pub(crate) client: Option<(String, String)>,
    /// Accepts connections with the server's certificate.
    pub(crate) acceptor: TlsAcceptor,
}

impl Tls {
    /// A new authority and server certificate; with `client_auth`, a client certificate too,
    /// and a server that accepts only clients presenting one the authority signed.
    pub(crate) fn generate(client_auth: bool) -> std::io::Result<Tls> {
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
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(std::io::Error::other)?;
        let (builder, client) = if client_auth {
            let client_key = KeyPair::generate().map_err(io)?;
            let mut params = CertificateParams::new(Vec::<String>::new()).map_err(io)?;
            params
                .distinguished_name
                .push(DnType::CommonName, "flotilla runner");
            params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
            let client_cert = params.signed_by(&client_key, &issuer).map_err(io)?;
            let mut roots = rustls::RootCertStore::empty();
            roots
                .add(CertificateDer::from(ca_cert.der().to_vec()))
                .map_err(std::io::Error::other)?;
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            )
            .build()
            .map_err(std::io::Error::other)?;
            (
                builder.with_client_cert_verifier(verifier),
                Some((client_cert.pem(), client_key.serialize_pem())),
            )
        } else {
            (builder.with_no_client_auth(), None)
        };
        let config = builder
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
            client,
            acceptor: TlsAcceptor::from(Arc::new(config)),
        })
    }
}
