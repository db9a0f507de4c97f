//! The fleet ledger through the scaler's `Journal` trait, on real SQLite files.

use flotilla_fleet::State;
use flotilla_scaler::{Cause, InstanceRecord, JournalEvent, Persisted, RemovalReason};
use flotilla_store::{Identity, Store, StoreError, StoreOptions};
use std::path::Path;

fn open(path: &Path) -> Store {
    Store::open(path, StoreOptions::default()).unwrap()
}

fn identity() -> Identity {
    Identity::new("https://gitlab.example.com", "17", "docker:test")
}

fn instance(id: &str, state: State, use_count: u32) -> InstanceRecord {
    InstanceRecord {
        id: id.to_string(),
        state,
        cause: Cause::Requested,
        use_count,
        removal: None,
    }
}

#[test]
fn every_event_round_trips_through_load_fleet() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir.path().join("state.db"));
    let scope = store.scope(&identity()).unwrap();
    let journal = store.journal(scope);

    assert_eq!(store.load_fleet(scope).unwrap(), Persisted::default());

    journal.record(&JournalEvent::RequestedInFlight(3)).unwrap();
    journal
        .record(&JournalEvent::Instance(instance("i-a", State::Creating, 0)))
        .unwrap();
    journal
        .record(&JournalEvent::Instance(InstanceRecord {
            cause: Cause::Preexisted,
            ..instance("i-b", State::Running, 4)
        }))
        .unwrap();
    journal.record(&JournalEvent::RequestedInFlight(2)).unwrap();
    // A state change is an upsert, not a second row.
    journal
        .record(&JournalEvent::Instance(instance("i-a", State::Running, 0)))
        .unwrap();
    journal
        .record(&JournalEvent::Acquired {
            key: "job-1".into(),
            instance: "i-a".into(),
            slot: 1,
            use_count: 1,
        })
        .unwrap();
    journal
        .record(&JournalEvent::Acquired {
            key: "job-2".into(),
            instance: "i-b".into(),
            slot: 0,
            use_count: 5,
        })
        .unwrap();

    let fleet = store.load_fleet(scope).unwrap();
    assert_eq!(fleet.requested_in_flight, 2);
    assert_eq!(
        fleet.instances,
        vec![
            instance("i-a", State::Running, 1),
            InstanceRecord {
                cause: Cause::Preexisted,
                ..instance("i-b", State::Running, 5)
            },
        ]
    );
    assert_eq!(
        fleet.acquisitions,
        vec![
            ("job-1".to_string(), "i-a".to_string(), 1),
            ("job-2".to_string(), "i-b".to_string(), 0)
        ]
    );

    // Removal decided, then the instance leaves; the job's release comes afterwards.
    journal
        .record(&JournalEvent::Instance(InstanceRecord {
            removal: Some(RemovalReason::MaxUseCount),
            ..instance("i-b", State::Deleting, 5)
        }))
        .unwrap();
    let fleet = store.load_fleet(scope).unwrap();
    assert_eq!(fleet.instances[1].removal, Some(RemovalReason::MaxUseCount));
    assert_eq!(fleet.instances[1].state, State::Deleting);
    journal
        .record(&JournalEvent::InstanceGone("i-b".into()))
        .unwrap();
    let fleet = store.load_fleet(scope).unwrap();
    assert_eq!(fleet.instances, vec![instance("i-a", State::Running, 1)]);
    // The acquisition outlives its instance's row until it is released.
    assert_eq!(fleet.acquisitions.len(), 2);
    journal
        .record(&JournalEvent::Released {
            key: "job-2".into(),
        })
        .unwrap();
    journal
        .record(&JournalEvent::Released {
            key: "job-1".into(),
        })
        .unwrap();
    // Releasing twice is harmless.
    journal
        .record(&JournalEvent::Released {
            key: "job-1".into(),
        })
        .unwrap();
    let fleet = store.load_fleet(scope).unwrap();
    assert!(fleet.acquisitions.is_empty());
    assert_eq!(fleet.instances, vec![instance("i-a", State::Running, 1)]);
}

#[test]
fn every_removal_reason_and_cause_survives_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir.path().join("state.db"));
    let scope = store.scope(&identity()).unwrap();
    let reasons = [
        RemovalReason::IdleTime,
        RemovalReason::MaxUseCount,
        RemovalReason::Unhealthy,
        RemovalReason::ReadyUpFailed,
        RemovalReason::Timeout,
        RemovalReason::RemovedFromOutside,
        RemovalReason::Shutdown,
        RemovalReason::Reconcile,
    ];
    let causes = [Cause::Requested, Cause::Preexisted, Cause::Restored];
    let states = [
        State::Creating,
        State::Running,
        State::Deleting,
        State::Deleted,
        State::Timeout,
    ];
    let mut expected = Vec::new();
    for (n, reason) in reasons.iter().enumerate() {
        let r = InstanceRecord {
            id: format!("i-{n}"),
            state: states[n % states.len()],
            cause: causes[n % causes.len()],
            use_count: n as u32 * 3,
            removal: Some(*reason),
        };
        store
            .record(scope, &JournalEvent::Instance(r.clone()))
            .unwrap();
        expected.push(r);
    }
    assert_eq!(store.load_fleet(scope).unwrap().instances, expected);
}

