//! Snapshots carried between instances through the manager's cache store, so a job on any
//! instance can start from a snapshot taken on another one, and `flotilla debug` can open a
//! fleet job's snapshot on the manager's host.
//!
//! A snapshot on its instance is not portable as it is: each disk is a qcow2 layer over a
//! root file system that instance exported from the job's image (another instance's export
//! holds the same files in other blocks), and the machine names the instance's kernel and
//! initramfs. So an export is made self-contained ([`pack_script`]): every disk flattened
//! into a qcow2 file of its own (`qemu-img convert`), the kernel and initramfs copied beside
//! the state, and the description ([`SnapshotMeta`]) rewritten to name those copies by
//! relative paths. The whole is one gzip-compressed tar stream, read from the instance into a
//! temporary file on the manager and kept in the store under the job's project: a snapshot
//! is never restored into another project's job.
//!
//! Each snapshot has an id. Beside the archive the store keeps the id alone, so that an
//! instance holding a snapshot of that key learns cheaply whether its copy is the newest
//! ([`import`]); only an instance without it, or with an older one, fetches the archive.

use super::MicrovmConfig;
use super::restore::SnapshotMeta;
use flotilla_connect::shell::quote;
use flotilla_connect::{Connector, ExecRequest};
use flotilla_job::{CacheKey, CacheStore, EnvError};
use std::path::Path;

/// The store entries of snapshot `key` of `project`: the archive, and its id alone.
pub(crate) fn store_keys(project: &str, key: &str) -> (CacheKey, CacheKey) {
    let entry = |suffix: &str| CacheKey {
        project: project.to_string(),
        key: format!("flotilla-snapshot-{key}{suffix}"),
    };
    (entry(""), entry(".id"))
}

/// The script that turns snapshot directory `snap` (with `disks` disks) into a
/// self-contained copy in `out` (which exists and holds the rewritten `meta.json`) and writes
/// it to stdout as a gzip-compressed tar stream. `out` is removed at the end.
pub(crate) fn pack_script(
    snap: &str,
    out: &str,
    disks: usize,
    kernel: &str,
    initrd: &str,
) -> String {
    let (snap, out) = (quote(snap), quote(out));
    format!(
        r#"set -e
snap={snap}
out={out}
trap 'rm -rf "$out"' EXIT
i=0
while [ "$i" -lt {disks} ]; do
  qemu-img convert -O qcow2 "$snap/disk-$i.qcow2" "$out/disk-$i.qcow2"
  i=$((i + 1))
done
ln "$snap/state.bin" "$out/state.bin" 2>/dev/null || cp "$snap/state.bin" "$out/state.bin"
cp {kernel} "$out/vmlinuz"
cp {initrd} "$out/initrd"
tar -C "$out" -cf - . | gzip -1
"#,
        kernel = quote(kernel),
        initrd = quote(initrd),
    )
}

