//! The scaler's last decision per scope, as text: what `flotilla status` shows to explain why
//! a fleet has the size it has. Overwritten, not appended: the log keeps the history.

use crate::error::StoreError;
use crate::identity::ScopeId;
use crate::store::Store;
use crate::time::{from_millis, to_millis};
use rusqlite::{OptionalExtension, params};
use std::time::SystemTime;

impl Store {
    /// Records `explanation` as the last decision of `scope`, made at `at`.
    pub fn record_decision(
        &self,
        scope: ScopeId,
        explanation: &str,
        at: SystemTime,
    ) -> Result<(), StoreError> {
        self.write("record the scaler's decision", |tx| {
            tx.prepare_cached(
                "INSERT INTO decisions (scope, decided_at, explanation) VALUES (?1, ?2, ?3) \
                 ON CONFLICT (scope) DO UPDATE SET decided_at = ?2, explanation = ?3",
            )?
            .execute(params![scope.0, to_millis(at), explanation])?;
            Ok(())
        })
    }

    /// The last decision recorded for `scope`: when, and its explanation. `None` also for a
    /// file of schema version 1 opened with [`Store::open_read_only`] (no decisions there).
    pub fn last_decision(
        &self,
        scope: ScopeId,
    ) -> Result<Option<(SystemTime, String)>, StoreError> {
        self.read("read the scaler's last decision", |tx| {
            let has_table = tx
                .prepare_cached(
                    "SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = 'decisions'",
                )?
                .exists([])?;
            if !has_table {
                return Ok(None);
            }
            let row = tx
                .prepare_cached("SELECT decided_at, explanation FROM decisions WHERE scope = ?1")?
                .query_row([scope.0], |r| {
                    Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?))
                })
                .optional()?;
            Ok(row.map(|(at, text)| (from_millis(at), text)))
        })
    }
}
