//! The file naming the hosts lent to the fleet, so that a restarted flotilla finds them lent.
//!
//! It is the provider's own state (a cloud keeps an instance group's size the same way), not
//! a record of the fleet: losing it loses nothing but the lending, and the fleet lends again.

use serde::{Deserialize, Serialize};
use std::path::Path;

#[derive(Debug, Default, Serialize, Deserialize)]
struct LentFile {
    lent: Vec<String>,
}

/// The ids kept in `path`; none when the file does not exist.
pub(crate) fn load(path: &Path) -> Result<Vec<String>, String> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice::<LentFile>(&bytes)
            .map(|f| f.lent)
            .map_err(|e| format!("{}: {e}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

/// Writes `ids` to `path` atomically (a temporary file renamed over it).
pub(crate) fn save(path: &Path, ids: &[String]) -> Result<(), String> {
    let err = |e: std::io::Error| format!("{}: {e}", path.display());
    if let Some(dir) = path.parent()
        && !dir.as_os_str().is_empty()
    {
        std::fs::create_dir_all(dir).map_err(err)?;
    }
    let body = serde_json::to_vec(&LentFile { lent: ids.to_vec() }).map_err(|e| e.to_string())?;
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, body).map_err(err)?;
    std::fs::rename(&tmp, path).map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_absent_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/pool.json");
        assert_eq!(load(&path).unwrap(), Vec::<String>::new());
        save(&path, &["a".into(), "b:22".into()]).unwrap();
        assert_eq!(load(&path).unwrap(), ["a", "b:22"]);
        save(&path, &[]).unwrap();
        assert!(load(&path).unwrap().is_empty());
        std::fs::write(&path, "{").unwrap();
        assert!(load(&path).unwrap_err().contains("pool.json"));
    }
}
