//! The database file on disk: creating it private (mode 0600), recognising what an existing
//! file is from its first bytes, and moving a bad file aside without deleting anything.

use crate::error::StoreError;
use std::fs::{self, OpenOptions, Permissions};
use std::io::Read;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// The mode of the database and its companions: they hold credentials.
pub(crate) const PRIVATE_MODE: u32 = 0o600;

/// Every SQLite database file starts with these 16 bytes.
const SQLITE_MAGIC: &[u8; 16] = b"SQLite format 3\0";

/// The size of SQLite's file header.
const HEADER_LEN: usize = 100;

/// What the file at the store's path is, judged from the file system and its first bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Found {
    /// Nothing there.
    Missing,
    /// A zero-length file (created but never written, e.g. killed right after creation).
    Empty,
    /// Starts with the SQLite header; SQLite must tell whether it is ours.
    Sqlite,
    /// Something else.
    NotSqlite(String),
}

/// Judges a file from its length and its first bytes (pure).
pub(crate) fn classify_header(len: u64, first: &[u8]) -> Found {
    if len == 0 {
        Found::Empty
    } else if first.len() < HEADER_LEN {
        Found::NotSqlite(format!(
            "{len} bytes, shorter than an SQLite header ({HEADER_LEN} bytes)"
        ))
    } else if !first.starts_with(SQLITE_MAGIC) {
        Found::NotSqlite("it does not start with the SQLite header".to_string())
    } else {
        Found::Sqlite
    }
}

/// Looks at the file at `path` without changing it.
pub(crate) fn inspect(path: &Path) -> Result<Found, StoreError> {
    let io = |what, source| StoreError::Io {
        path: path.to_path_buf(),
        what,
        source,
    };
    let meta = match fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Found::Missing),
        Err(e) => return Err(io("inspect", e)),
    };
    if !meta.is_file() {
        return Ok(Found::NotSqlite("it is not a regular file".to_string()));
    }
    let mut first = Vec::with_capacity(HEADER_LEN);
    fs::File::open(path)
        .and_then(|f| f.take(HEADER_LEN as u64).read_to_end(&mut first))
        .map_err(|e| io("read the header of", e))?;
    Ok(classify_header(meta.len(), &first))
}

/// The files SQLite keeps next to the database: the WAL, its shared-memory index, and the
/// rollback journal (used only while switching to WAL mode).
pub(crate) fn companions(path: &Path) -> [PathBuf; 3] {
    let with = |suffix: &str| {
        let mut name = path.as_os_str().to_os_string();
        name.push(suffix);
        PathBuf::from(name)
    };
    [with("-wal"), with("-shm"), with("-journal")]
}

/// The companions of `path` that exist.
pub(crate) fn existing_companions(path: &Path) -> Vec<PathBuf> {
    companions(path)
        .into_iter()
        .filter(|p| fs::symlink_metadata(p).is_ok())
        .collect()
}

/// Creates an empty database file readable and writable by its owner only, whatever the
/// umask. Another process creating it first is fine.
pub(crate) fn create_private(path: &Path) -> Result<(), StoreError> {
    let io = |what, source| StoreError::Io {
        path: path.to_path_buf(),
        what,
        source,
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        fs::create_dir_all(dir).map_err(|e| StoreError::Io {
            path: dir.to_path_buf(),
            what: "create the directory",
            source: e,
        })?;
    }
    match OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(PRIVATE_MODE)
        .open(path)
    {
        Ok(file) => {
            // The umask may have removed bits; set the mode exactly.
            file.set_permissions(Permissions::from_mode(PRIVATE_MODE))
                .map_err(|e| io("set the mode of", e))?;
            file.sync_all().map_err(|e| io("sync", e))
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(io("create", e)),
    }
}

/// The temporary name a new store is built under before it is published at `path`.
pub(crate) fn building_name(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_os_string();
    name.push(format!(".building-{}", std::process::id()));
    PathBuf::from(name)
}

/// Removes `path` and its companions where they exist (a store left half-built by a process
/// that was killed).
pub(crate) fn remove_with_companions(path: &Path) -> Result<(), StoreError> {
    for p in std::iter::once(path.to_path_buf()).chain(companions(path)) {
        match fs::remove_file(&p) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(StoreError::Io {
                    path: p,
                    what: "remove the half-built store",
                    source: e,
                });
            }
        }
    }
    Ok(())
}

