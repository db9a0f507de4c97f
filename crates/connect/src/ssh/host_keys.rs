//! Host keys pinned on first contact (trust on first use, per instance).
//!
//! An instance's host key is unknown until flotilla first connects to it, so the first key
//! seen is pinned under the instance's id; any later connection that presents another key is
//! refused. Keys are kept as OpenSSH public key text (`ssh-ed25519 AAAA...`).

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The result of checking a presented host key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostKeyCheck {
    /// Nothing was pinned under this id; the presented key is now.
    Pinned,
    /// The presented key is the pinned one.
    Matched,
    /// Another key is pinned: refuse the connection.
    Mismatch {
        /// The pinned key.
        pinned: String,
    },
}

/// Where pinned host keys live. Implementations must be safe to call from several
/// connections at once, and `check_or_pin` must be atomic per key id.
pub trait HostKeyStore: Send + Sync + fmt::Debug {
    /// Checks `presented` against the key pinned under `key_id`, pinning it if there is none.
    fn check_or_pin(&self, key_id: &str, presented: &str) -> io::Result<HostKeyCheck>;

    /// The key pinned under `key_id`, if any.
    fn pinned(&self, key_id: &str) -> io::Result<Option<String>>;

    /// Pins `key` under `key_id`, replacing any earlier one (an operator's decision).
    fn pin(&self, key_id: &str, key: &str) -> io::Result<()>;

    /// Forgets `key_id` (its instance was deleted).
    fn forget(&self, key_id: &str) -> io::Result<()>;
}

/// The comparable part of an OpenSSH public key line: algorithm and base64 data, without
/// the comment.
pub fn normalize(key: &str) -> String {
    key.split_whitespace().take(2).collect::<Vec<_>>().join(" ")
}

/// The check itself (pure): what to do given what is pinned and what was presented.
pub fn decide(pinned: Option<&str>, presented: &str) -> HostKeyCheck {
    match pinned {
        None => HostKeyCheck::Pinned,
        Some(p) if normalize(p) == normalize(presented) => HostKeyCheck::Matched,
        Some(p) => HostKeyCheck::Mismatch {
            pinned: normalize(p),
        },
    }
}

/// Host keys in memory, for one process's lifetime.
#[derive(Debug, Default)]
pub struct MemoryHostKeys {
    keys: Mutex<HashMap<String, String>>,
}

impl MemoryHostKeys {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, String>> {
        self.keys.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl HostKeyStore for MemoryHostKeys {
    fn check_or_pin(&self, key_id: &str, presented: &str) -> io::Result<HostKeyCheck> {
        let mut keys = self.lock();
        let check = decide(keys.get(key_id).map(String::as_str), presented);
        if check == HostKeyCheck::Pinned {
            keys.insert(key_id.to_string(), normalize(presented));
        }
        Ok(check)
    }

    fn pinned(&self, key_id: &str) -> io::Result<Option<String>> {
        Ok(self.lock().get(key_id).cloned())
    }

    fn pin(&self, key_id: &str, key: &str) -> io::Result<()> {
        self.lock().insert(key_id.to_string(), normalize(key));
        Ok(())
    }

    fn forget(&self, key_id: &str) -> io::Result<()> {
        self.lock().remove(key_id);
        Ok(())
    }
}

/// Host keys in a text file, one `<key id> <algorithm> <base64>` line each (a
/// `known_hosts`-like format keyed by instance id). Rewritten atomically on change.
#[derive(Debug)]
pub struct FileHostKeys {
    path: PathBuf,
    lock: Mutex<()>,
}

impl FileHostKeys {
    /// A store kept at `path` (created on the first pin).
    pub fn new(path: impl Into<PathBuf>) -> Self {
        FileHostKeys {
            path: path.into(),
            lock: Mutex::new(()),
        }
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn read(&self) -> io::Result<Vec<(String, String)>> {
        let text = match std::fs::read_to_string(&self.path) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        Ok(text
            .lines()
            .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
            .filter_map(|l| {
                let (id, key) = l.split_once(' ')?;
                Some((id.to_string(), normalize(key)))
            })
            .collect())
    }

    fn write(&self, entries: &[(String, String)]) -> io::Result<()> {
        use std::io::Write;
        if let Some(dir) = self.path.parent()
            && !dir.as_os_str().is_empty()
        {
            std::fs::create_dir_all(dir)?;
        }
        let tmp = self
            .path
            .with_extension(format!("tmp{}", std::process::id()));
        {
            let mut f = std::fs::File::create(&tmp)?;
            for (id, key) in entries {
                writeln!(f, "{id} {key}")?;
            }
            f.sync_all()?;
        }
        std::fs::rename(&tmp, &self.path)
    }

    fn guard(&self) -> std::sync::MutexGuard<'_, ()> {
        self.lock.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn check_id(key_id: &str) -> io::Result<()> {
    if key_id.is_empty() || key_id.chars().any(char::is_whitespace) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("host key id {key_id:?} must be non-empty and without whitespace"),
        ));
    }
    Ok(())
}

impl HostKeyStore for FileHostKeys {
    fn check_or_pin(&self, key_id: &str, presented: &str) -> io::Result<HostKeyCheck> {
        check_id(key_id)?;
        let _g = self.guard();
        let mut entries = self.read()?;
        let pinned = entries
            .iter()
            .find(|(id, _)| id == key_id)
            .map(|(_, k)| k.as_str());
        let check = decide(pinned, presented);
        if check == HostKeyCheck::Pinned {
            entries.push((key_id.to_string(), normalize(presented)));
            self.write(&entries)?;
        }
        Ok(check)
    }

