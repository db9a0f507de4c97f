//! A tar stream from a place the job controls, filtered before it is extracted where the job
//! has no say (the microvm level copies the job's directories back from the VM, where the job
//! is root, to the instance).
//!
//! What passes: directories, regular files, symbolic links (kept as links, wherever they
//! point) and hard links to a file already passed, each named below one of the stream's roots
//! and not through `..`; permission bits only (no setuid, setgid or sticky bit). What is left
//! out: devices, FIFOs and other special files, and what lies under a kept path (the
//! project's `.git`, which the instance's own git keeps; a job-written hook there would run on
//! the instance). What refuses the whole stream: a name outside the roots, an absolute name,
//! `..`, or an entry under a symbolic link of the same stream (it would be written through the
//! link).

use super::ArchiveError;
use std::collections::HashSet;
use std::io::{self, Read, Write};

/// Where a stream may write, as names relative to `/` (`b/0/p`, no trailing slash).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StreamRules {
    /// The directories entries must lie in (or be).
    pub roots: Vec<Vec<u8>>,
    /// Paths whose entries are dropped (the path itself and everything under it).
    pub kept: Vec<Vec<u8>>,
}

/// Whether `name` is `base` or lies under it.
fn within(name: &[u8], base: &[u8]) -> bool {
    name == base || (name.starts_with(base) && name.get(base.len()) == Some(&b'/'))
}

/// `raw` without `./` segments and trailing slashes, or `None` when it is absolute, empty or
/// climbs with `..`.
fn normalized(raw: &[u8]) -> Option<Vec<u8>> {
    if raw.first() == Some(&b'/') {
        return None;
    }
    let mut parts: Vec<&[u8]> = Vec::new();
    for part in raw.split(|b| *b == b'/') {
        match part {
            b"" | b"." => {}
            b".." => return None,
            p => parts.push(p),
        }
    }
    if parts.is_empty() {
        return None;
    }
    Some(parts.join(&b'/'))
}

/// Copies the tar stream `input` to `output`, keeping what `rules` allow (blocking).
pub fn filter_tar(
    input: impl Read,
    output: impl Write,
    rules: &StreamRules,
) -> Result<(), ArchiveError> {
    let mut archive = tar::Archive::new(input);
    let mut builder = tar::Builder::new(output);
    let mut links: HashSet<Vec<u8>> = HashSet::new();
    let mut files: HashSet<Vec<u8>> = HashSet::new();
    let read = |e| ArchiveError::Io {
        context: "reading the tar stream".into(),
        source: e,
    };
    let refuse = |name: &[u8], reason: &str| ArchiveError::UnsafeStreamEntry {
        name: String::from_utf8_lossy(name).into_owned(),
        reason: reason.to_owned(),
    };
    for entry in archive.entries().map_err(read)? {
        let mut entry = entry.map_err(read)?;
        let raw = entry.path_bytes().into_owned();
        let Some(name) = normalized(&raw) else {
            return Err(refuse(&raw, "is absolute, empty or climbs with `..`"));
        };
        if !rules.roots.iter().any(|r| within(&name, r)) {
            return Err(refuse(&name, "is outside the job's directories"));
        }
        let under_link = name
            .iter()
            .enumerate()
            .filter(|(_, b)| **b == b'/')
            .map(|(i, _)| &name[..i])
            .find(|above| links.contains(*above));
        if let Some(link) = under_link {
            let link = String::from_utf8_lossy(link).into_owned();
            return Err(refuse(
                &name,
                &format!("lies under the stream's own symbolic link {link:?}"),
            ));
        }
        if rules.kept.iter().any(|k| within(&name, k)) {
            continue;
        }
        let kind = entry.header().entry_type();
        let mut header = entry.header().clone();
        let mode = header.mode().map_err(read)? & 0o777;
        header.set_mode(mode);
        let write = |e| ArchiveError::Io {
            context: format!("writing {}", String::from_utf8_lossy(&name)),
            source: e,
        };
        let path = bytes_path(&name);
        match kind {
            tar::EntryType::Directory => {
                header.set_size(0);
                builder
                    .append_data(&mut header, &path, io::empty())
                    .map_err(write)?;
            }
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                builder
                    .append_data(&mut header, &path, &mut entry)
                    .map_err(write)?;
                files.insert(name);
            }
            tar::EntryType::Symlink => {
                let target = entry.link_name_bytes().map(|t| t.into_owned());
                let Some(target) = target.filter(|t| !t.is_empty()) else {
                    return Err(refuse(&name, "is a symbolic link without a target"));
                };
                header.set_size(0);
                builder
                    .append_link(&mut header, &path, bytes_path(&target))
                    .map_err(write)?;
                links.insert(name);
            }
            tar::EntryType::Link => {
                // Only to a file this stream already wrote: a hard link to anything else
                // would reach a file outside the job's directories.
                let target = entry
                    .link_name_bytes()
                    .and_then(|t| normalized(&t))
                    .filter(|t| files.contains(t));
                let Some(target) = target else {
                    return Err(refuse(&name, "is a hard link to a file not in the stream"));
                };
                header.set_size(0);
                builder
                    .append_link(&mut header, &path, bytes_path(&target))
                    .map_err(write)?;
            }
            // Devices, FIFOs, sockets and the rest: nothing a build leaves that the next
            // stage needs, and a device node is a way out.
            _ => {}
        }
    }
    let mut out = builder.into_inner().map_err(|e| ArchiveError::Io {
        context: "finishing the tar stream".into(),
        source: e,
    })?;
    out.flush().map_err(|e| ArchiveError::Io {
        context: "finishing the tar stream".into(),
        source: e,
    })
}