/// Puts the complete store built at `building` at `path` (a hard link, which never replaces
/// a file another process put there first) and removes the temporary name.
pub(crate) fn publish(building: &Path, path: &Path) -> Result<(), StoreError> {
    let linked = fs::hard_link(building, path);
    remove_with_companions(building)?;
    match linked {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => {
            return Err(StoreError::Io {
                path: path.to_path_buf(),
                what: "publish the new store at",
                source: e,
            });
        }
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| StoreError::Io {
                path: dir.to_path_buf(),
                what: "sync the directory of",
                source: e,
            })?;
    }
    Ok(())
}

/// Sets mode 0600 on the database and its existing companions where they are more open.
pub(crate) fn tighten(path: &Path) -> Result<(), StoreError> {
    for p in std::iter::once(path.to_path_buf()).chain(existing_companions(path)) {
        let meta = fs::metadata(&p).map_err(|e| StoreError::Io {
            path: p.clone(),
            what: "inspect",
            source: e,
        })?;
        if meta.permissions().mode() & 0o777 != PRIVATE_MODE {
            tracing::warn!(path = %p.display(), mode = format!("{:o}", meta.permissions().mode() & 0o777), "the store holds credentials; setting its mode to 0600");
            fs::set_permissions(&p, Permissions::from_mode(PRIVATE_MODE)).map_err(|e| {
                StoreError::Io {
                    path: p.clone(),
                    what: "set the mode of",
                    source: e,
                }
            })?;
        }
    }
    Ok(())
}

/// The name a bad file is moved to: `<name>.bad-<unix seconds>`, with `-<n>` appended when
/// that is taken (pure apart from `taken`).
pub(crate) fn aside_name(path: &Path, now: SystemTime, taken: impl Fn(&Path) -> bool) -> PathBuf {
    let secs = now
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let base = {
        let mut name = path.as_os_str().to_os_string();
        name.push(format!(".bad-{secs}"));
        PathBuf::from(name)
    };
    let free =
        |candidate: &Path| !taken(candidate) && companions(candidate).iter().all(|c| !taken(c));
    if free(&base) {
        return base;
    }
    (1u32..)
        .map(|n| {
            let mut name = base.as_os_str().to_os_string();
            name.push(format!("-{n}"));
            PathBuf::from(name)
        })
        .find(|c| free(c))
        .unwrap_or(base)
}

/// Moves the database and its companions aside (never deleting them) and returns the new
/// path of the database. Companions go first: a WAL left next to a fresh database would be
/// replayed into it.
pub(crate) fn move_aside(path: &Path, now: SystemTime) -> Result<PathBuf, StoreError> {
    let target = aside_name(path, now, |p| fs::symlink_metadata(p).is_ok());
    for (from, to) in companions(path).iter().zip(companions(&target).iter()) {
        if fs::symlink_metadata(from).is_ok() {
            fs::rename(from, to).map_err(|e| StoreError::Io {
                path: from.clone(),
                what: "move aside",
                source: e,
            })?;
        }
    }
    if fs::symlink_metadata(path).is_ok() {
        fs::rename(path, &target).map_err(|e| StoreError::Io {
            path: path.to_path_buf(),
            what: "move aside",
            source: e,
        })?;
    }
    tracing::warn!(from = %path.display(), to = %target.display(), "moved a bad store aside; starting empty");
    Ok(target)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn header_classification() {
        let mut sqlite = SQLITE_MAGIC.to_vec();
        sqlite.resize(100, 0);
        assert_eq!(classify_header(4096, &sqlite), Found::Sqlite);
        assert_eq!(classify_header(0, &[]), Found::Empty);
        assert!(
            matches!(classify_header(10, b"0123456789"), Found::NotSqlite(r) if r.contains("shorter"))
        );
        let mut other = b"PK\x03\x04".to_vec();
        other.resize(100, 7);
        assert!(
            matches!(classify_header(100, &other), Found::NotSqlite(r) if r.contains("header"))
        );
    }

    #[test]
    fn aside_names_avoid_taken_names_and_their_companions() {
        let t = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let p = Path::new("/x/state.db");
        assert_eq!(
            aside_name(p, t, |_| false),
            PathBuf::from("/x/state.db.bad-1700000000")
        );
        let taken = |c: &Path| c == Path::new("/x/state.db.bad-1700000000-wal");
        assert_eq!(
            aside_name(p, t, taken),
            PathBuf::from("/x/state.db.bad-1700000000-1")
        );
    }

    #[test]
    fn companion_names() {
        let [wal, shm, journal] = companions(Path::new("a/b.db"));
        assert_eq!(wal, PathBuf::from("a/b.db-wal"));
        assert_eq!(shm, PathBuf::from("a/b.db-shm"));
        assert_eq!(journal, PathBuf::from("a/b.db-journal"));
    }
}
