//! Lenient decoding helpers: GitLab sends `null` for absent arrays, objects and strings.

use serde::{Deserialize, Deserializer};

/// Decodes a value, turning an explicit JSON `null` into the type's default.
pub(crate) fn nullable<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}
