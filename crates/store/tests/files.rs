//! The database file: its mode, refusing bad files without touching them, moving them aside
//! on request, newer schemas, and a full disk.

use flotilla_fleet::State;
use flotilla_scaler::{Cause, InstanceRecord, JournalEvent};
use flotilla_store::{Identity, OpenMode, Store, StoreError, StoreOptions};
use rand::{Rng, SeedableRng};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

fn identity() -> Identity {
    Identity::new("https://gitlab.example.com", "17", "docker:test")
}

fn rebuild() -> StoreOptions {
    StoreOptions {
        mode: OpenMode::Rebuild,
        ..StoreOptions::default()
    }
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

fn companion(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_os_string();
    s.push(suffix);
    PathBuf::from(s)
}

fn instance(id: &str) -> JournalEvent {
    JournalEvent::Instance(InstanceRecord {
        id: id.to_string(),
        state: State::Running,
        cause: Cause::Requested,
        use_count: 0,
        removal: None,
    })
}

/// A foreign SQLite database: some other program's schema.
fn write_foreign_sqlite(path: &Path) {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.execute_batch(
        "CREATE TABLE bookmarks (id INTEGER PRIMARY KEY, url TEXT);
         INSERT INTO bookmarks (url) VALUES ('https://example.com');",
    )
    .unwrap();
}

/// Files in `dir` (names), sorted.
fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn the_database_and_its_wal_and_shm_are_private() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let store = Store::open(&path, StoreOptions::default()).unwrap();
    let scope = store.scope(&identity()).unwrap();
    store.put_credential(scope, "ssh", b"key").unwrap();
    for p in [
        path.clone(),
        companion(&path, "-wal"),
        companion(&path, "-shm"),
    ] {
        assert_eq!(mode(&p), 0o600, "{}", p.display());
    }
    drop(store);
    // A store left with an open mode (copied around, restored from a backup) is tightened.
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let store = Store::open(&path, StoreOptions::default()).unwrap();
    assert_eq!(mode(&path), 0o600);
    assert!(store.get_credential(scope, "ssh").unwrap().is_some());
}

#[test]
fn a_file_of_random_bytes_is_refused_and_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let mut bytes = vec![0u8; 8192];
    rand_chacha::ChaCha8Rng::seed_from_u64(7).fill(&mut bytes[..]);
    std::fs::write(&path, &bytes).unwrap();
    let before = listing(dir.path());

    let err = Store::open(&path, StoreOptions::default()).unwrap_err();
    assert!(matches!(err, StoreError::NotOurs { .. }), "{err}");
    let message = err.to_string();
    assert!(message.contains(&path.display().to_string()), "{message}");
    assert!(message.contains("SQLite header"), "{message}");
    assert_eq!(std::fs::read(&path).unwrap(), bytes);
    assert_eq!(listing(dir.path()), before);
}

#[test]
fn an_sqlite_header_over_garbage_is_corrupt_and_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let mut bytes = vec![0u8; 16384];
    rand_chacha::ChaCha8Rng::seed_from_u64(9).fill(&mut bytes[..]);
    bytes[..16].copy_from_slice(b"SQLite format 3\0");
    std::fs::write(&path, &bytes).unwrap();

    let err = Store::open(&path, StoreOptions::default()).unwrap_err();
    assert!(matches!(err, StoreError::Corrupt { .. }), "{err}");
    assert!(err.to_string().contains(&path.display().to_string()));
    assert_eq!(std::fs::read(&path).unwrap(), bytes);
}

#[test]
fn a_foreign_sqlite_database_is_refused_and_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    write_foreign_sqlite(&path);
    let bytes = std::fs::read(&path).unwrap();
    let before = listing(dir.path());

    let err = Store::open(&path, StoreOptions::default()).unwrap_err();
    assert!(matches!(err, StoreError::NotOurs { .. }), "{err}");
    let message = err.to_string();
    assert!(message.contains(&path.display().to_string()), "{message}");
    assert!(message.contains("application_id"), "{message}");
    assert!(message.contains("left untouched"), "{message}");
    assert_eq!(std::fs::read(&path).unwrap(), bytes);
    assert_eq!(listing(dir.path()), before);
    // Still the other program's database.
    let conn = rusqlite::Connection::open(&path).unwrap();
    let url: String = conn
        .query_row("SELECT url FROM bookmarks", [], |r| r.get(0))
        .unwrap();
    assert_eq!(url, "https://example.com");
}

#[test]
fn our_application_id_without_the_marker_is_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch(&format!(
        "PRAGMA application_id = {}; PRAGMA user_version = 1; CREATE TABLE t (x);",
        flotilla_store::APPLICATION_ID
    ))
    .unwrap();
    drop(conn);
    let bytes = std::fs::read(&path).unwrap();
    let err = Store::open(&path, StoreOptions::default()).unwrap_err();
    assert!(matches!(err, StoreError::Corrupt { .. }), "{err}");
    assert!(err.to_string().contains("meta"), "{err}");
    assert_eq!(std::fs::read(&path).unwrap(), bytes);
}

