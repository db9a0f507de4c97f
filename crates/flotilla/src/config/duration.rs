//! Durations in the configuration: Go's `time.Duration` syntax (`"20m0s"`, `"1h30m"`,
//! `"300ms"`, parsed by [`flotilla_job::duration`]), and plain integers of seconds for the few
//! keys where GitLab uses seconds (`check_interval`, `shutdown_timeout`).

pub use flotilla_job::duration::{DurationError, format_go_duration, parse_go_duration};

/// Serde adapter for `Duration` fields written in Go syntax. A bare integer is accepted only
/// when it is `0`: GitLab Runner would read any other integer as nanoseconds, which is never
/// what the author meant, so it is rejected with a hint.
pub(crate) mod go {
    use super::{format_go_duration, parse_go_duration};
    use serde::de::{self, Visitor};
    use serde::{Deserializer, Serializer};
    use std::fmt;
    use std::time::Duration;

    pub(crate) fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format_go_duration(*d))
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        d.deserialize_any(GoDurationVisitor)
    }

    pub(super) struct GoDurationVisitor;

    impl Visitor<'_> for GoDurationVisitor {
        type Value = Duration;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a duration string such as \"20m0s\", \"1h30m\" or \"300ms\"")
        }

        fn visit_str<E: de::Error>(self, v: &str) -> Result<Duration, E> {
            parse_go_duration(v).map_err(E::custom)
        }

        fn visit_i64<E: de::Error>(self, v: i64) -> Result<Duration, E> {
            if v == 0 {
                Ok(Duration::ZERO)
            } else {
                Err(E::custom(format!(
                    "bare integer {v} for a duration: GitLab Runner reads it as nanoseconds; \
                     write a duration string such as \"{v}s\""
                )))
            }
        }

        fn visit_u64<E: de::Error>(self, v: u64) -> Result<Duration, E> {
            i64::try_from(v)
                .map_err(|_| E::custom(format!("duration {v} is too large")))
                .and_then(|v| self.visit_i64(v))
        }
    }
}

/// Serde adapter for `Option<Duration>` fields written in Go syntax.
pub(crate) mod go_opt {
    use serde::{Deserializer, Serializer};
    use std::time::Duration;

    pub(crate) fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => super::go::serialize(d, s),
            None => s.serialize_none(),
        }
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Duration>, D::Error> {
        super::go::deserialize(d).map(Some)
    }
}

/// Serde adapter for GitLab's integer-seconds durations (`check_interval`, `shutdown_timeout`).
/// Integers are seconds (negative ones are rejected); a Go duration string is accepted too.
/// Whole seconds are written back as integers so GitLab Runner can read the output.
pub(crate) mod seconds {
    use super::go::GoDurationVisitor;
    use serde::de::{self, Visitor};
    use serde::{Deserializer, Serializer};
    use std::fmt;
    use std::time::Duration;

    pub(crate) fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        if d.subsec_nanos() == 0
            && let Ok(secs) = i64::try_from(d.as_secs())
        {
            return s.serialize_i64(secs);
        }
        super::go::serialize(d, s)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        d.deserialize_any(SecondsVisitor)
    }

    struct SecondsVisitor;

    impl Visitor<'_> for SecondsVisitor {
        type Value = Duration;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a number of seconds or a duration string such as \"3s\"")
        }

        fn visit_i64<E: de::Error>(self, v: i64) -> Result<Duration, E> {
            u64::try_from(v)
                .map(Duration::from_secs)
                .map_err(|_| E::custom(format!("negative number of seconds {v}")))
        }

        fn visit_u64<E: de::Error>(self, v: u64) -> Result<Duration, E> {
            Ok(Duration::from_secs(v))
        }

        fn visit_str<E: de::Error>(self, v: &str) -> Result<Duration, E> {
            GoDurationVisitor.visit_str(v)
        }
    }
}
