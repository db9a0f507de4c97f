//! Running the VMM's commands on the instance through its connector.

use crate::VmmError;
use flotilla_connect::{Connector, ConnectorExt, ExecRequest};

/// Runs `line` (POSIX `sh` syntax) on the instance and returns its stdout; a non-zero exit is
/// [`VmmError::Command`] with its stderr.
pub async fn run(host: &dyn Connector, what: &str, line: &str) -> Result<String, VmmError> {
    let out = host
        .output(&format!("sh -c {}", flotilla_shell::quote(line)))
        .await
        .map_err(|e| VmmError::connect(what, e))?;
    if !out.status.success() {
        return Err(VmmError::Command {
            what: what.to_string(),
            status: out.status.clone(),
            stderr: out.stderr_str().trim().to_string(),
        });
    }
    Ok(out.stdout_str())
}

/// Reads a file of the instance (small files: module lists, kernel modules).
pub async fn read(host: &dyn Connector, path: &str) -> Result<Vec<u8>, VmmError> {
    let out = host
        .output(&format!("cat {}", flotilla_shell::quote(path)))
        .await
        .map_err(|e| VmmError::connect(format!("reading {path}"), e))?;
    if !out.status.success() {
        return Err(VmmError::Command {
            what: format!("reading {path}"),
            status: out.status.clone(),
            stderr: out.stderr_str().trim().to_string(),
        });
    }
    Ok(out.stdout)
}

/// Writes `bytes` to `path` on the instance atomically (a temporary file renamed), making
/// its directory.
pub async fn write(host: &dyn Connector, path: &str, bytes: Vec<u8>) -> Result<(), VmmError> {
    let q = flotilla_shell::quote(path);
    // A name of this write's own: two jobs of one process may write the same file at once.
    static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = flotilla_shell::quote(&format!("{path}.tmp{}-{n}", std::process::id()));
    let line = format!(
        "sh -c {}",
        flotilla_shell::quote(&format!(
            "mkdir -p \"$(dirname {q})\" && cat > {tmp} && mv -f {tmp} {q}"
        ))
    );
    let mut err = Vec::new();
    let status = host
        .exec(ExecRequest::new(line).stdin_bytes(bytes).stderr(&mut err))
        .await
        .map_err(|e| VmmError::connect(format!("writing {path}"), e))?;
    if !status.success() {
        return Err(VmmError::Command {
            what: format!("writing {path}"),
            status,
            stderr: String::from_utf8_lossy(&err).trim().to_string(),
        });
    }
    Ok(())
}

/// Runs `line` (POSIX `sh` syntax) on the instance with its stdin read from `stdin` (none:
/// empty) and its stdout written to `stdout`, for streams too large to hold in memory (disk
/// images, archives); a non-zero exit is [`VmmError::Command`] with its stderr.
pub async fn stream(
    host: &dyn Connector,
    what: &str,
    line: &str,
    stdin: Option<&mut (dyn tokio::io::AsyncRead + Send + Unpin)>,
    stdout: &mut (dyn tokio::io::AsyncWrite + Send + Unpin),
) -> Result<(), VmmError> {
    let mut err = Vec::new();
    let mut req =
        ExecRequest::new(format!("sh -c {}", flotilla_shell::quote(line))).stderr(&mut err);
    if let Some(stdin) = stdin {
        req = req.stdin_reader(stdin);
    }
    req.stdout = Some(stdout);
    let status = host
        .exec(req)
        .await
        .map_err(|e| VmmError::connect(what, e))?;
    if !status.success() {
        return Err(VmmError::Command {
            what: what.to_string(),
            status,
            stderr: String::from_utf8_lossy(&err).trim().to_string(),
        });
    }
    Ok(())
}