#[test]
fn rebuild_moves_a_bad_file_aside_and_starts_empty() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    write_foreign_sqlite(&path);
    let bytes = std::fs::read(&path).unwrap();

    let store = Store::open(&path, rebuild()).unwrap();
    let aside = store.moved_aside().expect("moved aside").to_path_buf();
    let name = aside.file_name().unwrap().to_string_lossy().into_owned();
    assert!(name.starts_with("state.db.bad-"), "{name}");
    // Moved, not deleted, not changed.
    assert_eq!(std::fs::read(&aside).unwrap(), bytes);
    let scope = store.scope(&identity()).unwrap();
    assert!(store.load_fleet(scope).unwrap().instances.is_empty());
    assert_eq!(mode(&path), 0o600);
    drop(store);

    // A good store is not moved aside by rebuild.
    let store = Store::open(&path, rebuild()).unwrap();
    assert_eq!(store.moved_aside(), None);
    drop(store);

    // Random bytes, rebuilt twice in the same second: distinct names, nothing lost.
    std::fs::write(&path, b"not a database at all, just text").unwrap();
    let store = Store::open(&path, rebuild()).unwrap();
    let second = store.moved_aside().unwrap().to_path_buf();
    assert_ne!(second, aside);
    assert_eq!(
        std::fs::read(&second).unwrap(),
        b"not a database at all, just text"
    );
    assert_eq!(std::fs::read(&aside).unwrap(), bytes);
}

#[test]
fn rebuild_moves_a_bad_wal_along_with_its_database() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    // A foreign WAL database with content still in its WAL (its writer is still running).
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.pragma_update(None, "journal_mode", "WAL").unwrap();
    conn.execute_batch("CREATE TABLE other (x); INSERT INTO other VALUES (42);")
        .unwrap();
    assert!(companion(&path, "-wal").exists());
    let store = Store::open(&path, rebuild()).unwrap();
    let aside = store.moved_aside().unwrap().to_path_buf();
    assert!(companion(&aside, "-wal").exists());
    drop(conn);
    // The moved database still holds its content, WAL included.
    let moved = rusqlite::Connection::open(&aside).unwrap();
    let x: i64 = moved
        .query_row("SELECT x FROM other", [], |r| r.get(0))
        .unwrap();
    assert_eq!(x, 42);
    // And the new store did not inherit it.
    let scope = store.scope(&identity()).unwrap();
    store.record(scope, &instance("i-1")).unwrap();
    assert_eq!(store.load_fleet(scope).unwrap().instances.len(), 1);
}

#[test]
fn a_newer_schema_is_refused_with_a_clear_message() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let store = Store::open(&path, StoreOptions::default()).unwrap();
    let scope = store.scope(&identity()).unwrap();
    store.record(scope, &instance("i-1")).unwrap();
    drop(store);
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.pragma_update(None, "user_version", 999).unwrap();
    drop(conn);
    let bytes = std::fs::read(&path).unwrap();

    let err = Store::open(&path, StoreOptions::default()).unwrap_err();
    match &err {
        StoreError::TooNew {
            path: p,
            found,
            supported,
        } => {
            assert_eq!(p, &path);
            assert_eq!(*found, 999);
            assert_eq!(*supported, flotilla_store::SCHEMA_VERSION);
        }
        other => panic!("expected TooNew, got {other}"),
    }
    let message = err.to_string();
    assert!(message.contains("schema version 999"), "{message}");
    assert!(message.contains("Upgrade flotilla"), "{message}");
    assert_eq!(std::fs::read(&path).unwrap(), bytes);

    // Rebuild moves it aside too (a downgrade that accepts starting over).
    let store = Store::open(&path, rebuild()).unwrap();
    let aside = store.moved_aside().unwrap();
    assert_eq!(std::fs::read(aside).unwrap(), bytes);
}

#[test]
fn a_store_truncated_to_nothing_is_refused_and_a_new_one_appears_complete() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let store = Store::open(&path, StoreOptions::default()).unwrap();
    assert_eq!(mode(&path), 0o600);
    let scope = store.scope(&identity()).unwrap();
    store.record(scope, &instance("i-1")).unwrap();
    drop(store);
    // Only the store itself is in the directory: it was built under another name and
    // published complete, so an empty file at its path is never one flotilla made.
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.contains("building"))
        .collect();
    assert!(names.is_empty(), "{names:?}");

    // Truncated (a full disk, a careless copy): starting empty would forget the fleet.
    std::fs::write(&path, b"").unwrap();
    let err = Store::open(&path, StoreOptions::default()).unwrap_err();
    assert!(matches!(err, StoreError::Corrupt { .. }), "{err}");
    let text = err.to_string();
    assert!(text.contains("empty (0 bytes)"), "{text}");
    assert!(text.contains(path.to_str().unwrap()), "{text}");
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 0, "left untouched");
    // Rebuild moves it aside and starts over.
    let store = Store::open(&path, rebuild()).unwrap();
    assert!(store.moved_aside().is_some());
    let scope = store.scope(&identity()).unwrap();
    assert!(store.load_fleet(scope).unwrap().instances.is_empty());
}