/// The script that unpacks a snapshot archive read from stdin as snapshot `key` (whose id is
/// `id`) under `snapshots_dir`, replacing what was there only once the whole archive
/// arrived. Jobs importing one key at once (a matrix branched from one snapshot, on an
/// instance that lacks it) take turns on a lock, and those that find the snapshot already
/// there read their input away and print `current`.
pub(crate) fn unpack_script(snapshots_dir: &str, key: &str, id: &str) -> String {
    // The key is made of `[A-Za-z0-9._-]` ([`super::snapshot::key_of`]), the id is ours.
    format!(
        r#"set -e
dir={dir}
mkdir -p "$dir"
chmod 700 "$dir"
exec 9>"$dir/.{key}.lock"
flock 9
if grep -qF {marker} "$dir/{key}/meta.json" 2>/dev/null; then
  cat >/dev/null
  echo current
  exit 0
fi
tmp=$(mktemp -d "$dir/.import-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
gzip -dc | tar -C "$tmp" -xf -
[ -f "$tmp/meta.json" ] && [ -f "$tmp/state.bin" ] || {{ echo "the archive holds no snapshot" >&2; exit 1; }}
rm -rf "$dir/{key}"
mv "$tmp" "$dir/{key}"
"#,
        dir = quote(snapshots_dir),
        marker = quote(&id_marker(id)),
    )
}

/// How a snapshot's id appears in its `meta.json` (serde_json's compact form).
fn id_marker(id: &str) -> String {
    format!("\"id\":{}", serde_json::Value::String(id.to_string()))
}

/// The description of a self-contained copy: the same machine, its kernel and initramfs
/// named relative to the snapshot's directory.
pub(crate) fn portable(meta: &SnapshotMeta) -> SnapshotMeta {
    let mut m = meta.clone();
    m.spec.kernel = "vmlinuz".into();
    m.spec.initrd = "initrd".into();
    m
}

/// Runs `line` on the instance with `stdin` and `stdout` as given, failing with its stderr.
async fn run_streaming(
    host: &dyn Connector,
    what: &str,
    line: &str,
    stdin: Option<&mut (dyn tokio::io::AsyncRead + Send + Unpin)>,
    stdout: &mut (dyn tokio::io::AsyncWrite + Send + Unpin),
) -> Result<(), EnvError> {
    let mut err = Vec::new();
    let mut req = ExecRequest::new(format!("sh -c {}", quote(line))).stderr(&mut err);
    if let Some(stdin) = stdin {
        req = req.stdin_reader(stdin);
    }
    req.stdout = Some(stdout);
    let status = host
        .exec(req)
        .await
        .map_err(|e| EnvError::System(format!("{what}: {e}")))?;
    if !status.success() {
        return Err(EnvError::System(format!(
            "{what} failed with {status}: {}",
            String::from_utf8_lossy(&err).trim()
        )));
    }
    Ok(())
}

/// Copies snapshot `key` (just saved on the instance `host` reaches, described by `meta`)
/// into `store` under `project`; returns the archive's size in bytes.
pub(crate) async fn export(
    host: &dyn Connector,
    config: &MicrovmConfig,
    key: &str,
    meta: &SnapshotMeta,
    store: &dyn CacheStore,
    project: &str,
    slot: usize,
) -> Result<u64, EnvError> {
    let snap = format!("{}/{key}", config.snapshots_dir());
    let out = format!(
        "{}/.export-{}-slot-{slot}",
        config.snapshots_dir(),
        config.owner
    );
    let described = serde_json::to_vec(&portable(meta))
        .map_err(|e| EnvError::System(format!("describing the snapshot: {e}")))?;
    flotilla_vmm::host::run(
        host,
        "clearing the export directory",
        &format!("rm -rf {}", quote(&out)),
    )
    .await
    .map_err(|e| EnvError::System(e.to_string()))?;
    flotilla_vmm::host::write(host, &format!("{out}/meta.json"), described)
        .await
        .map_err(|e| EnvError::System(e.to_string()))?;
    let file = tempfile::NamedTempFile::new()
        .map_err(|e| EnvError::System(format!("a temporary file for the snapshot: {e}")))?;
    let mut writer = tokio::fs::File::create(file.path())
        .await
        .map_err(|e| EnvError::System(format!("a temporary file for the snapshot: {e}")))?;
    let script = pack_script(
        &snap,
        &out,
        meta.spec.disks.len(),
        &meta.spec.kernel,
        &meta.spec.initrd,
    );
    run_streaming(host, "packing the snapshot", &script, None, &mut writer).await?;
    tokio::io::AsyncWriteExt::flush(&mut writer)
        .await
        .map_err(|e| EnvError::System(format!("writing the snapshot archive: {e}")))?;
    drop(writer);
    let size = std::fs::metadata(file.path())
        .map(|m| m.len())
        .map_err(|e| EnvError::System(format!("the snapshot archive: {e}")))?;
    let (archive, id_key) = store_keys(project, key);
    let keep = |e: flotilla_job::StoreError| {
        EnvError::System(format!("keeping the snapshot in the store: {e}"))
    };
    store.store(&archive, file.path()).await.map_err(keep)?;
    // The id goes last: a reader that sees it finds the archive it names.
    let id = tempfile::NamedTempFile::new()
        .map_err(|e| EnvError::System(format!("a temporary file for the snapshot: {e}")))?;
    std::fs::write(id.path(), meta.id.as_deref().unwrap_or_default())
        .map_err(|e| EnvError::System(format!("writing the snapshot's id: {e}")))?;
    store.store(&id_key, id.path()).await.map_err(keep)?;
    Ok(size)
}

/// What [`import`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Imported {
    /// The store has no such snapshot for the project.
    NotInStore,
    /// The instance's copy is the store's.
    Current,
    /// The store's copy was brought to the instance (this many bytes of archive).
    Fetched(u64),
}

