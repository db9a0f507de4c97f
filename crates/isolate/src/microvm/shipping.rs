//! Snapshots carried between instances through a store on the manager (a `CacheStore` of
//! its own, apart from caches), so a job on any instance can start from a snapshot taken on
//! another one, and `flotilla debug` can open a fleet job's snapshot on the manager's host.
//!
//! A snapshot on its instance is not portable as it is: each disk is a qcow2 layer over a
//! root file system that instance exported from the job's image (another instance's export
//! holds the same files in other blocks), and the machine names the instance's kernel and
//! initramfs. So an export is made self-contained ([`pack_script`]): every disk flattened
//! into a qcow2 file of its own (`qemu-img convert`), the kernel and initramfs copied beside
//! the state, and the description ([`SnapshotMeta`]) rewritten to name those copies by
//! relative paths. The whole is one gzip-compressed tar stream, read from the instance into a
//! temporary file on the manager and kept in the store under the job's [`Scope`] (its
//! project, protected refs apart from the others).
//!
//! Each snapshot has an id and a save time ([`Stamp`]). Beside the archive the store keeps
//! the stamp alone, so that an instance holding a snapshot of that key learns cheaply whether
//! its copy is the newest ([`import`]); only an instance without it, or with an older one,
//! fetches the archive, and the unpacking checks that the archive is the one the stamp names.

use super::MicrovmConfig;
use super::restore::SnapshotMeta;
use super::snapshot::Scope;
use flotilla_connect::Connector;
use flotilla_connect::shell::quote;
use flotilla_job::{CacheKey, CacheStore, EnvError};
use std::path::Path;

/// The store entries of snapshot `key` of `scope`: the archive, and its stamp alone. Refs
/// that are protected and those that are not have entries of their own, as GitLab keeps
/// their caches apart.
pub(crate) fn store_keys(scope: &Scope, key: &str) -> (CacheKey, CacheKey) {
    let entry = |ext: &str| CacheKey {
        project: scope.project.clone(),
        project_id: scope.project_id,
        key: format!("{key}-{}{ext}", scope.suffix()),
    };
    (entry(""), entry(".stamp"))
}

/// When a snapshot was saved (the manager's clock, milliseconds since the epoch) and its id:
/// what the store keeps beside an archive, and what tells two copies of a key apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Stamp {
    pub(crate) saved_at_ms: u64,
    pub(crate) id: String,
}

impl Stamp {
    /// The stamp of a snapshot's description (none for snapshots of older versions).
    pub(crate) fn of(meta: &SnapshotMeta) -> Option<Stamp> {
        Some(Stamp {
            saved_at_ms: meta.saved_at_ms?,
            id: meta.id.clone()?,
        })
    }

    fn parse(text: &str) -> Option<Stamp> {
        let (at, id) = text.trim().split_once(' ')?;
        Some(Stamp {
            saved_at_ms: at.parse().ok()?,
            id: id.to_string(),
        })
    }

    fn render(&self) -> String {
        format!("{} {}", self.saved_at_ms, self.id)
    }
}