#[test]
fn state_survives_close_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let before = {
        let store = open(&path);
        let scope = store.scope(&identity()).unwrap();
        let journal = store.journal(scope);
        journal.record(&JournalEvent::RequestedInFlight(5)).unwrap();
        for n in 0..4 {
            journal
                .record(&JournalEvent::Instance(instance(
                    &format!("i-{n}"),
                    State::Running,
                    n,
                )))
                .unwrap();
        }
        journal
            .record(&JournalEvent::Acquired {
                key: "k".into(),
                instance: "i-2".into(),
                slot: 3,
                use_count: 3,
            })
            .unwrap();
        store.load_fleet(scope).unwrap()
    };
    assert_eq!(before.instances.len(), 4);
    // The same identity (even spelled with a trailing slash) finds the same scope.
    let store = open(&path);
    let scope = store
        .scope(&Identity::new(
            "https://gitlab.example.com/",
            "17",
            "docker:test",
        ))
        .unwrap();
    assert_eq!(store.load_fleet(scope).unwrap(), before);
    assert_eq!(store.scopes().unwrap().len(), 1);
    assert_eq!(
        store.schema_version().unwrap(),
        flotilla_store::SCHEMA_VERSION
    );
}

#[test]
fn scopes_do_not_see_each_other() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir.path().join("state.db"));
    let a = store.scope(&identity()).unwrap();
    // A rotated token does not matter; another runner id or provider is another scope.
    let b = store
        .scope(&Identity::new(
            "https://gitlab.example.com",
            "18",
            "docker:test",
        ))
        .unwrap();
    let c = store
        .scope(&Identity::new(
            "https://gitlab.example.com",
            "17",
            "aws:asg",
        ))
        .unwrap();
    assert_ne!(a, b);
    assert_ne!(a, c);
    assert_eq!(store.scope(&identity()).unwrap(), a);
    store
        .record(
            a,
            &JournalEvent::Instance(instance("i-1", State::Running, 0)),
        )
        .unwrap();
    store
        .record(b, &JournalEvent::RequestedInFlight(7))
        .unwrap();
    store
        .record(
            c,
            &JournalEvent::Acquired {
                key: "k".into(),
                instance: "i-1".into(),
                slot: 0,
                use_count: 1,
            },
        )
        .unwrap();
    let fa = store.load_fleet(a).unwrap();
    assert_eq!(fa.instances.len(), 1);
    assert_eq!(fa.requested_in_flight, 0);
    assert!(fa.acquisitions.is_empty());
    // The acquisition in c did not touch a's instance.
    assert_eq!(fa.instances[0].use_count, 0);
    let fb = store.load_fleet(b).unwrap();
    assert!(fb.instances.is_empty());
    assert_eq!(fb.requested_in_flight, 7);
    assert_eq!(store.load_fleet(c).unwrap().acquisitions.len(), 1);
}

#[test]
fn a_restored_instance_keeps_its_origin() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir.path().join("state.db"));
    let scope = store.scope(&identity()).unwrap();
    let with = |id: &str, cause| {
        JournalEvent::Instance(InstanceRecord {
            cause,
            ..instance(id, State::Running, 0)
        })
    };
    store
        .record(scope, &with("ours", Cause::Requested))
        .unwrap();
    store
        .record(scope, &with("foreign", Cause::Preexisted))
        .unwrap();
    // After a restart the scaler calls both Restored.
    store.record(scope, &with("ours", Cause::Restored)).unwrap();
    store
        .record(scope, &with("foreign", Cause::Restored))
        .unwrap();
    // An instance the store never heard of can only be Restored.
    store
        .record(scope, &with("unknown", Cause::Restored))
        .unwrap();
    let causes: Vec<(String, Cause)> = store
        .load_fleet(scope)
        .unwrap()
        .instances
        .into_iter()
        .map(|i| (i.id, i.cause))
        .collect();
    assert_eq!(
        causes,
        vec![
            ("foreign".to_string(), Cause::Preexisted),
            ("ours".to_string(), Cause::Requested),
            ("unknown".to_string(), Cause::Restored),
        ]
    );
}

#[test]
fn a_slot_handed_out_again_replaces_its_stale_record() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir.path().join("state.db"));
    let scope = store.scope(&identity()).unwrap();
    let acquire = |key: &str| JournalEvent::Acquired {
        key: key.into(),
        instance: "i-1".into(),
        slot: 0,
        use_count: 1,
    };
    store.record(scope, &acquire("old")).unwrap();
    // The release of "old" was never recorded; the scaler hands the slot to "new".
    store.record(scope, &acquire("new")).unwrap();
    assert_eq!(
        store.load_fleet(scope).unwrap().acquisitions,
        vec![("new".to_string(), "i-1".to_string(), 0)]
    );
}

