//! Opening the store: recognising the file, refusing or moving aside a bad one, configuring
//! SQLite, applying migrations; and the transaction helpers every operation goes through.

use crate::error::StoreError;
use crate::file::{self, Found};
use crate::options::{OpenMode, StoreOptions};
use crate::schema::{self, SCHEMA_VERSION, Verdict};
use rusqlite::config::DbConfig;
use rusqlite::{Connection, OpenFlags, Transaction, TransactionBehavior};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;

/// The durable store: one SQLite file (WAL mode, mode 0600) holding, per scope, the fleet
/// ledger the scaler journals, the lease that keeps a second manager out, job records and
/// credentials flotilla minted.
///
/// A `Store` is a cheap handle (clone it freely); all clones share one connection behind a
/// mutex, and every operation is one short transaction. Several processes may open the same
/// file (SQLite serialises their writes); the lease decides which of them runs a scope.
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

struct Inner {
    path: PathBuf,
    conn: Mutex<Connection>,
    moved_aside: Option<PathBuf>,
    options: StoreOptions,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("path", &self.inner.path)
            .field("moved_aside", &self.inner.moved_aside)
            .field("options", &self.inner.options)
            .finish()
    }
}

/// Why a transaction failed, before it is named with the path and operation.
#[derive(Debug)]
pub(crate) enum TxError {
    /// SQLite failed.
    Sql(rusqlite::Error),
    /// A stored value cannot be decoded.
    Decode(String),
    /// A domain error (lease held, unknown job, ...).
    Store(StoreError),
}

impl From<rusqlite::Error> for TxError {
    fn from(e: rusqlite::Error) -> Self {
        TxError::Sql(e)
    }
}

impl Store {
    /// Opens (creating if needed) the store at `path`.
    ///
    /// A new file is created with mode 0600 before SQLite touches it; SQLite gives its `-wal`
    /// and `-shm` companions the same mode. An existing file is used only if it is a flotilla
    /// store of this or an older schema version (pending migrations are applied in one
    /// transaction). Otherwise, with [`OpenMode::Refuse`], this fails with
    /// [`StoreError::NotOurs`], [`StoreError::Corrupt`] or [`StoreError::TooNew`] and the file
    /// is left untouched; with [`OpenMode::Rebuild`] the file is moved aside (see
    /// [`Store::moved_aside`]) and an empty store is created in its place.
    pub fn open(path: impl AsRef<Path>, options: StoreOptions) -> Result<Store, StoreError> {
        let path = path.as_ref().to_path_buf();
        let (conn, moved_aside) = match open_checked(&path, &options) {
            Ok(conn) => (conn, None),
            Err(e) if options.mode == OpenMode::Rebuild && is_bad_file(&e) => {
                tracing::warn!(error = %e, "rebuilding the store");
                let aside = file::move_aside(&path, SystemTime::now())?;
                (open_checked(&path, &options)?, Some(aside))
            }
            Err(e) => return Err(e),
        };
        Ok(Store {
            inner: Arc::new(Inner {
                path,
                conn: Mutex::new(conn),
                moved_aside,
                options,
            }),
        })
    }