/// Whether the store's copy (`stored`) is to replace the instance's (`local`): when the
/// instance has none, or an older one. A newer local copy (its export failed, or is under
/// way) stays.
pub(crate) fn fetch_wanted(stored: &Stamp, local: Option<&Stamp>) -> bool {
    match local {
        None => true,
        Some(l) => l.id != stored.id && l.saved_at_ms < stored.saved_at_ms,
    }
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
# Shared with restores, apart from a save or an import replacing the snapshot.
exec 9>"$(dirname "$snap")/.$(basename "$snap").lock"
flock -s 9
i=0
while [ "$i" -lt {disks} ]; do
  qemu-img convert -U -O qcow2 "$snap/disk-$i.qcow2" "$out/disk-$i.qcow2"
  i=$((i + 1))
done
ln "$snap/state.bin" "$out/state.bin" 2>/dev/null || cp "$snap/state.bin" "$out/state.bin"
cp {kernel} "$out/vmlinuz"
cp {initrd} "$out/initrd"
# tar runs gzip itself and fails when it fails: a pipe would hide a failing tar.
tar -C "$out" -I 'gzip -1' -cf - .
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
tar -C "$tmp" -xzf -
for f in meta.json state.bin vmlinuz initrd disk-0.qcow2; do
  [ -f "$tmp/$f" ] || {{ echo "the archive lacks $f" >&2; exit 1; }}
done
grep -qF {marker} "$tmp/meta.json" || {{ echo "the archive holds another snapshot than the store says" >&2; exit 1; }}
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

/// A temporary file on the manager for an archive or a stamp.
fn temp_file() -> Result<tempfile::NamedTempFile, EnvError> {
    tempfile::NamedTempFile::new()
        .map_err(|e| EnvError::System(format!("a temporary file for the snapshot: {e}")))
}

/// A failure on the instance as the job's error.
fn on_instance(e: flotilla_vmm::VmmError) -> EnvError {
    EnvError::System(e.to_string())
}

/// Copies snapshot `key` (just saved on the instance `host` reaches, described by `meta`)
/// into `store` under `project`; returns the archive's size in bytes.
pub(crate) async fn export(
    host: &dyn Connector,
    config: &MicrovmConfig,
    key: &str,
    meta: &SnapshotMeta,
    store: &dyn CacheStore,
    scope: &Scope,
    slot: usize,
) -> Result<u64, EnvError> {
    let stamp = Stamp::of(meta)
        .ok_or_else(|| EnvError::System("the snapshot has no id or save time".into()))?;
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
    .map_err(on_instance)?;
    flotilla_vmm::host::write(host, &format!("{out}/meta.json"), described)
        .await
        .map_err(on_instance)?;
    let file = temp_file()?;
    let mut writer = tokio::fs::File::create(file.path())
        .await
        .map_err(|e| EnvError::System(format!("a temporary file for the snapshot: {e}")))?;
    let script = pack_script(
        &snap,
        &out,
        meta.spec.disks.len(),
        &boot_file(&snap, &meta.spec.kernel),
        &boot_file(&snap, &meta.spec.initrd),
    );
    flotilla_vmm::host::stream(host, "packing the snapshot", &script, None, &mut writer)
        .await
        .map_err(on_instance)?;
    tokio::io::AsyncWriteExt::flush(&mut writer)
        .await
        .map_err(|e| EnvError::System(format!("writing the snapshot archive: {e}")))?;
    drop(writer);
    let size = std::fs::metadata(file.path())
        .map(|m| m.len())
        .map_err(|e| EnvError::System(format!("the snapshot archive: {e}")))?;
    let (archive, stamp_key) = store_keys(scope, key);
    let keep = |e: flotilla_job::StoreError| {
        EnvError::System(format!("keeping the snapshot in the store: {e}"))
    };
    store.store(&archive, file.path()).await.map_err(keep)?;
    // The stamp goes last: a reader that sees it finds the archive it names (or a newer
    // one, which the unpacking refuses: its id is not the stamp's).
    let stamp_file = temp_file()?;
    std::fs::write(stamp_file.path(), stamp.render())
        .map_err(|e| EnvError::System(format!("writing the snapshot's stamp: {e}")))?;
    store
        .store(&stamp_key, stamp_file.path())
        .await
        .map_err(keep)?;
    Ok(size)
}

/// What [`import`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Imported {
    /// The store has no such snapshot for the project.
    NotInStore,
    /// The instance's copy is the store's.
    Current,
    /// The instance's copy is newer than the store's (its export failed or is under way).
    LocalNewer,
    /// The store's copy was brought to the instance (this many bytes of archive).
    Fetched(u64),
}

