//! The schema, its migrations, and recognising whether an SQLite file is a flotilla store.
//!
//! The schema version lives in `PRAGMA user_version`; `MIGRATIONS` is the ordered list of
//! steps from an empty database to [`SCHEMA_VERSION`]. A flotilla store also carries
//! `PRAGMA application_id` = [`APPLICATION_ID`] and a `meta` row `format = flotilla-store`,
//! both written by the first migration in the same transaction as everything else.

use rusqlite::{Connection, OptionalExtension};

/// The newest schema version this build reads and writes.
pub const SCHEMA_VERSION: u32 = 2;

/// `PRAGMA application_id` of a flotilla store: "FLOT" in ASCII.
pub const APPLICATION_ID: i32 = 0x464C_4F54;

/// The value of the `meta` row `format`.
pub(crate) const MARKER: &str = "flotilla-store";

/// One step of the schema's history.
pub(crate) struct Migration {
    /// The version the database has after this step.
    pub(crate) version: u32,
    /// What it does (for logs).
    pub(crate) description: &'static str,
    /// The statements, run in one transaction with the version update.
    pub(crate) sql: &'static str,
}

/// Every migration, in order; versions are 1, 2, 3, ...
pub(crate) const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        description: "scopes, leases, fleet ledger, job records, credentials",
        sql: r"
PRAGMA application_id = 1179406164;

CREATE TABLE meta (
    key   TEXT PRIMARY KEY NOT NULL,
    value TEXT NOT NULL
) WITHOUT ROWID;
INSERT INTO meta (key, value) VALUES ('format', 'flotilla-store');

CREATE TABLE scopes (
    id                  INTEGER PRIMARY KEY,
    runner_url          TEXT NOT NULL,
    runner_id           TEXT NOT NULL,
    provider_id         TEXT NOT NULL,
    requested_in_flight INTEGER NOT NULL DEFAULT 0 CHECK (requested_in_flight >= 0),
    created_at          INTEGER NOT NULL,
    UNIQUE (runner_url, runner_id, provider_id)
);

CREATE TABLE leases (
    scope       INTEGER PRIMARY KEY REFERENCES scopes (id) ON DELETE CASCADE,
    holder_id   TEXT NOT NULL,
    hostname    TEXT NOT NULL,
    pid         INTEGER NOT NULL,
    acquired_at INTEGER NOT NULL,
    expires_at  INTEGER NOT NULL
);

CREATE TABLE instances (
    scope      INTEGER NOT NULL REFERENCES scopes (id) ON DELETE CASCADE,
    id         TEXT NOT NULL,
    state      TEXT NOT NULL,
    cause      TEXT NOT NULL,
    use_count  INTEGER NOT NULL CHECK (use_count >= 0),
    removal    TEXT,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (scope, id)
) WITHOUT ROWID;

CREATE TABLE acquisitions (
    scope      INTEGER NOT NULL REFERENCES scopes (id) ON DELETE CASCADE,
    key        TEXT NOT NULL,
    instance   TEXT NOT NULL,
    slot       INTEGER NOT NULL CHECK (slot >= 0),
    started_at INTEGER NOT NULL,
    PRIMARY KEY (scope, key),
    UNIQUE (scope, instance, slot)
) WITHOUT ROWID;

CREATE TABLE jobs (
    scope          INTEGER NOT NULL REFERENCES scopes (id) ON DELETE CASCADE,
    source         TEXT NOT NULL,
    job_id         TEXT NOT NULL,
    state          TEXT NOT NULL CHECK (state IN ('running', 'finished', 'reported')),
    key            TEXT NOT NULL,
    instance       TEXT NOT NULL,
    slot           INTEGER NOT NULL CHECK (slot >= 0),
    started_at     INTEGER NOT NULL,
    ended_at       INTEGER,
    reported_at    INTEGER,
    outcome        TEXT CHECK (outcome IN ('success', 'failed')),
    failure_reason TEXT,
    exit_code      INTEGER,
    CHECK ((state = 'running') = (outcome IS NULL)),
    PRIMARY KEY (scope, source, job_id)
);
CREATE INDEX jobs_unfinished ON jobs (scope, started_at) WHERE state <> 'reported';

CREATE TABLE credentials (
    scope      INTEGER NOT NULL REFERENCES scopes (id) ON DELETE CASCADE,
    name       TEXT NOT NULL,
    value      BLOB NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (scope, name)
);
",
    },
    Migration {
        version: 2,
        description: "the scaler's last decision per scope, for `flotilla status`",
        sql: r"
CREATE TABLE decisions (
    scope       INTEGER PRIMARY KEY REFERENCES scopes (id) ON DELETE CASCADE,
    decided_at  INTEGER NOT NULL,
    explanation TEXT NOT NULL
);
",
    },
];

/// What an SQLite file says about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Probe {
    /// `PRAGMA application_id`.
    pub(crate) application_id: i32,
    /// `PRAGMA user_version`.
    pub(crate) user_version: i64,
    /// Rows in `sqlite_schema` (tables, indexes, ...).
    pub(crate) objects: i64,
    /// The `meta` row `format`, when the table and row exist.
    pub(crate) marker: Option<String>,
}