    /// Opens the store at `path` read-only, for looking without touching (`flotilla status`):
    /// nothing is created, migrated, or switched to WAL, and every write fails. The file must
    /// be a flotilla store of this or an older schema version, as for [`Store::open`].
    pub fn open_read_only(path: impl AsRef<Path>) -> Result<Store, StoreError> {
        let path = path.as_ref().to_path_buf();
        let options = StoreOptions::default();
        match file::inspect(&path)? {
            Found::NotSqlite(reason) => return Err(StoreError::NotOurs { path, reason }),
            Found::Empty => return Err(truncated(path)),
            Found::Missing | Found::Sqlite => {}
        }
        let conn = Connection::open_with_flags(
            &path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .and_then(|conn| conn.busy_timeout(options.busy_timeout).map(|()| conn))
        .map_err(|source| StoreError::Open {
            path: path.clone(),
            what: "open read-only",
            source,
        })?;
        check_ours(&conn, &path)?;
        Ok(Store {
            inner: Arc::new(Inner {
                path,
                conn: Mutex::new(conn),
                moved_aside: None,
                options,
            }),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Where a bad file was moved by [`OpenMode::Rebuild`], if it was.
    pub fn moved_aside(&self) -> Option<&Path> {
        self.inner.moved_aside.as_deref()
    }

    /// The options the store was opened with.
    pub fn options(&self) -> &StoreOptions {
        &self.inner.options
    }

    /// The schema version of the open file (always [`SCHEMA_VERSION`] once open).
    pub fn schema_version(&self) -> Result<u32, StoreError> {
        self.read("read the schema version", |conn| {
            let v: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
            u32::try_from(v).map_err(|_| TxError::Decode(format!("schema version {v}")))
        })
    }

    fn lock(&self) -> MutexGuard<'_, Connection> {
        // A panic while holding the lock leaves no transaction open (a dropped
        // `Transaction` rolls back), so the connection is still sound.
        self.inner
            .conn
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn name(&self, what: &'static str, e: TxError, write: bool) -> StoreError {
        let path = self.inner.path.clone();
        match e {
            TxError::Sql(source) if write => StoreError::Write { path, what, source },
            TxError::Sql(source) => StoreError::Read { path, what, source },
            TxError::Decode(reason) => StoreError::Corrupt {
                path,
                reason: format!("{what}: {reason}"),
            },
            TxError::Store(e) => e,
        }
    }

    /// Runs `f` in one write transaction (taking the write lock at once, so a concurrent
    /// writer in another process waits up to `busy_timeout` here rather than failing at
    /// commit). Nothing is kept unless `f` succeeds and the commit does.
    pub(crate) fn write<T>(
        &self,
        what: &'static str,
        f: impl FnOnce(&Transaction<'_>) -> Result<T, TxError>,
    ) -> Result<T, StoreError> {
        let mut conn = self.lock();
        let result = in_transaction(&mut conn, TransactionBehavior::Immediate, f);
        if result.is_err() && !conn.is_autocommit() {
            // Belt and braces: a failed COMMIT is rolled back when the transaction drops.
            let _ = conn.execute_batch("ROLLBACK");
        }
        result.map_err(|e| {
            let e = self.name(what, e, true);
            if !matches!(
                e,
                StoreError::LeaseHeld { .. }
                    | StoreError::LeaseLost { .. }
                    | StoreError::UnknownJob { .. }
                    | StoreError::JobConflict { .. }
            ) {
                tracing::error!(error = %e, "store write failed");
            }
            e
        })
    }

    /// Runs `f` in one read transaction (a consistent snapshot).
    pub(crate) fn read<T>(
        &self,
        what: &'static str,
        f: impl FnOnce(&Transaction<'_>) -> Result<T, TxError>,
    ) -> Result<T, StoreError> {
        let mut conn = self.lock();
        in_transaction(&mut conn, TransactionBehavior::Deferred, f)
            .map_err(|e| self.name(what, e, false))
    }

    /// A [`StoreError`] naming this store's file.
    pub(crate) fn error(&self, make: impl FnOnce(PathBuf) -> StoreError) -> TxError {
        TxError::Store(make(self.inner.path.clone()))
    }
}

/// Runs `f` in a transaction begun with `behavior`, committed if `f` succeeds.
fn in_transaction<T>(
    conn: &mut Connection,
    behavior: TransactionBehavior,
    f: impl FnOnce(&Transaction<'_>) -> Result<T, TxError>,
) -> Result<T, TxError> {
    let tx = conn.transaction_with_behavior(behavior)?;
    let out = f(&tx)?;
    tx.commit()?;
    Ok(out)
}

/// Whether `e` is about the file's content (so [`OpenMode::Rebuild`] applies), rather than
/// about this process's environment (permissions, a locked file).
fn is_bad_file(e: &StoreError) -> bool {
    matches!(
        e,
        StoreError::NotOurs { .. } | StoreError::Corrupt { .. } | StoreError::TooNew { .. }
    )
}

fn is_corruption(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseCorrupt | rusqlite::ErrorCode::NotADatabase)
    )
}

/// Opens `path` if it is (or can become) a flotilla store, never writing to a file that is
/// not ours.
fn open_checked(path: &Path, options: &StoreOptions) -> Result<Connection, StoreError> {
    match file::inspect(path)? {
        Found::Missing => {
            if let Some(stale) = file::existing_companions(path).first() {
                return Err(StoreError::NotOurs {
                    path: path.to_path_buf(),
                    reason: format!(
                        "the database file is missing but {} exists, and SQLite would replay \
                         it into a new database",
                        stale.display()
                    ),
                });
            }
            create(path, options)?;
        }
        // A store appears at its path only complete (see `create`): an empty file there was
        // truncated, and starting empty would forget the fleet's instances and jobs.
        Found::Empty => return Err(truncated(path.to_path_buf())),
        Found::Sqlite => {}
        Found::NotSqlite(reason) => {
            return Err(StoreError::NotOurs {
                path: path.to_path_buf(),
                reason,
            });
        }
    }
    open_ours(path, options)
}

/// The error for an empty file at the store's path.
fn truncated(path: PathBuf) -> StoreError {
    StoreError::Corrupt {
        path,
        reason: "it is empty (0 bytes), though a store is never empty once created".into(),
    }
}

/// Makes a new store at `path` that appears there only once complete: it is built and
/// migrated under a temporary name, closed (SQLite folds its write-ahead log in), then
/// hard-linked into place, which fails rather than replace a store another process made
/// first. So a zero-byte file at the store's path is never one of ours.
fn create(path: &Path, options: &StoreOptions) -> Result<(), StoreError> {
    let building = file::building_name(path);
    file::remove_with_companions(&building)?;
    file::create_private(&building)?;
    let conn = open_ours(&building, options).map_err(|e| e.at(path))?;
    drop(conn);
    file::publish(&building, path)
}

/// Opens a file that is empty or holds an SQLite database, and makes it a store of this
/// schema version if it is one of ours.
fn open_ours(path: &Path, options: &StoreOptions) -> Result<Connection, StoreError> {
    let open_err = |what| {
        move |source| StoreError::Open {
            path: path.to_path_buf(),
            what,
            source,
        }
    };
    // No CREATE flag: SQLite never creates the main file (we did, with the right mode).
    let mut conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(open_err("open"))?;
    conn.busy_timeout(options.busy_timeout)
        .map_err(open_err("set the busy timeout"))?;

    // Look before touching: no writes, and no checkpoint on close, until we know it is ours.
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true)
        .map_err(open_err("disable checkpoint on close"))?;
    conn.pragma_update(None, "query_only", true)
        .map_err(open_err("enter query-only mode"))?;
    let version = check_ours(&conn, path)?;

    // Ours (or empty): make it so.
    conn.pragma_update(None, "query_only", false)
        .map_err(open_err("leave query-only mode"))?;
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, false)
        .map_err(open_err("enable checkpoint on close"))?;
    file::tighten(path)?;
    let mode: String = conn
        .pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))
        .map_err(open_err("switch to WAL mode"))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(StoreError::NoWal {
            path: path.to_path_buf(),
            mode,
        });
    }
    conn.pragma_update(None, "synchronous", options.synchronous.as_pragma())
        .map_err(open_err("set synchronous"))?;
    conn.pragma_update(None, "foreign_keys", true)
        .map_err(open_err("enable foreign keys"))?;
    // Overwrite deleted content (old credentials) where that costs no extra I/O.
    conn.pragma_update(None, "secure_delete", "FAST")
        .map_err(open_err("enable secure delete"))?;
    if let Some(pages) = options.max_page_count {
        conn.pragma_update(None, "max_page_count", pages)
            .map_err(open_err("set max_page_count"))?;
    }
    migrate(&mut conn, path, version)?;
    Ok(conn)
}

