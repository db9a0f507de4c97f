//! Disk layers on the instance with `qemu-img`: copy-on-write overlays over a base image or
//! a snapshot's frozen layer.

use crate::{VmmError, host};
use flotilla_connect::Connector;
use flotilla_shell::quote;

/// Makes `path` a qcow2 overlay over `backing` (of format `backing_format`): reads fall
/// through, writes stay in `path`. Without `size`, `qemu-img` reads the backing's.
pub async fn overlay(
    host: &dyn Connector,
    path: &str,
    backing: &str,
    backing_format: &str,
    size: Option<u64>,
) -> Result<(), VmmError> {
    let mut line = format!(
        "qemu-img create -q -f qcow2 -F {} -b {} ",
        quote(backing_format),
        quote(backing)
    );
    if let Some(s) = size {
        // Without opening the backing (it may be in use by a running VM).
        line.push_str(&format!("-u {} {s}", quote(path)));
    } else {
        line.push_str(&quote(path));
    }
    host::run(host, &format!("creating the disk layer {path}"), &line)
        .await
        .map(drop)
}

/// The virtual size of an image, read even while a VM uses it.
pub async fn virtual_size(host: &dyn Connector, path: &str) -> Result<u64, VmmError> {
    let out = host::run(
        host,
        &format!("reading the size of {path}"),
        &format!("qemu-img info -U --output=json {}", quote(path)),
    )
    .await?;
    let v: serde_json::Value = serde_json::from_str(&out)
        .map_err(|e| VmmError::Protocol(format!("qemu-img info: {e}"), "qemu"))?;
    v.get("virtual-size")
        .and_then(serde_json::Value::as_u64)
        .ok_or_else(|| VmmError::Protocol("qemu-img info without virtual-size".into(), "qemu"))
}

/// Bytes `paths` take on the instance's disk (allocated blocks, not apparent sizes).
pub async fn allocated(host: &dyn Connector, paths: &[String]) -> Result<u64, VmmError> {
    if paths.is_empty() {
        return Ok(0);
    }
    let list: Vec<String> = paths.iter().map(|p| quote(p)).collect();
    let out = host::run(
        host,
        "measuring snapshot files",
        &format!("du -k -c {} | tail -n 1", list.join(" ")),
    )
    .await?;
    let kib: u64 = out
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    Ok(kib * 1024)
}
