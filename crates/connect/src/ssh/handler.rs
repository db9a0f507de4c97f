//! The russh client handler: host-key pinning and recording why a connection ended.

use super::host_keys::{HostKeyCheck, HostKeyStore};
use russh::client::{DisconnectReason, Handler};
use russh::keys::{HashAlg, PublicKey, PublicKeyOrCertificate};
use std::sync::{Arc, Mutex};

/// Why a connection ended, as the session saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Ended {
    /// The peer stopped answering keepalives.
    KeepaliveTimeout,
    /// Nothing at all was received for the inactivity timeout.
    InactivityTimeout,
    /// The server sent a disconnect message.
    ByServer(String),
    /// The transport failed (reset, broken pipe).
    Io(String),
    /// Anything else.
    Other(String),
}

/// What the handler learned, shared with the connector.
#[derive(Debug, Default)]
pub(crate) struct Observed {
    /// A host key mismatch: (pinned, presented) SHA-256 fingerprints.
    pub mismatch: Mutex<Option<(String, String)>>,
    /// The host key store failed (file unreadable).
    pub store_error: Mutex<Option<String>>,
    /// Why the session ended, once it has.
    pub ended: Mutex<Option<Ended>>,
}

impl Observed {
    pub(super) fn ended(&self) -> Option<Ended> {
        self.ended.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub(super) fn mismatch(&self) -> Option<(String, String)> {
        self.mismatch
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub(super) fn store_error(&self) -> Option<String> {
        self.store_error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// The handler of one SSH connection.
pub(crate) struct ClientHandler {
    pub key_id: String,
    pub store: Arc<dyn HostKeyStore>,
    pub observed: Arc<Observed>,
}

fn fingerprint_of(openssh: &str) -> String {
    PublicKey::from_openssh(openssh)
        .map(|k| k.fingerprint(HashAlg::Sha256).to_string())
        .unwrap_or_else(|_| openssh.to_string())
}

impl Handler for ClientHandler {
    type Error = russh::Error;

    async fn check_server_key(
        &mut self,
        server_public_key: &PublicKeyOrCertificate,
    ) -> Result<bool, Self::Error> {
        let key = match server_public_key {
            PublicKeyOrCertificate::PublicKey { key, .. } => key.clone(),
            // A host certificate: pin the key it certifies.
            PublicKeyOrCertificate::Certificate(cert) => {
                PublicKey::new(cert.public_key().clone(), "")
            }
        };
        let presented = key.to_openssh()?;
        match self.store.check_or_pin(&self.key_id, &presented) {
            Ok(HostKeyCheck::Pinned) => {
                tracing::debug!(key_id = %self.key_id, fingerprint = %key.fingerprint(HashAlg::Sha256), "host key pinned on first contact");
                Ok(true)
            }
            Ok(HostKeyCheck::Matched) => Ok(true),
            Ok(HostKeyCheck::Mismatch { pinned }) => {
                let presented_fp = key.fingerprint(HashAlg::Sha256).to_string();
                tracing::warn!(key_id = %self.key_id, pinned = %fingerprint_of(&pinned), presented = %presented_fp, "host key mismatch: connection refused");
                *self
                    .observed
                    .mismatch
                    .lock()
                    .unwrap_or_else(|e| e.into_inner()) =
                    Some((fingerprint_of(&pinned), presented_fp));
                Ok(false)
            }
            Err(e) => {
                *self
                    .observed
                    .store_error
                    .lock()
                    .unwrap_or_else(|e| e.into_inner()) = Some(e.to_string());
                Ok(false)
            }
        }
    }

    async fn disconnected(
        &mut self,
        reason: DisconnectReason<Self::Error>,
    ) -> Result<(), Self::Error> {
        let ended = match reason {
            DisconnectReason::ReceivedDisconnect(info) => {
                Ended::ByServer(format!("{:?}: {}", info.reason_code, info.message))
            }
            DisconnectReason::Error(russh::Error::KeepaliveTimeout) => Ended::KeepaliveTimeout,
            DisconnectReason::Error(russh::Error::InactivityTimeout) => Ended::InactivityTimeout,
            DisconnectReason::Error(russh::Error::IO(e)) => Ended::Io(e.to_string()),
            DisconnectReason::Error(e) => Ended::Other(e.to_string()),
        };
        tracing::debug!(key_id = %self.key_id, ?ended, "ssh connection ended");
        *self
            .observed
            .ended
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(ended);
        Ok(())
    }
}
