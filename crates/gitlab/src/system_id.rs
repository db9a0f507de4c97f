//! The `system_id` that identifies this runner manager (host) to GitLab: GitLab creates one
//! runner-manager record per (runner token, system_id).
//!
//! Like GitLab Runner (`commands/internal/configfile/system_id_state.go`
//! `GenerateUniqueSystemID`: `hmac.New(sha256.New, []byte(machineID))`, then
//! `mac.Write([]byte("gitlab-runner"))`): `s_` + the first 6 bytes (12 hex digits) of
//! HMAC-SHA256 keyed with the machine id (`/etc/machine-id`, trimmed) over the message
//! `gitlab-runner`, so it is stable per host and the same id GitLab Runner would use there;
//! without a machine id, `r_` + 12 random alphanumerics, persisted in a state directory so
//! it survives restarts.

use rand::Rng;
use sha2::{Digest, Sha256};
use std::io;
use std::path::Path;

/// The HMAC message (the machine id is the key).
const HMAC_MESSAGE: &[u8] = b"gitlab-runner";
const BLOCK: usize = 64;
const FILE_NAME: &str = ".runner_system_id";

/// HMAC-SHA256 (RFC 2104) of `message` under `key`.
pub(crate) fn hmac_sha256(key: &[u8], message: &[u8]) -> [u8; 32] {
    let mut k = [0u8; BLOCK];
    if key.len() > BLOCK {
        k[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        k[..key.len()].copy_from_slice(key);
    }
    let mut inner = Sha256::new();
    inner.update(k.map(|b| b ^ 0x36));
    inner.update(message);
    let inner = inner.finalize();
    let mut outer = Sha256::new();
    outer.update(k.map(|b| b ^ 0x5c));
    outer.update(inner);
    outer.finalize().into()
}

/// The system id derived from a machine id (pure): `s_` + 12 hex digits.
pub fn from_machine_id(machine_id: &str) -> String {
    let mac = hmac_sha256(machine_id.trim().as_bytes(), HMAC_MESSAGE);
    format!("s_{}", hex::encode(&mac[..6]))
}

/// A fresh random system id: `r_` + 12 alphanumerics.
pub fn random() -> String {
    let mut rng = rand::rng();
    let s: String = (0..12)
        .map(|_| rng.sample(rand::distr::Alphanumeric) as char)
        .collect();
    format!("r_{s}")
}

/// This host's system id: from `/etc/machine-id` when it holds one, else the random id kept
/// in `state_dir` (created on first use).
pub fn system_id(state_dir: &Path) -> io::Result<String> {
    system_id_from(Path::new("/etc/machine-id"), state_dir)
}

/// [`system_id`] with the machine-id file given (for tests).
pub fn system_id_from(machine_id_file: &Path, state_dir: &Path) -> io::Result<String> {
    if let Ok(id) = std::fs::read_to_string(machine_id_file)
        && !id.trim().is_empty()
    {
        return Ok(from_machine_id(&id));
    }
    let file = state_dir.join(FILE_NAME);
    if let Ok(id) = std::fs::read_to_string(&file) {
        let id = id.trim();
        if id.starts_with("r_") && id.len() == 14 {
            return Ok(id.to_string());
        }
    }
    let id = random();
    std::fs::create_dir_all(state_dir)?;
    let tmp = state_dir.join(format!("{FILE_NAME}.tmp"));
    std::fs::write(&tmp, format!("{id}\n"))?;
    std::fs::rename(&tmp, &file)?;
    Ok(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hmac_matches_rfc_4231_test_case_2() {
        let mac = hmac_sha256(b"Jefe", b"what do ya want for nothing?");
        assert_eq!(
            hex::encode(mac),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn hmac_with_a_long_key_hashes_it_first() {
        // RFC 4231 test case 6: 131-byte key.
        let key = [0xaau8; 131];
        let mac = hmac_sha256(
            &key,
            b"Test Using Larger Than Block-Size Key - Hash Key First",
        );
        assert_eq!(
            hex::encode(mac),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
        );
    }

    #[test]
    fn the_machine_id_is_the_key_and_gitlab_runner_the_message() {
        // HMAC-SHA256(key = "0123456789abcdef0123456789abcdef", msg = "gitlab-runner"),
        // computed independently with Python's `hmac` module.
        assert_eq!(
            from_machine_id("0123456789abcdef0123456789abcdef"),
            "s_ee3af03959fe"
        );
    }

    #[test]
    fn machine_ids_give_stable_s_ids() {
        let a = from_machine_id("0123456789abcdef0123456789abcdef\n");
        assert_eq!(a, from_machine_id("0123456789abcdef0123456789abcdef"));
        assert!(a.starts_with("s_") && a.len() == 14, "{a}");
        assert!(a[2..].bytes().all(|b| b.is_ascii_hexdigit()));
        assert_ne!(a, from_machine_id("ffffffffffffffffffffffffffffffff"));
    }

    #[test]
    fn without_a_machine_id_a_random_id_is_persisted() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("no-machine-id");
        let a = system_id_from(&missing, &dir.path().join("state")).unwrap();
        assert!(a.starts_with("r_") && a.len() == 14, "{a}");
        assert!(a[2..].bytes().all(|b| b.is_ascii_alphanumeric()));
        let b = system_id_from(&missing, &dir.path().join("state")).unwrap();
        assert_eq!(a, b);
        let mid = dir.path().join("machine-id");
        std::fs::write(&mid, "abc\n").unwrap();
        assert_eq!(
            system_id_from(&mid, &dir.path().join("state")).unwrap(),
            from_machine_id("abc")
        );
    }
}