/// The stamp of the snapshot the instance holds under `key`, if any.
async fn local_stamp(host: &dyn Connector, config: &MicrovmConfig, key: &str) -> Option<Stamp> {
    let path = format!("{}/{key}/meta.json", config.snapshots_dir());
    let bytes = flotilla_vmm::host::read(host, &path).await.ok()?;
    Stamp::of(&serde_json::from_slice::<SnapshotMeta>(&bytes).ok()?)
}

/// Reads a small store entry.
async fn fetch_small(store: &dyn CacheStore, key: &CacheKey) -> Result<Option<String>, EnvError> {
    let file = temp_file()?;
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

/// Brings snapshot `key` of `scope` from `store` to the instance `host` reaches, unless the
/// instance holds that very snapshot or a newer one.
pub(crate) async fn import(
    host: &dyn Connector,
    config: &MicrovmConfig,
    key: &str,
    store: &dyn CacheStore,
    scope: &Scope,
) -> Result<Imported, EnvError> {
    let (archive, stamp_key) = store_keys(scope, key);
    let Some(stored) = fetch_small(store, &stamp_key).await? else {
        return Ok(Imported::NotInStore);
    };
    let stored = Stamp::parse(&stored)
        .ok_or_else(|| EnvError::System(format!("the store's stamp {stored:?} is unreadable")))?;
    let local = local_stamp(host, config, key).await;
    if !fetch_wanted(&stored, local.as_ref()) {
        return Ok(match local {
            Some(l) if l.id != stored.id => Imported::LocalNewer,
            _ => Imported::Current,
        });
    }
    let id = stored.id;
    let file = temp_file()?;
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
    flotilla_vmm::host::stream(
        host,
        "unpacking the snapshot on the instance",
        &unpack_script(&config.snapshots_dir(), key, &id),
        Some(&mut reader),
        &mut said,
    )
    .await
    .map_err(on_instance)?;
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

    fn scope(project: &str, protected: bool) -> Scope {
        Scope {
            project: project.into(),
            project_id: 1,
            protected,
        }
    }

    #[test]
    fn entries_are_per_project_and_protection_and_the_stamp_is_apart() {
        let (a, stamp) = store_keys(&scope("group/app", false), "setup");
        assert_eq!(a.project, "group/app");
        assert_eq!(a.key, "setup-non_protected");
        assert_eq!(stamp.key, "setup-non_protected.stamp");
        assert_ne!(store_keys(&scope("group/other", false), "setup").0, a);
        assert_eq!(
            store_keys(&scope("group/app", true), "setup").0.key,
            "setup-protected"
        );
    }

    #[test]
    fn only_a_newer_copy_is_fetched() {
        let stamp = |at, id: &str| Stamp {
            saved_at_ms: at,
            id: id.into(),
        };
        let stored = stamp(200, "b");
        assert!(fetch_wanted(&stored, None));
        assert!(fetch_wanted(&stored, Some(&stamp(100, "a"))));
        assert!(!fetch_wanted(&stored, Some(&stamp(200, "b"))));
        // A local save whose export failed is newer: it stays.
        assert!(!fetch_wanted(&stored, Some(&stamp(300, "c"))));
        assert_eq!(Stamp::parse(&stored.render()), Some(stored));
        assert_eq!(Stamp::parse("garbage"), None);
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
        assert!(
            !s.contains("| gzip"),
            "a pipe would hide a failing tar: {s}"
        );
        let u = unpack_script("/st ate/snapshots", "setup", "0b9e");
        assert!(u.contains("dir='/st ate/snapshots'"), "{u}");
        assert!(u.contains(r#"mv "$tmp" "$dir/setup""#), "{u}");
        assert!(
            u.contains(r#"grep -qF '"id":"0b9e"' "$dir/setup/meta.json""#),
            "{u}"
        );
        assert!(
            u.contains(r#"grep -qF '"id":"0b9e"' "$tmp/meta.json""#),
            "{u}"
        );
        assert!(s.contains("flock -s 9"), "{s}");
    }
}
