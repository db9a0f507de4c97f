//! Credentials flotilla minted (for example the SSH key the docker provider generates), kept
//! per scope in the same private (mode 0600) file as the rest of the state.

use crate::error::StoreError;
use crate::identity::ScopeId;
use crate::store::Store;
use crate::time::to_millis;
use flotilla_fleet::Secret;
use rusqlite::{OptionalExtension, params};
use std::time::SystemTime;

impl Store {
    /// Stores (or replaces) the credential `name` of `scope`.
    pub fn put_credential(
        &self,
        scope: ScopeId,
        name: &str,
        value: &[u8],
    ) -> Result<(), StoreError> {
        let now = to_millis(SystemTime::now());
        self.write("store a credential", |tx| {
            tx.prepare_cached(
                "INSERT INTO credentials (scope, name, value, updated_at) VALUES (?1, ?2, ?3, ?4) \
                 ON CONFLICT (scope, name) DO UPDATE SET value = excluded.value, \
                 updated_at = excluded.updated_at",
            )?
            .execute(params![scope.0, name, value, now])?;
            Ok(())
        })
    }

    /// The credential `name` of `scope`, if stored. It comes wrapped in a [`Secret`] so that
    /// it cannot reach a log by accident.
    pub fn get_credential(
        &self,
        scope: ScopeId,
        name: &str,
    ) -> Result<Option<Secret<Vec<u8>>>, StoreError> {
        self.read("read a credential", |tx| {
            Ok(tx
                .prepare_cached("SELECT value FROM credentials WHERE scope = ?1 AND name = ?2")?
                .query_row(params![scope.0, name], |r| r.get::<_, Vec<u8>>(0))
                .optional()?
                .map(Secret::new))
        })
    }

    /// Deletes the credential `name` of `scope`; returns whether it existed.
    pub fn delete_credential(&self, scope: ScopeId, name: &str) -> Result<bool, StoreError> {
        self.write("delete a credential", |tx| {
            Ok(tx
                .prepare_cached("DELETE FROM credentials WHERE scope = ?1 AND name = ?2")?
                .execute(params![scope.0, name])?
                > 0)
        })
    }
}