#[test]
fn a_wal_without_its_database_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let wal = companion(&path, "-wal");
    std::fs::write(&wal, b"stale").unwrap();
    let err = Store::open(&path, StoreOptions::default()).unwrap_err();
    assert!(matches!(err, StoreError::NotOurs { .. }), "{err}");
    assert!(err.to_string().contains("-wal"), "{err}");
    assert!(!path.exists());
    assert_eq!(std::fs::read(&wal).unwrap(), b"stale");
    // Rebuild moves the stray WAL aside before creating the database.
    let store = Store::open(&path, rebuild()).unwrap();
    let aside = store.moved_aside().unwrap();
    assert_eq!(std::fs::read(companion(aside, "-wal")).unwrap(), b"stale");
}

#[test]
fn a_full_disk_fails_loudly_and_keeps_the_last_committed_state() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let capped = StoreOptions {
        // A tiny file system: 64 pages of 4 KiB.
        max_page_count: Some(64),
        ..StoreOptions::default()
    };
    let store = Store::open(&path, capped).unwrap();
    let scope = store.scope(&identity()).unwrap();
    let journal = store.journal(scope);
    let blob = vec![0xA5u8; 16 * 1024];
    let mut stored = 0;
    let err = loop {
        match store.put_credential(scope, &format!("key-{stored}"), &blob) {
            Ok(()) => stored += 1,
            Err(e) => break e,
        }
        assert!(stored < 1000, "the cap was never hit");
    };
    assert!(stored > 0);
    assert!(err.is_disk_full(), "{err}");
    assert!(matches!(err, StoreError::Write { .. }), "{err}");
    let message = err.to_string();
    assert!(message.contains("full"), "{message}");
    assert!(message.contains(&path.display().to_string()), "{message}");
    // The journal reports it too, with the path, rather than pretending.
    let mut journal_failed = None;
    for n in 0..200 {
        if let Err(e) = journal.record(&instance(&format!("i-{n:0>200}"))) {
            journal_failed = Some(e);
            break;
        }
    }
    let journal_err = journal_failed.expect("journal writes hit the cap");
    assert!(journal_err.0.contains("full"), "{journal_err}");
    let committed = store.load_fleet(scope).unwrap();
    drop(journal);
    drop(store);

    // The file is intact and holds what was committed before the failure.
    let store = Store::open(&path, StoreOptions::default()).unwrap();
    assert_eq!(store.moved_aside(), None);
    let scope = store.scope(&identity()).unwrap();
    for n in 0..stored {
        let key = store
            .get_credential(scope, &format!("key-{n}"))
            .unwrap()
            .unwrap();
        assert_eq!(key.expose(), &blob);
    }
    assert!(
        store
            .get_credential(scope, &format!("key-{stored}"))
            .unwrap()
            .is_none()
    );
    assert_eq!(store.load_fleet(scope).unwrap(), committed);
    let conn = rusqlite::Connection::open(&path).unwrap();
    let check: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(check, "ok");
    // Without the cap, writing goes on.
    store.record(scope, &instance("i-after")).unwrap();
}

#[test]
fn read_only_opens_change_nothing_and_refuse_writes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let store = Store::open(&path, StoreOptions::default()).unwrap();
    let scope = store
        .scope(&Identity::new("https://g.example", "1", "docker:x"))
        .unwrap();
    store
        .record(
            scope,
            &JournalEvent::Instance(InstanceRecord {
                id: "i-1".into(),
                state: State::Running,
                cause: Cause::Requested,
                use_count: 1,
                removal: None,
            }),
        )
        .unwrap();
    drop(store);
    // As version 1 left it: no decisions table.
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch("DROP TABLE decisions; PRAGMA user_version = 1;")
        .unwrap();
    drop(conn);
    let bytes = std::fs::read(&path).unwrap();

    let ro = Store::open_read_only(&path).unwrap();
    assert_eq!(ro.schema_version().unwrap(), 1, "not migrated");
    assert_eq!(ro.load_fleet(scope).unwrap().instances.len(), 1);
    assert_eq!(ro.last_decision(scope).unwrap(), None);
    let err = ro
        .record_decision(scope, "hold", std::time::SystemTime::now())
        .unwrap_err();
    assert!(matches!(err, StoreError::Write { .. }), "{err}");
    drop(ro);
    assert_eq!(std::fs::read(&path).unwrap(), bytes, "the file changed");

    // A file that is not ours is refused as by `open`.
    let other = dir.path().join("other.db");
    std::fs::write(&other, b"not a database at all, just some text").unwrap();
    assert!(matches!(
        Store::open_read_only(&other).unwrap_err(),
        StoreError::NotOurs { .. }
    ));
}