/// A name as a path, bytes kept as they are (names need not be UTF-8).
fn bytes_path(name: &[u8]) -> std::path::PathBuf {
    use std::os::unix::ffi::OsStrExt;
    std::path::PathBuf::from(std::ffi::OsStr::from_bytes(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules() -> StreamRules {
        StreamRules {
            roots: vec![b"b/0/p".to_vec(), b"b/0/p.tmp".to_vec()],
            kept: vec![b"b/0/p/.git".to_vec()],
        }
    }

    /// An entry of a test stream: name, kind, data or link target, mode.
    type Raw<'a> = (&'a [u8], tar::EntryType, &'a [u8], u32);

    /// A stream built with raw headers, as a hostile tar would be.
    fn stream(entries: &[Raw<'_>]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for (name, kind, data, mode) in entries {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(*kind);
            h.set_mode(*mode);
            match kind {
                tar::EntryType::Symlink | tar::EntryType::Link => {
                    h.set_size(0);
                    h.set_link_name_literal(data).unwrap();
                    h.as_gnu_mut().unwrap().name[..name.len()].copy_from_slice(name);
                    h.set_cksum();
                    b.append(&h, io::empty()).unwrap();
                }
                _ => {
                    h.set_size(data.len() as u64);
                    h.as_gnu_mut().unwrap().name[..name.len()].copy_from_slice(name);
                    h.set_cksum();
                    b.append(&h, *data).unwrap();
                }
            }
        }
        b.into_inner().unwrap()
    }

    fn names(tar_bytes: &[u8]) -> Vec<(String, u32)> {
        let mut a = tar::Archive::new(tar_bytes);
        a.entries()
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                (
                    String::from_utf8_lossy(&e.path_bytes()).into_owned(),
                    e.header().mode().unwrap(),
                )
            })
            .collect()
    }

    fn filtered(input: &[u8]) -> Result<Vec<u8>, ArchiveError> {
        let mut out = Vec::new();
        filter_tar(input, &mut out, &rules()).map(|()| out)
    }

    #[test]
    fn the_jobs_files_pass_with_permission_bits_only() {
        use tar::EntryType::{Directory, Link, Regular, Symlink};
        let input = stream(&[
            (b"b/0/p/", Directory, b"", 0o755),
            (b"b/0/p/run", Regular, b"#!/bin/sh", 0o4755),
            (b"b/0/p/same", Link, b"b/0/p/run", 0o755),
            (b"b/0/p/python", Symlink, b"/usr/bin/python3", 0o777),
            (b"b/0/p/.git/hooks/post-checkout", Regular, b"evil", 0o755),
            (b"b/0/p.tmp/f\xff", Regular, b"x", 0o600),
        ]);
        let out = filtered(&input).unwrap();
        assert_eq!(
            names(&out),
            [
                ("b/0/p".to_string(), 0o755),
                ("b/0/p/run".to_string(), 0o755),
                ("b/0/p/same".to_string(), 0o755),
                ("b/0/p/python".to_string(), 0o777),
                ("b/0/p.tmp/f\u{fffd}".to_string(), 0o600),
            ]
        );
    }

    #[test]
    fn what_would_write_outside_refuses_the_stream() {
        use tar::EntryType::{Block, Link, Regular, Symlink};
        let cases: &[(&[Raw<'_>], &str)] = &[
            (
                &[(b"etc/cron.d/x", Regular, b"* * * * * root sh", 0o644)],
                "outside the job's directories",
            ),
            (&[(b"b/0/p/../../../etc/x", Regular, b"", 0o644)], "climbs"),
            (&[(b"/etc/x", Regular, b"", 0o644)], "absolute"),
            (&[(b"b/0/px/x", Regular, b"", 0o644)], "outside"),
            (
                &[
                    (b"b/0/p/l", Symlink, b"/etc", 0o777),
                    (b"b/0/p/l/cron.d/x", Regular, b"", 0o644),
                ],
                "lies under the stream's own symbolic link",
            ),
            (
                &[(b"b/0/p/h", Link, b"etc/shadow", 0o644)],
                "hard link to a file not in the stream",
            ),
        ];
        for (entries, why) in cases {
            let err = filtered(&stream(entries)).unwrap_err();
            assert!(err.to_string().contains(why), "{why}: {err}");
        }
        // A device node is left out, not refused.
        let out = filtered(&stream(&[(b"b/0/p/sda", Block, b"", 0o660)])).unwrap();
        assert!(names(&out).is_empty());
    }
}