/// What to make of a probed file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// A database with nothing in it: safe to make ours.
    Empty,
    /// A flotilla store at this schema version (migrations may be pending).
    Ours(u32),
    /// Somebody else's database.
    NotOurs(String),
    /// Ours, but damaged.
    Corrupt(String),
    /// Ours, from a newer flotilla.
    TooNew(i64),
}

/// Judges a probe (pure).
pub(crate) fn judge(p: &Probe) -> Verdict {
    if p.objects == 0 && p.application_id == 0 && p.user_version == 0 {
        return Verdict::Empty;
    }
    if p.application_id != APPLICATION_ID {
        return Verdict::NotOurs(format!(
            "an SQLite database with application_id {:#x} and {} schema objects; a flotilla \
             store has application_id {APPLICATION_ID:#x}",
            p.application_id, p.objects
        ));
    }
    if p.user_version > i64::from(SCHEMA_VERSION) {
        return Verdict::TooNew(p.user_version);
    }
    let Ok(version @ 1..) = u32::try_from(p.user_version) else {
        return Verdict::Corrupt(format!(
            "flotilla's application_id with schema version {}",
            p.user_version
        ));
    };
    match p.marker.as_deref() {
        Some(MARKER) => Verdict::Ours(version),
        Some(other) => Verdict::Corrupt(format!("the meta format is {other:?}, not {MARKER:?}")),
        None => Verdict::Corrupt("the meta table or its format row is missing".to_string()),
    }
}

/// Reads what [`judge`] needs, without writing.
pub(crate) fn probe(conn: &Connection) -> rusqlite::Result<Probe> {
    let application_id = conn.pragma_query_value(None, "application_id", |r| r.get(0))?;
    let user_version = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    let objects = conn.query_row("SELECT count(*) FROM sqlite_schema", [], |r| r.get(0))?;
    let has_meta: bool = conn.query_row(
        "SELECT count(*) > 0 FROM sqlite_schema WHERE type = 'table' AND name = 'meta'",
        [],
        |r| r.get(0),
    )?;
    let marker = if has_meta {
        conn.query_row(
            "SELECT CAST(value AS TEXT) FROM meta WHERE key = 'format'",
            [],
            |r| r.get(0),
        )
        .optional()?
    } else {
        None
    };
    Ok(Probe {
        application_id,
        user_version,
        objects,
        marker,
    })
}

/// `PRAGMA quick_check`: `None` when the file is sound, else the first problems found.
pub(crate) fn quick_check(conn: &Connection) -> rusqlite::Result<Option<String>> {
    let mut stmt = conn.prepare("PRAGMA quick_check(5)")?;
    let rows: Vec<String> = stmt
        .query_map([], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    Ok(if rows.len() == 1 && rows[0] == "ok" {
        None
    } else {
        Some(rows.join("; "))
    })
}

/// The migrations still to apply to a database at `version`.
pub(crate) fn pending(version: u32) -> impl Iterator<Item = &'static Migration> {
    MIGRATIONS.iter().filter(move |m| m.version > version)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ours(version: i64) -> Probe {
        Probe {
            application_id: APPLICATION_ID,
            user_version: version,
            objects: 9,
            marker: Some(MARKER.to_string()),
        }
    }

    #[test]
    fn migrations_are_numbered_in_order_up_to_the_schema_version() {
        for (i, m) in MIGRATIONS.iter().enumerate() {
            assert_eq!(m.version as usize, i + 1, "{}", m.description);
        }
        assert_eq!(MIGRATIONS.last().map(|m| m.version), Some(SCHEMA_VERSION));
        assert_eq!(pending(0).count(), MIGRATIONS.len());
        assert_eq!(pending(SCHEMA_VERSION).count(), 0);
    }

    #[test]
    fn the_first_migration_sets_the_application_id() {
        assert!(
            MIGRATIONS[0]
                .sql
                .contains(&format!("application_id = {APPLICATION_ID};"))
        );
    }

    #[test]
    fn verdicts() {
        let empty = Probe {
            application_id: 0,
            user_version: 0,
            objects: 0,
            marker: None,
        };
        assert_eq!(judge(&empty), Verdict::Empty);
        assert_eq!(judge(&ours(1)), Verdict::Ours(1));
        assert_eq!(
            judge(&ours(SCHEMA_VERSION as i64 + 1)),
            Verdict::TooNew(SCHEMA_VERSION as i64 + 1)
        );
        assert!(matches!(judge(&ours(0)), Verdict::Corrupt(_)));
        assert!(matches!(judge(&ours(-3)), Verdict::Corrupt(_)));
        let foreign = Probe {
            application_id: 0,
            objects: 2,
            ..empty.clone()
        };
        assert!(matches!(judge(&foreign), Verdict::NotOurs(r) if r.contains("application_id 0x0")));
        // Another program's user_version alone does not make a file ours.
        let versioned = Probe {
            user_version: 7,
            ..empty
        };
        assert!(matches!(judge(&versioned), Verdict::NotOurs(_)));
        let unmarked = Probe {
            marker: None,
            ..ours(1)
        };
        assert!(matches!(judge(&unmarked), Verdict::Corrupt(r) if r.contains("meta")));
    }
}