    fn pinned(&self, key_id: &str) -> io::Result<Option<String>> {
        let _g = self.guard();
        Ok(self
            .read()?
            .into_iter()
            .find(|(id, _)| id == key_id)
            .map(|(_, k)| k))
    }

    fn pin(&self, key_id: &str, key: &str) -> io::Result<()> {
        check_id(key_id)?;
        let _g = self.guard();
        let mut entries = self.read()?;
        entries.retain(|(id, _)| id != key_id);
        entries.push((key_id.to_string(), normalize(key)));
        self.write(&entries)
    }

    fn forget(&self, key_id: &str) -> io::Result<()> {
        let _g = self.guard();
        let mut entries = self.read()?;
        let before = entries.len();
        entries.retain(|(id, _)| id != key_id);
        if entries.len() != before {
            self.write(&entries)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAAAA comment-a";
    const B: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBBBB";

    fn exercise(store: &dyn HostKeyStore) {
        assert_eq!(store.pinned("i-1").unwrap(), None);
        assert_eq!(store.check_or_pin("i-1", A).unwrap(), HostKeyCheck::Pinned);
        assert_eq!(store.check_or_pin("i-1", A).unwrap(), HostKeyCheck::Matched);
        assert_eq!(
            store
                .check_or_pin(
                    "i-1",
                    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAAAA other-comment"
                )
                .unwrap(),
            HostKeyCheck::Matched,
            "comments do not matter"
        );
        assert!(matches!(
            store.check_or_pin("i-1", B).unwrap(),
            HostKeyCheck::Mismatch { .. }
        ));
        assert_eq!(
            store.check_or_pin("i-2", B).unwrap(),
            HostKeyCheck::Pinned,
            "per id"
        );
        store.pin("i-1", B).unwrap();
        assert_eq!(store.check_or_pin("i-1", B).unwrap(), HostKeyCheck::Matched);
        store.forget("i-1").unwrap();
        assert_eq!(store.pinned("i-1").unwrap(), None);
        assert_eq!(
            store.pinned("i-2").unwrap().as_deref(),
            Some(normalize(B).as_str())
        );
    }

    #[test]
    fn memory_store() {
        exercise(&MemoryHostKeys::new());
    }

    #[test]
    fn file_store_persists() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub").join("host_keys");
        exercise(&FileHostKeys::new(&path));
        let reopened = FileHostKeys::new(&path);
        assert_eq!(
            reopened.pinned("i-2").unwrap().as_deref(),
            Some(normalize(B).as_str())
        );
        assert!(matches!(
            reopened.check_or_pin("i-2", A).unwrap(),
            HostKeyCheck::Mismatch { .. }
        ));
        assert!(reopened.check_or_pin("bad id", A).is_err());
    }

    #[test]
    fn decide_is_pure() {
        assert_eq!(decide(None, A), HostKeyCheck::Pinned);
        assert_eq!(decide(Some(A), A), HostKeyCheck::Matched);
        assert_eq!(
            decide(Some(A), B),
            HostKeyCheck::Mismatch {
                pinned: normalize(A)
            }
        );
    }
}
