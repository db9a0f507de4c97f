//! Credentials flotilla minted, kept in the store.

use flotilla_store::{Identity, Store, StoreOptions};

#[test]
fn credentials_round_trip_per_scope_and_never_print() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let key = b"-----BEGIN OPENSSH PRIVATE KEY-----\nAAAA\n-----END OPENSSH PRIVATE KEY-----\n";
    {
        let store = Store::open(&path, StoreOptions::default()).unwrap();
        let a = store
            .scope(&Identity::new("https://gitlab.example.com", "1", "docker"))
            .unwrap();
        let b = store
            .scope(&Identity::new("https://gitlab.example.com", "2", "docker"))
            .unwrap();
        store.put_credential(a, "ssh-key", key).unwrap();
        store.put_credential(b, "ssh-key", b"other").unwrap();
        assert!(store.get_credential(a, "missing").unwrap().is_none());
        // Replacing keeps one value.
        store.put_credential(b, "ssh-key", b"rotated").unwrap();
        assert_eq!(
            store
                .get_credential(b, "ssh-key")
                .unwrap()
                .unwrap()
                .expose(),
            b"rotated"
        );
    }
    let store = Store::open(&path, StoreOptions::default()).unwrap();
    let a = store
        .scope(&Identity::new("https://gitlab.example.com", "1", "docker"))
        .unwrap();
    let got = store.get_credential(a, "ssh-key").unwrap().unwrap();
    assert_eq!(got.expose().as_slice(), key);
    assert!(!format!("{got:?}").contains("OPENSSH"));
    assert!(store.delete_credential(a, "ssh-key").unwrap());
    assert!(!store.delete_credential(a, "ssh-key").unwrap());
    assert!(store.get_credential(a, "ssh-key").unwrap().is_none());
}
