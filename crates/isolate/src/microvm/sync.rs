//! Copying a job's directories between the instance and its VM: the helper stages (sources,
//! caches, artifacts) work on the instance, the build stages in the VM, at the same paths.
//!
//! A copy is a `tar` stream from one connector's command into the other's. It replaces the
//! destination's directories with the source's, so files deleted on one side are gone on
//! the other too; or, into a VM restored from a snapshot, merges.

use crate::exec::env_error;
use flotilla_connect::shell::quote;
use flotilla_connect::{Connector, ExecRequest, Stdin};
use flotilla_job::EnvError;
use tokio::io::AsyncWriteExt;
use tokio_util::sync::CancellationToken;

/// `paths` relative to `/`, quoted for `sh`.
fn relative(paths: &[&str]) -> Result<String, EnvError> {
    let mut out = Vec::new();
    for p in paths {
        let rel = p.trim_start_matches('/').trim_end_matches('/');
        if !p.starts_with('/') || rel.is_empty() || rel.split('/').any(|c| c == "..") {
            return Err(EnvError::System(format!(
                "cannot copy {p:?} to or from the VM: not an absolute path below /"
            )));
        }
        out.push(quote(rel));
    }
    Ok(out.join(" "))
}

/// The command that writes `paths` (made if missing) as a tar stream on stdout.
pub fn pack_command(paths: &[&str]) -> Result<String, EnvError> {
    let rel = relative(paths)?;
    Ok(format!("cd / && mkdir -p {rel} && exec tar -cf - {rel}"))
}

/// How a copy treats what is already at the destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The destination's directories are replaced.
    Replace,
    /// The source's files are written over the destination's, which keeps the others (a
    /// VM restored from a snapshot keeps what the snapshotted job made).
    Merge,
}

/// The command that writes the tar stream on stdin to `paths`, replacing or merging.
pub fn unpack_command(paths: &[&str], mode: Mode) -> Result<String, EnvError> {
    let rel = relative(paths)?;
    Ok(match mode {
        Mode::Replace => format!("cd / && rm -rf {rel} && exec tar -xf -"),
        Mode::Merge => "cd / && exec tar -xf -".to_string(),
    })
}

/// Copies `paths` from `from` to `to`; `what` names the direction for errors.
pub async fn copy(
    from: &dyn Connector,
    to: &dyn Connector,
    paths: &[&str],
    mode: Mode,
    what: &str,
    cancel: CancellationToken,
) -> Result<(), EnvError> {
    let pack = pack_command(paths)?;
    let unpack = unpack_command(paths, mode)?;
    let (w, mut r) = tokio::io::duplex(256 * 1024);
    let mut pack_err = Vec::new();
    let mut unpack_err = Vec::new();
    let packing = async {
        let mut w = w;
        let status = from
            .exec(ExecRequest {
                command: pack,
                env: Vec::new(),
                stdin: Stdin::Null,
                stdout: Some(&mut w),
                stderr: Some(&mut pack_err),
                cancel: cancel.clone(),
            })
            .await;
        // End of the stream for the unpacking side.
        let _ = w.shutdown().await;
        status
    };
    let unpacking = to.exec(ExecRequest {
        command: unpack,
        env: Vec::new(),
        stdin: Stdin::Reader(&mut r),
        stdout: None,
        stderr: Some(&mut unpack_err),
        cancel: cancel.clone(),
    });
    let (packed, unpacked) = tokio::join!(packing, unpacking);
    let packed = packed.map_err(|e| env_error(what, e))?;
    let unpacked = unpacked.map_err(|e| env_error(what, e))?;
    if !packed.success() || !unpacked.success() {
        return Err(EnvError::System(format!(
            "{what}: tar ended with {packed} ({}) and {unpacked} ({})",
            String::from_utf8_lossy(&pack_err).trim(),
            String::from_utf8_lossy(&unpack_err).trim()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_absolute_paths_below_the_root_are_copied() {
        assert_eq!(
            pack_command(&["/b/0/p", "/b/0/p.tmp"]).unwrap(),
            "cd / && mkdir -p b/0/p b/0/p.tmp && exec tar -cf - b/0/p b/0/p.tmp"
        );
        for bad in ["relative", "/", "/a/../etc"] {
            assert!(pack_command(&[bad]).is_err(), "{bad}");
        }
    }
}
