//! The file name of an uploaded artifact, as GitLab Runner's
//! `commands/helpers/artifacts_uploader.go` `artifactFilename` makes it: the base name of the
//! artifact's name (`default` when that is empty or `.`) plus the format's extension, always
//! appended (`bin.zip` becomes `bin.zip.zip`).

/// The multipart file name for an artifact called `name` in `format`.
pub fn artifact_file_name(name: &str, format: &str) -> String {
    // `filepath.Base`: trailing slashes are dropped, then the last element is taken.
    let trimmed = name.trim_end_matches('/');
    let base = if trimmed.is_empty() && !name.is_empty() {
        "/"
    } else {
        trimmed.rsplit('/').next().unwrap_or(trimmed)
    };
    let base = if base.is_empty() || base == "." {
        "default"
    } else {
        base
    };
    match format {
        "" | "zip" | "zipzstd" => format!("{base}.zip"),
        "gzip" => format!("{base}.gz"),
        "tarzstd" => format!("{base}.tar.zst"),
        _ => base.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::artifact_file_name;

    #[test]
    fn names_follow_gitlab_runners_artifact_filename() {
        assert_eq!(artifact_file_name("artifacts", "zip"), "artifacts.zip");
        assert_eq!(artifact_file_name("bin.zip", "zip"), "bin.zip.zip");
        assert_eq!(artifact_file_name("out/dist/pkg", "zip"), "pkg.zip");
        assert_eq!(artifact_file_name("", "zip"), "default.zip");
        assert_eq!(artifact_file_name(".", "zip"), "default.zip");
        assert_eq!(artifact_file_name("junit.xml", "gzip"), "junit.xml.gz");
        assert_eq!(artifact_file_name(".env", "gzip"), ".env.gz");
        assert_eq!(
            artifact_file_name("gl-code-quality-report.json", "raw"),
            "gl-code-quality-report.json"
        );
        assert_eq!(artifact_file_name("dir/", "zip"), "dir.zip");
    }
}
