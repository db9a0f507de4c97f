//! The fleet ledger: what the scaler journals ([`JournalEvent`]) and reads back at start
//! ([`Persisted`]).
//!
//! Each event is one transaction, committed before [`Journal::record`] returns, and each
//! batch ([`Journal::record_all`], one per driver tick) is one transaction too, so it is on
//! disk before the change it describes takes effect outside (the scaler calls the journal
//! first). An acquisition is not tied to its instance's row: an instance can leave the group
//! while a job still holds one of its slots, and the acquisition stays until it is released
//! (or until the next start, when the scaler releases every acquisition it finds).
//!
//! An instance's stored cause is where it came from: `requested` (flotilla created it) or
//! `preexisted` (found in the group). The scaler calls every instance it restores
//! `Restored`; recording that over a known origin would turn a foreign instance into one of
//! ours after two restarts, so an upsert with cause `Restored` keeps the stored cause.

use crate::codec::{
    cause_as_str, parse_cause, parse_removal, parse_state, removal_as_str, state_as_str,
};
use crate::error::StoreError;
use crate::identity::ScopeId;
use crate::store::{Store, TxError};
use crate::time::to_millis;
use flotilla_scaler::{InstanceRecord, Journal, JournalError, JournalEvent, Persisted};
use rusqlite::{OptionalExtension, Transaction, params};
use std::sync::Arc;
use std::time::SystemTime;

/// A [`Journal`] writing one scope of a [`Store`].
struct ScopeJournal {
    store: Store,
    scope: ScopeId,
}

impl Journal for ScopeJournal {
    fn record(&self, event: &JournalEvent) -> Result<(), JournalError> {
        self.store
            .record(self.scope, event)
            .map_err(|e| JournalError(e.to_string()))
    }

    fn record_all(&self, events: &[JournalEvent]) -> Result<(), JournalError> {
        self.store
            .record_all(self.scope, events)
            .map_err(|e| JournalError(e.to_string()))
    }
}

fn index(n: usize, what: &str) -> Result<i64, TxError> {
    i64::try_from(n).map_err(|_| TxError::Decode(format!("{what} {n} is out of range")))
}

impl Store {
    /// The scaler's journal for `scope` (hand it to `ScalerBuilder::journal`). Errors name
    /// the database file and the failed operation.
    pub fn journal(&self, scope: ScopeId) -> Arc<dyn Journal> {
        Arc::new(ScopeJournal {
            store: self.clone(),
            scope,
        })
    }

    /// Records one ledger change for `scope` in its own transaction; returns once it is
    /// committed (durable against a process crash; against power loss too with
    /// [`crate::Synchronous::Full`]).
    pub fn record(&self, scope: ScopeId, event: &JournalEvent) -> Result<(), StoreError> {
        self.write(event_name(event), |tx| self.apply(tx, scope, event))
    }

    /// Records `events` for `scope` in one transaction, all or nothing: the scaler's driver
    /// commits one batch per tick.
    pub fn record_all(&self, scope: ScopeId, events: &[JournalEvent]) -> Result<(), StoreError> {
        if events.is_empty() {
            return Ok(());
        }
        self.write("record a batch of ledger changes", |tx| {
            for event in events {
                self.apply(tx, scope, event)?;
            }
            Ok(())
        })
    }