#[test]
fn an_unknown_scope_is_an_error_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let store = open(&path);
    let scope = store.scope(&identity()).unwrap();
    let other = Store::open(dir.path().join("other.db"), StoreOptions::default()).unwrap();
    other.scope(&identity()).unwrap();
    let missing = other.scope(&Identity::new("https://x", "1", "p")).unwrap();
    assert_ne!(missing, scope);
    let err = store.load_fleet(missing).unwrap_err();
    assert!(matches!(err, StoreError::UnknownScope { .. }), "{err}");
    assert!(err.to_string().contains(&path.display().to_string()));
    let journal = store.journal(missing);
    let err = journal
        .record(&JournalEvent::RequestedInFlight(1))
        .unwrap_err();
    assert!(err.0.contains("no scope"), "{err}");
    // A foreign key keeps rows of an unknown scope out.
    let err = store
        .record(
            missing,
            &JournalEvent::Instance(instance("i", State::Running, 0)),
        )
        .unwrap_err();
    assert!(matches!(err, StoreError::Write { .. }), "{err}");
    assert!(store.load_fleet(scope).unwrap().instances.is_empty());
}

#[test]
fn the_last_decision_is_kept_per_scope_and_overwritten() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let store = open(&path);
    let a = store.scope(&identity()).unwrap();
    let b = store
        .scope(&Identity::new(
            "https://gitlab.example.com",
            "18",
            "docker:b",
        ))
        .unwrap();
    assert_eq!(store.last_decision(a).unwrap(), None);
    let t0 = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_800_000_000);
    store.record_decision(a, "scale up by 2", t0).unwrap();
    store
        .record_decision(a, "hold", t0 + std::time::Duration::from_secs(5))
        .unwrap();
    store.record_decision(b, "scale down by 1", t0).unwrap();
    drop(store);
    let store = open(&path);
    assert_eq!(
        store.last_decision(a).unwrap(),
        Some((t0 + std::time::Duration::from_secs(5), "hold".to_string()))
    );
    assert_eq!(
        store.last_decision(b).unwrap(),
        Some((t0, "scale down by 1".to_string()))
    );
}

#[test]
fn a_version_1_file_is_migrated_with_its_contents_kept() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let store = open(&path);
    let scope = store.scope(&identity()).unwrap();
    store
        .record(
            scope,
            &JournalEvent::Instance(instance("kept", State::Running, 2)),
        )
        .unwrap();
    drop(store);
    // Back to what version 1 wrote: no decisions table.
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch("DROP TABLE decisions; PRAGMA user_version = 1;")
        .unwrap();
    drop(conn);

    let store = open(&path);
    assert_eq!(store.schema_version().unwrap(), 2);
    assert_eq!(store.load_fleet(scope).unwrap().instances.len(), 1);
    store
        .record_decision(scope, "hold", std::time::SystemTime::now())
        .unwrap();
}

/// A batch (the scaler's driver commits one per tick) is one transaction: all of it or
/// nothing.
#[test]
fn a_batch_is_recorded_all_or_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir.path().join("state.db"));
    let scope = store.scope(&identity()).unwrap();
    let journal = store.journal(scope);
    journal
        .record_all(&[
            JournalEvent::Instance(instance("a", State::Running, 0)),
            JournalEvent::Instance(instance("b", State::Creating, 0)),
            JournalEvent::RequestedInFlight(2),
        ])
        .unwrap();
    let fleet = store.load_fleet(scope).unwrap();
    assert_eq!(fleet.instances.len(), 2);
    assert_eq!(fleet.requested_in_flight, 2);
    // The second event fails (a slot index out of range): the first is not kept either.
    let err = journal
        .record_all(&[
            JournalEvent::InstanceGone("a".into()),
            JournalEvent::Acquired {
                key: "k".into(),
                instance: "b".into(),
                slot: usize::MAX,
                use_count: 1,
            },
        ])
        .unwrap_err();
    assert!(err.0.contains("batch"), "{err}");
    let fleet = store.load_fleet(scope).unwrap();
    assert_eq!(
        fleet.instances.len(),
        2,
        "nothing of the failed batch was kept"
    );
    assert!(fleet.acquisitions.is_empty());
}

/// An instance's use count never goes down in the store: a listing's record committed after
/// a newer acquisition (the scaler commits outside its lock) does not undo it.
#[test]
fn a_use_count_never_goes_down() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir.path().join("state.db"));
    let scope = store.scope(&identity()).unwrap();
    let journal = store.journal(scope);
    journal
        .record(&JournalEvent::Instance(instance("a", State::Running, 0)))
        .unwrap();
    journal
        .record(&JournalEvent::Acquired {
            key: "k".into(),
            instance: "a".into(),
            slot: 0,
            use_count: 3,
        })
        .unwrap();
    journal
        .record(&JournalEvent::Instance(instance("a", State::Running, 1)))
        .unwrap();
    assert_eq!(store.load_fleet(scope).unwrap().instances[0].use_count, 3);
}
