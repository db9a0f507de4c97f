//! Stable identity: what a scope of state belongs to.
//!
//! State is keyed by the GitLab instance's URL, the runner's id and the provider's id, never
//! by the runner token: tokens rotate, and a rotation must find the same fleet rather than
//! start a second scaler that prunes live instances (GitLab runner#39380).

use crate::error::StoreError;
use crate::store::{Store, TxError};
use rusqlite::params;
use std::fmt;
use std::time::SystemTime;

/// Who owns a scope of state: one runner's fleet on one provider.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Identity {
    /// The GitLab instance's URL (`[[runners]] url`); trailing slashes are ignored.
    pub runner_url: String,
    /// The runner's id as GitLab reports it (not its token, which rotates).
    pub runner_id: String,
    /// The provider's id for the instance group (for example the group name or ASG ARN).
    pub provider_id: String,
}

impl Identity {
    /// An identity from its three parts.
    pub fn new(
        runner_url: impl Into<String>,
        runner_id: impl Into<String>,
        provider_id: impl Into<String>,
    ) -> Self {
        Identity {
            runner_url: runner_url.into(),
            runner_id: runner_id.into(),
            provider_id: provider_id.into(),
        }
    }

    /// The URL as stored: `https://gitlab.example.com/` and `https://gitlab.example.com`
    /// are the same instance.
    pub fn normalized_url(&self) -> &str {
        self.runner_url.trim_end_matches('/')
    }

    /// The URL as shown in messages and `status`: without a `user:password@` or a query.
    pub fn shown_url(&self) -> String {
        flotilla_fleet::redact_url(self.normalized_url())
    }
}

impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "runner {} at {} on provider {}",
            self.runner_id,
            self.shown_url(),
            self.provider_id
        )
    }
}

/// A scope's row id in one store: the handle every per-scope operation takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ScopeId(pub(crate) i64);

impl ScopeId {
    /// The row id.
    pub fn get(self) -> i64 {
        self.0
    }
}

impl fmt::Display for ScopeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl Store {
    /// The scope of `identity`, created on first use.
    pub fn scope(&self, identity: &Identity) -> Result<ScopeId, StoreError> {
        let now = crate::time::to_millis(SystemTime::now());
        self.write("find or create the scope", |tx| {
            tx.prepare_cached(
                "INSERT INTO scopes (runner_url, runner_id, provider_id, created_at) \
                 VALUES (?1, ?2, ?3, ?4) \
                 ON CONFLICT (runner_url, runner_id, provider_id) DO NOTHING",
            )?
            .execute(params![
                identity.normalized_url(),
                identity.runner_id,
                identity.provider_id,
                now
            ])?;
            let id = tx
                .prepare_cached(
                    "SELECT id FROM scopes \
                     WHERE runner_url = ?1 AND runner_id = ?2 AND provider_id = ?3",
                )?
                .query_row(
                    params![
                        identity.normalized_url(),
                        identity.runner_id,
                        identity.provider_id
                    ],
                    |r| r.get(0),
                )?;
            Ok(ScopeId(id))
        })
    }

    /// Every scope in the store with its identity.
    pub fn scopes(&self) -> Result<Vec<(ScopeId, Identity)>, StoreError> {
        self.read("list scopes", |tx| {
            let mut stmt = tx.prepare_cached(
                "SELECT id, runner_url, runner_id, provider_id FROM scopes ORDER BY id",
            )?;
            let rows = stmt.query_map([], |r| {
                Ok((
                    ScopeId(r.get(0)?),
                    Identity::new(
                        r.get::<_, String>(1)?,
                        r.get::<_, String>(2)?,
                        r.get::<_, String>(3)?,
                    ),
                ))
            })?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
    }

    /// Fails with [`StoreError::UnknownScope`] unless `scope` exists.
    pub(crate) fn check_scope(
        &self,
        tx: &rusqlite::Transaction<'_>,
        scope: ScopeId,
    ) -> Result<(), TxError> {
        let found: bool = tx
            .prepare_cached("SELECT count(*) > 0 FROM scopes WHERE id = ?1")?
            .query_row([scope.0], |r| r.get(0))?;
        if found {
            Ok(())
        } else {
            Err(self.error(|path| StoreError::UnknownScope {
                path,
                scope: scope.0,
            }))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trailing_slashes_do_not_make_a_new_identity() {
        let a = Identity::new("https://gitlab.example.com/", "42", "asg-1");
        let b = Identity::new("https://gitlab.example.com", "42", "asg-1");
        assert_eq!(a.normalized_url(), b.normalized_url());
        assert_eq!(
            a.to_string(),
            "runner 42 at https://gitlab.example.com on provider asg-1"
        );
    }
}
