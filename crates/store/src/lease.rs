//! The lease: at most one live manager per scope.
//!
//! A manager takes the lease on its scope before it starts the scaler and renews it well
//! within the TTL; a second manager pointing at the same instance group (same runner URL,
//! runner id and provider id) finds it held and refuses to start. A lease that was not
//! renewed in time (its holder died) can be taken over. All times are the callers' (pass
//! `SystemTime::now()` in production), stored as milliseconds since the epoch; processes
//! sharing one SQLite file in WAL mode are on one host, so they share a clock.

use crate::error::StoreError;
use crate::holder::{LeaseHolder, hostname};
use crate::identity::ScopeId;
use crate::store::Store;
use crate::time::{duration_millis, from_millis, to_millis};
use rusqlite::{OptionalExtension, params};
use std::time::{Duration, SystemTime};

/// A lease as granted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The scope.
    pub scope: ScopeId,
    /// Its holder.
    pub holder: LeaseHolder,
    /// When it lapses unless renewed.
    pub expires_at: SystemTime,
    /// The holder whose expired lease this one replaced, if any.
    pub took_over_from: Option<LeaseHolder>,
}

/// The lease row as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Row {
    holder: LeaseHolder,
    expires_at: i64,
}

/// What to do with an acquire request (pure).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Grant {
    /// Take (or keep) it; `took_over` names an expired previous holder.
    Take { took_over: Option<LeaseHolder> },
    /// Someone else holds it for `remaining_ms` more.
    Held {
        holder: LeaseHolder,
        remaining_ms: i64,
    },
}

/// Whether the process that holds a lease is known to be dead: it ran on this host and no
/// process with its pid exists any more (a `kill -9`ed manager). A reused pid only delays a
/// takeover until the lease expires.
fn holder_dead(holder: &LeaseHolder) -> bool {
    holder.hostname == hostname()
        && holder.pid != std::process::id()
        && !std::path::Path::new(&format!("/proc/{}", holder.pid)).exists()
}

fn decide(current: Option<Row>, holder_id: &str, now_ms: i64) -> Grant {
    match current {
        None => Grant::Take { took_over: None },
        Some(row) if row.holder.id == holder_id => Grant::Take { took_over: None },
        Some(row) if row.expires_at <= now_ms || holder_dead(&row.holder) => Grant::Take {
            took_over: Some(row.holder),
        },
        Some(row) => Grant::Held {
            remaining_ms: row.expires_at - now_ms,
            holder: row.holder,
        },
    }
}

fn current(tx: &rusqlite::Transaction<'_>, scope: ScopeId) -> rusqlite::Result<Option<Row>> {
    tx.prepare_cached("SELECT holder_id, hostname, pid, expires_at FROM leases WHERE scope = ?1")?
        .query_row([scope.0], |r| {
            Ok(Row {
                holder: LeaseHolder {
                    id: r.get(0)?,
                    hostname: r.get(1)?,
                    pid: r.get(2)?,
                },
                expires_at: r.get(3)?,
            })
        })
        .optional()
}

impl Store {
    /// Takes the lease on `scope` for `ttl` from `now`, or fails with
    /// [`StoreError::LeaseHeld`] naming the live holder. Taking a lease this holder already
    /// has extends it; an expired lease of another holder is taken over (and named in
    /// [`Lease::took_over_from`]).
    pub fn acquire_lease(
        &self,
        scope: ScopeId,
        holder: &LeaseHolder,
        ttl: Duration,
        now: SystemTime,
    ) -> Result<Lease, StoreError> {
        let now_ms = to_millis(now);
        let expires_at = now_ms.saturating_add(duration_millis(ttl));
        self.write("acquire the lease", |tx| {
            self.check_scope(tx, scope)?;
            match decide(current(tx, scope)?, &holder.id, now_ms) {
                Grant::Held {
                    holder: other,
                    remaining_ms,
                } => Err(self.error(|path| StoreError::LeaseHeld {
                    path,
                    holder: other,
                    expires_in: Duration::from_millis(u64::try_from(remaining_ms).unwrap_or(0)),
                })),
                Grant::Take { took_over } => {
                    tx.prepare_cached(
                        "INSERT INTO leases (scope, holder_id, hostname, pid, acquired_at, expires_at) \
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6) \
                         ON CONFLICT (scope) DO UPDATE SET holder_id = excluded.holder_id, \
                         hostname = excluded.hostname, pid = excluded.pid, \
                         acquired_at = excluded.acquired_at, expires_at = excluded.expires_at",
                    )?
                    .execute(params![
                        scope.0,
                        holder.id,
                        holder.hostname,
                        holder.pid,
                        now_ms,
                        expires_at
                    ])?;
                    if let Some(old) = &took_over {
                        tracing::warn!(scope = scope.0, previous = %old, "took over an expired lease");
                    }
                    Ok(Lease {
                        scope,
                        holder: holder.clone(),
                        expires_at: from_millis(expires_at),
                        took_over_from: took_over,
                    })
                }
            }
        })
    }