/// Probes an open connection: the schema version of a flotilla store (0: an empty database),
/// or why the file is not one flotilla can use. Reads only.
fn check_ours(conn: &Connection, path: &Path) -> Result<u32, StoreError> {
    let open_err = |what| {
        move |source| StoreError::Open {
            path: path.to_path_buf(),
            what,
            source,
        }
    };
    let corrupt = |reason: String| StoreError::Corrupt {
        path: path.to_path_buf(),
        reason,
    };
    let probe = match schema::probe(conn) {
        Ok(p) => p,
        Err(e) if is_corruption(&e) => return Err(corrupt(format!("SQLite cannot read it: {e}"))),
        Err(e) => return Err(open_err("read the schema")(e)),
    };
    let version = match schema::judge(&probe) {
        Verdict::Empty => 0,
        Verdict::Ours(v) => v,
        Verdict::NotOurs(reason) => {
            return Err(StoreError::NotOurs {
                path: path.to_path_buf(),
                reason,
            });
        }
        Verdict::Corrupt(reason) => return Err(corrupt(reason)),
        Verdict::TooNew(found) => {
            return Err(StoreError::TooNew {
                path: path.to_path_buf(),
                found,
                supported: SCHEMA_VERSION,
            });
        }
    };
    if version > 0 {
        match schema::quick_check(conn) {
            Ok(None) => {}
            Ok(Some(problems)) => return Err(corrupt(format!("integrity check: {problems}"))),
            Err(e) if is_corruption(&e) => return Err(corrupt(format!("integrity check: {e}"))),
            Err(e) => return Err(open_err("check integrity")(e)),
        }
    }

    Ok(version)
}

/// Applies the pending migrations in one transaction.
fn migrate(conn: &mut Connection, path: &Path, seen: u32) -> Result<(), StoreError> {
    if schema::pending(seen).next().is_none() {
        return Ok(());
    }
    let target = SCHEMA_VERSION;
    let failed = |version| {
        move |source| StoreError::Migrate {
            path: path.to_path_buf(),
            version,
            source,
        }
    };
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(failed(target))?;
    // Another process may have migrated while we looked.
    let current: i64 = tx
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .map_err(failed(target))?;
    let current = match u32::try_from(current) {
        Ok(v) if v <= SCHEMA_VERSION => v,
        _ => {
            return Err(StoreError::TooNew {
                path: path.to_path_buf(),
                found: current,
                supported: SCHEMA_VERSION,
            });
        }
    };
    for m in schema::pending(current) {
        tracing::info!(path = %path.display(), version = m.version, "migrating the store: {}", m.description);
        tx.execute_batch(m.sql).map_err(failed(m.version))?;
        tx.pragma_update(None, "user_version", m.version)
            .map_err(failed(m.version))?;
    }
    tx.commit().map_err(failed(target))
}
