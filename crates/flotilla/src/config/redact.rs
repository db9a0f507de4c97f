//! Serialising secrets as `[REDACTED]`, so the normalized configuration can be printed.
//!
//! `flotilla_fleet::Secret` serialises its value (the store and plugin transport need it), so
//! every secret field of the configuration names one of these functions in
//! `serialize_with`.

use flotilla_fleet::Secret;
use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Serialize, Serializer};

/// What a secret is printed as.
pub use flotilla_fleet::REDACTED;

/// Serialises an optional secret as `[REDACTED]` (or nothing when unset).
pub(crate) fn secret_opt<S: Serializer>(
    value: &Option<Secret<String>>,
    s: S,
) -> Result<S::Ok, S::Error> {
    match value {
        Some(_) => s.serialize_str(REDACTED),
        None => s.serialize_none(),
    }
}

/// Serialises an optional URL without its `user:password@` or query (a runner `url` may
/// carry credentials); a URL with neither is printed as written.
pub(crate) fn url_opt<S: Serializer>(value: &Option<String>, s: S) -> Result<S::Ok, S::Error> {
    match value {
        Some(url) => s.serialize_str(&flotilla_fleet::redact_url(url)),
        None => s.serialize_none(),
    }
}

/// Whether a key of an opaque table (`plugin_config`, `nesting_config`) looks like it holds a
/// credential (Hetzner's plugin takes `token`, others take `password`, `secret_key`, ...).
fn key_looks_secret(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    if key.ends_with("_file") || key.ends_with("_path") {
        return false;
    }
    [
        "token",
        "password",
        "passwd",
        "secret",
        "private_key",
        "access_key",
        "api_key",
        "credential",
    ]
    .iter()
    .any(|word| key.contains(word))
}

/// Serialises an opaque JSON table with the values of credential-like keys redacted, at any
/// depth.
pub(crate) fn opaque_table<S: Serializer>(
    value: &serde_json::Value,
    s: S,
) -> Result<S::Ok, S::Error> {
    struct Redacted<'a>(&'a serde_json::Value);
    impl Serialize for Redacted<'_> {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            match self.0 {
                serde_json::Value::Object(map) => {
                    let mut m = s.serialize_map(Some(map.len()))?;
                    for (k, v) in map {
                        if key_looks_secret(k) && !v.is_object() {
                            m.serialize_entry(k, REDACTED)?;
                        } else {
                            m.serialize_entry(k, &Redacted(v))?;
                        }
                    }
                    m.end()
                }
                serde_json::Value::Array(items) => {
                    let mut seq = s.serialize_seq(Some(items.len()))?;
                    for item in items {
                        seq.serialize_element(&Redacted(item))?;
                    }
                    seq.end()
                }
                other => other.serialize(s),
            }
        }
    }
    Redacted(value).serialize(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credential_like_keys() {
        for k in [
            "token",
            "api_token",
            "Password",
            "secret_key",
            "access_key_id",
            "credentials",
        ] {
            assert!(key_looks_secret(k), "{k}");
        }
        for k in [
            "name",
            "region",
            "credentials_file",
            "key_path",
            "zone",
            "profile",
        ] {
            assert!(!key_looks_secret(k), "{k}");
        }
    }

    #[test]
    fn opaque_tables_are_redacted_at_depth() {
        let v = serde_json::json!({
            "name": "asg",
            "token": "hcloud-abc",
            "nested": {"password": "p", "list": [{"secret": "s", "ok": 1}]},
        });
        let out = serde_json::to_value(RedactedForTest(&v)).unwrap();
        assert_eq!(
            out,
            serde_json::json!({
                "name": "asg",
                "token": REDACTED,
                "nested": {"password": REDACTED, "list": [{"secret": REDACTED, "ok": 1}]},
            })
        );
    }

    struct RedactedForTest<'a>(&'a serde_json::Value);
    impl Serialize for RedactedForTest<'_> {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            opaque_table(self.0, s)
        }
    }
}
