//! Atomic file placement: copy into a temporary file in the target directory, sync, rename.

use super::StoreError;
use std::path::Path;

/// Copies `src` to `dest` so that readers see either the old file or the complete new one.
pub(crate) async fn place_atomically(src: &Path, dest: &Path) -> Result<(), StoreError> {
    let src = src.to_path_buf();
    let dest = dest.to_path_buf();
    tokio::task::spawn_blocking(move || -> Result<(), StoreError> {
        let dir = dest.parent().ok_or_else(|| {
            StoreError::Invalid(format!("{} has no parent directory", dest.display()))
        })?;
        std::fs::create_dir_all(dir)
            .map_err(StoreError::io(format!("creating {}", dir.display())))?;
        let mut tmp = tempfile::Builder::new()
            .prefix(".incoming-")
            .tempfile_in(dir)
            .map_err(StoreError::io(format!(
                "creating a temporary file in {}",
                dir.display()
            )))?;
        let mut from = std::fs::File::open(&src)
            .map_err(StoreError::io(format!("opening {}", src.display())))?;
        std::io::copy(&mut from, tmp.as_file_mut())
            .map_err(StoreError::io(format!("copying {}", src.display())))?;
        tmp.as_file()
            .sync_all()
            .map_err(StoreError::io(format!("syncing {}", dest.display())))?;
        tmp.persist(&dest).map_err(|e| StoreError::Io {
            context: format!("renaming into {}", dest.display()),
            source: e.error,
        })?;
        Ok(())
    })
    .await
    .map_err(|e| StoreError::Io {
        context: "storing an archive".into(),
        source: std::io::Error::other(e.to_string()),
    })?
}

/// Copies `src` to `dest` if `src` exists; false when it does not.
pub(crate) async fn copy_if_exists(src: &Path, dest: &Path) -> Result<bool, StoreError> {
    match tokio::fs::copy(src, dest).await {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            // Either the archive or the destination directory is missing; tell them apart.
            if tokio::fs::try_exists(src).await.unwrap_or(false) {
                Err(StoreError::Io {
                    context: format!("copying {} to {}", src.display(), dest.display()),
                    source: e,
                })
            } else {
                Ok(false)
            }
        }
        Err(e) => Err(StoreError::Io {
            context: format!("copying {} to {}", src.display(), dest.display()),
            source: e,
        }),
    }
}
