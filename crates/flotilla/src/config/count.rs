//! Counts (`limit`, `max_instances`, `capacity_per_instance`, ...): GitLab stores them as
//! signed integers, flotilla as `u32`, and a negative one is rejected with a message that says
//! so instead of serde's "expected u32".

use serde::Deserializer;
use serde::de::{self, Visitor};
use std::fmt;

/// Deserialises a non-negative count into a `u32`.
pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    d.deserialize_i64(CountVisitor)
}

struct CountVisitor;

impl Visitor<'_> for CountVisitor {
    type Value = u32;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a non-negative integer")
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<u32, E> {
        if v < 0 {
            return Err(E::custom(format!("must not be negative, got {v}")));
        }
        self.visit_u64(v.unsigned_abs())
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<u32, E> {
        u32::try_from(v).map_err(|_| E::custom(format!("{v} is too large (at most {})", u32::MAX)))
    }
}

#[cfg(test)]
mod tests {
    #[derive(serde::Deserialize, Debug)]
    struct T {
        #[serde(deserialize_with = "super::deserialize")]
        n: u32,
    }

    #[test]
    fn accepts_non_negative_and_explains_negative() {
        assert_eq!(toml::from_str::<T>("n = 7").unwrap().n, 7);
        let e = toml::from_str::<T>("n = -2").unwrap_err();
        assert_eq!(e.message(), "must not be negative, got -2");
        let e = toml::from_str::<T>("n = 5000000000").unwrap_err();
        assert!(e.message().contains("too large"), "{}", e.message());
        let e = toml::from_str::<T>("n = \"3\"").unwrap_err();
        assert!(
            e.message().contains("a non-negative integer"),
            "{}",
            e.message()
        );
    }
}
