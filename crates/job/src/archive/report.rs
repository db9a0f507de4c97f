//! The formats of `artifacts:reports` besides zip. Rails keeps each report type in one format
//! (`Enums::Ci::JobArtifact::REPORT_TYPES` in `app/models/concerns/enums/ci/job_artifact.rb`:
//! `junit`, `dotenv`, `cobertura` ... `gzip`; `codequality`, `sast`, `terraform` ... `raw`) and
//! GitLab Runner writes them as `commands/helpers/archive/gziplegacy` and `raw` do:
//!
//! - `gzip`: one gzip member per file, in path order, concatenated; each member's header names
//!   the file (`Name` = its base name, `Comment` = its path, `ModTime`),
//!   `helpers/archives/gzip_create.go`;
//! - `raw`: the bytes of the one matching file; more than one is an error
//!   (`raw_archiver.go`, `ErrTooManyRawFiles`).
//!
//! The files are collected as for any artifact (a zip on the manager, see
//! [`super::collect_zip`]), then rewritten here.

use super::ArchiveError;
use super::ziptime::unix_time;
use flate2::{Compression, GzBuilder};
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;

/// An artifact format this runner can upload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReportFormat {
    /// A zip archive (`archive`, `lsif`, `scip`).
    Zip,
    /// Concatenated gzip members, one per file.
    Gzip,
    /// One file as it is.
    Raw,
}

impl ReportFormat {
    /// The format named `artifact_format` (empty is `zip`), if supported.
    pub fn parse(artifact_format: &str) -> Option<ReportFormat> {
        match artifact_format {
            "" | "zip" => Some(ReportFormat::Zip),
            "gzip" => Some(ReportFormat::Gzip),
            "raw" => Some(ReportFormat::Raw),
            _ => None,
        }
    }

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            ReportFormat::Zip => "zip",
            ReportFormat::Gzip => "gzip",
            ReportFormat::Raw => "raw",
        }
    }
}

/// An open zip archive and its regular files (path, index), sorted by path.
type Entries = (zip::ZipArchive<File>, Vec<(String, usize)>);

/// The regular files of a zip archive, sorted by path (links and directories are left out:
/// GitLab Runner's gzip writer refuses anything but regular files, and a report is a file).
fn regular_entries(zip: &Path) -> Result<Entries, ArchiveError> {
    let file = File::open(zip).map_err(ArchiveError::io(format!("opening {}", zip.display())))?;
    let mut archive = zip::ZipArchive::new(file)
        .map_err(ArchiveError::zip(format!("reading {}", zip.display())))?;
    let mut entries = Vec::new();
    for index in 0..archive.len() {
        let entry = archive
            .by_index(index)
            .map_err(ArchiveError::zip(format!("reading {}", zip.display())))?;
        if !entry.is_file() {
            continue;
        }
        let name = entry
            .name()
            .map_err(ArchiveError::zip(format!("reading {}", zip.display())))?
            .into_owned();
        entries.push((name, index));
    }
    entries.sort();
    Ok((archive, entries))
}

/// Rewrites the zip at `zip` as GitLab's `gzip` report format at `out`. Returns the number
/// of files.
pub fn zip_to_gzip(zip: &Path, out: &Path) -> Result<u64, ArchiveError> {
    let (mut archive, entries) = regular_entries(zip)?;
    let context = format!("writing {}", out.display());
    let file = File::create(out).map_err(ArchiveError::io(context.clone()))?;
    let mut w = BufWriter::new(file);
    for (name, index) in &entries {
        let mut entry = archive
            .by_index(*index)
            .map_err(ArchiveError::zip(format!("reading {}", zip.display())))?;
        let base = name.rsplit('/').next().unwrap_or(name).to_string();
        let mtime = entry
            .last_modified()
            .map(unix_time)
            .and_then(|t| u32::try_from(t).ok())
            .unwrap_or(0);
        let mut gz = GzBuilder::new()
            .filename(sanitize(&base))
            .comment(sanitize(name))
            .mtime(mtime)
            .write(&mut w, Compression::default());
        io::copy(&mut entry, &mut gz).map_err(ArchiveError::io(context.clone()))?;
        gz.finish().map_err(ArchiveError::io(context.clone()))?;
    }
    w.flush().map_err(ArchiveError::io(context))?;
    Ok(entries.len() as u64)
}

