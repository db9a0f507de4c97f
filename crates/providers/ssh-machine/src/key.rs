//! A group's SSH key pair, and reading a user's private key.

use flotilla_fleet::{FleetError, Secret};
use rand::RngCore;
use russh::keys::ssh_key::LineEnding;
use russh::keys::ssh_key::private::Ed25519Keypair;
use russh::keys::{PrivateKey, decode_secret_key};
use std::path::Path;

/// A key pair: the private half goes into `ConnectInfo`, the public half into each machine's
/// `authorized_keys` (however the provider hands it in).
#[derive(Debug, Clone)]
pub struct GroupKey {
    /// The private key in OpenSSH format.
    pub private_openssh: Secret<Vec<u8>>,
    /// The public key as an `authorized_keys` line (`ssh-ed25519 AAAA... comment`).
    pub public_openssh: String,
}

impl GroupKey {
    /// A fresh ed25519 key, from the operating system's randomness (via a CSPRNG seeded by it).
    pub fn generate(comment: &str) -> Result<GroupKey, FleetError> {
        let mut seed = [0u8; 32];
        rand::rng().fill_bytes(&mut seed);
        let mut key = PrivateKey::from(Ed25519Keypair::from_seed(&seed));
        seed.fill(0);
        key.set_comment(comment);
        Self::from_private(&key)
    }

    /// Parses a private key (OpenSSH or PEM, unencrypted).
    pub fn parse(private: &[u8]) -> Result<GroupKey, FleetError> {
        let text = std::str::from_utf8(private)
            .map_err(|_| FleetError::Config("the SSH private key is not text".into()))?;
        let key = decode_secret_key(text, None)
            .map_err(|e| FleetError::Config(format!("cannot read the SSH private key: {e}")))?;
        Self::from_private(&key)
    }

    /// Loads the key kept at `path`, or makes one and writes it there (mode 0600).
    pub fn load_or_create(path: &Path, comment: &str) -> Result<GroupKey, FleetError> {
        match std::fs::read(path) {
            Ok(bytes) => Self::parse(&bytes),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let key = Self::generate(comment)?;
                write_private(path, key.private_openssh.expose())?;
                Ok(key)
            }
            Err(e) => Err(FleetError::Config(format!(
                "cannot read key_file {}: {e}",
                path.display()
            ))),
        }
    }

    fn from_private(key: &PrivateKey) -> Result<GroupKey, FleetError> {
        let private = key
            .to_openssh(LineEnding::LF)
            .map_err(|e| FleetError::provider("init", format!("cannot encode SSH key: {e}")))?;
        let public = key
            .public_key()
            .to_openssh()
            .map_err(|e| FleetError::provider("init", format!("cannot encode SSH key: {e}")))?;
        Ok(GroupKey {
            private_openssh: Secret::new(private.as_bytes().to_vec()),
            public_openssh: public,
        })
    }
}

/// Writes a private key file readable by its owner only, atomically (temp file + rename).
fn write_private(path: &Path, bytes: &[u8]) -> Result<(), FleetError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let err = |e: std::io::Error| {
        FleetError::Config(format!("cannot write key_file {}: {e}", path.display()))
    };
    if let Some(dir) = path.parent()
        && !dir.as_os_str().is_empty()
    {
        std::fs::create_dir_all(dir).map_err(err)?;
    }
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(err)?;
    f.write_all(bytes).map_err(err)?;
    f.sync_all().map_err(err)?;
    std::fs::rename(&tmp, path).map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_keys_are_distinct_and_round_trip() {
        let a = GroupKey::generate("flotilla/test").unwrap();
        let b = GroupKey::generate("flotilla/test").unwrap();
        assert_ne!(a.public_openssh, b.public_openssh);
        assert!(
            a.public_openssh.starts_with("ssh-ed25519 "),
            "{}",
            a.public_openssh
        );
        let again = GroupKey::parse(a.private_openssh.expose()).unwrap();
        assert_eq!(again.public_openssh, a.public_openssh);
        assert!(!format!("{a:?}").contains("PRIVATE"), "never printed");
    }

    #[test]
    fn key_file_is_created_once_then_reused() {
        let dir =
            std::env::temp_dir().join(format!("flotilla-ssh-machine-key-{}", std::process::id()));
        let path = dir.join("group.key");
        let _ = std::fs::remove_dir_all(&dir);
        let first = GroupKey::load_or_create(&path, "c").unwrap();
        let second = GroupKey::load_or_create(&path, "c").unwrap();
        assert_eq!(first.public_openssh, second.public_openssh);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn garbage_is_refused() {
        assert!(matches!(
            GroupKey::parse(b"nope"),
            Err(FleetError::Config(_))
        ));
    }
}