    /// Extends the lease `holder` has on `scope` to `now + ttl`. Fails with
    /// [`StoreError::LeaseLost`] when the lease is gone or another holder took it over (this
    /// manager must then stop changing the fleet).
    pub fn renew_lease(
        &self,
        scope: ScopeId,
        holder: &LeaseHolder,
        ttl: Duration,
        now: SystemTime,
    ) -> Result<Lease, StoreError> {
        let now_ms = to_millis(now);
        let expires_at = now_ms.saturating_add(duration_millis(ttl));
        self.write("renew the lease", |tx| {
            let changed = tx
                .prepare_cached(
                    "UPDATE leases SET expires_at = ?3 WHERE scope = ?1 AND holder_id = ?2",
                )?
                .execute(params![scope.0, holder.id, expires_at])?;
            if changed == 0 {
                let now_held = current(tx, scope)?.map(|r| r.holder);
                return Err(self.error(|path| StoreError::LeaseLost {
                    path,
                    holder: now_held,
                }));
            }
            Ok(Lease {
                scope,
                holder: holder.clone(),
                expires_at: from_millis(expires_at),
                took_over_from: None,
            })
        })
    }

    /// Gives the lease up (at a clean shutdown) so the next manager need not wait for it to
    /// expire. Returns whether `holder` had it; releasing a lease one does not hold changes
    /// nothing.
    pub fn release_lease(&self, scope: ScopeId, holder: &LeaseHolder) -> Result<bool, StoreError> {
        self.write("release the lease", |tx| {
            Ok(tx
                .prepare_cached("DELETE FROM leases WHERE scope = ?1 AND holder_id = ?2")?
                .execute(params![scope.0, holder.id])?
                > 0)
        })
    }

    /// The lease on `scope` as stored (possibly expired), for status displays.
    pub fn current_lease(&self, scope: ScopeId) -> Result<Option<Lease>, StoreError> {
        self.read("read the lease", |tx| {
            Ok(current(tx, scope)?.map(|row| Lease {
                scope,
                holder: row.holder,
                expires_at: from_millis(row.expires_at),
                took_over_from: None,
            }))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holder(id: &str) -> LeaseHolder {
        LeaseHolder {
            id: id.to_string(),
            hostname: "h".to_string(),
            pid: 1,
        }
    }

    #[test]
    fn grants() {
        assert_eq!(decide(None, "a", 10), Grant::Take { took_over: None });
        let row = |id: &str, exp| Row {
            holder: holder(id),
            expires_at: exp,
        };
        assert_eq!(
            decide(Some(row("a", 5)), "a", 10),
            Grant::Take { took_over: None }
        );
        assert_eq!(
            decide(Some(row("b", 10)), "a", 10),
            Grant::Take {
                took_over: Some(holder("b"))
            }
        );
        assert_eq!(
            decide(Some(row("b", 15)), "a", 10),
            Grant::Held {
                holder: holder("b"),
                remaining_ms: 5
            }
        );
    }

    #[test]
    fn a_dead_holder_on_this_host_loses_its_lease_at_once() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        let dead = LeaseHolder {
            id: "dead".into(),
            hostname: hostname(),
            pid,
        };
        let far = i64::MAX / 2;
        let row = |h: &LeaseHolder| Row {
            holder: h.clone(),
            expires_at: far,
        };
        assert_eq!(
            decide(Some(row(&dead)), "me", 10),
            Grant::Take {
                took_over: Some(dead.clone())
            }
        );
        // Alive (this process), or on another host: held until it expires.
        let alive = LeaseHolder {
            pid: std::process::id(),
            ..dead.clone()
        };
        assert!(matches!(
            decide(Some(row(&alive)), "me", 10),
            Grant::Held { .. }
        ));
        let elsewhere = LeaseHolder {
            hostname: format!("{}-other", hostname()),
            ..dead
        };
        assert!(matches!(
            decide(Some(row(&elsewhere)), "me", 10),
            Grant::Held { .. }
        ));
    }

    #[test]
    fn holders_are_unique_and_name_their_process() {
        let a = LeaseHolder::this_process();
        let b = LeaseHolder::this_process();
        assert_ne!(a.id, b.id);
        assert_eq!(a.pid, std::process::id());
        assert!(a.to_string().contains(&format!("pid {}", a.pid)));
        assert!(!a.hostname.is_empty());
    }
}