/// The id of the snapshot the instance holds under `key`, if any.
async fn local_id(host: &dyn Connector, config: &MicrovmConfig, key: &str) -> Option<String> {
    let path = format!("{}/{key}/meta.json", config.snapshots_dir());
    let bytes = flotilla_vmm::host::read(host, &path).await.ok()?;
    serde_json::from_slice::<SnapshotMeta>(&bytes).ok()?.id
}

/// Reads a small store entry.
async fn fetch_small(store: &dyn CacheStore, key: &CacheKey) -> Result<Option<String>, EnvError> {
    let file = tempfile::NamedTempFile::new()
        .map_err(|e| EnvError::System(format!("a temporary file for the snapshot: {e}")))?;
    let found = store
        .fetch(key, file.path())
        .await
        .map_err(|e| EnvError::System(format!("reading the store: {e}")))?;
    if !found {
        return Ok(None);
    }
    std::fs::read_to_string(file.path())
        .map(|s| Some(s.trim().to_string()))
        .map_err(|e| EnvError::System(format!("reading the store: {e}")))
}

/// Brings snapshot `key` of `project` from `store` to the instance `host` reaches, unless the
/// instance already holds that very snapshot.
pub(crate) async fn import(
    host: &dyn Connector,
    config: &MicrovmConfig,
    key: &str,
    store: &dyn CacheStore,
    project: &str,
) -> Result<Imported, EnvError> {
    let (archive, id_key) = store_keys(project, key);
    let Some(id) = fetch_small(store, &id_key).await? else {
        return Ok(Imported::NotInStore);
    };
    if !id.is_empty() && local_id(host, config, key).await.as_deref() == Some(id.as_str()) {
        return Ok(Imported::Current);
    }
    let file = tempfile::NamedTempFile::new()
        .map_err(|e| EnvError::System(format!("a temporary file for the snapshot: {e}")))?;
    let found = store
        .fetch(&archive, file.path())
        .await
        .map_err(|e| EnvError::System(format!("fetching the snapshot from the store: {e}")))?;
    if !found {
        return Ok(Imported::NotInStore);
    }
    let size = std::fs::metadata(file.path()).map(|m| m.len()).unwrap_or(0);
    let mut reader = tokio::fs::File::open(file.path())
        .await
        .map_err(|e| EnvError::System(format!("reading the snapshot archive: {e}")))?;
    let mut said = Vec::new();
    run_streaming(
        host,
        "unpacking the snapshot on the instance",
        &unpack_script(&config.snapshots_dir(), key, &id),
        Some(&mut reader),
        &mut said,
    )
    .await?;
    if String::from_utf8_lossy(&said).trim() == "current" {
        // Another job brought it meanwhile.
        return Ok(Imported::Current);
    }
    Ok(Imported::Fetched(size))
}

/// Where a snapshot's kernel or initramfs is: as named, or in the snapshot's directory for a
/// self-contained copy.
pub(crate) fn boot_file(snapshot_dir: &str, named: &str) -> String {
    if Path::new(named).is_absolute() {
        named.to_string()
    } else {
        format!("{snapshot_dir}/{named}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_per_project_and_the_id_is_apart() {
        let (a, id) = store_keys("group/app", "setup");
        assert_eq!(a.project, "group/app");
        assert_eq!(a.key, "flotilla-snapshot-setup");
        assert_eq!(id.key, "flotilla-snapshot-setup.id");
        assert_ne!(store_keys("group/other", "setup").0, a);
    }

    #[test]
    fn a_portable_copy_names_its_own_kernel_and_initramfs() {
        assert_eq!(boot_file("/s/k", "vmlinuz"), "/s/k/vmlinuz");
        assert_eq!(boot_file("/s/k", "/boot/vmlinuz-6.1"), "/boot/vmlinuz-6.1");
    }

    #[test]
    fn the_scripts_quote_what_they_are_given() {
        let s = pack_script("/a b/k", "/a b/.x", 2, "/boot/v'z", "/i");
        assert!(s.contains("snap='/a b/k'"), "{s}");
        assert!(s.contains(r#"cp '/boot/v'\''z' "$out/vmlinuz""#), "{s}");
        assert!(s.contains("-lt 2"), "{s}");
        let u = unpack_script("/st ate/snapshots", "setup", "0b9e");
        assert!(u.contains("dir='/st ate/snapshots'"), "{u}");
        assert!(u.contains(r#"mv "$tmp" "$dir/setup""#), "{u}");
        assert!(
            u.contains(r#"grep -qF '"id":"0b9e"' "$dir/setup/meta.json""#),
            "{u}"
        );
    }
}
