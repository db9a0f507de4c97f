//! A job's starting files as one archive: the working-tree snapshot followed by the artifacts
//! of its dependencies, merged in order with the later copy of a path winning, which is what
//! extracting them one after the other gives. One archive means one extraction in the job's
//! environment instead of one per dependency (each extraction starts processes there).
//!
//! Entries are copied raw (still compressed, with their permissions, times and symlink
//! flags), so merging costs about one read and one write of the archives.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use zip::{ZipArchive, ZipWriter};

/// Why archives could not be merged.
#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    /// An archive could not be opened or the merged one written.
    #[error("merging artifacts: {path}: {source}")]
    Io {
        /// The archive concerned.
        path: PathBuf,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// An archive could not be read or the merged one written.
    #[error("merging artifacts: {path}: {source}")]
    Zip {
        /// The archive concerned.
        path: PathBuf,
        /// The error.
        #[source]
        source: zip::result::ZipError,
    },
}

/// Which entries to copy, in order, from archives whose entry names are `names` (one list per
/// archive, in extraction order): every name once, from the last archive that has it, in the
/// position of its first appearance. Returns `(archive, entry index)` pairs.
pub fn plan<N: AsRef<[u8]>>(names: &[Vec<N>]) -> Vec<(usize, usize)> {
    let mut last: HashMap<&[u8], (usize, usize)> = HashMap::new();
    let mut order: Vec<&[u8]> = Vec::new();
    for (a, list) in names.iter().enumerate() {
        for (i, name) in list.iter().enumerate() {
            let name = name.as_ref();
            if last.insert(name, (a, i)).is_none() {
                order.push(name);
            }
        }
    }
    order.into_iter().map(|n| last[n]).collect()
}

/// Merges the zip archives `inputs` (in extraction order) into `output`; returns its size.
pub fn merge(inputs: &[PathBuf], output: &Path) -> Result<u64, MergeError> {
    let io_err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| MergeError::Io { path, source }
    };
    let zip_err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| MergeError::Zip { path, source }
    };
    let mut archives = Vec::with_capacity(inputs.len());
    for path in inputs {
        let file = File::open(path).map_err(io_err(path))?;
        archives.push(ZipArchive::new(BufReader::new(file)).map_err(zip_err(path))?);
    }
    let names: Vec<Vec<Vec<u8>>> = archives
        .iter()
        .map(|a| a.file_names_raw().map(<[u8]>::to_vec).collect())
        .collect();
    if let Some(parent) = output.parent() {
        std::fs::create_dir_all(parent).map_err(io_err(parent))?;
    }
    let out = File::create(output).map_err(io_err(output))?;
    let mut zip = ZipWriter::new(BufWriter::new(out));
    for (a, i) in plan(&names) {
        let entry = archives[a].by_index_raw(i).map_err(zip_err(&inputs[a]))?;
        zip.raw_copy_file(entry).map_err(zip_err(output))?;
    }
    let mut inner = zip.finish().map_err(zip_err(output))?;
    inner.flush().map_err(io_err(output))?;
    drop(inner);
    Ok(std::fs::metadata(output).map_err(io_err(output))?.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use zip::write::SimpleFileOptions;

    #[test]
    fn later_archives_win_and_order_is_first_appearance() {
        let names = vec![
            vec!["a", "dir/", "dir/x"],
            vec!["dir/", "dir/y", "a"],
            vec!["b", "dir/x"],
        ];
        assert_eq!(
            plan(&names),
            vec![(1, 2), (1, 0), (2, 1), (1, 1), (2, 0)],
            "a from #1, dir/ from #1, dir/x from #2, then dir/y, b"
        );
        assert!(plan::<&str>(&[]).is_empty());
    }

    fn write_zip(path: &Path, files: &[(&str, &str, u32)]) {
        let mut z = ZipWriter::new(File::create(path).unwrap());
        for (name, text, mode) in files {
            z.start_file(
                *name,
                SimpleFileOptions::default()
                    .compression_method(zip::CompressionMethod::Deflated)
                    .unix_permissions(*mode),
            )
            .unwrap();
            z.write_all(text.as_bytes()).unwrap();
        }
        z.add_symlink("link", "a.txt", SimpleFileOptions::default())
            .unwrap();
        z.finish().unwrap();
    }

    #[test]
    fn merged_archive_holds_the_last_copy_of_each_file() {
        let d = tempfile::tempdir().unwrap();
        let one = d.path().join("one.zip");
        let two = d.path().join("two.zip");
        write_zip(
            &one,
            &[("a.txt", "old", 0o644), ("bin/run", "#!/bin/sh", 0o755)],
        );
        write_zip(&two, &[("a.txt", "new", 0o600), ("out/b.txt", "b", 0o644)]);
        let merged = d.path().join("m/merged.zip");
        let size = merge(&[one, two], &merged).unwrap();
        assert_eq!(size, std::fs::metadata(&merged).unwrap().len());
        let mut z = ZipArchive::new(File::open(&merged).unwrap()).unwrap();
        let names: Vec<String> = z.file_names().map(|n| n.unwrap().to_string()).collect();
        assert_eq!(names, vec!["a.txt", "bin/run", "link", "out/b.txt"]);
        let mut text = String::new();
        z.by_name("a.txt")
            .unwrap()
            .read_to_string(&mut text)
            .unwrap();
        assert_eq!(text, "new");
        assert_eq!(
            z.by_name("a.txt").unwrap().unix_mode().unwrap() & 0o777,
            0o600
        );
        assert_eq!(
            z.by_name("bin/run").unwrap().unix_mode().unwrap() & 0o777,
            0o755
        );
        assert!(z.by_name("link").unwrap().is_symlink());
    }

    #[test]
    fn a_missing_input_is_named() {
        let d = tempfile::tempdir().unwrap();
        let missing = d.path().join("nope.zip");
        let e = merge(&[missing], &d.path().join("out.zip")).unwrap_err();
        assert!(e.to_string().contains("nope.zip"), "{e}");
    }
}
