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
use flotilla_job::archive::{StreamRules, filter_tar};
use tokio::io::AsyncWriteExt;
use tokio_util::io::SyncIoBridge;
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

/// The command that writes the tar stream on stdin to `paths`, replacing or merging. Paths in
/// `kept` (below one of `paths`) survive a replacement: the stream brings nothing there.
pub fn unpack_command(paths: &[&str], mode: Mode, kept: &[&str]) -> Result<String, EnvError> {
    let rel = relative(paths)?;
    Ok(match mode {
        Mode::Replace if kept.is_empty() => format!("cd / && rm -rf {rel} && exec tar -xf -"),
        Mode::Replace => {
            // Everything of each path goes but the kept ones.
            let keep = relative(kept)?;
            format!(
                "cd / && for d in {rel}; do if [ -d \"$d\" ] && [ ! -L \"$d\" ]; then \
                 for e in \"$d\"/* \"$d\"/.[!.]* \"$d\"/..?*; do \
                 [ -e \"$e\" ] || [ -L \"$e\" ] || continue; keep=; \
                 for k in {keep}; do [ \"$e\" = \"$k\" ] && keep=1; done; \
                 [ -n \"$keep\" ] || rm -rf \"$e\"; done; else rm -rf \"$d\"; fi; done && exec tar -xf -"
            )
        }
        Mode::Merge => "cd / && exec tar -xf -".to_string(),
    })
}

/// What a copy out of the VM may write on the instance: the job's directories, never the
/// project's `.git` (the instance's own git works there, and a hook or config the job wrote
/// would run on the instance), by [`flotilla_job::archive::filter_tar`].
pub fn rules_out_of_vm(paths: &[&str], project_dir: &str) -> StreamRules {
    let rel = |p: &str| {
        p.trim_start_matches('/')
            .trim_end_matches('/')
            .as_bytes()
            .to_vec()
    };
    StreamRules {
        roots: paths.iter().map(|p| rel(p)).collect(),
        kept: vec![rel(&format!("{}/.git", project_dir.trim_end_matches('/')))],
    }
}

/// Copies `paths` from `from` to `to`; `what` names the direction for errors. With `check`,
/// the stream passes through [`filter_tar`] on the way, and the paths it keeps are kept at
/// the destination.
pub async fn copy(
    from: &dyn Connector,
    to: &dyn Connector,
    paths: &[&str],
    mode: Mode,
    check: Option<StreamRules>,
    what: &str,
    cancel: CancellationToken,
) -> Result<(), EnvError> {
    let pack = pack_command(paths)?;
    let kept: Vec<String> = check
        .iter()
        .flat_map(|c| &c.kept)
        .map(|k| format!("/{}", String::from_utf8_lossy(k)))
        .collect();
    let kept: Vec<&str> = kept.iter().map(String::as_str).collect();
    let unpack = unpack_command(paths, mode, &kept)?;
    let (w, r_packed) = tokio::io::duplex(256 * 1024);
    let (filtered_w, mut r) = tokio::io::duplex(256 * 1024);
    let filtering = async {
        match check {
            Some(rules) => {
                let input = SyncIoBridge::new(r_packed);
                let output = SyncIoBridge::new(filtered_w);
                tokio::task::spawn_blocking(move || filter_tar(input, output, &rules))
                    .await
                    .map_err(|e| EnvError::System(format!("{what}: {e}")))?
                    .map_err(|e| EnvError::System(format!("{what}: {e}")))
            }
            None => {
                let (mut r_packed, mut filtered_w) = (r_packed, filtered_w);
                tokio::io::copy(&mut r_packed, &mut filtered_w)
                    .await
                    .map_err(|e| EnvError::System(format!("{what}: {e}")))?;
                filtered_w
                    .shutdown()
                    .await
                    .map_err(|e| EnvError::System(format!("{what}: {e}")))
            }
        }
    };
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
    let (packed, filtered, unpacked) = tokio::join!(packing, filtering, unpacking);
    // A refused stream is the reason, whatever the two tars made of its end.
    filtered?;
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

    #[test]
    fn a_replacement_keeps_the_kept_paths_and_removes_the_rest() {
        let root = tempfile::tempdir().unwrap();
        let p = root.path().join("b/0/p");
        std::fs::create_dir_all(p.join(".git/hooks")).unwrap();
        std::fs::write(p.join(".git/config"), "ours").unwrap();
        std::fs::write(p.join("old.txt"), "x").unwrap();
        std::fs::write(p.join(".hidden"), "x").unwrap();
        std::fs::create_dir_all(p.join("sub")).unwrap();
        let base = root.path().to_str().unwrap();
        let paths = [format!("{base}/b/0/p")];
        let kept = [format!("{base}/b/0/p/.git")];
        let command = unpack_command(&[paths[0].as_str()], Mode::Replace, &[kept[0].as_str()])
            .unwrap()
            .replace("exec tar -xf -", "true");
        let status = std::process::Command::new("sh")
            .args(["-c", &command])
            .status()
            .unwrap();
        assert!(status.success(), "{command}");
        let left: Vec<_> = std::fs::read_dir(&p)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(left, [".git"], "{command}");
        assert_eq!(
            std::fs::read_to_string(p.join(".git/config")).unwrap(),
            "ours"
        );
    }
}