/// Rewrites the zip at `zip`, which must hold exactly one file, as that file at `out`.
pub fn zip_to_raw(zip: &Path, out: &Path) -> Result<(), ArchiveError> {
    let (mut archive, entries) = regular_entries(zip)?;
    let [(_, index)] = entries.as_slice() else {
        return Err(ArchiveError::Io {
            context: format!("a raw artifact is one file, but {} matched", entries.len()),
            source: io::Error::new(
                io::ErrorKind::InvalidInput,
                "only one file can be sent as raw",
            ),
        });
    };
    let context = format!("writing {}", out.display());
    let mut entry = archive
        .by_index(*index)
        .map_err(ArchiveError::zip(format!("reading {}", zip.display())))?;
    let mut file = File::create(out).map_err(ArchiveError::io(context.clone()))?;
    io::copy(&mut entry, &mut file).map_err(ArchiveError::io(context))?;
    Ok(())
}

/// GitLab Runner's `sanitizePath`: names with non-ASCII characters or `%` are written
/// `e:` + URL path escaping, so the gzip header (Latin-1) holds them intact.
fn sanitize(s: &str) -> Vec<u8> {
    if !s.chars().any(|c| !c.is_ascii() || c == '%') {
        return s.as_bytes().to_vec();
    }
    let mut out = String::from("e:");
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/!$&'()*+,;=:@".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out.into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use zip::write::SimpleFileOptions;

    fn zip_with(dir: &Path, files: &[(&str, &[u8])]) -> std::path::PathBuf {
        let path = dir.join("in.zip");
        let mut z = zip::ZipWriter::new(File::create(&path).unwrap());
        for (name, data) in files {
            z.start_file(*name, SimpleFileOptions::default()).unwrap();
            z.write_all(data).unwrap();
        }
        z.add_directory("empty/", SimpleFileOptions::default())
            .unwrap();
        z.finish().unwrap();
        path
    }

    #[test]
    fn gzip_reports_are_one_member_per_file_in_path_order() {
        let dir = tempfile::tempdir().unwrap();
        let zip = zip_with(
            dir.path(),
            &[
                ("b/report.xml", b"<b/>"),
                ("a/report.xml", b"<a/>"),
                ("ünï.env", b"X=1\n"),
            ],
        );
        let out = dir.path().join("out.gz");
        assert_eq!(zip_to_gzip(&zip, &out).unwrap(), 3);
        let bytes = std::fs::read(&out).unwrap();
        // A multi-member reader sees the concatenation, in path order.
        let mut all = String::new();
        flate2::read::MultiGzDecoder::new(&bytes[..])
            .read_to_string(&mut all)
            .unwrap();
        assert_eq!(all, "<a/><b/>X=1\n");
        // Each member names its file.
        let mut first = flate2::read::GzDecoder::new(&bytes[..]);
        let mut s = String::new();
        first.read_to_string(&mut s).unwrap();
        let h = first.header().unwrap();
        assert_eq!(h.filename(), Some(&b"report.xml"[..]));
        assert_eq!(h.comment(), Some(&b"a/report.xml"[..]));
        assert!(sanitize("ünï.env").starts_with(b"e:%C3%BC"));
    }

    #[test]
    fn raw_reports_are_exactly_one_file() {
        let dir = tempfile::tempdir().unwrap();
        let zip = zip_with(dir.path(), &[("gl-code-quality-report.json", b"[]")]);
        let out = dir.path().join("out");
        zip_to_raw(&zip, &out).unwrap();
        assert_eq!(std::fs::read(&out).unwrap(), b"[]");
        let two = zip_with(dir.path(), &[("a.json", b"1"), ("b.json", b"2")]);
        let e = zip_to_raw(&two, &out).unwrap_err();
        assert!(e.to_string().contains("2 matched"), "{e}");
        assert_eq!(ReportFormat::parse(""), Some(ReportFormat::Zip));
        assert_eq!(ReportFormat::parse("zstd"), None);
    }
}
