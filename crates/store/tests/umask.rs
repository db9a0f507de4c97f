//! The store's files are private whatever the umask. This changes the process's umask, so it
//! lives alone in its own test binary.

use flotilla_store::{Identity, Store, StoreOptions};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

fn companion(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_os_string();
    s.push(suffix);
    PathBuf::from(s)
}

#[test]
fn files_are_0600_under_an_open_umask() {
    // SAFETY: umask only changes this process's file-creation mask; this binary has no other
    // test running concurrently.
    unsafe { libc::umask(0) };
    let dir = tempfile::tempdir().unwrap();
    // Even the directory SQLite works in is open to all under this umask.
    let path = dir.path().join("nested").join("state.db");
    for round in 0..2 {
        let store = Store::open(&path, StoreOptions::default()).unwrap();
        let scope = store
            .scope(&Identity::new("https://gitlab.example.com", "1", "docker"))
            .unwrap();
        store
            .put_credential(scope, "ssh-key", format!("secret {round}").as_bytes())
            .unwrap();
        // SQLite created the WAL and shared-memory files itself (fresh on each open, since
        // closing the last connection removes them); they take the database's mode.
        for p in [
            path.clone(),
            companion(&path, "-wal"),
            companion(&path, "-shm"),
        ] {
            assert!(p.exists(), "{}", p.display());
            assert_eq!(mode(&p), 0o600, "round {round}: {}", p.display());
        }
        drop(store);
        assert!(!companion(&path, "-wal").exists());
    }
}
