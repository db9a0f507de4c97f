//! Two managers on one instance group: the second refuses to start until the first's lease
//! expires.

use flotilla_store::{Identity, LeaseHolder, Store, StoreError, StoreOptions};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

fn identity() -> Identity {
    Identity::new("https://gitlab.example.com", "17", "aws:asg-1")
}

#[test]
fn a_second_manager_is_refused_while_the_first_holds_the_lease() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    // Two managers: two connections to one file, as two processes would have.
    let first = Store::open(&path, StoreOptions::default()).unwrap();
    let second = Store::open(&path, StoreOptions::default()).unwrap();
    let scope = first.scope(&identity()).unwrap();
    // After a token rotation the second manager computes the same scope.
    assert_eq!(second.scope(&identity()).unwrap(), scope);

    let a = LeaseHolder {
        id: "aaaa".into(),
        hostname: "manager-a".into(),
        pid: 4242,
    };
    let b = LeaseHolder::this_process();
    let ttl = Duration::from_secs(30);
    let t0 = UNIX_EPOCH + Duration::from_secs(1_800_000_000);

    let lease = first.acquire_lease(scope, &a, ttl, t0).unwrap();
    assert_eq!(lease.expires_at, t0 + ttl);
    assert_eq!(lease.took_over_from, None);

    let err = second
        .acquire_lease(scope, &b, ttl, t0 + Duration::from_secs(10))
        .unwrap_err();
    match &err {
        StoreError::LeaseHeld {
            holder, expires_in, ..
        } => {
            assert_eq!(holder, &a);
            assert_eq!(*expires_in, Duration::from_secs(20));
        }
        other => panic!("expected LeaseHeld, got {other}"),
    }
    let message = err.to_string();
    assert!(message.contains("pid 4242 on manager-a"), "{message}");
    assert!(message.contains(&path.display().to_string()), "{message}");

    // The first renews; the second is still refused after the original expiry.
    first
        .renew_lease(scope, &a, ttl, t0 + Duration::from_secs(25))
        .unwrap();
    assert!(matches!(
        second.acquire_lease(scope, &b, ttl, t0 + Duration::from_secs(40)),
        Err(StoreError::LeaseHeld { .. })
    ));

    // The first dies without releasing; once its lease lapses the second takes over.
    let t_late = t0 + Duration::from_secs(25) + ttl;
    let taken = second.acquire_lease(scope, &b, ttl, t_late).unwrap();
    assert_eq!(taken.took_over_from.as_ref(), Some(&a));
    assert_eq!(taken.holder, b);
    assert_eq!(first.current_lease(scope).unwrap().unwrap().holder, b);

    // The first comes back: its renewal fails and names the new holder.
    let err = first
        .renew_lease(scope, &a, ttl, t_late + Duration::from_secs(1))
        .unwrap_err();
    match &err {
        StoreError::LeaseLost { holder, .. } => assert_eq!(holder.as_ref(), Some(&b)),
        other => panic!("expected LeaseLost, got {other}"),
    }
    assert!(
        first
            .acquire_lease(scope, &a, ttl, t_late + Duration::from_secs(1))
            .is_err()
    );
    // Releasing a lease one does not hold changes nothing.
    assert!(!first.release_lease(scope, &a).unwrap());
    assert_eq!(second.current_lease(scope).unwrap().unwrap().holder, b);

    // A clean shutdown releases; the next manager need not wait.
    assert!(second.release_lease(scope, &b).unwrap());
    assert_eq!(second.current_lease(scope).unwrap(), None);
    let back = first
        .acquire_lease(scope, &a, ttl, t_late + Duration::from_secs(2))
        .unwrap();
    assert_eq!(back.took_over_from, None);
    let err = second
        .renew_lease(scope, &b, ttl, t_late + Duration::from_secs(2))
        .unwrap_err();
    assert!(matches!(err, StoreError::LeaseLost { .. }), "{err}");
}

#[test]
fn leases_are_per_scope_and_survive_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let a = LeaseHolder::this_process();
    let b = LeaseHolder::this_process();
    // Whole milliseconds: the store keeps times to the millisecond.
    let since_epoch = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    let now = UNIX_EPOCH + Duration::from_millis(since_epoch.as_millis() as u64);
    let ttl = Duration::from_secs(60);
    {
        let store = Store::open(&path, StoreOptions::default()).unwrap();
        let s1 = store.scope(&identity()).unwrap();
        let s2 = store
            .scope(&Identity::new(
                "https://gitlab.example.com",
                "18",
                "aws:asg-2",
            ))
            .unwrap();
        store.acquire_lease(s1, &a, ttl, now).unwrap();
        // Another instance group is free.
        store.acquire_lease(s2, &b, ttl, now).unwrap();
        // Taking one's own lease again extends it.
        let again = store
            .acquire_lease(s1, &a, ttl, now + Duration::from_secs(5))
            .unwrap();
        assert_eq!(again.expires_at, now + Duration::from_secs(65));
    }
    // A restart of the process does not clear the lease (a new process is a new holder).
    let store = Store::open(&path, StoreOptions::default()).unwrap();
    let s1 = store.scope(&identity()).unwrap();
    let err = store
        .acquire_lease(
            s1,
            &LeaseHolder::this_process(),
            ttl,
            now + Duration::from_secs(6),
        )
        .unwrap_err();
    assert!(
        matches!(err, StoreError::LeaseHeld { ref holder, .. } if holder == &a),
        "{err}"
    );
}