    /// Applies one event inside a transaction.
    ///
    /// An instance's use count only grows in the store: the scaler commits a listing's
    /// instance records after releasing its lock, so an acquisition committed meanwhile may
    /// carry a newer count than the record being written.
    fn apply(
        &self,
        tx: &Transaction<'_>,
        scope: ScopeId,
        event: &JournalEvent,
    ) -> Result<(), TxError> {
        let now = to_millis(SystemTime::now());
        match event {
            JournalEvent::RequestedInFlight(n) => {
                let n = index(*n, "requested count")?;
                let changed = tx
                    .prepare_cached("UPDATE scopes SET requested_in_flight = ?2 WHERE id = ?1")?
                    .execute(params![scope.0, n])?;
                if changed == 0 {
                    return Err(self.error(|path| StoreError::UnknownScope {
                        path,
                        scope: scope.0,
                    }));
                }
            }
            JournalEvent::Instance(r) => {
                tx.prepare_cached(
                    "INSERT INTO instances (scope, id, state, cause, use_count, removal, updated_at) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) \
                     ON CONFLICT (scope, id) DO UPDATE SET state = excluded.state, \
                     cause = CASE excluded.cause WHEN 'restored' THEN instances.cause \
                     ELSE excluded.cause END, use_count = MAX(instances.use_count, excluded.use_count), \
                     removal = excluded.removal, updated_at = excluded.updated_at",
                )?
                .execute(params![
                    scope.0,
                    r.id,
                    state_as_str(r.state),
                    cause_as_str(r.cause),
                    r.use_count,
                    r.removal.map(removal_as_str),
                    now
                ])?;
            }
            JournalEvent::InstanceGone(id) => {
                tx.prepare_cached("DELETE FROM instances WHERE scope = ?1 AND id = ?2")?
                    .execute(params![scope.0, id])?;
            }
            JournalEvent::Acquired {
                key,
                instance,
                slot,
                use_count,
            } => {
                let slot = index(*slot, "slot")?;
                // The scaler just handed this slot out, so any other record of it is stale
                // (a release that could not be recorded).
                let stale = tx
                    .prepare_cached(
                        "DELETE FROM acquisitions \
                         WHERE scope = ?1 AND instance = ?2 AND slot = ?3 AND key <> ?4",
                    )?
                    .execute(params![scope.0, instance, slot, key])?;
                if stale > 0 {
                    tracing::warn!(instance = %instance, slot, "dropped a stale acquisition record of a slot handed out again");
                }
                tx.prepare_cached(
                    "INSERT INTO acquisitions (scope, key, instance, slot, started_at) \
                     VALUES (?1, ?2, ?3, ?4, ?5) \
                     ON CONFLICT (scope, key) DO UPDATE SET instance = excluded.instance, \
                     slot = excluded.slot, started_at = excluded.started_at",
                )?
                .execute(params![scope.0, key, instance, slot, now])?;
                tx.prepare_cached(
                    "UPDATE instances SET use_count = MAX(use_count, ?3), updated_at = ?4 \
                     WHERE scope = ?1 AND id = ?2",
                )?
                .execute(params![scope.0, instance, use_count, now])?;
            }
            JournalEvent::Released { key } => {
                tx.prepare_cached("DELETE FROM acquisitions WHERE scope = ?1 AND key = ?2")?
                    .execute(params![scope.0, key])?;
            }
        }
        Ok(())
    }

    /// What the store holds for `scope`, to hand to `ScalerBuilder::restore` at start:
    /// instances (ordered by id), the requested-in-flight count, and the acquisitions held
    /// when the previous process stopped (ordered by start).
    pub fn load_fleet(&self, scope: ScopeId) -> Result<Persisted, StoreError> {
        self.read("load the fleet", |tx| {
            let requested: Option<i64> = tx
                .prepare_cached("SELECT requested_in_flight FROM scopes WHERE id = ?1")?
                .query_row([scope.0], |r| r.get(0))
                .optional()?;
            let Some(requested) = requested else {
                return Err(self.error(|path| StoreError::UnknownScope {
                    path,
                    scope: scope.0,
                }));
            };
            let requested_in_flight = usize::try_from(requested)
                .map_err(|_| TxError::Decode(format!("requested count {requested}")))?;

            let mut stmt = tx.prepare_cached(
                "SELECT id, state, cause, use_count, removal FROM instances \
                 WHERE scope = ?1 ORDER BY id",
            )?;
            let rows = stmt.query_map([scope.0], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, u32>(3)?,
                    r.get::<_, Option<String>>(4)?,
                ))
            })?;
            let mut instances = Vec::new();
            for row in rows {
                let (id, state, cause, use_count, removal) = row?;
                let bad = |field: &str, value: &str| {
                    TxError::Decode(format!("instance {id} has an unknown {field} {value:?}"))
                };
                instances.push(InstanceRecord {
                    state: parse_state(&state).ok_or_else(|| bad("state", &state))?,
                    cause: parse_cause(&cause).ok_or_else(|| bad("cause", &cause))?,
                    use_count,
                    removal: match removal {
                        None => None,
                        Some(r) => {
                            Some(parse_removal(&r).ok_or_else(|| bad("removal reason", &r))?)
                        }
                    },
                    id,
                });
            }

            let mut stmt = tx.prepare_cached(
                "SELECT key, instance, slot FROM acquisitions \
                 WHERE scope = ?1 ORDER BY started_at, key",
            )?;
            let rows = stmt.query_map([scope.0], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, i64>(2)?,
                ))
            })?;
            let mut acquisitions = Vec::new();
            for row in rows {
                let (key, instance, slot) = row?;
                let slot = usize::try_from(slot)
                    .map_err(|_| TxError::Decode(format!("acquisition {key} has slot {slot}")))?;
                acquisitions.push((key, instance, slot));
            }
            Ok(Persisted {
                instances,
                requested_in_flight,
                acquisitions,
            })
        })
    }
}

/// What recording `event` is called in errors.
fn event_name(event: &JournalEvent) -> &'static str {
    match event {
        JournalEvent::RequestedInFlight(_) => "record requested instances",
        JournalEvent::Instance(_) => "record an instance",
        JournalEvent::InstanceGone(_) => "record an instance's departure",
        JournalEvent::Acquired { .. } => "record an acquisition",
        JournalEvent::Released { .. } => "record a release",
    }
}
